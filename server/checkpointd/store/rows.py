"""Records from database rows. Both backends name their columns alike; only how a stored
timestamp is read differs (microseconds in SQLite, timestamptz in Postgres), so each backend
passes its own reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import datetime
from typing import Any, Final, Protocol

from checkpointd.domain import (
    CheckpointRecord,
    CheckpointStatus,
    DecisionRecord,
    DecisionStatus,
    EventKind,
    InterruptEventRecord,
    PendingRecord,
)
from checkpointd.store import times

__all__ = [
    "DECISION_COLUMNS",
    "Row",
    "TimeReader",
    "checkpoint_from_row",
    "decision_from_json",
    "decision_from_row",
    "decision_to_json",
    "event_from_row",
    "pending_from_row",
]

#: The decision columns of ``interrupt_decisions``, as read with a pending row.
DECISION_COLUMNS = (
    "approved",
    "metadata_json",
    "decided_by",
    "decision_reason",
    "decided_at",
    "decision_status",
    "attempts",
    "lease_expires_at",
    "decision_error",
    "reported_at",
    "response_json",
)

TimeReader = Callable[[Any], datetime]


class Row(Protocol):
    """A result row addressable by column name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str | int, /) -> Any: ...


def _kept_as_stored(record: type[Any], *converted: str) -> tuple[str, ...]:
    """The fields of a record whose column has the field's name and holds its value as it
    is: every field but the ``converted`` ones (times, enums, nested records)."""
    return tuple(f.name for f in fields(record) if f.name not in converted)


#: A checkpoint's fields read from their columns unchanged.
_CHECKPOINT_AS_STORED: Final = _kept_as_stored(CheckpointRecord, "status", "created_at")
#: A pending row's fields read from their columns unchanged.
_PENDING_AS_STORED: Final = _kept_as_stored(PendingRecord, "created_at", "decision")


def _as_stored(row: Row, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: row[name] for name in names}


def checkpoint_from_row(row: Row, read_time: TimeReader) -> CheckpointRecord:
    """A checkpoint from a ``checkpoints`` row."""
    return CheckpointRecord(
        **_as_stored(row, _CHECKPOINT_AS_STORED),
        status=CheckpointStatus(row["status"]),
        created_at=read_time(row["created_at"]),
    )


def decision_from_row(row: Row, read_time: TimeReader) -> DecisionRecord | None:
    """The decision of a row read with :data:`DECISION_COLUMNS` (None when a LEFT JOIN found
    no decision)."""
    if row["decided_by"] is None:
        return None
    lease = row["lease_expires_at"]
    reported = row["reported_at"]
    return DecisionRecord(
        approved=bool(row["approved"]),
        metadata_json=row["metadata_json"],
        decided_by=row["decided_by"],
        reason=row["decision_reason"],
        decided_at=read_time(row["decided_at"]),
        status=DecisionStatus(row["decision_status"]),
        attempts=int(row["attempts"]),
        lease_expires_at=None if lease is None else read_time(lease),
        error=row["decision_error"],
        reported_at=None if reported is None else read_time(reported),
        response_json=row["response_json"],
    )


def _us(value: datetime | None) -> int | None:
    return None if value is None else times.to_us(value)


def _from_us(value: int | None) -> datetime | None:
    return None if value is None else times.from_us(value)


def decision_to_json(decision: DecisionRecord) -> str:
    """The decision as the outbox keeps it with an event (times in microseconds)."""
    return json.dumps(
        {
            "approved": decision.approved,
            "metadata_json": decision.metadata_json,
            "decided_by": decision.decided_by,
            "reason": decision.reason,
            "decided_at": _us(decision.decided_at),
            "status": decision.status.value,
            "attempts": decision.attempts,
            "lease_expires_at": _us(decision.lease_expires_at),
            "error": decision.error,
            "reported_at": _us(decision.reported_at),
            "response_json": decision.response_json,
        },
        separators=(",", ":"),
    )


def decision_from_json(text: str | None) -> DecisionRecord | None:
    """The decision an outbox event carries (None for events written without one)."""
    if not text:
        return None
    data = json.loads(text)
    decided_at = _from_us(data["decided_at"])
    assert decided_at is not None
    return DecisionRecord(
        approved=bool(data["approved"]),
        metadata_json=data["metadata_json"],
        decided_by=data["decided_by"],
        reason=data["reason"],
        decided_at=decided_at,
        status=DecisionStatus(data["status"]),
        attempts=int(data["attempts"]),
        lease_expires_at=_from_us(data["lease_expires_at"]),
        error=data["error"],
        reported_at=_from_us(data["reported_at"]),
        # Events written before schema 12 carry no response.
        response_json=data.get("response_json", ""),
    )


def pending_from_row(
    row: Row,
    read_time: TimeReader,
    *,
    created_at_column: str = "created_at",
    with_decision: bool = False,
) -> PendingRecord:
    """A pending interrupt from a ``pending_interrupts`` row (or an event, claim or decision
    row that carries one, whose created_at column may be named otherwise); with
    ``with_decision`` the row also carries :data:`DECISION_COLUMNS`."""
    return PendingRecord(
        **_as_stored(row, _PENDING_AS_STORED),
        created_at=read_time(row[created_at_column]),
        decision=decision_from_row(row, read_time) if with_decision else None,
    )


def event_from_row(row: Row, read_time: TimeReader) -> InterruptEventRecord:
    """An outbox event from an ``interrupt_events`` row."""
    return InterruptEventRecord(
        cursor=row["cursor"],
        namespace=row["namespace"],
        kind=EventKind(row["kind"]),
        pending=replace(
            pending_from_row(row, read_time, created_at_column="pending_created_at"),
            decision=decision_from_json(row["decision_json"]),
        ),
        event_at=read_time(row["event_at"]),
    )
