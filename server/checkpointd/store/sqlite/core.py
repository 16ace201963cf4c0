"""What the SQLite store's concern modules (:mod:`~checkpointd.store.sqlite.checkpoints`,
:mod:`~checkpointd.store.sqlite.interrupts`) use of the store: the shared hooks of
:class:`~checkpointd.store.statements.StatementStore` and its group commit, which
:class:`~checkpointd.store.sqlite.store.SQLiteStore` provides, and the outbox's event writer."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from checkpointd.domain import EventKind, PendingRecord
from checkpointd.store import times
from checkpointd.store.columns import decision_json, event_params
from checkpointd.store.sqlite import sql
from checkpointd.store.statements import Statements, StatementStore

__all__ = ["GroupWrite", "SQLiteCore"]

#: One write of a group transaction: its statements, run on the writer inside the transaction.
GroupWrite = Callable[[Statements], Awaitable[Any]]


class SQLiteCore(StatementStore):
    """The SQLite store as its concern mixins see it."""

    #: The database file, for messages.
    _path: str
    #: Set when an event commits: wakes this process's event notifiers.
    _event_wakeups: set[asyncio.Event]

    @abc.abstractmethod
    async def _grouped(self, write: GroupWrite) -> Any:
        """Run ``write`` in the next group-commit transaction (bounded by the store's
        timeout); return its outcome."""

    def _wake_event_readers(self) -> None:
        for wakeup in self._event_wakeups:
            wakeup.set()

    async def _append_event_at(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        at: datetime,
    ) -> None:
        """Write an outbox event in the writer's transaction; its commit wakes the notifiers."""
        params = (*event_params(namespace, kind, pending, times.to_us), times.to_us(at))
        await conn.run(sql.INSERT_EVENT, (*params, decision_json(pending)))
        conn.after_commit(self._wake_event_readers)
