"""What only the Postgres store has, against a real server: schema names, migrations racing
across replicas, the pooler, its connections, query plans, outages and error mapping. The
contract every backend keeps is in test_store_contract.py.

Each test gets its own schema (``pg_schema``), dropped afterwards; every pool opened here is
closed before the test ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from checkpointd.app import build_graph_store
from checkpointd.domain import (
    CheckpointStatus,
    PendingFilter,
)
from checkpointd.graph.records import GraphCheckpoint, TypedValue
from checkpointd.store.base import CheckpointExists, StoreError, StoreUnavailable
from checkpointd.store.filters import conditions
from checkpointd.store.postgres import PostgresStore
from tests.support.records import NS, checkpoint, interrupt, pending

pytestmark = pytest.mark.postgres

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
async def store(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    """An open store in this test's schema."""
    s = PostgresStore(pg_dsn, schema=pg_schema)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def raw(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection beside the store, for inspecting and disturbing the database."""
    conn = await asyncpg.connect(pg_dsn, timeout=10)
    try:
        yield conn
    finally:
        await conn.close()


async def events(raw: asyncpg.Connection, schema: str) -> list[tuple[int, str, str]]:
    rows = await raw.fetch(
        f'SELECT cursor, kind, execution_id FROM "{schema}".interrupt_events ORDER BY cursor'
    )
    return [(r["cursor"], r["kind"], r["execution_id"]) for r in rows]


# --- construction and migrations ---------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "1abc", "a-b", 'a"b', "a b", "x" * 64, "public;drop", "ümlaut", "a.b"]
)
def test_schema_name_is_validated(pg_dsn: str, name: str) -> None:
    """A schema name that is not a plain identifier of at most 63 characters is refused."""
    with pytest.raises(ValueError, match="invalid Postgres schema name"):
        PostgresStore(pg_dsn, schema=name)


@pytest.mark.parametrize("name", ["_x", "A1", "x" * 63, "checkpointd"])
def test_schema_name_accepts_identifiers(pg_dsn: str, name: str) -> None:
    """Plain identifiers up to 63 characters are accepted."""
    assert PostgresStore(pg_dsn, schema=name).schema == name


async def test_migrations_are_idempotent_and_safe_when_four_stores_open_at_once(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """Four stores migrating one new schema concurrently apply each version exactly once."""
    stores = [PostgresStore(pg_dsn, schema=pg_schema) for _ in range(4)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        await stores[0].open()  # a second open of an open store is a no-op
        again = PostgresStore(pg_dsn, schema=pg_schema)
        await again.open()  # a fresh open of a migrated schema changes nothing
        await again.close()
        versions = await raw.fetch(f'SELECT version, name FROM "{pg_schema}".schema_migrations')
        assert [(r["version"], r["name"]) for r in versions] == [
            (1, "initial"),
            (2, "watch"),
            (3, "applied_requests"),
            (4, "request_ids"),
            (5, "replication_outbox"),
            (6, "decisions"),
            (7, "request_fingerprints"),
            (8, "graph"),
            (9, "graph_interrupts"),
            (10, "graph_retention"),
            (11, "graph_held_interrupts"),
            (12, "decision_responses"),
            (13, "graph_send_nodes"),
        ]
        tables = await raw.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", pg_schema
        )
        assert [r["tablename"] for r in tables] == [
            "applied_requests",
            "checkpoints",
            "graph_blobs",
            "graph_checkpoints",
            "graph_held_interrupts",
            "graph_requests",
            "graph_writes",
            "idempotency_results",
            "interrupt_claims",
            "interrupt_decisions",
            "interrupt_events",
            "interrupt_events_purged",
            "pending_interrupts",
            "schema_migrations",
        ]
        stored = await stores[3].put_checkpoint(NS, "r", checkpoint("e"))
        assert await stores[1].get_checkpoint(NS, "e", stored.checkpoint_id) == stored
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"statement_cache_size": -1}, "statement_cache_size"),
        ({"poll_interval": 0.0}, "poll_interval"),
    ],
)
def test_pooler_settings_are_validated(pg_dsn: str, kwargs: dict[str, Any], message: str) -> None:
    """A negative statement cache or a poll interval that is not positive is refused."""
    with pytest.raises(ValueError, match=message):
        PostgresStore(pg_dsn, **kwargs)


async def test_m1_pooled_stores_through_pgbouncer_migrate_write_claim_and_read_events(
    pg_dsn: str, pg_schema: str, pgbouncer: Any, raw: asyncpg.Connection
) -> None:
    """Two stores with pools of 2, both through a transaction-pooling PgBouncer, migrate
    together, then serve 40 concurrent records and 80 contested claims: each interrupt is
    won once, and the outbox reads back every event in cursor order. Their notifier polls
    (no listen DSN) and opens no LISTEN connection."""
    stores = [
        PostgresStore(pgbouncer.url(), schema=pg_schema, max_pool_size=2, pooled=True)
        for _ in range(2)
    ]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        await asyncio.gather(*(interrupt(stores[i % 2], f"e-{i}") for i in range(40)))

        async def claim(i: int, by: int) -> bool:
            won = await stores[by].claim_interrupt(NS, f"e-{i}", f"t-{i}-{by}", T0)
            return won is not None

        won = await asyncio.gather(*(claim(i, by) for i in range(40) for by in (0, 1)))
        assert [won[2 * i] + won[2 * i + 1] for i in range(40)] == [1] * 40
        page = await stores[1].read_events(
            after_cursor=0, up_to_cursor=None, limit=1000, namespace=NS
        )
        assert [e.cursor for e in page.events] == [c for c, _, _ in await events(raw, pg_schema)]
        assert len(page.events) == 80
        notifier = stores[0].event_notifier()
        try:
            await notifier.wait(0.1)
            await notifier.wait(0.1)
        finally:
            await notifier.close()
        listening = await raw.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            f"checkpointd:{pg_schema}:listen",
        )
        assert listening == 0
    finally:
        for s in stores:
            await s.close()


async def test_close_is_safe_twice_and_a_closed_store_is_unavailable(
    pg_dsn: str, pg_schema: str
) -> None:
    """close() twice is fine; calls on a closed (or never opened) store raise StoreUnavailable."""
    s = PostgresStore(pg_dsn, schema=pg_schema)
    with pytest.raises(StoreUnavailable, match="not open"):
        await s.ping()
    await s.open()
    await s.ping()
    await s.close()
    await s.close()
    with pytest.raises(StoreUnavailable):
        await s.get_latest_checkpoint(NS, "e")


# --- checkpoints ---------------------------------------------------------------------------


async def test_c2_retry_with_same_request_id_returns_stored_row(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """Same id + same request id is a retry (stored row back); anything else is
    CheckpointExists, nothing changes, and the (only) pooled connection stays usable."""
    s = PostgresStore(pg_dsn, schema=pg_schema, min_pool_size=1, max_pool_size=1)
    await s.open()
    try:
        first = await s.put_checkpoint(NS, "req-1", checkpoint("e", "cp-1"))
        changed = checkpoint("e", "cp-1", state_snapshot_json='{"other": true}')
        assert await s.put_checkpoint(NS, "req-1", changed) == first
        for request_id in ("req-2", ""):
            with pytest.raises(CheckpointExists) as info:
                await s.put_checkpoint(NS, request_id, changed)
            assert info.value.checkpoint_id == "cp-1"
            assert isinstance(info.value, StoreError)
        # Written without a request id, a second write is never taken for a retry.
        await s.put_checkpoint(NS, "", checkpoint("e", "cp-2"))
        with pytest.raises(CheckpointExists):
            await s.put_checkpoint(NS, "", checkpoint("e", "cp-2"))
        # record_interrupt over an existing id: refused, and no pending row or event appears.
        interrupted = checkpoint("e", "cp-1", status=CheckpointStatus.INTERRUPTED)
        with pytest.raises(CheckpointExists):
            await s.record_interrupt(NS, "req-3", interrupted, pending("e"))
        assert (
            await s.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter()) == []
        )
        assert await events(raw, pg_schema) == []

        assert await s.get_checkpoint(NS, "e", "cp-1") == first
        rows = await s.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=10)
        assert [r.checkpoint_id for r in rows] == ["cp-1", "cp-2"]
        # The single connection is idle, not stuck in an open or aborted transaction.
        states = await raw.fetch(
            "SELECT state FROM pg_stat_activity WHERE application_name = $1",
            f"checkpointd:{pg_schema}",
        )
        assert [r["state"] for r in states] == ["idle"]
        await s.ping()
        third = await s.put_checkpoint(NS, "req-4", checkpoint("e", "cp-3"))
        assert third.sequence > first.sequence
    finally:
        await s.close()


async def test_c9_a_graph_put_whose_write_fails_after_its_id_was_recorded_leaves_no_record(
    store: PostgresStore, raw: asyncpg.Connection, pg_schema: str
) -> None:
    """A graph put records its request id before it writes (one statement with its locks).
    When the write then fails (metadata Postgres refuses), the transaction takes the record
    with it: the id stays unrecorded, so the put sent again with it applies."""
    graph = build_graph_store(store)
    body = TypedValue("json", b"{}")
    bad = GraphCheckpoint("t", "", "cp-1", "", body, "{not json", {}, "")
    with pytest.raises(StoreError):
        await graph.put_checkpoint(NS, "req-1", bad, [], T0, fingerprint="f")
    recorded = f"SELECT count(*) FROM {pg_schema}.graph_requests"
    assert await raw.fetchval(recorded) == 0
    good = GraphCheckpoint("t", "", "cp-1", "", body, "{}", {}, "")
    await graph.put_checkpoint(NS, "req-1", good, [], T0, fingerprint="f")
    assert await raw.fetchval(recorded) == 1
    stored = await graph.get_tuple(NS, "t", "", "cp-1")
    assert stored is not None
    assert stored.checkpoint.metadata_json == "{}"


async def test_c7_prune_batches_and_never_deletes_protected_rows(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prune deletes old completed/failed rows in batches of batch_size, keeps interrupted rows,
    pending rows, and the idempotency rows of an execution with a pending interrupt."""
    old = T0 - timedelta(days=30)
    cutoff = T0 - timedelta(days=1)
    statuses = [CheckpointStatus.COMPLETED] * 3 + [CheckpointStatus.INTERRUPTED]
    for i in range(40):  # 30 prunable, 10 interrupted, interleaved; 12 share one timestamp
        when = old if i < 12 else old + timedelta(minutes=i)
        await store.put_checkpoint(NS, "", checkpoint("e", status=statuses[i % 4], created_at=when))
    await store.put_checkpoint(
        NS, "", checkpoint("e", status=CheckpointStatus.FAILED, created_at=old)
    )
    for _ in range(3):  # recent rows stay
        await store.put_checkpoint(NS, "", checkpoint("e", created_at=T0))
    await store.put_checkpoint("ns-b", "", checkpoint("e", created_at=old))  # other namespace

    await interrupt(store, "waiting")  # an interrupted checkpoint and a pending row
    for i in range(5):
        await store.put_idempotent(NS, "", "waiting", f"k{i}", "1", old)
        await store.put_idempotent(NS, "", "done", f"k{i}", "1", old)
    await store.put_idempotent(NS, "", "done", "fresh", "1", T0)

    batches = 0
    original = store._connection

    def counting() -> Any:
        nonlocal batches
        batches += 1
        return original()

    monkeypatch.setattr(store, "_connection", counting)
    result = await store.prune(NS, cutoff, batch_size=7)
    monkeypatch.undo()

    assert (result.checkpoints_deleted, result.idempotency_results_deleted) == (31, 5)
    # 31 checkpoints: 4 full batches and 1 partial; 5 idempotency rows: 1 partial batch.
    assert batches == 5 + 1
    rows = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=100)
    assert sorted(r.status for r in rows) == ["completed"] * 3 + ["interrupted"] * 10
    assert all(r.created_at == T0 for r in rows if r.status == "completed")
    assert await store.get_latest_checkpoint(NS, "waiting") is not None
    assert (
        len(await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter()))
        == 1
    )
    assert await store.get_idempotent(NS, "waiting", "k0") == "1"
    assert await store.get_idempotent(NS, "done", "k0") is None
    assert await store.get_idempotent(NS, "done", "fresh") == "1"
    assert await store.get_latest_checkpoint("ns-b", "e") is not None

    again = await store.prune(NS, cutoff, batch_size=7)
    assert (again.checkpoints_deleted, again.idempotency_results_deleted) == (0, 0)
    with pytest.raises(ValueError, match="batch_size"):
        await store.prune(NS, cutoff, batch_size=0)


# --- interrupts ---------------------------------------------------------------------------


async def test_purge_claims_works_in_batches(store: PostgresStore, raw: asyncpg.Connection) -> None:
    """More expired claims than one purge batch are all purged, and only the expired ones."""
    await raw.execute(
        f"""INSERT INTO "{store.schema}".interrupt_claims
            SELECT 'ns', 'e' || i, 't', 'chain', 'n', 'r', '{{}}', NULL, now(), 'c' || i, i,
                   $1::timestamptz + (i % 2) * interval '1 second'
            FROM generate_series(1, 2501) AS i""",
        T0,
    )
    assert await store.purge_claims(T0 + timedelta(milliseconds=1)) == 1250
    assert await store.purge_claims(T0 + timedelta(milliseconds=1)) == 0
    assert await store.purge_claims(T0 + timedelta(seconds=5)) == 1251


# --- idempotency ---------------------------------------------------------------------------


# --- events ---------------------------------------------------------------------------------


async def test_i5_event_cursors_become_visible_in_cursor_order(
    store: PostgresStore, raw: asyncpg.Connection
) -> None:
    """While writers race, a reader never finds a cursor below one it has already seen.

    The writers run in waves, and each wave starts only after the reader has taken a fresh
    sample, so the reader is sure to look while writes are in flight: the test fails if the
    reads never interleaved with the writes, rather than passing on an empty comparison."""
    waves, per_wave = 6, 10
    stop = asyncio.Event()
    sampled = asyncio.Event()
    problems: list[str] = []
    sizes: list[int] = []  # how many events each sample saw
    in_flight = False  # a wave of writes is running
    racing = 0  # samples taken wholly while a wave was running

    async def watch() -> None:
        nonlocal racing
        seen: set[int] = set()
        high = 0
        while not stop.is_set():
            racing_from_start = in_flight
            cursors = {c for c, _, _ in await events(raw, store.schema)}
            if racing_from_start and in_flight:
                racing += 1
            late = {c for c in cursors - seen if c < high}
            if late:
                problems.append(f"cursors {sorted(late)} appeared after {high}")
            seen |= cursors
            high = max(seen, default=0)
            sizes.append(len(cursors))
            sampled.set()

    async def write(i: int) -> None:
        await interrupt(store, f"e-{i}")
        await store.claim_interrupt(NS, f"e-{i}", f"t-{i}", T0)

    watcher = asyncio.create_task(watch())
    for wave in range(waves):
        sampled.clear()
        await asyncio.wait_for(sampled.wait(), 30)
        in_flight = True
        await asyncio.gather(*(write(wave * per_wave + i) for i in range(per_wave)))
        in_flight = False
    stop.set()
    await watcher
    total = 2 * waves * per_wave
    assert problems == []
    assert len(await events(raw, store.schema)) == total
    # The reader saw the outbox part-written at least once per wave after the first.
    partial = {n for n in sizes if 0 < n < total}
    assert len(partial) >= waves - 1, sizes
    assert racing >= waves, (racing, sizes)  # and looked while writes were in flight


# --- plans ---------------------------------------------------------------------------------


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    return "'" + str(value).replace("'", "''") + "'"


async def test_hot_queries_use_indexes(store: PostgresStore, raw: asyncpg.Connection) -> None:
    """Latest, list, get-by-id, pending list, claim and prune plan as index scans on 5000 rows,
    both as custom plans and as the generic plans a long-lived prepared statement may get."""
    s = f'"{store.schema}"'
    await raw.execute(
        f"""INSERT INTO {s}.checkpoints (namespace, execution_id, checkpoint_id, chain_name,
                node_id, node_index, status, state_snapshot_json, node_input_json,
                node_output_json, iteration, iteration_counters_json, interrupt_context_json,
                created_at, step_type)
            SELECT 'ns', 'e' || (i % 100), 'c' || i, 'chain', 'n', i,
                   (ARRAY['completed', 'failed', 'interrupted'])[1 + i % 3],
                   '{{}}', '{{}}', '{{}}', 0, '{{}}', '{{}}',
                   timestamptz '2025-01-01' + i * interval '1 minute',
                   CASE WHEN i % 50 = 0 THEN 'run_end' END
            FROM generate_series(1, 5000) AS i"""
    )
    await raw.execute(
        f"""INSERT INTO {s}.pending_interrupts
            SELECT 'ns', 'e' || i, 'chain' || (i % 10), 'n', 'r' || (i % 7), '{{}}',
                   'a/b' || (i % 5), now(), 'c' || i, i
            FROM generate_series(1, 3000) AS i"""
    )
    await raw.execute(
        f"""INSERT INTO {s}.idempotency_results
            SELECT 'ns', 'e' || (i % 100), 'k' || i, '1',
                   timestamptz '2025-01-01' + i * interval '1 minute'
            FROM generate_series(1, 5000) AS i"""
    )
    await raw.execute(
        f"""INSERT INTO {s}.interrupt_claims
            SELECT 'ns', 'e' || i, 't', 'chain', 'n', 'r', '{{}}', NULL, now(), 'c' || i, i,
                   timestamptz '2025-01-01' + i * interval '1 minute'
            FROM generate_series(1, 5000) AS i"""
    )
    await raw.execute(
        f"""INSERT INTO {s}.applied_requests
            SELECT 'ns', 'r' || i, timestamptz '2025-01-01' + i * interval '1 minute'
            FROM generate_series(1, 5000) AS i"""
    )
    await raw.execute(
        f"ANALYZE {s}.checkpoints, {s}.pending_interrupts, {s}.idempotency_results,"
        f" {s}.interrupt_claims, {s}.applied_requests"
    )
    sql = store._sql

    def pending_listing(filters: PendingFilter, *, sizes: bool = False) -> str:
        where, _ = conditions(filters, store._outbox_sql.prefix)
        return store._outbox_sql.pending(where, sizes=sizes)

    early = datetime(2025, 1, 1, 3, tzinfo=UTC)
    start = datetime(1, 1, 1, tzinfo=UTC)
    cases: list[tuple[str, str, tuple[object, ...]]] = [
        ("latest", sql.latest, ("ns", "e5")),
        ("latest_skip_run_end", sql.latest_skip_run_end, ("ns", "e5", "run_end")),
        ("list_ascending", sql.list_ascending, ("ns", "e5", 0, 2**63 - 1, 20)),
        ("list_descending", sql.list_descending, ("ns", "e5", 0, 2**63 - 1, 20)),
        ("list_page", sql.list_ascending, ("ns", "e5", 2500, 2600, 20)),
        ("list_ascending_sizes", sql.list_ascending_sizes, ("ns", "e5", 0, 2**63 - 1, 20)),
        (
            "list_descending_sizes",
            sql.list_descending_sizes,
            ("ns", "e5", 0, 2**63 - 1, 20),
        ),
        (
            "list_pending_sizes",
            pending_listing(PendingFilter(), sizes=True),
            ("ns", 2**63 - 1, 0, 50),
        ),
        ("get_checkpoint", sql.get_checkpoint, ("ns", "c77", "e77")),
        ("checkpoint_by_id", sql.checkpoint_by_id, ("ns", "c77")),
        ("checkpoint_by_request_id", sql.checkpoint_by_request_id, ("ns", "r77")),
        ("tombstone_fingerprint", sql.tombstone_fingerprint, ("ns", "r77")),
        ("fingerprint_of_applied", sql.fingerprint_of_applied, ("ns", "r77")),
        ("reply_of_request", sql.reply_of_request, ("ns", "r77")),
        ("list_pending", pending_listing(PendingFilter()), ("ns", 2**63 - 1, 0, 50)),
        ("list_pending_page", pending_listing(PendingFilter()), ("ns", 1500, 1400, 50)),
        (
            "list_pending_chain",
            pending_listing(PendingFilter(chain_name="chain3")),
            ("ns", 1500, 0, "chain3", 50),
        ),
        (
            "list_pending_reason",
            pending_listing(PendingFilter(reason="r2")),
            ("ns", 1500, 0, "r2", 50),
        ),
        (
            "list_pending_path",
            pending_listing(PendingFilter(agent_path_prefix="a/b1")),
            ("ns", 1500, 0, "a/b1", 50),
        ),
        (
            "list_pending_all_filters",
            pending_listing(PendingFilter("chain3", "r2", "a/b1")),
            ("ns", 1500, 0, "chain3", "r2", "a/b1", 50),
        ),
        ("pending_by_execution", sql.pending_by_execution, ("ns", "e5")),
        (
            "claim_with_token",
            sql.claim_with_token_and_event,
            ("ns", "e5", "tok", T0, 7, "claimed", "channel"),
        ),
        ("claim_without_token", sql.claim_with_event, ("ns", "e5", 7, "claimed", "channel")),
        ("claim_by_token", sql.claim_by_token, ("ns", "e5", "tok")),
        ("prune_checkpoints", sql.prune_checkpoints, ("ns", start, early, 100, early)),
        ("prune_idempotent", sql.prune_idempotent, ("ns", start, early, 100)),
        ("purge_claims", sql.purge_claims, (early, 1000)),
        ("purge_applied_requests", sql.purge_applied_requests, (early, 1000)),
        ("get_idempotent", sql.get_idempotent, ("ns", "e5", "k5")),
    ]
    tables = (
        "checkpoints",
        "pending_interrupts",
        "idempotency_results",
        "interrupt_claims",
        "applied_requests",
    )
    # Prune may hash the (small) pending set to skip executions with a pending interrupt;
    # its driving scan over idempotency_results is still an index range scan.
    allowed_seq_scans = {("prune_idempotent", "pending_interrupts")}
    for name, query, args in cases:
        custom = "\n".join(r[0] for r in await raw.fetch("EXPLAIN " + query, *args))
        await raw.execute(f"PREPARE q AS {query}")
        try:
            await raw.execute("SET plan_cache_mode = force_generic_plan")
            values = ", ".join(_literal(v) for v in args)
            generic = "\n".join(r[0] for r in await raw.fetch(f"EXPLAIN EXECUTE q({values})"))
        finally:
            await raw.execute("DEALLOCATE q; RESET plan_cache_mode")
        for kind, plan in (("custom", custom), ("generic", generic)):
            assert "Index" in plan, f"{name} ({kind}) uses no index:\n{plan}"
            for table in tables:
                if (name, table) in allowed_seq_scans:
                    continue
                assert f"Seq Scan on {table}" not in plan, f"{name} ({kind}) scans {table}:\n{plan}"


# --- errors and outages --------------------------------------------------------------------


async def wait_until_gone(raw: asyncpg.Connection, pids: list[int]) -> None:
    """Wait until the terminated backends have left the server."""
    for _ in range(100):
        if not await raw.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pids
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"terminated backends {pids} did not go away")


async def test_e3_store_recovers_after_backends_are_terminated(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """After every pooled backend is killed, at most one call fails with StoreUnavailable and
    the pool then serves calls again by itself (asyncpg replaces the connections)."""
    s = PostgresStore(pg_dsn, schema=pg_schema, min_pool_size=3, max_pool_size=3)
    await s.open()
    try:
        stored = await s.put_checkpoint(NS, "", checkpoint("e"))
        for round_no in range(6):
            killed = await raw.fetch(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1 AND pid <> pg_backend_pid()",
                f"checkpointd:{pg_schema}",
            )
            assert killed, f"round {round_no}"
            if round_no % 2:  # else call at once, while the backends may still be exiting
                await wait_until_gone(raw, [r["pid"] for r in killed])
            failures: list[str] = []
            for _ in range(2):
                try:
                    assert await s.get_latest_checkpoint(NS, "e") == stored
                    break
                except StoreUnavailable as exc:
                    failures.append(str(exc))
            assert len(failures) <= 1, failures
            assert not any("SELECT" in m or "checkpoints" in m for m in failures), failures
            await asyncio.gather(
                *(s.get_checkpoint(NS, "e", stored.checkpoint_id) for _ in range(6))
            )
            await s.ping()
    finally:
        await s.close()


async def test_e3_open_unreachable_database_raises_quickly_without_password(
    pg_schema: str,
) -> None:
    """open() against a closed port fails fast with StoreUnavailable naming host, port and
    database, never the password."""
    s = PostgresStore(
        "postgresql://postgres:s3cret-pw@127.0.0.1:1/test", schema=pg_schema, timeout=5
    )
    with pytest.raises(StoreUnavailable) as info:
        await s.open()
    message = str(info.value)
    assert message.startswith("cannot connect to Postgres at 127.0.0.1:1/test: ")
    assert "s3cret" not in message
    await s.close()


async def test_e3_wrong_password_message_hides_it(pg_dsn: str, pg_schema: str) -> None:
    """A refused login is StoreUnavailable; the message names the target, not the password."""
    bad = pg_dsn.replace("postgresql://postgres@", "postgresql://no_such_role_x:pw-XYZ@")
    s = PostgresStore(bad, schema=pg_schema, timeout=5)
    with pytest.raises(StoreUnavailable, match="cannot connect to Postgres at") as info:
        await s.open()
    assert "pw-XYZ" not in str(info.value)


async def test_e3_statement_timeout_is_unavailable_and_the_store_still_works(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """A statement blocked past the timeout raises StoreUnavailable within a bounded time, and
    the same store answers once the blocker is gone."""
    # The schema is created and migrated first, so the store under test only has to connect
    # within its own short timeout, even on a busy machine.
    prepared = PostgresStore(pg_dsn, schema=pg_schema)
    await prepared.open()
    await prepared.close()
    s = PostgresStore(pg_dsn, schema=pg_schema, timeout=2.0, max_pool_size=1)
    await s.open()
    try:
        await s.put_checkpoint(NS, "", checkpoint("e"))
        blocker = raw.transaction()
        await blocker.start()
        await raw.execute(f'LOCK TABLE "{pg_schema}".checkpoints IN ACCESS EXCLUSIVE MODE')
        # The message names the store timeout as what ended the wait (a hang would meet the
        # test's timeout instead).
        with pytest.raises(StoreUnavailable, match=r"did not answer within 2s") as info:
            await s.get_latest_checkpoint(NS, "e")
        assert "SELECT" not in str(info.value)
        await blocker.rollback()
        latest = await s.get_latest_checkpoint(NS, "e")
        assert latest is not None
    finally:
        await s.close()


async def test_e2_database_errors_carry_no_sql_text(
    store: PostgresStore, raw: asyncpg.Connection
) -> None:
    """An unexpected database error becomes a StoreError naming only the SQLSTATE."""
    await raw.execute(f'DROP TABLE "{store.schema}".idempotency_results')
    with pytest.raises(StoreError) as info:
        await store.get_idempotent(NS, "e", "k")
    assert not isinstance(info.value, StoreUnavailable)
    assert str(info.value) == "Postgres error 42P01 (UndefinedTableError)"
