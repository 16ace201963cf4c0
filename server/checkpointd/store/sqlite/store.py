"""The SQLite store: the embedded default backend, one database file, safe across processes.

Durability (contract E1): the file runs in WAL journal mode with ``synchronous=FULL``, so the
WAL is fsynced at every commit and an acknowledged commit survives ``kill -9`` of the server
and a power loss. (``NORMAL`` would survive ``kill -9`` but could lose the last commits on
power loss.)

Concurrency:

* Writes run in explicit ``BEGIN IMMEDIATE`` transactions on one connection in autocommit
  mode (``isolation_level=None``). A whole transaction (``BEGIN``, its statements, ``COMMIT``
  or ``ROLLBACK``) is one function run on the connection's thread
  (:mod:`checkpointd.store.sqlite.on_thread`), a multi-statement read one function on the
  reader's: one thread hop each, not one per statement. An :class:`asyncio.Lock` guards the
  writer until its transaction has ended, so the few transactions still made statement by
  statement (graph retention's) never interleave with another.
* ``BEGIN IMMEDIATE`` takes SQLite's write lock before the first read, so a transaction never
  reads a row that another process changes before it commits. That makes the read-then-write
  transactions (claim, record interrupt) exactly-once across every process that shares the
  file (contract I3); a process waiting for the lock waits up to ``busy_timeout`` and then
  gets :class:`StoreUnavailable` (retriable), never a half-done write.
* Reads use a second, query-only connection: in WAL mode readers neither block nor are
  blocked by the writer, and each read sees the last committed state.
* Group commit (:mod:`checkpointd.store.group_commit`): ``put_checkpoint`` and
  ``put_idempotent`` queue their write; one task runs the queued writes (at most
  ``columns.GROUP_COMMIT_MAX``) in a single transaction, so many concurrent writers share one fsync.
  Nothing waits on purpose: when the writer is idle the first write goes at once, alone, and
  whatever arrives while it commits forms the next transaction. Each caller is answered only
  after the transaction holding its row has committed (E1). A write's own failure
  (``CheckpointExists``; a retry finding its row) touches no other write of the transaction:
  SQLite undoes only the failed statement (no savepoint needed), and the transaction goes on.
  An SQLite error (disk full, I/O) rolls the whole transaction back and every write in it
  gets that error; none was acknowledged. The other writes (interrupts, claims, deletes) keep
  a transaction each: they read before they write and emit events, and stay simple.

Every call is bounded by ``timeout`` seconds; past it the call raises
:class:`StoreUnavailable`. SQLite errors that mean the file cannot be reached, locked,
written or grown (busy, locked, read-only, I/O error, full, cannot open) become
:class:`StoreUnavailable` with a short message naming the file and never any SQL.

Times are stored as INTEGER microseconds since the Unix epoch (UTC) and converted exactly,
without floats. The schema is applied by versioned migrations
(``store/migrations/sqlite_NNNN_*.sql``), each in one ``BEGIN IMMEDIATE`` transaction with its
``schema_migrations`` row, so several processes opening a fresh file at once apply each
version exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import types
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import aiosqlite

from checkpointd.config import DEFAULT_SQLITE_BUSY_TIMEOUT_MS, DEFAULT_STORE_TIMEOUT
from checkpointd.domain import (
    LeaseFence,
)
from checkpointd.store import decisions, times
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.columns import (
    GROUP_COMMIT_MAX,
)
from checkpointd.store.decisions import Pause
from checkpointd.store.fence_locks import PauseLocks
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.interface import Store
from checkpointd.store.schema import Migration, load_migrations
from checkpointd.store.sqlite import errors, sql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.core import GroupWrite
from checkpointd.store.sqlite.interrupts import SQLiteInterrupts
from checkpointd.store.sqlite.notifier import DataVersion, SQLiteEventNotifier
from checkpointd.store.sqlite.on_loop import LoopReadBusy, LoopReader
from checkpointd.store.sqlite.on_thread import Body, HopStatements, OnThread, Statements

__all__ = ["SQLiteStore"]

# --- rows ----------------------------------------------------------------------------------


def _load_migrations() -> tuple[Migration, ...]:
    return load_migrations("sqlite")


async def _fetch(conn: Statements, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    """All rows of a query (fetched to the end, so no statement stays open)."""
    return await conn.fetch(sql, params)


async def _run(conn: Statements, sql: str, params: Sequence[Any]) -> int:
    """Run one statement; return the number of rows it changed."""
    return await conn.run(sql, params)


T = TypeVar("T")


def _probe_open(path: str) -> None:
    """Raise the sqlite3 error of opening ``path``, if opening it fails."""
    sqlite3.connect(path, isolation_level=None).close()


# --- the store -----------------------------------------------------------------------------


class _Call:
    """:meth:`SQLiteStore._call` as a plain context manager: every store call enters one, and
    a generator-based one cost a generator and its steps on each (a put enters two)."""

    __slots__ = ("_store", "_timeout")

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._timeout = asyncio.timeout(store._timeout)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, traceback)
        except BaseException as raised:
            failure = self._store._failure(raised)
            if failure is None:
                raise
            raise failure from raised
        if exc is not None:
            failure = self._store._failure(exc)
            if failure is not None:
                raise failure from exc


class SQLiteStore(SQLiteInterrupts, Store):
    """A :class:`~checkpointd.store.interface.Store` in one SQLite file.

    ``busy_timeout_ms`` is how long a write waits for another process's write lock before
    the call fails with :class:`StoreUnavailable`; ``timeout`` bounds every call (including
    :meth:`open` and the wait for this process's own writer) in seconds. The caller checks
    the path; the parent directory must exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = DEFAULT_SQLITE_BUSY_TIMEOUT_MS,
        timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> None:
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must not be negative")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._path = os.fspath(path)
        if self._path in ("", ":memory:"):
            # Each connection would get its own private database: the reader would see nothing.
            raise ValueError("SQLiteStore needs the path of a database file")
        self._busy_timeout_ms = busy_timeout_ms
        self._timeout = timeout
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._pause_locks = PauseLocks()
        # The outbox reader's connection: its multi-statement read transactions never share
        # a connection with other callers' reads.
        self._events_conn: aiosqlite.Connection | None = None
        # The event notifiers' data_version polls, on the event loop's thread.
        self._versions: DataVersion | None = None
        # Point reads on the event loop's thread (on_loop).
        self._loop_reads: LoopReader | None = None
        self._events_lock = asyncio.Lock()
        # Each connection's transactions and reads, one call on its thread each.
        self._writes: OnThread | None = None
        self._reads: OnThread | None = None
        self._events: OnThread | None = None
        self._event_wakeups: set[asyncio.Event] = set()
        # Notifiers not closed yet: closing the store closes their inotify descriptors.
        self._notifiers: weakref.WeakSet[SQLiteEventNotifier] = weakref.WeakSet()
        self._cleanups: set[asyncio.Future[None]] = set()
        # Every submit runs inside its caller's _call (the timeout and the error translation),
        # so a lone write committed in its caller's task needs no second one around it.
        self._group: GroupCommit[GroupWrite, Any] = GroupCommit(
            self._commit_group, max_batch=GROUP_COMMIT_MAX, inline=self._commit_writes
        )
        self._read_time = times.from_us
        self._write_time = times.to_us
        self._decision_sql = sql.DECISIONS
        self._outbox_sql = sql.OUTBOX
        self._checkpoint_sql = sql.CHECKPOINTS
        self._get_idempotent_sql = sql.GET_IDEMPOTENT

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"

    # --- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, set WAL and ``synchronous=FULL``, and apply the missing migrations."""
        if self._writer is not None:
            return
        migrations = _load_migrations()
        writer: aiosqlite.Connection | None = None
        reader: aiosqlite.Connection | None = None
        events: aiosqlite.Connection | None = None
        try:
            async with asyncio.timeout(self._timeout):
                writer = await self._connect()
                mode = await self._enter_wal(writer)
                if str(mode[0][0]).lower() != "wal":
                    raise StoreError(
                        f"cannot open SQLite database at {self._path}: "
                        f"WAL journal mode is not available (journal_mode={mode[0][0]})"
                    )
                await _run(HopStatements(writer), "PRAGMA synchronous = FULL", ())
                await self._migrate(writer, migrations)
                reader = await self._connect()
                await _run(HopStatements(reader), "PRAGMA query_only = ON", ())
                await _fetch(HopStatements(reader), sql.PING, ())
                events = await self._connect()
                await _run(HopStatements(events), "PRAGMA query_only = ON", ())
        except BaseException as exc:
            for conn in (events, reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            if isinstance(exc, TimeoutError):
                raise StoreUnavailable(
                    f"cannot open SQLite database at {self._path}: "
                    f"no answer within {self._timeout:g} s"
                ) from exc
            if isinstance(exc, sqlite3.Error):
                error = (
                    StoreUnavailable
                    if errors.primary_code(exc) in errors.UNAVAILABLE_CODES
                    else StoreError
                )
                raise error(
                    f"cannot open SQLite database at {self._path}: {errors.describe(exc)}"
                ) from exc
            raise
        self._writer, self._reader, self._events_conn = writer, reader, events
        self._writes = OnThread(writer, self._write_lock)
        self._reads = OnThread(reader)
        self._events = OnThread(events, self._events_lock)
        self._versions = DataVersion(self._path)
        self._loop_reads = LoopReader(self._path)

    @staticmethod
    async def _enter_wal(writer: aiosqlite.Connection) -> list[sqlite3.Row]:
        """Switch the file to WAL, retrying while another process holds it. Switching takes
        an exclusive lock and SQLite answers "database is locked" at once, without its busy
        handler, when processes open a new file together; the caller's timeout bounds the
        retries."""
        while True:
            try:
                return await _fetch(HopStatements(writer), "PRAGMA journal_mode = WAL", ())
            except sqlite3.OperationalError as exc:
                if errors.primary_code(exc) not in errors.BUSY_CODES:
                    raise
            await asyncio.sleep(random.uniform(0.005, 0.05))  # jitter, so racers part

    async def close(self) -> None:
        """Close both connections, after the write in progress (if any). Safe to call twice."""
        reader, writer, events = self._reader, self._writer, self._events_conn
        self._reader = self._writer = self._events_conn = None
        self._reads = self._writes = self._events = None
        versions, self._versions = self._versions, None
        if versions is not None:
            versions.close()
        loop_reads, self._loop_reads = self._loop_reads, None
        if loop_reads is not None:
            loop_reads.close()
        for notifier in list(self._notifiers):
            notifier.detach()
        if reader is not None:
            await reader.close()
        if events is not None:
            async with self._events_lock:
                await events.close()
        if writer is not None:
            async with self._write_lock:
                await writer.close()

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the file answers a trivial query."""
        async with self._call():
            await self._rows(sql.PING, ())

    def pool_state(self) -> None:
        """None: the SQLite store holds two fixed connections, not a pool."""
        return None

    async def count_pending_by_namespace(self) -> dict[str, int]:
        async with self._call():
            rows = await self._rows(sql.COUNT_PENDING, ())
        return {str(row[0]): int(row[1]) for row in rows}

    async def _connect(self) -> aiosqlite.Connection:
        # Probe with plain sqlite3 first: when aiosqlite's own connect fails, its worker
        # thread outlives the call and may report to a closed event loop.
        await asyncio.to_thread(_probe_open, self._path)
        conn = await aiosqlite.connect(
            self._path,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,
        )
        conn.row_factory = sqlite3.Row
        try:
            await _run(
                HopStatements(conn), f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}", ()
            )
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _migrate(self, conn: aiosqlite.Connection, migrations: Sequence[Migration]) -> None:
        """Apply each missing migration in its own ``BEGIN IMMEDIATE`` transaction."""
        scripts = {m.version: sql.split_statements(m.sql) for m in migrations}
        hops = HopStatements(conn)  # at open only: one hop per statement is no matter
        await _run(hops, "BEGIN IMMEDIATE", ())
        try:
            await _run(hops, sql.CREATE_SCHEMA_MIGRATIONS, ())
            await _run(hops, "COMMIT", ())
        except BaseException:
            await conn.rollback()
            raise
        known = migrations[-1].version
        for migration in migrations:
            await _run(hops, "BEGIN IMMEDIATE", ())
            try:
                applied = {row[0] for row in await _fetch(hops, sql.APPLIED_VERSIONS, ())}
                if applied and max(applied) > known:
                    raise StoreError(
                        f"cannot open SQLite database at {self._path}: its schema version "
                        f"{max(applied)} is newer than this server knows ({known})"
                    )
                if migration.version not in applied:
                    for statement in scripts[migration.version]:
                        await _run(hops, statement, ())
                    await _run(
                        hops,
                        sql.RECORD_MIGRATION,
                        (migration.version, migration.file_name, times.now_us()),
                    )
                await _run(hops, "COMMIT", ())
            except BaseException:
                await conn.rollback()
                raise

    def access(self) -> SQLiteAccess:
        """What the graph store and the execution reader borrow from this store."""
        return SQLiteAccess(
            call=self._call,
            write=self._write,
            write_hops=self._write_hops,
            read=self._read,
            read_point=self._read_point,
            group=self._group.submit,
            append_event=self._append_event_at,
        )

    # --- plumbing ------------------------------------------------------------------------

    def _on(self, on_thread: OnThread | None) -> OnThread:
        if on_thread is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        return on_thread

    async def _read(self, body: Body[T]) -> T:
        """The body's reads on the query-only connection, in one call on its thread."""
        return await self._on(self._reads).read(body)

    async def _read_point(self, body: Body[T]) -> T:
        """The reads of one checkpoint's rows on the event loop's own connection, at once
        (:mod:`checkpointd.store.sqlite.on_loop`); on the reader's thread when the file is
        locked for a moment."""
        reader = self._loop_reads
        if reader is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        try:
            return reader.read(body)
        except LoopReadBusy:
            return await self._read(body)

    async def _rows(self, query: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        """All rows of one query on the query-only connection."""
        return await self._read(lambda conn: conn.fetch(query, params))

    async def _write(self, body: Body[T]) -> T:
        """One ``BEGIN IMMEDIATE`` transaction on the writer, the body's statements and the
        ``COMMIT`` in one call on its thread (see :mod:`checkpointd.store.sqlite.on_thread`:
        a cancelled caller leaves no transaction open); its commit wakes the event notifiers
        when it wrote an event."""
        return await self._on(self._writes).transaction("BEGIN IMMEDIATE", body)

    async def _in_transaction(self, body: Body[T]) -> T:
        async with self._call():
            return await self._write(body)

    async def _grouped(self, write: GroupWrite) -> Any:
        async with self._call():
            return await self._group.submit(write)

    async def _in_read(self, body: Body[T]) -> T:
        async with self._call():
            return await self._read(body)

    async def _in_point_read(self, body: Body[T]) -> T:
        async with self._call():
            return await self._read_point(body)

    async def _in_snapshot(self, body: Body[T]) -> T:
        async with self._call():
            return await self._events_read(body)

    async def _in_listing(self, body: Body[T]) -> T:
        # On the query-only reader: sequences are handed out in commit order.
        return await self._in_read(body)

    def _holding_pause(self, pause: Pause) -> AbstractAsyncContextManager[object]:
        # The lease excludes this process's fenced writes on the pause (K4).
        return self._pause_locks.exclusive(pause)

    def _call(self) -> _Call:
        """Bound a call by ``timeout`` and turn SQLite errors into store errors."""
        return _Call(self)

    def _failure(self, exc: BaseException) -> BaseException | None:
        """The store error a call that raised ``exc`` ends with; None: ``exc`` itself."""
        if isinstance(exc, TimeoutError):
            return StoreUnavailable(
                f"SQLite database {self._path} did not answer within {self._timeout:g} s"
            )
        if isinstance(exc, sqlite3.Error):
            return errors.translate(
                exc, self._path, busy_timeout_ms=self._busy_timeout_ms, closed=self._writer is None
            )
        if isinstance(exc, ValueError) and self._writer is None:
            # aiosqlite's "Connection closed" when close() overtook this call.
            return StoreUnavailable(f"SQLite store {self._path} is closed")
        return None

    @contextlib.asynccontextmanager
    async def _write_hops(self) -> AsyncIterator[Statements]:
        """One ``BEGIN IMMEDIATE`` transaction on the writer, one thread hop per statement,
        for a body that awaits other work between its statements (graph retention), under the
        lock of :meth:`_write`'s transactions, committed when the body returns, rolled back
        when it raises.

        The lock is held until the transaction has ended. A cancelled caller (its ``timeout``
        ran out) does not wait for that: the rollback finishes in the background after
        whatever statement the connection is still running, then frees the lock.
        """
        conn = self._writer
        if conn is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        lock = self._write_lock
        await lock.acquire()
        hops = HopStatements(conn)
        try:
            await _fetch(hops, "BEGIN IMMEDIATE", ())
            yield hops
            await _fetch(hops, "COMMIT", ())
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._rollback_and_release(conn, lock))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)
            raise
        except BaseException:
            await self._rollback_and_release(conn, lock)
            raise
        else:
            lock.release()
            for callback in hops.callbacks:
                callback()

    @staticmethod
    async def _rollback_and_release(conn: aiosqlite.Connection, lock: asyncio.Lock) -> None:
        """End the connection's transaction, if one is open, and free its lock."""
        try:
            # A no-op when no transaction is open (BEGIN failed, or COMMIT went through).
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.rollback()
        finally:
            lock.release()

    async def _commit_group(self, writes: list[GroupWrite]) -> list[Any]:
        """Run ``writes`` in one transaction (one call on the writer's thread), bounded by the
        store's timeout (the group's own task, whose callers wait on its outcome)."""
        async with self._call():
            return await self._commit_writes(writes)

    async def _commit_writes(self, writes: list[GroupWrite]) -> list[Any]:
        """Run ``writes`` in one transaction; a write's own :class:`StoreError` (a duplicate
        id) is its outcome, and SQLite has undone only that write's failed statement."""

        async def body(conn: Statements) -> list[Any]:
            outcomes: list[Any] = []
            for write in writes:
                try:
                    outcomes.append(await write(conn))
                except StoreError as exc:
                    outcomes.append(exc)
            return outcomes

        return await self._write(body)

    # --- fences (the decision transactions: checkpointd.store.decisions) -------------

    @contextlib.asynccontextmanager
    async def fenced(self, namespace: str, fence: LeaseFence) -> AsyncIterator[bool]:
        """Hold the pause's lock shared while a write under ``fence`` runs (K4)."""
        pause = (namespace, fence.execution_id, fence.checkpoint_id, fence.interrupt_id)
        async with self._pause_locks.shared(pause):
            async with self._call():
                found = await self._rows(sql.DECISION_OF_PAUSE, pause)
            current = self._decided(found[0]) if found else None
            yield decisions.fence_holds(current, found[0]["lease_token"] if found else None, fence)

    # --- interrupt events ----------------------------------------------------------------

    async def _events_read(self, body: Body[T]) -> T:
        """One read transaction on the events connection, in one call on its thread: every
        query in it sees the same committed state (WAL readers neither block nor are blocked
        by writers)."""
        return await self._on(self._events).transaction("BEGIN", body)

    def _data_version(self) -> int:
        """``PRAGMA data_version``, read on the event loop's thread (see
        :class:`~checkpointd.store.sqlite.notifier.DataVersion`); raises
        :class:`sqlite3.Error` when it cannot be read, the store closed included."""
        versions = self._versions
        if versions is None:
            raise sqlite3.ProgrammingError("the store is closed")
        return versions.read()

    def _outbox_bounds(self) -> tuple[object, ...]:
        """The outbox's purge mark and newest cursor, read on the event loop's thread as
        :meth:`_data_version` is: a commit that leaves them as they were wrote no event."""
        versions = self._versions
        if versions is None:
            raise sqlite3.ProgrammingError("the store is closed")
        return versions.row(sql.OUTBOX.bounds)

    def event_notifier(self) -> SQLiteEventNotifier:
        """A notifier that hears this process's writes, and other connections' commits
        through an inotify watch on the file's directory confirmed by ``PRAGMA
        data_version`` (or a poll of it every 50 ms where inotify is not available) and by
        the outbox's bounds: commits that write no event do not wake it."""
        notifier = SQLiteEventNotifier(
            self._data_version,
            self._event_wakeups,
            path=self._path,
            outbox_bounds=self._outbox_bounds,
        )
        self._notifiers.add(notifier)
        return notifier
