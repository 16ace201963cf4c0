"""What a person reads of a LangGraph checkpoint without decoding it (the server never does):
its step and source from its metadata, the nodes whose writes made it (LangGraph before 1.0
kept them in the metadata), the nodes whose tasks left writes on it (the step run from it,
"(error)" after one that raised), and the time its version-6 UUID carries. ``checkpointd runs
show`` and the approvals page's run view show these."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from checkpointd_client.v1 import graph_service_pb2 as g

__all__ = ["CheckpointSummary", "checkpoint_time", "summarize"]

#: 100-nanosecond intervals from the Gregorian calendar's start to the Unix epoch.
_GREGORIAN_TO_UNIX = 0x01B21DD213814000


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    """One checkpoint of a thread, as a person reads it."""

    checkpoint_id: str
    checkpoint_ns: str
    parent_checkpoint_id: str
    step: Any
    source: Any
    wrote: list[str]
    tasks: list[str]
    created_at: datetime | None
    metadata: dict[str, Any]


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """The time a version-6 UUID carries (LangGraph's checkpoint ids are ones, made when the
    checkpoint was); None for any other id."""
    try:
        value = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if value.version != 6:
        return None
    n = value.int
    stamp = ((n >> 96) << 28) | (((n >> 80) & 0xFFFF) << 12) | ((n >> 64) & 0x0FFF)
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=(stamp - _GREGORIAN_TO_UNIX) // 10
        )
    except OverflowError:
        return None


def _metadata(found: g.GraphCheckpointTuple) -> dict[str, Any]:
    try:
        value = json.loads(found.checkpoint.metadata_json or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tasks(found: g.GraphCheckpointTuple) -> list[str]:
    nodes: dict[str, bool] = {}
    for write in found.pending_writes:
        node = write.task_path.rsplit(", ", 1)[-1] if write.task_path else ""
        if node:
            nodes[node] = nodes.get(node, False) or write.channel == "__error__"
    return [f"{node} (error)" if failed else node for node, failed in sorted(nodes.items())]


def summarize(found: g.GraphCheckpointTuple) -> CheckpointSummary:
    """``found`` as a person reads it."""
    metadata = _metadata(found)
    writes = metadata.get("writes")
    checkpoint = found.checkpoint
    return CheckpointSummary(
        checkpoint_id=checkpoint.checkpoint_id,
        checkpoint_ns=checkpoint.checkpoint_ns,
        parent_checkpoint_id=checkpoint.parent_checkpoint_id,
        step=metadata.get("step"),
        source=metadata.get("source"),
        wrote=sorted(str(node) for node in writes) if isinstance(writes, dict) else [],
        tasks=_tasks(found),
        created_at=checkpoint_time(checkpoint.checkpoint_id),
        metadata=metadata,
    )
