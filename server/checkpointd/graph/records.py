"""The records of the graph store (:mod:`checkpointd.graph.store`): checkpoints, their values
and pending writes as the servicer and both backends exchange them, a listing's query,
position and page, the DeltaChannel walk's (:mod:`checkpointd.graph.delta`) chain links,
ancestors, cursor and page, and what a prune keeps."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "ChainLink",
    "ChannelValue",
    "DeltaAncestor",
    "DeltaCursor",
    "DeltaPage",
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


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One checkpoint of a parent chain, without its body (the DeltaChannel walk's)."""

    checkpoint_id: str
    parent_checkpoint_id: str
    channel_versions: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeltaAncestor:
    """One ancestor the walk visited: its writes to the channels still walked and the seeds
    of the channels whose walk ends at it."""

    checkpoint_id: str
    walking: tuple[str, ...]
    """The channels still walked when the walk reached it (what a page resumes with)."""
    writes: tuple[GraphWrite, ...]
    seeds: tuple[ChannelValue, ...]

    def size(self) -> int:
        """The stored bytes it holds (what a page budget counts)."""
        return sum(len(w.value.data) for w in self.writes) + sum(
            len(s.value.data) for s in self.seeds
        )


@dataclass(frozen=True, slots=True)
class DeltaCursor:
    """Where a walk goes on: the next ancestor to visit and the channels still walked."""

    target_id: str
    """The checkpoint whose history is walked (the newest, resolved on the first page)."""
    checkpoint_id: str
    walking: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeltaPage:
    """A page of a walk: its ancestors, nearest first, and where the next page starts."""

    ancestors: list[DeltaAncestor]
    next: DeltaCursor | None
    target_id: str = ""
    """The checkpoint whose history is walked; empty when none was found."""

    def resume_at(self, index: int) -> DeltaCursor:
        """The cursor that resumes this page at its ``index``-th ancestor (when the reply had
        no room for it)."""
        ancestor = self.ancestors[index]
        return DeltaCursor(self.target_id, ancestor.checkpoint_id, ancestor.walking)


class PruneStrategy(Enum):
    """What a prune keeps."""

    KEEP_LATEST = "keep_latest"
    DELETE = "delete"
