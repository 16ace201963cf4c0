"""One call on the connection's thread per transaction or read (store/sqlite/on_thread.py),
on a real SQLite file: rollback on error, cancellation, what a read sees."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest

from checkpointd.store.sqlite.on_thread import OnThread, Statements

# A query that keeps the thread busy for a while (a few hundred ms on this machine).
SLOW = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) "
    "SELECT count(*) FROM n"
)


async def _connect(path: Path, busy_timeout_ms: int = 5000) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    return conn


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    conn = await _connect(tmp_path / "db.sqlite")
    await conn.execute("CREATE TABLE t (v TEXT PRIMARY KEY)")
    try:
        yield conn
    finally:
        await conn.close()


def _values(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT v FROM t ORDER BY v")]


async def _insert(conn: Statements, value: str) -> int:
    return await conn.run("INSERT INTO t (v) VALUES (?)", (value,))


async def test_a_transaction_commits_its_statements_and_returns_the_body_result(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    on = OnThread(writer, asyncio.Lock())

    async def body(conn: Statements) -> list[str]:
        await _insert(conn, "a")
        await conn.run_many("INSERT INTO t (v) VALUES (?)", [("b",), ("c",)])
        return [row[0] for row in await conn.fetch("SELECT v FROM t ORDER BY v")]

    assert await on.transaction("BEGIN IMMEDIATE", body) == ["a", "b", "c"]
    assert _values(tmp_path / "db.sqlite") == ["a", "b", "c"]


async def test_a_body_that_raises_rolls_back_and_the_connection_still_works(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    lock = asyncio.Lock()
    on = OnThread(writer, lock)

    async def fails(conn: Statements) -> None:
        await _insert(conn, "gone")
        raise LookupError("the body's own error")

    with pytest.raises(LookupError, match="the body's own error"):
        await on.transaction("BEGIN IMMEDIATE", fails)
    assert not lock.locked()

    async def duplicate(conn: Statements) -> None:
        await _insert(conn, "x")
        await _insert(conn, "x")

    with pytest.raises(sqlite3.IntegrityError):  # SQLite errors reach the caller as they are
        await on.transaction("BEGIN IMMEDIATE", duplicate)
    # A second BEGIN would fail if either had left its transaction open.
    await on.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "kept"))
    assert _values(tmp_path / "db.sqlite") == ["kept"]


async def test_a_body_awaiting_anything_but_its_statements_is_refused_and_rolled_back(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    on = OnThread(writer, asyncio.Lock())

    async def sleeps(conn: Statements) -> None:
        await _insert(conn, "gone")
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="awaited something besides its statements"):
        await on.transaction("BEGIN IMMEDIATE", sleeps)
    await on.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "kept"))
    assert _values(tmp_path / "db.sqlite") == ["kept"]


async def test_cancelled_while_running_leaves_no_transaction_and_nothing_written(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    """The caller is cancelled while its body runs on the thread: the body finishes there,
    rolls back instead of committing, and only then is the lock free again."""
    lock = asyncio.Lock()
    on = OnThread(writer, lock)
    started = threading.Event()

    async def slow(conn: Statements) -> None:
        await _insert(conn, "cancelled")
        started.set()
        await conn.fetch(SLOW)

    task = asyncio.ensure_future(on.transaction("BEGIN IMMEDIATE", slow))
    assert await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(30):  # freed once the body has ended on the thread
        await lock.acquire()
    lock.release()
    await on.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "after"))
    assert _values(tmp_path / "db.sqlite") == ["after"]


async def test_cancelled_while_waiting_for_another_process_lock_writes_nothing(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    """``BEGIN IMMEDIATE`` waits on another connection's write lock; the caller gives up; when
    the lock comes free the transaction is rolled back, not committed."""
    path = tmp_path / "db.sqlite"
    lock = asyncio.Lock()
    on = OnThread(writer, lock)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await on.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "late"))
        assert lock.locked()  # the function still waits on the thread
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    await on.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "after"))
    assert _values(path) == ["after"]


async def test_cancelled_while_queued_is_skipped(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    """A read and a transaction queued behind a busy thread, whose callers give up, never run."""
    on = OnThread(writer)
    started = threading.Event()

    async def slow(conn: Statements) -> None:
        started.set()
        await conn.fetch(SLOW)

    busy = asyncio.ensure_future(on.read(slow))
    assert await asyncio.to_thread(started.wait, 30)
    queued = asyncio.ensure_future(on.transaction("BEGIN", lambda conn: _insert(conn, "never")))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    await busy
    assert _values(tmp_path / "db.sqlite") == []


async def test_a_read_sees_what_another_connection_committed(
    writer: aiosqlite.Connection, tmp_path: Path
) -> None:
    reader_conn = await _connect(tmp_path / "db.sqlite")
    try:
        await reader_conn.execute("PRAGMA query_only = ON")
        writes, reads = OnThread(writer, asyncio.Lock()), OnThread(reader_conn)

        async def both(conn: Statements) -> tuple[int, list[str]]:
            count = await conn.fetch("SELECT count(*) FROM t")
            rows = await conn.fetch("SELECT v FROM t ORDER BY v")
            return int(count[0][0]), [row[0] for row in rows]

        assert await reads.read(both) == (0, [])
        await writes.transaction("BEGIN IMMEDIATE", lambda conn: _insert(conn, "one"))
        assert await reads.read(both) == (1, ["one"])
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await reads.read(lambda conn: _insert(conn, "refused"))
    finally:
        await reader_conn.close()


async def test_after_commit_callbacks_run_once_on_commit_and_never_on_rollback(
    writer: aiosqlite.Connection,
) -> None:
    on = OnThread(writer, asyncio.Lock())
    calls: list[str] = []
    loop_thread = threading.get_ident()

    def woke() -> None:
        assert threading.get_ident() == loop_thread
        calls.append("woke")

    async def commits(conn: Statements) -> None:
        await _insert(conn, "a")
        conn.after_commit(woke)
        conn.after_commit(woke)

    async def fails(conn: Statements) -> None:
        conn.after_commit(woke)
        await _insert(conn, "a")  # a duplicate: the transaction rolls back

    await on.transaction("BEGIN IMMEDIATE", commits)
    assert calls == ["woke"]
    with pytest.raises(sqlite3.IntegrityError):
        await on.transaction("BEGIN IMMEDIATE", fails)
    assert calls == ["woke"]


async def test_a_closed_connection_raises_aiosqlites_error(tmp_path: Path) -> None:
    conn = await _connect(tmp_path / "closed.sqlite")
    on = OnThread(conn, asyncio.Lock())
    await conn.close()
    with pytest.raises(ValueError, match="Connection closed"):
        await on.read(lambda c: c.fetch("SELECT 1"))
    with pytest.raises(ValueError, match="Connection closed"):
        await on.transaction("BEGIN", lambda c: c.fetch("SELECT 1"))
