"""The small statement interface both backends' transactions are written against, and the
hooks a backend store gives the shared transaction bodies.

A transaction body is an ``async`` function of :class:`Statements`: SQLite runs it in one
call on its connection's thread (:mod:`checkpointd.store.sqlite.on_thread`), Postgres on a
pooled connection (:class:`checkpointd.store.postgres.statements.PgStatements`). The bodies
written once for both (:mod:`~checkpointd.store.decisions`,
:mod:`~checkpointd.store.outbox`, :mod:`~checkpointd.store.checkpoints`) live in mixins of
:class:`StatementStore`; each backend keeps its own locking (``BEGIN IMMEDIATE``, ``FOR
UPDATE``) by what its hooks and its statements do.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from checkpointd.domain import CheckpointRecord, EventKind, PendingRecord
from checkpointd.store import budget, rows
from checkpointd.store.columns import TimeWriter
from checkpointd.store.rows import Row, TimeReader

__all__ = ["Body", "EventWriter", "RunsBody", "StatementStore", "Statements"]

T = TypeVar("T")


class Statements(Protocol):
    """The statements of one transaction or read."""

    async def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        """All rows of a query (fetched to the end, so no statement stays open)."""
        ...

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run one statement; return the number of rows it changed."""
        ...

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the event loop once the transaction has committed (once per
        callback, however often it is asked)."""
        ...


#: A transaction's or a read's work: awaits only its statements.
Body = Callable[[Statements], Coroutine[Any, Any, T]]


class RunsBody(Protocol):
    """Runs a body of statements (a store's transaction or read, lent through ``access()``)."""

    def __call__(self, body: Body[T], /) -> Awaitable[T]: ...


#: See :attr:`StatementStore._append_event_at`.
EventWriter = Callable[[Statements, str, EventKind, PendingRecord, datetime], Awaitable[None]]


class StatementStore(abc.ABC):
    """What the shared transaction bodies need of a backend store: where to run them, how
    its times are stored, and how it appends an outbox event."""

    #: Stored time to an aware datetime.
    _read_time: TimeReader
    #: Aware datetime to the stored form (checked: a naive time raises).
    _write_time: TimeWriter
    #: Append an outbox event (namespace, kind, pending row, event time) as the last
    #: statement of the transaction.
    _append_event_at: EventWriter

    @abc.abstractmethod
    async def _in_transaction(self, body: Body[T]) -> T:
        """Run ``body`` in one write transaction, bounded and with the store's errors."""

    @abc.abstractmethod
    async def _in_read(self, body: Body[T]) -> T:
        """Run ``body``'s reads, each statement seeing the last committed state."""

    async def _in_point_read(self, body: Body[T]) -> T:
        """Run the reads of one row's worth (a checkpoint): here :meth:`_in_read`; SQLite
        runs them on the event loop's thread, without a hand-off."""
        return await self._in_read(body)

    @abc.abstractmethod
    async def _in_snapshot(self, body: Body[T]) -> T:
        """Run ``body``'s reads in one read transaction: every statement sees one state."""

    @abc.abstractmethod
    async def _in_listing(self, body: Body[T]) -> T:
        """Run the two reads of a listing's page (:func:`checkpointd.store.budget.read_page`):
        in one snapshot where rows may commit out of sequence order (Postgres), each on the
        last committed state where sequences are handed out in commit order (SQLite)."""

    async def _listing_page(
        self,
        sizes: budget.Listing,
        found: budget.Listing,
        *,
        above: int,
        below: int,
        limit: int,
        max_bytes: int | None,
    ) -> tuple[list[Any], bool]:
        """A listing's page and whether rows were left (:func:`budget.read_page`), read
        again when every chosen row went between its two reads."""
        if limit <= 0:
            raise ValueError("limit must be positive")

        async def page(conn: Statements) -> tuple[list[Any], bool] | None:
            return await budget.read_page(
                conn, sizes, found, above=above, below=below, limit=limit, max_bytes=max_bytes
            )

        while True:
            read = await self._in_listing(page)
            if read is not None:
                return read

    def _checkpoint(self, row: Row) -> CheckpointRecord:
        return rows.checkpoint_from_row(row, self._read_time)

    def _pending(self, row: Row) -> PendingRecord:
        return rows.pending_from_row(row, self._read_time)

    def _decided(self, row: Row) -> PendingRecord:
        """A pending row with the decision on its pause."""
        return rows.pending_from_row(row, self._read_time, with_decision=True)

    async def _query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """All rows of one read."""
        return await self._in_read(lambda conn: conn.fetch(sql, params))

    async def _point_query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The row (at most one) of one read of a single checkpoint."""
        return await self._in_point_read(lambda conn: conn.fetch(sql, params))
