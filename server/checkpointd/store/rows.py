"""Records from database rows. Both backends name their columns alike; only how a stored
timestamp is read differs (microseconds in SQLite, timestamptz in Postgres), so each backend
passes its own reader."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from checkpointd.domain import (
    CheckpointRecord,
    CheckpointStatus,
    EventKind,
    InterruptEventRecord,
    PendingRecord,
)

__all__ = ["Row", "TimeReader", "checkpoint_from_row", "event_from_row", "pending_from_row"]

TimeReader = Callable[[Any], datetime]


class Row(Protocol):
    """A result row addressable by column name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str, /) -> Any: ...


def checkpoint_from_row(row: Row, read_time: TimeReader) -> CheckpointRecord:
    """A checkpoint from a ``checkpoints`` row."""
    return CheckpointRecord(
        execution_id=row["execution_id"],
        checkpoint_id=row["checkpoint_id"],
        parent_checkpoint_id=row["parent_checkpoint_id"],
        chain_name=row["chain_name"],
        node_id=row["node_id"],
        node_index=row["node_index"],
        step_type=row["step_type"],
        status=CheckpointStatus(row["status"]),
        state_snapshot_json=row["state_snapshot_json"],
        node_input_json=row["node_input_json"],
        node_output_json=row["node_output_json"],
        iteration=row["iteration"],
        iteration_counters_json=row["iteration_counters_json"],
        interrupt_reason=row["interrupt_reason"],
        interrupt_context_json=row["interrupt_context_json"],
        agent_path=row["agent_path"],
        created_at=read_time(row["created_at"]),
        sequence=row["sequence"],
    )


def pending_from_row(
    row: Row, read_time: TimeReader, *, created_at_column: str = "created_at"
) -> PendingRecord:
    """A pending interrupt from a ``pending_interrupts`` row (or an event or claim row that
    carries one, whose created_at column may be named otherwise)."""
    return PendingRecord(
        execution_id=row["execution_id"],
        chain_name=row["chain_name"],
        node_id=row["node_id"],
        reason=row["reason"],
        context_json=row["context_json"],
        agent_path=row["agent_path"],
        created_at=read_time(row[created_at_column]),
        checkpoint_id=row["checkpoint_id"],
        sequence=row["sequence"],
    )


def event_from_row(row: Row, read_time: TimeReader) -> InterruptEventRecord:
    """An outbox event from an ``interrupt_events`` row."""
    return InterruptEventRecord(
        cursor=row["cursor"],
        namespace=row["namespace"],
        kind=EventKind(row["kind"]),
        pending=pending_from_row(row, read_time, created_at_column="pending_created_at"),
        event_at=read_time(row["event_at"]),
    )
