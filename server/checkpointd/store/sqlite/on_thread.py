"""A whole SQLite transaction, or a whole read, as one call on an aiosqlite connection's thread.

aiosqlite runs every statement on the connection's own thread: each one is a queue put, a
thread wake and a ``call_soon_threadsafe`` back to the event loop. A write transaction of
``BEGIN IMMEDIATE``, one insert and ``COMMIT`` paid that three times (a group commit of N
writes N + 2 times). :class:`OnThread` hands the thread one function that begins, runs every
statement of the body and commits (or rolls back), so a transaction costs one hop.

A body is an ``async`` function of :class:`Statements`, as the store's shared logic
(``retries``, ``outbox``, ``graph_interrupts``...) is written for both backends. On the thread
its statements run at once and never suspend, so the coroutine is driven to its end with one
``send``: a body that awaits anything but its statements is a bug, and raises.

Cancellation. The function always ends its transaction itself (``COMMIT``, or ``ROLLBACK``
when anything raised), so no caller can leave one open. It looks at its caller between its
steps, as the statement-by-statement transactions did between their hops: a caller cancelled
(its timeout ran out) while the function is queued has it skipped; one cancelled before
``COMMIT`` (while ``BEGIN IMMEDIATE`` waited for another process's lock, say) has it rolled
back; only a caller cancelled while ``COMMIT`` runs may find its write committed, as any
cancelled write may. The connection's lock is freed only when the function has ended.

This is the only module that touches aiosqlite's internals: its worker queue and the raw
``sqlite3`` connection (``Connection._tx``, ``._connection``, ``._running``; aiosqlite 0.22, whose
``Connection._execute`` puts ``(future, function)`` on that queue exactly so). Transactions
that must stay statement by statement (an ``async with`` body that awaits other work between
statements) use :class:`HopStatements` on the same connection, under the same lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiosqlite

from checkpointd.store.statements import Body, Statements

__all__ = ["Body", "Direct", "HopStatements", "OnThread", "Statements", "drive"]

T = TypeVar("T")


class Direct:
    """:class:`Statements` on a raw connection, on the thread that owns it."""

    __slots__ = ("_raw", "callbacks")

    def __init__(self, raw: sqlite3.Connection) -> None:
        self._raw = raw
        self.callbacks: dict[Callable[[], None], None] = {}

    async def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return self._raw.execute(sql, params).fetchall()

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        cursor = self._raw.execute(sql, params)
        try:
            return cursor.rowcount
        finally:
            cursor.close()

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._raw.executemany(sql, rows).close()

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks[callback] = None


class HopStatements:
    """:class:`Statements` through aiosqlite's public calls, one thread hop per statement:
    for a transaction whose body awaits other work between its statements."""

    __slots__ = ("_conn", "callbacks")

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self.callbacks: dict[Callable[[], None], None] = {}

    async def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return list(await self._conn.execute_fetchall(sql, params))

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        async with self._conn.execute(sql, params) as cursor:
            return cursor.rowcount

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await (await self._conn.executemany(sql, rows)).close()

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks[callback] = None


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a body that never suspends to its end, on the calling thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError("a body run on the SQLite thread awaited something besides its statements")


class _Skipped(Exception):
    """The caller was cancelled before the function could commit: nothing was written."""


@dataclass(slots=True)
class _Job:
    cancelled: bool = False
    """Set on the loop when the caller gives up; the thread looks at it between its steps."""
    committed: dict[Callable[[], None], None] | None = None
    """Set on the thread once ``COMMIT`` went through: the body's after-commit callbacks."""


def _transaction(job: _Job, begin: str, body: Body[T], raw: sqlite3.Connection) -> T:
    """On the thread: ``begin``, the body, ``COMMIT``; ``ROLLBACK`` when anything raises."""
    if job.cancelled:
        raise _Skipped
    statements = Direct(raw)
    raw.execute(begin)  # may wait up to busy_timeout for another process's lock
    try:
        if job.cancelled:  # while it waited
            raise _Skipped
        result = drive(body(statements))
        if job.cancelled:  # nothing is committed for a caller that gave up before COMMIT
            raise _Skipped
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:  # a failed COMMIT may leave it open too
            with contextlib.suppress(sqlite3.Error):
                raw.execute("ROLLBACK")
        raise
    job.committed = statements.callbacks
    return result


def _read(job: _Job, body: Body[T], raw: sqlite3.Connection) -> T:
    """On the thread: the body's statements, each in autocommit."""
    if job.cancelled:
        raise _Skipped
    return drive(body(Direct(raw)))


def _nothing(raw: sqlite3.Connection) -> None:
    """Queued behind an abandoned function: done once that function has ended."""


class OnThread:
    """Transactions and reads on one aiosqlite connection, one thread hop each.

    ``lock`` (when given) is held from before a transaction's function is queued until it has
    ended, so transactions of :class:`HopStatements` under the same lock never interleave
    with it.
    """

    def __init__(self, conn: aiosqlite.Connection, lock: asyncio.Lock | None = None) -> None:
        self._conn = conn
        self._lock = lock

    async def transaction(self, begin: str, body: Body[T]) -> T:
        """``begin`` (``BEGIN IMMEDIATE``, ``BEGIN``), the body, ``COMMIT``, in one call; the
        body's ``after_commit`` callbacks run here once it committed."""
        lock = self._lock
        if lock is not None:
            await lock.acquire()
        job = _Job()
        try:
            result = await self._submit(lambda raw: _transaction(job, begin, body, raw))
        except asyncio.CancelledError:
            # The function may still be queued or running: it ends its transaction itself,
            # and the lock stays held until it has (the thread runs its queue in order).
            job.cancelled = True
            self._after_abandoned(job, lock)
            raise
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        if lock is not None:
            lock.release()
        for callback in job.committed or ():
            callback()
        return result

    async def read(self, body: Body[T]) -> T:
        """The body's reads, each statement in autocommit (no lock: a read leaves nothing
        open, and the thread runs one function at a time)."""
        job = _Job()
        try:
            return await self._submit(lambda raw: _read(job, body, raw))
        except asyncio.CancelledError:
            job.cancelled = True
            raise

    def _after_abandoned(self, job: _Job, lock: asyncio.Lock | None) -> None:
        """Once a cancelled caller's function has ended on the thread: free the lock, and run
        its callbacks if it committed after all."""

        def finish(_: object = None) -> None:
            if lock is not None:
                lock.release()
            for callback in job.committed or ():
                callback()

        try:
            marker = self._submit(_nothing)
        except ValueError:  # closed: its queue is finishing, nothing more will run on it
            finish()
            return
        marker.add_done_callback(finish)

    def _submit(self, function: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``function(raw connection)`` on the connection's thread, as
        ``aiosqlite.Connection._execute`` does. A cancelled waiter cancels the future; the
        thread then drops the function's outcome."""
        conn = self._conn
        raw = conn._connection
        if not conn._running or raw is None:
            raise ValueError("Connection closed")  # aiosqlite's own error for it
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        conn._tx.put_nowait((future, lambda: function(raw)))
        return future
