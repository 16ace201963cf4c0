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
import dataclasses
import functools
import os
import random
import sqlite3
import types
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

import aiosqlite

from checkpointd.config import DEFAULT_SQLITE_BUSY_TIMEOUT_MS, DEFAULT_STORE_TIMEOUT
from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    DeleteExecutionResult,
    EventKind,
    EventPage,
    LeaseFence,
    Page,
    PendingFilter,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
    SnapshotPage,
)
from checkpointd.store import budget, decisions, outbox, replies, retries, rows, times
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.columns import (
    GROUP_COMMIT_MAX,
    MAX_SEQUENCE,
    checkpoint_params,
    decision_json,
    event_params,
    pending_params,
)
from checkpointd.store.decisions import DecisionTransactions, Pause
from checkpointd.store.fence_locks import PauseLocks
from checkpointd.store.filters import conditions
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.schema import Migration, load_migrations
from checkpointd.store.sqlite import errors, sql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.notifier import DataVersion, SQLiteEventNotifier
from checkpointd.store.sqlite.on_thread import Body, HopStatements, OnThread, Statements

__all__ = ["SQLiteStore"]

# --- rows ----------------------------------------------------------------------------------


def _checkpoint_from_row(row: sqlite3.Row) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, times.from_us)


def _pending_from_row(row: sqlite3.Row) -> PendingRecord:
    return rows.pending_from_row(row, times.from_us)


def _decided_from_row(row: sqlite3.Row) -> PendingRecord:
    return rows.pending_from_row(row, times.from_us, with_decision=True)


def _load_migrations() -> tuple[Migration, ...]:
    return load_migrations("sqlite")


async def _fetch(conn: Statements, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    """All rows of a query (fetched to the end, so no statement stays open)."""
    return await conn.fetch(sql, params)


async def _run(conn: Statements, sql: str, params: Sequence[Any]) -> int:
    """Run one statement; return the number of rows it changed."""
    return await conn.run(sql, params)


#: One write of a group transaction: its statements, run on the writer inside the transaction.
_GroupWrite = Callable[[Statements], Awaitable[Any]]

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


class SQLiteStore(DecisionTransactions):
    """A :class:`~checkpointd.store.base.Store` in one SQLite file.

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
        self._events_lock = asyncio.Lock()
        # Each connection's transactions and reads, one call on its thread each.
        self._writes: OnThread | None = None
        self._reads: OnThread | None = None
        self._events: OnThread | None = None
        self._event_wakeups: set[asyncio.Event] = set()
        # Notifiers not closed yet: closing the store closes their inotify descriptors.
        self._notifiers: weakref.WeakSet[SQLiteEventNotifier] = weakref.WeakSet()
        self._cleanups: set[asyncio.Future[None]] = set()
        self._group: GroupCommit[_GroupWrite, Any] = GroupCommit(
            self._commit_group, max_batch=GROUP_COMMIT_MAX
        )
        self._read_time = times.from_us
        self._write_time = times.to_us
        self._decision_sql = sql.DECISIONS

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
        """Return the number of pending interrupts in each namespace that has any."""
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

    def graph_access(self) -> SQLiteAccess:
        """The transactions and connections the graph wing shares with this store."""
        return SQLiteAccess(
            call=self._call,
            write=self._write,
            write_hops=self._write_hops,
            read=self._read,
            group=self._group.submit,
            append_event=self._append_event,
        )

    # --- plumbing ------------------------------------------------------------------------

    def _on(self, on_thread: OnThread | None) -> OnThread:
        if on_thread is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        return on_thread

    async def _read(self, body: Body[T]) -> T:
        """The body's reads on the query-only connection, in one call on its thread."""
        return await self._on(self._reads).read(body)

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

    async def _in_read(self, body: Body[T]) -> T:
        async with self._call():
            return await self._read(body)

    async def _in_snapshot(self, body: Body[T]) -> T:
        async with self._call():
            return await self._events_read(body)

    async def _append_event_at(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        at: datetime,
    ) -> None:
        await self._append_event(conn, namespace, kind, pending, times.to_us(at))

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

    def _wake_event_readers(self) -> None:
        for wakeup in self._event_wakeups:
            wakeup.set()

    async def _append_event(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        event_at_us: int,
    ) -> None:
        """Write an outbox event in the writer's transaction; its commit wakes the notifiers."""
        params = (*event_params(namespace, kind, pending, times.to_us), event_at_us)
        await _run(conn, sql.INSERT_EVENT, (*params, decision_json(pending)))
        conn.after_commit(self._wake_event_readers)

    @staticmethod
    async def _rollback_and_release(conn: aiosqlite.Connection, lock: asyncio.Lock) -> None:
        """End the connection's transaction, if one is open, and free its lock."""
        try:
            # A no-op when no transaction is open (BEGIN failed, or COMMIT went through).
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.rollback()
        finally:
            lock.release()

    async def _commit_group(self, writes: list[_GroupWrite]) -> list[Any]:
        """Run ``writes`` in one transaction (one call on the writer's thread); a write's own
        :class:`StoreError` (a duplicate id) is its outcome, and SQLite has undone only that
        write's failed statement."""

        async def body(conn: Statements) -> list[Any]:
            outcomes: list[Any] = []
            for write in writes:
                try:
                    outcomes.append(await write(conn))
                except StoreError as exc:
                    outcomes.append(exc)
            return outcomes

        async with self._call():
            return await self._write(body)

    async def _insert_checkpoint(
        self,
        conn: Statements,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> tuple[CheckpointRecord, bool]:
        """Insert inside the caller's transaction; return the stored row and whether this call
        wrote it (False: a retry of the same request). Raise :class:`CheckpointExists`,
        :class:`RequestAppliedThenDeleted` or :class:`RequestIdReused`. One statement when the
        row is written."""
        params = checkpoint_params(namespace, request_id, checkpoint, times.to_us, fingerprint)
        created_at_us = params[-2]
        try:
            written = await _fetch(conn, sql.INSERT_CHECKPOINT, (*params, namespace, request_id))
        except sqlite3.IntegrityError:
            written = []
        if written:
            stored = dataclasses.replace(
                checkpoint, sequence=int(written[0][0]), created_at=times.from_us(created_at_us)
            )
            return stored, True

        # Nothing written: a taken id, or a tombstone. Writers are serialized, so what these
        # lookups see is what stopped the insert.
        async def by_request_id() -> tuple[CheckpointRecord, str | None] | None:
            found = await _fetch(conn, sql.CHECKPOINT_BY_REQUEST_ID, (namespace, request_id))
            if not found:
                return None
            return _checkpoint_from_row(found[0]), found[0]["request_fingerprint"]

        async def tombstone() -> tuple[str | None] | None:
            found = await _fetch(conn, sql.IS_TOMBSTONE, (namespace, request_id))
            return (found[0][0],) if found else None

        async def by_checkpoint_id() -> bool:
            cid = checkpoint.checkpoint_id
            return bool(await _fetch(conn, sql.CHECKPOINT_BY_ID, (namespace, cid)))

        stored_before = await retries.existing_checkpoint(
            request_id,
            checkpoint.checkpoint_id,
            fingerprint,
            by_request_id=by_request_id,
            tombstone=tombstone,
            by_checkpoint_id=by_checkpoint_id,
        )
        if stored_before is not None:
            return stored_before, False  # a retry, whatever its id
        raise StoreError(f"SQLite database {self._path}: a checkpoint insert failed a constraint")

    # --- checkpoints ---------------------------------------------------------------------

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        """Insert one checkpoint (group commit); a retry with the same request id returns the
        stored row."""
        times.to_us(checkpoint.created_at)  # a naive time fails here, not inside the group

        async def write(conn: Statements) -> CheckpointRecord:
            stored, _ = await self._insert_checkpoint(
                conn, namespace, request_id, checkpoint, fingerprint
            )
            return stored

        async with self._call():
            result: CheckpointRecord = await self._group.submit(write)
        return result

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        async with self._call():
            rows = await self._rows(sql.GET_CHECKPOINT, (namespace, checkpoint_id, execution_id))
        return _checkpoint_from_row(rows[0]) if rows else None

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence (optionally not a run_end)."""
        async with self._call():
            if skip_run_end:
                rows = await self._rows(
                    sql.LATEST_CHECKPOINT_SKIP_STEP_TYPE, (namespace, execution_id, RUN_END)
                )
            else:
                rows = await self._rows(sql.LATEST_CHECKPOINT, (namespace, execution_id))
        return _checkpoint_from_row(rows[0]) if rows else None

    async def list_checkpoints(
        self,
        namespace: str,
        execution_id: str,
        *,
        after_sequence: int | None,
        descending: bool,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page[CheckpointRecord]:
        """Up to ``limit`` rows ordered by sequence, after ``after_sequence`` in the direction
        of travel, within ``max_bytes`` (sizes first, then only the rows that fit)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        if descending:
            sizes_sql, rows_sql = sql.LIST_CHECKPOINT_SIZES_DESC, sql.LIST_CHECKPOINTS_DESC
            low, high = 0, MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_sql, rows_sql = sql.LIST_CHECKPOINT_SIZES_ASC, sql.LIST_CHECKPOINTS_ASC
            low, high = 0 if after_sequence is None else after_sequence, MAX_SEQUENCE

        async def page(conn: Statements) -> Page[CheckpointRecord] | None:
            sizes = await _fetch(conn, sizes_sql, (namespace, execution_id, low, high, limit + 1))
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            chosen = [int(row[0]) for row in sizes[:taken]]
            # No new row can fall inside the chosen range (SQLite hands out sequences in
            # commit order), so this reads the chosen rows, less any deleted meanwhile.
            found = await _fetch(
                conn,
                rows_sql,
                (namespace, execution_id, min(chosen) - 1, max(chosen) + 1, taken),
            )
            if found:
                return Page((_checkpoint_from_row(row) for row in found), more=len(sizes) > taken)
            return None  # every chosen row was deleted meanwhile: read on from there

        while True:
            async with self._call():
                result = await self._read(page)
            if result is not None:
                return result

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> DeleteExecutionResult:
        """Delete the execution's checkpoints, pending interrupt and idempotency results in one
        transaction, with a ``removed`` event when a pending interrupt went away, tombstones
        for the request ids of the deleted checkpoints, and the reply under ``request_id``
        (a retry returns that reply and deletes nothing: C9)."""
        key = (namespace, execution_id)
        now_us = times.now_us() if now is None else times.to_us(now)

        async def body(conn: Statements) -> DeleteExecutionResult:
            record = bool(request_id)
            if request_id:
                earlier = await _fetch(conn, sql.REPLY_OF_REQUEST, (namespace, request_id))
                if earlier:
                    first = earlier[0]["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if earlier and earlier[0]["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(earlier[0]["reply_json"])
                # An id stored without a fingerprint by another kind of call is kept.
                record = not earlier
            pending_rows = await _fetch(conn, sql.PENDING_OF_EXECUTION, key)
            await _run(conn, sql.TOMBSTONE_EXECUTION, (now_us, *key))
            checkpoints = await _run(conn, sql.DELETE_CHECKPOINTS_OF_EXECUTION, key)
            pending_deleted = await _run(conn, sql.DELETE_PENDING_OF_EXECUTION, key) > 0
            idempotency = await _run(conn, sql.DELETE_IDEMPOTENT_OF_EXECUTION, key)
            await _run(conn, sql.DELETE_DECISIONS_OF_EXECUTION, key)
            if pending_rows:
                pending = _pending_from_row(pending_rows[0])
                await self._append_event(conn, namespace, EventKind.REMOVED, pending, now_us)
            result = DeleteExecutionResult(
                checkpoints_deleted=checkpoints,
                pending_interrupt_deleted=pending_deleted,
                idempotency_results_deleted=idempotency,
            )
            if record:
                reply = (namespace, request_id, now_us, replies.DELETE_EXECUTION)
                encoded = replies.encode(result)
                await _run(conn, sql.RECORD_REPLY, (*reply, encoded, fingerprint or None))
            return result

        async with self._call():
            return await self._write(body)

    async def prune(
        self,
        namespace: str,
        cutoff: datetime,
        *,
        batch_size: int,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> PruneResult:
        """Delete completed/failed checkpoints and unprotected idempotency results older than
        ``cutoff``, at most ``batch_size`` rows per transaction; the request ids of the deleted
        checkpoints become tombstones in their batch's transaction. The reply is recorded
        under ``request_id`` once the prune is complete, and a retry returns it (C9)."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        now_us = times.now_us() if now is None else times.to_us(now)
        if request_id:
            async with self._call():
                earlier = await self._rows(sql.REPLY_OF_REQUEST, (namespace, request_id))
            if earlier:
                first = earlier[0]["request_fingerprint"]
                retries.check_fingerprint(request_id, first, fingerprint)
            if earlier and earlier[0]["kind"] == replies.PRUNE:
                return replies.decode_prune(earlier[0]["reply_json"])
        params = (namespace, times.to_us(cutoff), batch_size)
        checkpoints = await self._delete_in_batches(
            sql.PRUNE_CHECKPOINTS_BATCH, params, tombstones_at=now_us
        )
        idempotency = await self._delete_in_batches(sql.PRUNE_IDEMPOTENT_BATCH, params)
        result = PruneResult(
            checkpoints_deleted=checkpoints, idempotency_results_deleted=idempotency
        )
        if not request_id:
            return result

        async def record(conn: Statements) -> PruneResult:
            reply = (namespace, request_id, now_us, replies.PRUNE, replies.encode(result))
            if not await _run(conn, sql.RECORD_REPLY, (*reply, fingerprint or None)):
                # A concurrent call with this id finished first: answer like it did.
                earlier = await _fetch(conn, sql.REPLY_OF_REQUEST, (namespace, request_id))
                if earlier:
                    first = earlier[0]["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if earlier and earlier[0]["kind"] == replies.PRUNE:
                    return replies.decode_prune(earlier[0]["reply_json"])
            return result

        async with self._call():
            return await self._write(record)

    async def _delete_in_batches(
        self, statement: str, params: tuple[str, int, int], *, tombstones_at: int | None = None
    ) -> int:
        """Run a batch DELETE in its own transaction until it deletes less than a batch;
        the writer is free for other callers between batches. With ``tombstones_at`` the
        statement returns the deleted rows' request ids, recorded as tombstones in the same
        transaction."""
        total = 0
        namespace, _, batch_size = params

        async def batch(conn: Statements) -> int:
            if tombstones_at is None:
                return await _run(conn, statement, params)
            gone = await _fetch(conn, statement, params)
            ids = [(namespace, row[0], tombstones_at, row[1]) for row in gone if row[0]]
            if ids:
                await conn.run_many(sql.TOMBSTONE, ids)
            return len(gone)

        while True:
            async with self._call():
                deleted = await self._write(batch)
            total += deleted
            if deleted < batch_size:
                return total

    # --- interrupts ----------------------------------------------------------------------

    async def record_interrupt(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        pending: PendingRecord,
        *,
        fingerprint: str = "",
    ) -> RecordInterruptResult:
        """Insert the interrupted checkpoint and, unless the execution has one, the pending
        row and its ``added`` event, in one transaction (contracts I1, I2)."""
        if pending.execution_id != checkpoint.execution_id:
            raise ValueError("the pending row and the checkpoint name different executions")
        key = (namespace, checkpoint.execution_id)

        async def body(conn: Statements) -> RecordInterruptResult:
            stored, written = await self._insert_checkpoint(
                conn, namespace, request_id, checkpoint, fingerprint
            )
            proposed = dataclasses.replace(
                pending,
                checkpoint_id=stored.checkpoint_id,
                sequence=stored.sequence,
                created_at=times.from_us(times.to_us(pending.created_at)),
            )
            rows = await _fetch(conn, sql.PENDING_OF_EXECUTION, key)
            if rows:
                in_place = _pending_from_row(rows[0])
                created = in_place.checkpoint_id == stored.checkpoint_id
                return RecordInterruptResult(stored, in_place, pending_created=created)
            if not written:
                # A retry after the pending row went away (claimed, most likely): report the
                # row as it was claimed when this checkpoint created it.
                claimed = await _fetch(conn, sql.CLAIM_BY_CHECKPOINT, (*key, stored.checkpoint_id))
                if claimed:
                    return RecordInterruptResult(
                        stored, _pending_from_row(claimed[0]), pending_created=True
                    )
                return RecordInterruptResult(stored, proposed, pending_created=False)
            await _run(
                conn, sql.INSERT_PENDING, (namespace, *pending_params(proposed, times.to_us))
            )
            await self._append_event(conn, namespace, EventKind.ADDED, proposed, times.now_us())
            return RecordInterruptResult(stored, proposed, pending_created=True)

        async with self._call():
            return await self._write(body)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Take the execution's pending row; exactly one caller among all processes gets it.
        A retry with the same non-empty token gets the same row again. One transaction (one
        thread hop), which looks for the token's earlier claim first: writers are serialized,
        so it sees any concurrent retry's claim."""
        now_us = times.to_us(now)
        by_token = (namespace, execution_id, claim_token)

        async def claim(conn: Statements) -> PendingRecord | None:
            if claim_token:
                earlier = await _fetch(conn, sql.CLAIM_BY_TOKEN, by_token)
                if earlier:
                    return _pending_from_row(earlier[0])
            rows = await _fetch(conn, sql.PENDING_OF_EXECUTION, (namespace, execution_id))
            if not rows:
                return None
            pending = _pending_from_row(rows[0])
            await _run(conn, sql.DELETE_PENDING_OF_EXECUTION, (namespace, execution_id))
            if claim_token:
                await _run(
                    conn,
                    sql.INSERT_CLAIM,
                    (namespace, claim_token, now_us, *pending_params(pending, times.to_us)),
                )
            await self._append_event(conn, namespace, EventKind.CLAIMED, pending, now_us)
            return pending

        async with self._call():
            return await self._write(claim)

    # --- decisions -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def fenced(self, namespace: str, fence: LeaseFence) -> AsyncIterator[bool]:
        """Hold the pause's lock shared while a write under ``fence`` runs (K4)."""
        pause = (namespace, fence.execution_id, fence.checkpoint_id, fence.interrupt_id)
        async with self._pause_locks.shared(pause):
            async with self._call():
                found = await self._rows(sql.DECISION_OF_PAUSE, pause)
            current = _decided_from_row(found[0]) if found else None
            yield decisions.fence_holds(current, found[0]["lease_token"] if found else None, fence)

    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims made before ``claimed_before``; return how many went."""

        async def body(conn: Statements) -> int:
            return await _run(conn, sql.PURGE_CLAIMS, (times.to_us(claimed_before),))

        async with self._call():
            return await self._write(body)

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """Forget the request ids of idempotency puts applied before ``applied_before``;
        return how many went."""

        async def body(conn: Statements) -> int:
            return await _run(conn, sql.PURGE_APPLIED_REQUESTS, (times.to_us(applied_before),))

        async with self._call():
            return await self._write(body)

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        """Up to ``limit`` pending rows below ``before_sequence``, newest first, matching
        every set filter (an empty ``agent_path_prefix`` matches every row), within
        ``max_bytes`` (sizes first, then only the rows that fit)."""
        if limit <= 0:
            raise ValueError("limit must be positive")

        async def page(conn: Statements) -> Page[PendingRecord] | None:
            query, params = self._list_pending_query(
                namespace, before_sequence, limit + 1, filters, sizes=True
            )
            sizes = await _fetch(conn, query, params)
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            chosen = [int(row[0]) for row in sizes[:taken]]
            # Both bounds: no row outside the sized ones is loaded (a pending row gets the
            # sequence of a new checkpoint, so none can appear between them).
            query, params = self._list_pending_query(
                namespace, max(chosen) + 1, taken, filters, above=min(chosen) - 1
            )
            found = await _fetch(conn, query, params)
            if found:
                return Page((_decided_from_row(row) for row in found), more=len(sizes) > taken)
            return None  # every chosen row went meanwhile: read again

        while True:
            async with self._call():
                result = await self._read(page)
            if result is not None:
                return result

    @staticmethod
    def _list_pending_query(
        namespace: str,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        *,
        above: int | None = None,
        sizes: bool = False,
    ) -> tuple[str, list[Any]]:
        """The pending listing below ``before_sequence`` (and above ``above``), newest first:
        the rows with their decisions, or (``sizes``) each row's sequence and size."""
        query = sql.LIST_PENDING_SIZES if sizes else sql.LIST_PENDING
        params: list[Any] = [
            namespace,
            MAX_SEQUENCE if before_sequence is None else before_sequence,
        ]
        if above is not None:
            query += sql.LIST_PENDING_ABOVE
            params.append(above)
        where, filter_params = conditions(filters, sql.PREFIX)
        query += where + sql.LIST_PENDING_ORDER
        params += [*filter_params, limit]
        return query, params

    # --- idempotency ---------------------------------------------------------------------

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Insert or replace the cached result, with created_at = ``now`` (group commit).
        A non-empty ``request_id`` is recorded in the same transaction; a retry that finds it
        recorded writes nothing (contract D1)."""
        now_us = times.to_us(now)
        params = (namespace, execution_id, key, result_json, now_us)

        async def write(conn: Statements) -> None:
            if request_id and not await _run(
                conn,
                sql.RECORD_APPLIED_REQUEST,
                (namespace, request_id, now_us, fingerprint or None),
            ):
                # A retry: the first call's write stands. Another request: refused (C10).
                first = await _fetch(conn, sql.FINGERPRINT_OF_APPLIED, (namespace, request_id))
                retries.check_fingerprint(request_id, first[0][0] if first else None, fingerprint)
                return
            await _fetch(conn, sql.PUT_IDEMPOTENT, params)

        async with self._call():
            await self._group.submit(write)

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        async with self._call():
            rows = await self._rows(sql.GET_IDEMPOTENT, (namespace, execution_id, key))
        return str(rows[0]["result_json"]) if rows else None

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

    async def snapshot_pending(
        self,
        namespace: str,
        filters: PendingFilter,
        *,
        as_of_cursor: int,
        before_sequence: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> SnapshotPage:
        """A page of the pending set as it was at ``as_of_cursor``, newest first, in one read
        transaction (see :func:`checkpointd.store.outbox.snapshot_page`)."""

        async def body(conn: Statements) -> SnapshotPage:
            return await outbox.snapshot_page(
                functools.partial(_fetch, conn),
                sql.OUTBOX,
                times.from_us,
                namespace,
                filters,
                as_of_cursor=as_of_cursor,
                before_sequence=before_sequence,
                limit=limit,
                max_bytes=max_bytes,
            )

        async with self._call():
            return await self._events_read(body)

    async def read_events(
        self,
        *,
        after_cursor: int,
        up_to_cursor: int | None,
        limit: int,
        namespace: str | None,
        max_bytes: int | None = None,
    ) -> EventPage:
        """Up to ``limit`` events after ``after_cursor`` (and up to ``up_to_cursor``) within
        ``max_bytes``, with the outbox's bounds, in one read transaction."""

        async def body(conn: Statements) -> EventPage:
            return await outbox.read_event_page(
                functools.partial(_fetch, conn),
                sql.OUTBOX,
                times.from_us,
                after_cursor=after_cursor,
                up_to_cursor=up_to_cursor,
                limit=limit,
                namespace=namespace,
                max_bytes=max_bytes,
            )

        async with self._call():
            return await self._events_read(body)

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events up to the first one written at or after
        ``written_before``, at most ``batch_size`` per transaction."""
        cutoff_us = times.to_us(written_before)

        async def body(conn: Statements) -> tuple[int, int]:
            return await outbox.purge_event_batch(
                functools.partial(_fetch, conn),
                functools.partial(_run, conn),
                sql.OUTBOX,
                cutoff_us,
                batch_size,
            )

        async def batch() -> tuple[int, int]:
            async with self._call():
                return await self._write(body)

        return await outbox.purge_in_batches(batch, batch_size=batch_size)

    def event_notifier(self) -> SQLiteEventNotifier:
        """A notifier that hears this process's writes, and other connections' commits
        through an inotify watch on the file's directory confirmed by ``PRAGMA
        data_version`` (or a poll of it every 50 ms where inotify is not available)."""
        notifier = SQLiteEventNotifier(self._data_version, self._event_wakeups, path=self._path)
        self._notifiers.add(notifier)
        return notifier

    # --- replication outbox (contracts R1-R4) --------------------------------------------

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled rows with sequence > ``after_sequence``, oldest
        first."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        bound = 0 if after_sequence is None else after_sequence
        async with self._call():
            rows = await self._rows(sql.LIST_UNSYNCED, (namespace, bound, limit))
        return [_checkpoint_from_row(row) for row in rows]

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle unsettled rows, first-wins, in one transaction; return the ids settled."""
        now_us = times.to_us(now)
        settled: set[str] = set()

        async def body(conn: Statements) -> None:
            synced = [cid for cid, reason in settlements if reason is None]
            for start in range(0, len(synced), sql.SETTLE_CHUNK):
                chunk = synced[start : start + sql.SETTLE_CHUNK]
                query = sql.MARK_SYNCED.format(ids=",".join("?" * len(chunk)))
                for row in await _fetch(conn, query, (now_us, namespace, *chunk)):
                    settled.add(str(row["checkpoint_id"]))
            for cid, reason in settlements:
                if reason is not None:
                    hit = await _fetch(conn, sql.QUARANTINE, (now_us, reason, namespace, cid))
                    if hit:
                        settled.add(cid)
                    else:
                        await _run(conn, sql.REQUARANTINE, (reason, namespace, cid))

        async with self._call():
            await self._write(body)
        return [cid for cid, _ in settlements if cid in settled]
