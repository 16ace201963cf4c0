"""What the Postgres store's concern modules (:mod:`~checkpointd.store.postgres.checkpoints`,
:mod:`~checkpointd.store.postgres.interrupts`) use of the store: its pool, its statements, its
group commits and its event writer, with the row helpers and limits they share.
:class:`~checkpointd.store.postgres.store.PostgresStore` provides them."""

from __future__ import annotations

import abc
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

import asyncpg
import asyncpg.exceptions

from checkpointd.domain import CheckpointRecord, EventKind, PendingRecord
from checkpointd.store import rows, times
from checkpointd.store.base import StoreError
from checkpointd.store.columns import CHECKPOINT_INSERT_COLUMNS
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.postgres.sql import Sql
from checkpointd.store.postgres.statements import Conn
from checkpointd.store.statements import StatementStore

__all__ = [
    "RACE_ATTEMPTS",
    "ROW_ERRORS",
    "CheckpointRow",
    "PostgresCore",
    "checkpoint_from_row",
    "decided_from_row",
    "pending_from_row",
]

#: Attempts when a row we conflicted with vanished before we could read it (a concurrent
#: delete or claim); each attempt is cheap and two are practically always enough.
RACE_ATTEMPTS: Final = 5
#: What one row's values can make a multi-row statement fail with (a value or a constraint
#: Postgres refuses), as opposed to the connection or the database failing.
ROW_ERRORS: Final = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
)
#: Where the write time sits in :func:`~checkpointd.store.columns.checkpoint_params`.
_CREATED_AT_PARAM: Final = CHECKPOINT_INSERT_COLUMNS.split(", ").index("created_at")


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A checkpoint on its way into the table: the insert's parameters and the record they
    were made from. The insert returns only the sequence: the stored row is the record with
    it (and its time as written, in UTC), so 2 KB of state never travels back."""

    args: tuple[object, ...]
    record: CheckpointRecord

    def stored(self, sequence: int) -> CheckpointRecord:
        created_at = self.args[_CREATED_AT_PARAM]
        assert isinstance(created_at, datetime)
        return replace(self.record, sequence=sequence, created_at=created_at)


def checkpoint_from_row(row: asyncpg.Record) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, times.utc_out)


def pending_from_row(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, times.utc_out)


def decided_from_row(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, times.utc_out, with_decision=True)


class PostgresCore(StatementStore):
    """The Postgres store as its concern mixins see it."""

    _sql: Sql
    #: The advisory lock that orders events by cursor, and the outbox's NOTIFY channel.
    _event_lock: int
    _channel: str
    _checkpoint_group: GroupCommit[CheckpointRow, CheckpointRecord | None]
    _idempotent_group: GroupCommit[tuple[object, ...], bool]

    @abc.abstractmethod
    def _connection(self) -> AbstractAsyncContextManager[Conn]:
        """Lend a pooled connection; turn driver failures into store errors."""

    @abc.abstractmethod
    def _read_snapshot(self) -> AbstractAsyncContextManager[Conn]:
        """One read-only REPEATABLE READ transaction."""

    @abc.abstractmethod
    def _translate(self, exc: Exception) -> StoreError | None:
        """The store error of a driver failure (None: not one)."""

    @abc.abstractmethod
    async def _append_event(
        self, conn: Conn, namespace: str, kind: EventKind, pending: PendingRecord
    ) -> None:
        """Append an outbox event; must be the last statement of the caller's transaction."""

    @abc.abstractmethod
    async def _existing_checkpoint(
        self,
        conn: Conn,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> CheckpointRecord | None:
        """After an insert wrote nothing: the stored row of a retry (None: the conflicting
        row is gone again, and the caller inserts once more)."""

    @staticmethod
    @abc.abstractmethod
    def _checkpoint_args(
        namespace: str, request_id: str, checkpoint: CheckpointRecord, fingerprint: str
    ) -> tuple[object, ...]:
        """The insert's parameters of a checkpoint."""
