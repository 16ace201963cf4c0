"""What the SQLite store's concern modules (:mod:`~checkpointd.store.sqlite.checkpoints`,
:mod:`~checkpointd.store.sqlite.interrupts`) use of the store: the shared hooks of
:class:`~checkpointd.store.statements.StatementStore`, its group commit and its event
writer. :class:`~checkpointd.store.sqlite.store.SQLiteStore` provides them."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any

from checkpointd.domain import CheckpointRecord, EventKind, PendingRecord
from checkpointd.store import rows, times
from checkpointd.store.statements import Statements, StatementStore

__all__ = [
    "GroupWrite",
    "SQLiteCore",
    "checkpoint_from_row",
    "decided_from_row",
    "pending_from_row",
]

#: One write of a group transaction: its statements, run on the writer inside the transaction.
GroupWrite = Callable[[Statements], Awaitable[Any]]


def checkpoint_from_row(row: rows.Row) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, times.from_us)


def pending_from_row(row: rows.Row) -> PendingRecord:
    return rows.pending_from_row(row, times.from_us)


def decided_from_row(row: rows.Row) -> PendingRecord:
    return rows.pending_from_row(row, times.from_us, with_decision=True)


class SQLiteCore(StatementStore):
    """The SQLite store as its concern mixins see it."""

    #: The database file, for messages.
    _path: str

    @abc.abstractmethod
    async def _grouped(self, write: GroupWrite) -> Any:
        """Run ``write`` in the next group-commit transaction (bounded by the store's
        timeout); return its outcome."""

    @abc.abstractmethod
    async def _append_event(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        event_at_us: int,
    ) -> None:
        """Write an outbox event in the writer's transaction; its commit wakes the notifiers."""

    @abc.abstractmethod
    async def _insert_checkpoint(
        self,
        conn: Statements,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> tuple[CheckpointRecord, bool]:
        """Insert inside the caller's transaction; return the stored row and whether this
        call wrote it (False: a retry of the same request)."""
