"""What the Postgres store's concern modules (:mod:`~checkpointd.store.postgres.checkpoints`,
:mod:`~checkpointd.store.postgres.interrupts`) use of the store: its pool, its statements and
its group commits, which :class:`~checkpointd.store.postgres.store.PostgresStore` provides,
and the outbox's event writer and the limits they share."""

from __future__ import annotations

import abc
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

import asyncpg
import asyncpg.exceptions

from checkpointd.domain import CheckpointRecord, EventKind, PendingRecord
from checkpointd.store import times
from checkpointd.store.base import StoreError
from checkpointd.store.columns import CHECKPOINT_INSERT_COLUMNS, decision_json, event_params
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.postgres.sql import Sql
from checkpointd.store.postgres.statements import Conn
from checkpointd.store.statements import Statements, StatementStore

__all__ = ["RACE_ATTEMPTS", "ROW_ERRORS", "CheckpointRow", "PostgresCore"]

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

    async def _append_event_at(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        at: datetime,
    ) -> None:
        """Append an outbox event; must be the last statement of the caller's transaction.
        The event's time is the database's (the column's default, now()), not ``at``.

        The advisory lock is held until commit, so events commit in cursor order (see the
        store's module docstring). Taking it last means its holder never waits for anything else,
        so it cannot deadlock with the row locks other writers hold.
        """
        params = event_params(namespace, kind, pending, times.utc_in)
        await conn.run(
            self._sql.insert_event,
            (*params, self._channel, decision_json(pending), self._event_lock),
        )
