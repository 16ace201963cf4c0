"""What only the SQLite store has: its file (WAL, synchronous=FULL, kill -9, several
processes on one file), its migrations, its query plans and its error mapping (E1-E3).
The contract every backend keeps is in test_store_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpointd.app import build_graph_store
from checkpointd.domain import (
    RUN_END,
    CheckpointStatus,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    PendingFilter,
)
from checkpointd.graph.records import ChannelValue, GraphCheckpoint, TypedValue
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.filters import conditions
from checkpointd.store.sqlite import SQLiteStore
from checkpointd.store.sqlite import errors as sqlite_errors
from checkpointd.store.sqlite import sql as sqlite_sql
from checkpointd.store.sqlite import store as sqlite_module
from checkpointd.store.sqlite.notifier import DataVersion, SQLiteEventNotifier
from checkpointd.store.sqlite.on_loop import LoopReadBusy, LoopReader
from checkpointd.store.statements import Statements
from tests.support.records import NS, T0, checkpoint, interrupt

NOW = datetime(2024, 6, 1, tzinfo=UTC)


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection on the store's file, for looking behind the store."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def events(path: Path) -> list[tuple[str, str, str, str]]:
    """(namespace, kind, execution_id, checkpoint_id) of every outbox row, in cursor order."""
    with raw(path) as conn:
        return conn.execute(
            "SELECT namespace, kind, execution_id, checkpoint_id FROM interrupt_events "
            "ORDER BY cursor"
        ).fetchall()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(db_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# --- data: J1, J4 ----------------------------------------------------------------------------


# --- checkpoints: C2-C7 -------------------------------------------------------------------


async def test_c7_prune_deletes_old_rows_in_batches_and_keeps_protected_ones(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prune deletes old completed/failed checkpoints and idempotency rows in batches; it
    never deletes interrupted checkpoints, pending rows, or idempotency rows of executions
    with a pending interrupt, nor anything newer than the cutoff or in another namespace."""
    old = T0
    cutoff = T0 + timedelta(days=1)
    new = T0 + timedelta(days=2)
    for i in range(20):
        status = CheckpointStatus.COMPLETED if i % 2 else CheckpointStatus.FAILED
        await store.put_checkpoint(
            NS, "", checkpoint(f"e{i % 3}", f"old{i}", status=status, created_at=old)
        )
        await store.put_idempotent(NS, "", f"e{i % 3}", f"k{i}", "1", old)
    fresh = await store.put_checkpoint(NS, "", checkpoint("e0", "fresh", created_at=new))
    await store.put_idempotent(NS, "", "e0", "fresh", "1", new)
    other_ns = await store.put_checkpoint(
        "other", "", checkpoint("e0", "old-other", created_at=old)
    )
    await store.put_idempotent("other", "", "e0", "k", "1", old)
    held = await interrupt(store, "held", created_at=old)
    await store.put_idempotent(NS, "", "held", "side-effect", '"done"', old)
    interrupted_only = await store.put_checkpoint(
        NS, "", checkpoint("e1", "int", status=CheckpointStatus.INTERRUPTED, created_at=old)
    )

    transactions = 0
    real_write = SQLiteStore._write

    def counting_write(self: SQLiteStore, body: Any) -> Any:
        nonlocal transactions
        transactions += 1
        return real_write(self, body)

    monkeypatch.setattr(SQLiteStore, "_write", counting_write)
    result = await store.prune(NS, cutoff, batch_size=7)
    monkeypatch.undo()

    assert result.checkpoints_deleted == 20
    assert result.idempotency_results_deleted == 20
    # 20 rows in batches of 7: 7 + 7 + 6 for each table.
    assert transactions == 6
    assert await store.get_checkpoint(NS, "e0", "old0") is None
    assert await store.get_checkpoint(NS, "e0", "fresh") == fresh
    assert await store.get_checkpoint("other", "e0", "old-other") == other_ns
    assert await store.get_idempotent("other", "e0", "k") == "1"
    assert await store.get_idempotent(NS, "e0", "fresh") == "1"
    assert await store.get_checkpoint(NS, "e1", "int") == interrupted_only
    assert await store.get_checkpoint(NS, "held", held.checkpoint.checkpoint_id) == held.checkpoint
    assert await store.get_idempotent(NS, "held", "side-effect") == '"done"'
    listed = await store.list_pending(NS, before_sequence=None, limit=10, filters=PendingFilter())
    assert listed == [held.pending]
    again = await store.prune(NS, cutoff, batch_size=7)
    assert (again.checkpoints_deleted, again.idempotency_results_deleted) == (0, 0)


# --- interrupts: I1-I4 --------------------------------------------------------------------


CLAIM_CHILD = """
import asyncio, json, sys
from datetime import UTC, datetime
from checkpointd.store.sqlite import SQLiteStore

async def main(path, name, tasks):
    store = SQLiteStore(path)
    await store.open()
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, _, execution_id = line.strip().partition(" ")
            if command != "claim":
                break
            now = datetime.now(UTC)
            results = await asyncio.gather(
                *(store.claim_interrupt("default", execution_id, f"{name}-{i}", now)
                  for i in range(tasks)),
                return_exceptions=True,
            )
            out = [
                {"error": repr(r)} if isinstance(r, BaseException)
                else {"won": None if r is None else r.checkpoint_id}
                for r in results
            ]
            print(json.dumps(out), flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_i3_claim_exactly_once_across_processes(store: SQLiteStore, db_path: Path) -> None:
    """Three server processes sharing the file race for each of 20 pending interrupts:
    exactly one claim wins each time, the others get None and none raises."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CLAIM_CHILD,
            str(db_path),
            f"p{n}",
            "4",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for n in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        for round_ in range(20):
            execution_id = f"exec-{round_}"
            recorded = await interrupt(store, execution_id)
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"claim {execution_id}\n".encode())
            outcomes: list[dict[str, Any]] = []
            for child in children:
                assert child.stdout is not None
                outcomes += json.loads(await asyncio.wait_for(child.stdout.readline(), 60))
            assert [o for o in outcomes if "error" in o] == []
            won = [o["won"] for o in outcomes if o["won"] is not None]
            assert won == [recorded.checkpoint.checkpoint_id], f"round {round_}: {outcomes}"
            assert len(outcomes) == 12
    finally:
        for child in children:
            await child.communicate(b"quit\n")
    assert [child.returncode for child in children] == [0, 0, 0]


# --- idempotency: D1 ----------------------------------------------------------------------


# --- durability, errors, schema: E1-E3 ----------------------------------------------------


async def test_e1_wal_and_synchronous_full(store: SQLiteStore, db_path: Path) -> None:
    """The file is in WAL mode and the writer commits with synchronous=FULL."""
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    writer = store._writer
    assert writer is not None
    assert [tuple(row) for row in await writer.execute_fetchall("PRAGMA synchronous")] == [(2,)]


KILL_CHILD = """
import asyncio, sys
from datetime import UTC, datetime
from checkpointd.domain import CheckpointRecord, CheckpointStatus
from checkpointd.store.sqlite import SQLiteStore

async def main(path):
    store = SQLiteStore(path)
    await store.open()
    record = CheckpointRecord("e", "acked", None, "c", "n", 0, None, CheckpointStatus.COMPLETED,
                              "{}", "{}", "{}", 0, "{}", None, "{}", None, datetime.now(UTC))
    await store.put_checkpoint("default", "r", record)
    print("acked", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def test_e1_acknowledged_write_survives_kill_9(db_path: Path) -> None:
    """A write acknowledged by a process that is then SIGKILLed is there on reopen."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILL_CHILD, str(db_path), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 60) == b"acked\n"
    finally:
        child.kill()
        await child.communicate()
    store = SQLiteStore(db_path)
    await store.open()
    try:
        assert await store.get_checkpoint(NS, "e", "acked") is not None
    finally:
        await store.close()


def applied_versions(path: Path) -> list[int]:
    with raw(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


async def test_migrations_are_idempotent_when_opened_twice(db_path: Path) -> None:
    """Opening the same file again applies nothing twice and keeps the data."""
    first = SQLiteStore(db_path)
    await first.open()
    try:
        stored = await first.put_checkpoint(NS, "", checkpoint("e", "c"))
        await first.open()  # a second open of an open store is a no-op
    finally:
        await first.close()
    second = SQLiteStore(db_path)
    await second.open()
    try:
        assert await second.get_checkpoint(NS, "e", "c") == stored
    finally:
        await second.close()
    versions = [m.version for m in sqlite_module._load_migrations()]
    assert applied_versions(db_path) == versions


MIGRATE_CHILD = """
import asyncio, sys
from checkpointd.store.sqlite import SQLiteStore

async def main(path):
    print("ready", flush=True)
    sys.stdin.readline()
    store = SQLiteStore(path)
    await store.open()
    await store.ping()
    await store.close()
    print("opened", flush=True)

asyncio.run(main(sys.argv[1]))
"""


async def test_migrations_are_safe_when_processes_open_a_new_file_at_once(db_path: Path) -> None:
    """Four processes opening a fresh file at the same moment all succeed, and each
    migration is applied exactly once."""
    for attempt in range(3):
        path = db_path.with_name(f"race-{attempt}.db")
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                MIGRATE_CHILD,
                str(path),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for _ in range(4)
        ]
        for child in children:  # every child has imported before any gets the start signal
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        outputs = await asyncio.gather(*(child.communicate(b"go\n") for child in children))
        for child, (out, err) in zip(children, outputs, strict=True):
            assert child.returncode == 0, err.decode()
            assert out == b"opened\n"
        versions = [m.version for m in sqlite_module._load_migrations()]
        assert applied_versions(path) == versions


def _plan(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[str]:
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


async def test_queries_are_index_lookups(store: SQLiteStore, db_path: Path) -> None:
    """EXPLAIN QUERY PLAN: latest, list, get-by-id, pending, claim and prune queries search
    an index and never scan a table or sort."""
    m = sqlite_sql
    full_filter = PendingFilter(chain_name="c", reason="r", agent_path_prefix="a/")
    where, filter_params = conditions(full_filter, sqlite_sql.PREFIX)
    list_pending_sql = sqlite_sql.OUTBOX.pending(where, sizes=False)
    list_pending_sizes_sql = sqlite_sql.OUTBOX.pending(where, sizes=True)
    queries: list[tuple[str, tuple[Any, ...]]] = [
        (m.LATEST_CHECKPOINT, (NS, "e")),
        (m.LATEST_CHECKPOINT_SKIP_STEP_TYPE, (NS, "e", RUN_END)),
        (m.LIST_CHECKPOINTS_ASC, (NS, "e", 0, 2**63 - 1, 10)),
        (m.LIST_CHECKPOINTS_DESC, (NS, "e", 0, 99, 10)),
        (m.LIST_CHECKPOINT_SIZES_ASC, (NS, "e", 0, 2**63 - 1, 10)),
        (m.LIST_CHECKPOINT_SIZES_DESC, (NS, "e", 0, 99, 10)),
        (m.GET_CHECKPOINT, (NS, "c", "e")),
        (m.CHECKPOINT_BY_ID, (NS, "c")),
        (m.CHECKPOINT_BY_REQUEST_ID, (NS, "r")),
        (m.IS_TOMBSTONE, (NS, "r")),
        (m.FINGERPRINT_OF_APPLIED, (NS, "r")),
        (m.REPLY_OF_REQUEST, (NS, "r")),
        (m.TOMBSTONE_EXECUTION, (1, NS, "e")),
        (m.DELETE_CHECKPOINTS_OF_EXECUTION, (NS, "e")),
        (m.PRUNE_CHECKPOINTS_BATCH, (NS, 1, 10)),
        (m.PENDING_OF_EXECUTION, (NS, "e")),
        (m.DELETE_PENDING_OF_EXECUTION, (NS, "e")),
        (list_pending_sql, (NS, 10, 0, *filter_params, 5)),
        (list_pending_sizes_sql, (NS, 10, 0, *filter_params, 5)),
        (sqlite_sql.OUTBOX.pending("", sizes=False), (NS, 10, 0, 5)),
        (m.CLAIM_BY_TOKEN, (NS, "e", "t")),
        (m.CLAIM_BY_CHECKPOINT, (NS, "e", "c")),
        (m.PURGE_CLAIMS, (1,)),
        (m.GET_IDEMPOTENT, (NS, "e", "k")),
        (m.DELETE_IDEMPOTENT_OF_EXECUTION, (NS, "e")),
        (m.PRUNE_IDEMPOTENT_BATCH, (NS, 1, 10)),
    ]
    with raw(db_path) as conn:
        for sql, params in queries:
            plan = _plan(conn, sql, params)
            assert any(step.startswith("SEARCH") for step in plan), (sql, plan)
            assert not [s for s in plan if s.startswith("SCAN") or "TEMP B-TREE" in s], (sql, plan)


async def test_unopenable_path_raises_store_unavailable_naming_the_path(tmp_path: Path) -> None:
    """A path in a missing directory, or a directory, cannot be opened: StoreUnavailable
    with a message naming the file."""
    for path in (tmp_path / "missing" / "x.db", tmp_path):
        store = SQLiteStore(path)
        with pytest.raises(StoreUnavailable) as info:
            await store.open()
        assert str(info.value) == (
            f"cannot open SQLite database at {path}: unable to open database file"
        )
        await store.close()


async def test_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    """A file that is not SQLite gives a StoreError naming the file and the reason."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match=r"junk\.db: file is not a database"):
        await store.open()


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (8, "attempt to write a readonly database", "is read-only"),
        (13, "database or disk is full", "disk or database is full"),
        (10 | (3 << 8), "disk I/O error", "disk I/O error"),
        (5, "database is locked", "busy_timeout (5000 ms)"),
        (14, "unable to open database file", "unable to open database file"),
    ],
)
def test_e2_unavailable_errors_map_to_store_unavailable(
    code: int, message: str, expected: str
) -> None:
    """Busy, read-only, full, I/O and cannot-open errors become StoreUnavailable."""
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code
    translated = sqlite_errors.translate(exc, "/data/x.db", busy_timeout_ms=5000, closed=False)
    assert isinstance(translated, StoreUnavailable)
    assert expected in str(translated)
    assert "/data/x.db" in str(translated)


def test_e2_other_errors_never_leak_sql() -> None:
    """A generic SQL error is a StoreError whose message shows no SQL text."""
    exc = sqlite3.OperationalError('near "SELEC": syntax error')
    exc.sqlite_errorcode = 1
    exc.sqlite_errorname = "SQLITE_ERROR"
    translated = sqlite_errors.translate(exc, "/data/x.db", busy_timeout_ms=5000, closed=False)
    assert type(translated) is StoreError
    assert "SELEC" not in str(translated)
    assert "SQLITE_ERROR" in str(translated)


async def test_e3_busy_past_timeout_is_unavailable_then_recovers(db_path: Path) -> None:
    """While another process holds the write lock, a write fails with StoreUnavailable after
    busy_timeout (reads still work); once the lock is released writes succeed again."""
    store = SQLiteStore(db_path, busy_timeout_ms=200)
    await store.open()
    try:
        first = await store.put_checkpoint(NS, "", checkpoint("e", "c1"))
        with raw(db_path) as blocker:
            blocker.execute("BEGIN IMMEDIATE")
            # The message says which limit ended the wait; a hang would meet the test timeout.
            with pytest.raises(StoreUnavailable, match=r"locked .* busy_timeout \(200 ms\)"):
                await store.put_checkpoint(NS, "", checkpoint("e", "c2"))
            assert await store.get_latest_checkpoint(NS, "e") == first
            blocker.execute("ROLLBACK")
        second = await store.put_checkpoint(NS, "", checkpoint("e", "c2"))
        assert await store.get_latest_checkpoint(NS, "e") == second
    finally:
        await store.close()


async def test_e3_call_timeout_is_unavailable_and_store_still_works(db_path: Path) -> None:
    """A call that outlives ``timeout`` raises StoreUnavailable in bounded time, its
    transaction is rolled back, and the store works afterwards."""
    # The file is created and migrated first, so the store under test only has to open it
    # within its own short timeout, even on a busy machine.
    prepared = SQLiteStore(db_path)
    await prepared.open()
    await prepared.close()
    store = SQLiteStore(db_path, busy_timeout_ms=10_000, timeout=2.0)
    await store.open()
    try:
        with raw(db_path) as blocker:
            blocker.execute("BEGIN IMMEDIATE")
            # The call's timeout (2 s), not busy_timeout (10 s), is what ended it: the message
            # names which, so no clock is needed to tell them apart.
            with pytest.raises(StoreUnavailable, match=r"did not answer within 2 s"):
                await store.put_checkpoint(NS, "", checkpoint("e", "late"))
            blocker.execute("ROLLBACK")
        stored = await store.put_checkpoint(NS, "", checkpoint("e", "c"))
        assert await store.get_latest_checkpoint(NS, "e") == stored
        assert await store.get_checkpoint(NS, "e", "late") is None
    finally:
        await store.close()


async def test_ping_and_closed_store(db_path: Path) -> None:
    """ping answers on an open store; a closed store raises StoreUnavailable; close twice
    is safe."""
    store = SQLiteStore(db_path)
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.ping()
    await store.open()
    await store.ping()
    await store.close()
    await store.close()
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.put_checkpoint(NS, "", checkpoint())
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.get_idempotent(NS, "e", "k")


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_in_memory_database_is_refused(path: str) -> None:
    """An in-memory database (private to each connection) is refused up front."""
    with pytest.raises(ValueError, match="path of a database file"):
        SQLiteStore(path)


class _CountingQueue:
    """Stands in for an aiosqlite connection's queue on the event loop's side (its thread
    keeps reading the real one): names the connection of every function queued."""

    def __init__(self, real: Any, name: str, hops: list[str]) -> None:
        self.real, self._name, self._hops = real, name, hops

    def put_nowait(self, item: Any) -> None:
        self._hops.append(self._name)
        self.real.put_nowait(item)


@contextlib.contextmanager
def thread_hops(store: SQLiteStore) -> Iterator[list[str]]:
    """Record every function queued on the store's connections' threads (one thread hop
    each): the name of the connection, in order."""
    hops: list[str] = []
    conns = {"writer": store._writer, "reader": store._reader, "events": store._events_conn}
    for name, conn in conns.items():
        assert conn is not None
        conn._tx = _CountingQueue(conn._tx, name, hops)  # type: ignore[assignment]
    try:
        yield hops
    finally:
        for conn in conns.values():
            assert conn is not None
            conn._tx = conn._tx.real  # type: ignore[attr-defined]


async def test_record_claim_and_decisions_are_one_thread_hop_each(store: SQLiteStore) -> None:
    """Each of record_interrupt, claim_interrupt, submit_decision, lease_decision and
    report_resume is one transaction, run as one function on the writer's thread."""
    decision = DecisionRecord(
        approved=True, metadata_json="{}", decided_by="bot", reason=None, decided_at=T0
    )
    await interrupt(store, "warm")
    with thread_hops(store) as hops:
        recorded = await interrupt(store, "e")
        assert hops == ["writer"]
        checkpoint_id = recorded.checkpoint.checkpoint_id
        applied = await store.submit_decision(NS, "r1", "e", decision)
        assert applied.outcome is DecisionOutcome.APPLIED
        until = T0 + timedelta(seconds=30)
        assert (await store.lease_decision(NS, "e", checkpoint_id, "a", until, T0)).pending
        status = DecisionStatus.RESUMED
        assert (await store.report_resume(NS, "e", checkpoint_id, "a", status, None, T0)).pending
        assert await store.claim_interrupt(NS, "e", "token", T0) is not None
        assert hops == ["writer"] * 5


def _graph_checkpoint(checkpoint_id: str, parent: str = "") -> GraphCheckpoint:
    body = TypedValue("json", b"{}")
    return GraphCheckpoint("t", "", checkpoint_id, parent, body, "{}", {"a": checkpoint_id}, "")


async def test_g1_a_graph_get_is_read_on_the_loop_without_a_thread_hop(
    store: SQLiteStore, db_path: Path
) -> None:
    """A graph get (one checkpoint with its values and writes) runs its statements on the
    event loop's own connection: no function is queued on any connection's thread, and it
    reads what another connection to the file committed just before."""
    graph = build_graph_store(store)
    other = SQLiteStore(db_path)
    await other.open()
    try:
        value = [ChannelValue("a", "cp-1", TypedValue("json", b"41"))]
        await graph.put_checkpoint(NS, "", _graph_checkpoint("cp-1"), value, T0)
        assert await graph.get_tuple(NS, "t", "", "") is not None  # opens the connection
        with thread_hops(store) as hops:
            value = [ChannelValue("a", "cp-2", TypedValue("json", b"42"))]
            await build_graph_store(other).put_checkpoint(
                NS, "", _graph_checkpoint("cp-2", "cp-1"), value, T0
            )
            latest = await graph.get_tuple(NS, "t", "", "")
            named = await graph.get_tuple(NS, "t", "", "cp-1")
            assert hops == []
        assert latest is not None
        assert latest.checkpoint.checkpoint_id == "cp-2"
        assert [v.value.data for v in latest.channel_values] == [b"42"]
        assert named is not None
        assert [v.value.data for v in named.channel_values] == [b"41"]
    finally:
        await other.close()


async def test_c3_a_checkpoint_get_and_latest_are_read_on_the_loop_without_a_thread_hop(
    store: SQLiteStore, db_path: Path
) -> None:
    """``get_checkpoint`` and ``get_latest_checkpoint`` (with and without ``skip_run_end``)
    read on the event loop's own connection, and see another connection's commit at once."""
    other = SQLiteStore(db_path)
    await other.open()
    try:
        await store.put_checkpoint(NS, "", checkpoint("e", "cp-1"))
        assert await store.get_latest_checkpoint(NS, "e") is not None  # opens the connection
        with thread_hops(store) as hops:
            await other.put_checkpoint(NS, "", checkpoint("e", "cp-2"))
            latest = await store.get_latest_checkpoint(NS, "e")
            skipping = await store.get_latest_checkpoint(NS, "e", skip_run_end=True)
            named = await store.get_checkpoint(NS, "e", "cp-1")
            assert hops == []
        assert latest is not None
        assert latest.checkpoint_id == "cp-2"
        assert skipping is not None
        assert skipping.checkpoint_id == "cp-2"
        assert named is not None
        assert named.checkpoint_id == "cp-1"
    finally:
        await other.close()


def _hold_exclusively(path: Path) -> sqlite3.Connection:
    """A WAL file that a connection holds in exclusive locking mode: no other connection
    can read it until that one closes."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("CREATE TABLE t (x)")
    return conn


def test_a_loop_read_that_meets_a_lock_raises_busy_and_reads_again_once_it_is_gone(
    tmp_path: Path,
) -> None:
    """The loop never waits for a lock: the read raises :class:`LoopReadBusy` at once, and
    the next read, once the lock is gone, opens a new connection and reads."""
    path = tmp_path / "held.db"
    holder = _hold_exclusively(path)
    reader = LoopReader(str(path))

    async def count(conn: Statements) -> int:
        return int((await conn.fetch("SELECT count(*) FROM t"))[0][0])

    try:
        with pytest.raises(LoopReadBusy):
            reader.read(count)
        holder.close()
        assert reader.read(count) == 0
    finally:
        reader.close()
    with pytest.raises(sqlite3.ProgrammingError):
        reader.read(count)  # closed


async def test_a_graph_get_that_meets_a_lock_on_the_loop_reads_on_the_thread(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """When the loop's read meets a lock, the get is read on the query-only connection's
    thread instead (which waits for the lock as every read of the store does). The loop's
    reader here is one on a file another connection holds, so its every read meets a lock."""
    graph = build_graph_store(store)
    value = [ChannelValue("a", "cp-1", TypedValue("json", b"41"))]
    await graph.put_checkpoint(NS, "", _graph_checkpoint("cp-1"), value, T0)
    held = tmp_path / "held.db"
    holder = _hold_exclusively(held)
    own = store._loop_reads
    store._loop_reads = LoopReader(str(held))
    try:
        with thread_hops(store) as hops:
            found = await graph.get_tuple(NS, "t", "", "cp-1")
            assert hops == ["reader"]
        assert found is not None
        assert [v.value.data for v in found.channel_values] == [b"41"]
    finally:
        assert store._loop_reads is not None
        store._loop_reads.close()
        store._loop_reads = own
        holder.close()


# --- the event notifier: I5 -------------------------------------------------------------


async def test_i5_notifier_polls_on_the_loop_thread_and_hears_another_connection(
    store: SQLiteStore, db_path: Path
) -> None:
    """While the outbox reader waits, the notifier polls ``data_version`` without a hop to
    any connection's thread, and a commit made through another connection to the file (as
    another process's would be) ends the wait."""
    other = SQLiteStore(db_path)
    await other.open()
    notifier = store.event_notifier()
    try:
        await asyncio.wait_for(notifier.wait(3600), 30)  # the first wait returns at once
        with thread_hops(store) as hops:
            waiting = asyncio.create_task(notifier.wait(3600))
            await asyncio.sleep(0.3)  # several polls
            assert not waiting.done()
            assert hops == []
            await interrupt(other, "from-another-connection")
            await asyncio.wait_for(waiting, 30)
            assert hops == []
    finally:
        await notifier.close()
        await other.close()


async def test_i5_notifier_wakes_when_the_file_cannot_be_read(tmp_path: Path) -> None:
    """A poll that fails (here: the file is not there, and the poll never creates it) ends
    the wait as a change would, after one poll interval rather than at once, so a lasting
    failure never spins the reader; once the file can be read the next wait returns at
    once (a new baseline, whose read covers what the failure hid), then waits for commits."""
    path = tmp_path / "odd ?#% name.db"
    versions = DataVersion(str(path))
    notifier = SQLiteEventNotifier(versions.read, set())
    loop = asyncio.get_running_loop()
    started = loop.time()
    returns = 0
    while loop.time() - started < 0.5:
        await asyncio.wait_for(notifier.wait(3600), 30)
        returns += 1
    assert 1 < returns <= 12  # woken, at most once per 50 ms poll
    assert not await asyncio.to_thread(path.exists)  # the polls created no file
    store = SQLiteStore(path)
    await store.open()
    try:
        await asyncio.wait_for(notifier.wait(3600), 30)
        waiting = asyncio.create_task(notifier.wait(3600))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await interrupt(store, "once-readable")
        await asyncio.wait_for(waiting, 30)
    finally:
        await notifier.close()
        versions.close()
        await store.close()


async def test_i5_notifier_of_a_closed_store_wakes_instead_of_waiting(db_path: Path) -> None:
    """Once the store is closed the poll cannot read: a wait returns after one poll
    interval (the reader then reads, and meets the closed store's error)."""
    store = SQLiteStore(db_path)
    await store.open()
    notifier = store.event_notifier()
    try:
        await asyncio.wait_for(notifier.wait(3600), 30)
        await store.close()
        await asyncio.wait_for(notifier.wait(3600), 5)
    finally:
        await notifier.close()
