"""Column lists and parameter order shared by both backends' SQL.

Both schemas name their columns alike; only how a time is written differs, so the parameter
builders take the backend's time writer (``times.to_us`` or ``times.utc_in``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from checkpointd.domain import CheckpointRecord, DecisionRecord, EventKind, PendingRecord
from checkpointd.store import budget, rows

__all__ = [
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_INSERT_COLUMNS",
    "DECIDED_PENDING_COLUMNS",
    "DECISION_ROW_COLUMNS",
    "EVENT_COLUMNS",
    "EVENT_INSERT_COLUMNS",
    "EVENT_PENDING_COLUMNS",
    "GROUP_COMMIT_MAX",
    "MAX_SEQUENCE",
    "PENDING_COLUMNS",
    "TimeWriter",
    "checkpoint_params",
    "decision_json",
    "decision_params",
    "event_params",
    "pending_params",
    "sizes",
]

#: Larger than any sequence or cursor either backend assigns (signed 64-bit).
MAX_SEQUENCE: Final = 2**63 - 1
#: Most writes one group commit carries.
GROUP_COMMIT_MAX: Final = 128

#: What every checkpoint SELECT/RETURNING reads.
CHECKPOINT_COLUMNS: Final = (
    "sequence, execution_id, checkpoint_id, request_id, parent_checkpoint_id, chain_name, "
    "node_id, node_index, step_type, status, state_snapshot_json, node_input_json, "
    "node_output_json, iteration, iteration_counters_json, interrupt_reason, "
    "interrupt_context_json, agent_path, created_at"
)
#: The columns a checkpoint insert writes, in the order of :func:`checkpoint_params`; the
#: request's fingerprint is last (C10).
CHECKPOINT_INSERT_COLUMNS: Final = (
    "namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id, chain_name, "
    "node_id, node_index, step_type, status, state_snapshot_json, node_input_json, "
    "node_output_json, iteration, iteration_counters_json, interrupt_reason, "
    "interrupt_context_json, agent_path, created_at, request_fingerprint"
)
#: A pending row, in the order of :func:`pending_params`.
PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, created_at, "
    "checkpoint_id, sequence, interrupt_id, checkpoint_ns"
)
EVENT_COLUMNS: Final = (
    "cursor, namespace, kind, execution_id, chain_name, node_id, reason, context_json, "
    "agent_path, pending_created_at, checkpoint_id, sequence, event_at, decision_json, "
    "interrupt_id, checkpoint_ns"
)
#: The columns an event insert writes from :func:`event_params` (then each backend's own).
EVENT_INSERT_COLUMNS: Final = (
    "namespace, kind, execution_id, chain_name, node_id, reason, context_json, agent_path, "
    "pending_created_at, checkpoint_id, sequence, interrupt_id, checkpoint_ns"
)
#: A decision row: its pause, its decision and its lease (K1, K2).
DECISION_ROW_COLUMNS: Final = (
    f"{PENDING_COLUMNS}, {', '.join(rows.DECISION_COLUMNS)}, lease_token, request_id"
)
#: The pending row an event carries, under the pending table's column names.
EVENT_PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, "
    "pending_created_at AS created_at, checkpoint_id, sequence, interrupt_id, checkpoint_ns"
)
#: A pending row ``p`` with the decision ``d`` on its pause, when there is one (K1).
DECIDED_PENDING_COLUMNS: Final = ", ".join(
    [f"p.{c}" for c in PENDING_COLUMNS.split(", ")] + [f"d.{c}" for c in rows.DECISION_COLUMNS]
)

TimeWriter = Callable[[datetime], Any]


def sizes(size_of: Callable[[Sequence[str]], str]) -> tuple[str, str, str]:
    """The (key, stored size) selections of checkpoints, pending rows and events, given the
    backend's size expression of a list of text columns (see :mod:`budget`)."""
    return (
        f"sequence, {size_of(budget.CHECKPOINT_TEXT_COLUMNS)}",
        f"sequence, {size_of(budget.PENDING_TEXT_COLUMNS)}",
        f"cursor, {size_of(budget.EVENT_TEXT_COLUMNS)}",
    )


def checkpoint_params(
    namespace: str,
    request_id: Any,
    checkpoint: CheckpointRecord,
    write_time: TimeWriter,
    fingerprint: str | None = None,
) -> tuple[Any, ...]:
    """The values of :data:`CHECKPOINT_INSERT_COLUMNS`, in order (``request_id`` as the
    backend stores "none"; ``fingerprint`` None when the request has none)."""
    return (
        namespace,
        checkpoint.execution_id,
        checkpoint.checkpoint_id,
        request_id,
        checkpoint.parent_checkpoint_id,
        checkpoint.chain_name,
        checkpoint.node_id,
        checkpoint.node_index,
        checkpoint.step_type,
        checkpoint.status.value,
        checkpoint.state_snapshot_json,
        checkpoint.node_input_json,
        checkpoint.node_output_json,
        checkpoint.iteration,
        checkpoint.iteration_counters_json,
        checkpoint.interrupt_reason,
        checkpoint.interrupt_context_json,
        checkpoint.agent_path,
        write_time(checkpoint.created_at),
        fingerprint or None,
    )


def pending_params(pending: PendingRecord, write_time: TimeWriter) -> tuple[Any, ...]:
    """The values of :data:`PENDING_COLUMNS`, in order."""
    return (
        pending.execution_id,
        pending.chain_name,
        pending.node_id,
        pending.reason,
        pending.context_json,
        pending.agent_path,
        write_time(pending.created_at),
        pending.checkpoint_id,
        pending.sequence,
        pending.interrupt_id,
        pending.checkpoint_ns,
    )


def event_params(
    namespace: str, kind: EventKind, pending: PendingRecord, write_time: TimeWriter
) -> tuple[Any, ...]:
    """The values of :data:`EVENT_INSERT_COLUMNS`, in order."""
    return (namespace, kind.value, *pending_params(pending, write_time))


def decision_json(pending: PendingRecord) -> str | None:
    """The decision an event carries with its pending row (None when it has none)."""
    return None if pending.decision is None else rows.decision_to_json(pending.decision)


def decision_params(
    namespace: str,
    request_id: str,
    decision: DecisionRecord,
    pending: PendingRecord,
    write_time: TimeWriter,
    fingerprint: str = "",
) -> tuple[Any, ...]:
    """A new decision row: namespace, request id, approved, metadata_json, decided_by,
    decision_reason, decided_at, then :data:`PENDING_COLUMNS` of its pause, then the
    request's fingerprint (None when it has none: C10), then the response (K3)."""
    return (
        namespace,
        request_id,
        decision.approved,
        decision.metadata_json,
        decision.decided_by,
        decision.reason,
        write_time(decision.decided_at),
        *pending_params(pending, write_time),
        fingerprint or None,
        decision.response_json,
    )
