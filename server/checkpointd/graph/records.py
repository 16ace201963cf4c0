"""The records of the graph store (:mod:`checkpointd.graph.store`): checkpoints, their values
and pending writes as the servicer and both backends exchange them, a listing's query,
position and page, and what a prune keeps."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "ChannelValue",
    "GraphCheckpoint",
    "GraphListQuery",
    "GraphPage",
    "GraphPosition",
    "GraphTuple",
    "GraphWrite",
    "PruneStrategy",
    "TypedValue",
    "tuple_size",
]


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A serialized value: the serializer's type tag and its bytes."""

    type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelValue:
    """The value of one channel at one version."""

    channel: str
    version: str
    value: TypedValue


@dataclass(frozen=True, slots=True)
class GraphWrite:
    """One pending write of a task."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    value: TypedValue


@dataclass(frozen=True, slots=True)
class GraphCheckpoint:
    """One checkpoint of a thread, without its channel values."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    """Empty for the first checkpoint of a thread."""
    body: TypedValue
    metadata_json: str
    """A JSON object."""
    channel_versions: dict[str, str]
    run_id: str = ""
    """The metadata's ``run_id`` when it is a string, else empty (filled by the servicer)."""
    send_nodes: tuple[str, ...] = ()
    """The node each Send pending in the checkpoint targets, in order, as its put names them:
    they name the pauses of the tasks those Sends start (G8). Not stored."""


@dataclass(frozen=True, slots=True)
class GraphTuple:
    """A checkpoint with the values of the versions it names and its pending writes."""

    checkpoint: GraphCheckpoint
    channel_values: tuple[ChannelValue, ...]
    pending_writes: tuple[GraphWrite, ...]


def tuple_size(found: GraphTuple) -> int:
    """The bytes a tuple holds in its values, body and metadata (what a page budget counts)."""
    return (
        len(found.checkpoint.body.data)
        + len(found.checkpoint.metadata_json)
        + sum(len(v.value.data) for v in found.channel_values)
        + sum(len(w.value.data) for w in found.pending_writes)
    )


@dataclass(frozen=True, slots=True)
class GraphPage:
    """A page of a listing, and whether rows were left for the next one."""

    tuples: list[GraphTuple]
    more: bool


@dataclass(frozen=True, slots=True)
class GraphPosition:
    """Where a listing stands: the last row returned, in listing order."""

    checkpoint_id: str
    thread_id: str
    checkpoint_ns: str


@dataclass(frozen=True, slots=True)
class GraphListQuery:
    """What ListGraphCheckpoints asks for (validated)."""

    thread_id: str
    """Empty: every thread."""
    checkpoint_ns: str | None
    """None: every checkpoint_ns."""
    checkpoint_id: str
    """Empty: every checkpoint."""
    metadata_filter_json: str
    """A JSON object, or empty for none."""
    before_checkpoint_id: str
    """Empty: no bound."""


class PruneStrategy(Enum):
    """What a prune keeps."""

    KEEP_LATEST = "keep_latest"
    DELETE = "delete"
