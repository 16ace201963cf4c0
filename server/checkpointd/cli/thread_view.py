"""How ``checkpointd runs show`` prints a LangGraph thread: its summary and each pause whole,
then its checkpoints oldest first in every checkpoint_ns (step, source, the nodes that wrote
or whose tasks left writes, the time its uuid6 id carries). The server never decodes a
checkpoint; what is shown comes from its metadata and its pending writes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from checkpointd.cli.interrupts import format_age
from checkpointd.cli.listing import PAGE_CAP
from checkpointd.cli.output import aligned
from checkpointd.cli.output import when as _when
from checkpointd.cli.pauses import describe_decision, pause_block
from checkpointd.graph.checkpoint_summary import summarize
from checkpointd_client import CheckpointdClient, Execution, ExecutionDetail
from checkpointd_client.v1 import graph_service_pb2 as g

__all__ = [
    "GRAPH_COLUMNS",
    "format_graph_checkpoints",
    "format_thread",
    "graph_checkpoint_json",
    "graph_checkpoints",
    "last_activity",
]

GRAPH_COLUMNS = ("#", "STEP", "SOURCE", "WROTE", "TASKS", "CREATED_AT", "CHECKPOINT_NS")


def last_activity(execution: Execution, now: datetime) -> str:
    """When a run was last active, and how long ago: ``2026-01-02T03:04:05Z (5m ago)``."""
    at = execution.last_activity_at
    return f"{_when(at)} ({format_age(at, now)} ago)"


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def format_graph_checkpoints(tuples: Sequence[g.GraphCheckpointTuple]) -> list[str]:
    """The header and one aligned line per checkpoint of a thread, oldest first."""
    rows = []
    for position, found in enumerate(tuples, start=1):
        seen = summarize(found)
        rows.append(
            (
                str(position),
                _cell(seen.step),
                _cell(seen.source),
                ",".join(seen.wrote) or "-",
                ",".join(seen.tasks).replace(" ", "") or "-",
                _when(seen.created_at),
                seen.checkpoint_ns or "-",
            )
        )
    return aligned(GRAPH_COLUMNS, rows)


def graph_checkpoint_json(position: int, found: g.GraphCheckpointTuple) -> dict[str, Any]:
    """One checkpoint of a thread's ``show --json``, with its place in the thread."""
    seen = summarize(found)
    return {
        "kind": "graph_checkpoint",
        "position": position,
        "checkpoint_ns": seen.checkpoint_ns,
        "checkpoint_id": seen.checkpoint_id,
        "parent_checkpoint_id": seen.parent_checkpoint_id,
        "step": seen.step,
        "source": seen.source,
        "wrote": seen.wrote,
        "tasks": seen.tasks,
        "created_at": None if seen.created_at is None else seen.created_at.isoformat(),
        "metadata": seen.metadata,
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
        f"last         {last_activity(e, now)} at checkpoint {e.last_checkpoint_id or '-'}",
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
