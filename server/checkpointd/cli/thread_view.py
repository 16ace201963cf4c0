"""How ``checkpointd runs show`` prints a LangGraph thread: its summary and each pause whole,
then its checkpoints oldest first in every checkpoint_ns (step, source, the nodes that wrote
or whose tasks left writes, the time its uuid6 id carries). The server never decodes a
checkpoint; what is shown comes from its metadata and its pending writes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from checkpointd.cli.interrupts import format_age
from checkpointd.cli.listing import PAGE_CAP
from checkpointd.cli.output import aligned
from checkpointd.cli.output import when as _when
from checkpointd.cli.pauses import describe_decision, pause_block
from checkpointd_client import CheckpointdClient, ExecutionDetail
from checkpointd_client.v1 import graph_service_pb2 as g

__all__ = [
    "GRAPH_COLUMNS",
    "checkpoint_time",
    "format_graph_checkpoints",
    "format_thread",
    "graph_checkpoint_json",
    "graph_checkpoints",
]

GRAPH_COLUMNS = ("#", "STEP", "SOURCE", "WROTE", "TASKS", "CREATED_AT", "CHECKPOINT_NS")


#: 100-nanosecond intervals from the Gregorian calendar's start to the Unix epoch.
_GREGORIAN_TO_UNIX = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """The time a version-6 UUID carries (LangGraph's checkpoint ids are ones, written when
    the checkpoint was made); None for any other id."""
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


def _wrote(metadata: dict[str, Any]) -> list[str]:
    """The nodes whose writes made the checkpoint, where its metadata says (LangGraph before
    1.0 kept them under "writes")."""
    writes = metadata.get("writes")
    return sorted(str(node) for node in writes) if isinstance(writes, dict) else []


def _tasks(found: g.GraphCheckpointTuple) -> list[str]:
    """The nodes whose tasks left pending writes on the checkpoint (the step run from it),
    "(error)" after one whose task raised."""
    nodes: dict[str, bool] = {}
    for write in found.pending_writes:
        node = write.task_path.rsplit(", ", 1)[-1] if write.task_path else ""
        if node:
            nodes[node] = nodes.get(node, False) or write.channel == "__error__"
    return [f"{node} (error)" if failed else node for node, failed in sorted(nodes.items())]


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def format_graph_checkpoints(tuples: Sequence[g.GraphCheckpointTuple]) -> list[str]:
    """The header and one aligned line per checkpoint of a thread, oldest first."""
    rows = []
    for position, found in enumerate(tuples, start=1):
        metadata = _metadata(found)
        rows.append(
            (
                str(position),
                _cell(metadata.get("step")),
                _cell(metadata.get("source")),
                ",".join(_wrote(metadata)) or "-",
                ",".join(_tasks(found)).replace(" ", "") or "-",
                _when(checkpoint_time(found.checkpoint.checkpoint_id)),
                found.checkpoint.checkpoint_ns or "-",
            )
        )
    return aligned(GRAPH_COLUMNS, rows)


def graph_checkpoint_json(position: int, found: g.GraphCheckpointTuple) -> dict[str, Any]:
    """One checkpoint of a thread's ``show --json``, with its place in the thread."""
    metadata = _metadata(found)
    created = checkpoint_time(found.checkpoint.checkpoint_id)
    return {
        "kind": "graph_checkpoint",
        "position": position,
        "checkpoint_ns": found.checkpoint.checkpoint_ns,
        "checkpoint_id": found.checkpoint.checkpoint_id,
        "parent_checkpoint_id": found.checkpoint.parent_checkpoint_id,
        "step": metadata.get("step"),
        "source": metadata.get("source"),
        "wrote": _wrote(metadata),
        "tasks": _tasks(found),
        "created_at": None if created is None else created.isoformat(),
        "metadata": metadata,
    }


def format_thread(detail: ExecutionDetail, now: datetime) -> list[str]:
    """The head of ``show`` for a LangGraph thread: the summary, then each pause whole."""
    e = detail.execution
    lines = [
        f"execution    {e.execution_id}",
        f"framework    {e.framework}",
        f"graph        {e.chain_name or '-'}",
        f"status       {e.status}",
        f"checkpoints  {e.checkpoint_count} (in every checkpoint_ns)",
        f"last         {_when(e.last_activity_at)} ({format_age(e.last_activity_at, now)} ago) "
        f"at checkpoint {e.last_checkpoint_id or '-'}",
        f"pauses       {len(detail.pauses)}",
    ]
    for pause in detail.pauses:
        lines += ["", *pause_block(pause, now)]
    decided = detail.last_decided
    shown = [p.decision for p in detail.pauses]
    if decided is not None and decided.decision is not None and decided.decision not in shown:
        lines += [
            "",
            f"last decided {describe_decision(decided.decision)} (pause at node "
            f"{decided.node_id or '-'}, interrupt {decided.interrupt_id or '-'})",
        ]
    return lines


def graph_checkpoints(client: CheckpointdClient, thread_id: str) -> list[g.GraphCheckpointTuple]:
    """A thread's checkpoints in every checkpoint_ns, oldest first (ListGraphCheckpoints
    lists them newest first by id, page after page)."""
    found: list[g.GraphCheckpointTuple] = []
    token = ""
    while True:
        request = g.ListGraphCheckpointsRequest(
            namespace=client.namespace, thread_id=thread_id, page_size=PAGE_CAP, page_token=token
        )
        response = client.call_graph("ListGraphCheckpoints", request)
        found.extend(response.checkpoint_tuples)
        token = response.next_page_token
        if not token:
            return found[::-1]
