"""The Postgres store against a real server: contract rules, concurrency, plans, outages.

Each test gets its own schema (``pg_schema``), dropped afterwards; every pool opened here is
closed before the test ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import pytest

from checkpointd.domain import (
    CheckpointRecord,
    CheckpointStatus,
    PendingFilter,
    PendingRecord,
)
from checkpointd.store.base import CheckpointExists, Store, StoreError, StoreUnavailable
from checkpointd.store.postgres import PostgresStore
from tests.support.protocols import signature_mismatches

pytestmark = pytest.mark.postgres

NS = "default"
T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def make_checkpoint(
    execution_id: str,
    checkpoint_id: str | None = None,
    *,
    status: CheckpointStatus = CheckpointStatus.COMPLETED,
    created_at: datetime = T0,
    step_type: str | None = None,
    node_index: int = 0,
    state_json: str = "{}",
) -> CheckpointRecord:
    return CheckpointRecord(
        execution_id=execution_id,
        checkpoint_id=checkpoint_id or f"cp-{uuid.uuid4().hex}",
        parent_checkpoint_id=None,
        chain_name="chain",
        node_id="node",
        node_index=node_index,
        step_type=step_type,
        status=status,
        state_snapshot_json=state_json,
        node_input_json="{}",
        node_output_json="{}",
        iteration=0,
        iteration_counters_json="{}",
        interrupt_reason="approve" if status is CheckpointStatus.INTERRUPTED else None,
        interrupt_context_json="{}",
        agent_path=None,
        created_at=created_at,
    )


def make_pending(
    execution_id: str,
    *,
    chain_name: str = "chain",
    reason: str = "approve",
    agent_path: str | None = None,
    context_json: str = '{"q": "ok?"}',
    created_at: datetime = T0,
) -> PendingRecord:
    return PendingRecord(
        execution_id=execution_id,
        chain_name=chain_name,
        node_id="node",
        reason=reason,
        context_json=context_json,
        agent_path=agent_path,
        created_at=created_at,
        checkpoint_id="",
    )


async def record(
    store: PostgresStore, execution_id: str, request_id: str = "", **pending: Any
) -> Any:
    checkpoint = make_checkpoint(execution_id, status=CheckpointStatus.INTERRUPTED)
    return await store.record_interrupt(
        NS, request_id, checkpoint, make_pending(execution_id, **pending)
    )


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


async def test_postgres_store_satisfies_the_store_protocol(store: PostgresStore) -> None:
    """PostgresStore implements every Store method with the protocol's signature, and an open
    store answers through the protocol's type (not only by method names, as isinstance does)."""
    assert signature_mismatches(PostgresStore, Store) == []
    as_protocol: Store = store
    await as_protocol.ping()
    assert as_protocol.pool_state() is not None
    written = await as_protocol.put_checkpoint(
        "default", "req-1", make_checkpoint("exec-p", "cp-p")
    )
    assert await as_protocol.get_checkpoint("default", "exec-p", "cp-p") == written


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
        ]
        tables = await raw.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", pg_schema
        )
        assert [r["tablename"] for r in tables] == [
            "applied_requests",
            "checkpoints",
            "idempotency_results",
            "interrupt_claims",
            "interrupt_decisions",
            "interrupt_events",
            "interrupt_events_purged",
            "pending_interrupts",
            "schema_migrations",
        ]
        stored = await stores[3].put_checkpoint(NS, "r", make_checkpoint("e"))
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
        await asyncio.gather(*(record(stores[i % 2], f"e-{i}") for i in range(40)))

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


async def test_j1_round_trip_preserves_every_field(store: PostgresStore) -> None:
    """Every field comes back exactly: JSON text byte for byte, big ints, unicode, UTC µs time."""
    state = (
        '{"z": 1, "a": {"big": 123456789012345678901234567890, "neg": -9223372036854775809},'
        ' "f": 0.1, "e": 1e-7, "u": "h\\u00e9llo ✓ 🚀 \\u0000", "empty": {}, "list": [null, true]}'
    )
    checkpoint = CheckpointRecord(
        execution_id="exé-1",
        checkpoint_id="cp-✓-1",
        parent_checkpoint_id="cp-0",
        chain_name="chaîne",
        node_id="nœud",
        node_index=2**40,
        step_type="step",
        status=CheckpointStatus.FAILED,
        state_snapshot_json=state,
        node_input_json='{"in": [1, 2.50, "x"]}',
        node_output_json='{ "spaced" :  true }',
        iteration=2**62,
        iteration_counters_json='{"loop": 3}',
        interrupt_reason="why ✓",
        interrupt_context_json='{"ctx": 18446744073709551617}',
        agent_path="root/sub agent/ü",
        created_at=datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5))),
    )
    stored = await store.put_checkpoint(NS, "req-1", checkpoint)
    assert stored.sequence > 0
    assert stored.created_at.tzinfo is UTC
    assert stored.created_at == checkpoint.created_at
    assert stored == replace(
        checkpoint, sequence=stored.sequence, created_at=checkpoint.created_at.astimezone(UTC)
    )
    assert await store.get_checkpoint(NS, "exé-1", "cp-✓-1") == stored
    assert await store.get_latest_checkpoint(NS, "exé-1") == stored
    page = await store.list_checkpoints(
        NS, "exé-1", after_sequence=None, descending=False, limit=10
    )
    assert page == [stored]

    pending = make_pending(
        "exé-2", context_json='{"n": 12345678901234567890, "u": "✓"}', agent_path="a/ü"
    )
    result = await store.record_interrupt(
        NS, "req-2", make_checkpoint("exé-2", status=CheckpointStatus.INTERRUPTED), pending
    )
    assert result.pending == replace(
        pending, checkpoint_id=result.checkpoint.checkpoint_id, sequence=result.checkpoint.sequence
    )
    assert result.pending.created_at.tzinfo is UTC
    listed = await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter())
    assert listed == [result.pending]

    await store.put_idempotent(NS, "", "exé-1", "key ✓", state, T0)
    assert await store.get_idempotent(NS, "exé-1", "key ✓") == state


async def test_j4_extreme_created_at_round_trips(store: PostgresStore) -> None:
    """The first and last representable instants are stored and read back exactly, in UTC,
    and prune still orders them correctly."""
    first = datetime(1, 1, 1, tzinfo=UTC)
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    for when in (first, last, first + timedelta(microseconds=1)):
        stored = await store.put_checkpoint(NS, "", make_checkpoint("e", created_at=when))
        got = await store.get_checkpoint(NS, "e", stored.checkpoint_id)
        assert got is not None
        assert (stored.created_at, got.created_at) == (when, when)
        assert got.created_at.tzinfo is UTC
    result = await store.prune(NS, T0, batch_size=1)
    assert result.checkpoints_deleted == 2
    rest = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=9)
    assert [r.created_at for r in rest] == [last]


async def test_naive_datetimes_are_refused(store: PostgresStore) -> None:
    """A naive datetime is a caller bug, refused before anything is written."""
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.put_checkpoint(NS, "", make_checkpoint("e", created_at=datetime(2025, 1, 1)))
    assert await store.get_latest_checkpoint(NS, "e") is None


async def test_c2_retry_with_same_request_id_returns_stored_row(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """Same id + same request id is a retry (stored row back); anything else is
    CheckpointExists, nothing changes, and the (only) pooled connection stays usable."""
    s = PostgresStore(pg_dsn, schema=pg_schema, min_pool_size=1, max_pool_size=1)
    await s.open()
    try:
        first = await s.put_checkpoint(NS, "req-1", make_checkpoint("e", "cp-1"))
        changed = make_checkpoint("e", "cp-1", state_json='{"other": true}')
        assert await s.put_checkpoint(NS, "req-1", changed) == first
        for request_id in ("req-2", ""):
            with pytest.raises(CheckpointExists) as info:
                await s.put_checkpoint(NS, request_id, changed)
            assert info.value.checkpoint_id == "cp-1"
            assert isinstance(info.value, StoreError)
        # Written without a request id, a second write is never taken for a retry.
        await s.put_checkpoint(NS, "", make_checkpoint("e", "cp-2"))
        with pytest.raises(CheckpointExists):
            await s.put_checkpoint(NS, "", make_checkpoint("e", "cp-2"))
        # record_interrupt over an existing id: refused, and no pending row or event appears.
        interrupted = make_checkpoint("e", "cp-1", status=CheckpointStatus.INTERRUPTED)
        with pytest.raises(CheckpointExists):
            await s.record_interrupt(NS, "req-3", interrupted, make_pending("e"))
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
        third = await s.put_checkpoint(NS, "req-4", make_checkpoint("e", "cp-3"))
        assert third.sequence > first.sequence
    finally:
        await s.close()


async def test_c2_same_checkpoint_id_in_two_namespaces_is_two_rows(store: PostgresStore) -> None:
    """Checkpoint ids are unique per namespace only (N1)."""
    a = await store.put_checkpoint("ns-a", "", make_checkpoint("e", "cp-1"))
    b = await store.put_checkpoint("ns-b", "", make_checkpoint("e", "cp-1", node_index=7))
    assert a.sequence != b.sequence
    assert (await store.get_checkpoint("ns-b", "e", "cp-1")) == b


async def test_c3_latest_is_by_sequence_not_created_at(store: PostgresStore) -> None:
    """The latest row is the last written even when its created_at is the oldest; skip_run_end
    passes over a trailing run_end row."""
    assert await store.get_latest_checkpoint(NS, "e") is None
    ids = []
    for i in range(5):  # each row is backdated further than the previous one
        cp = make_checkpoint("e", f"cp-{i}", created_at=T0 - timedelta(hours=i))
        ids.append((await store.put_checkpoint(NS, "", cp)).checkpoint_id)
    await store.put_checkpoint(NS, "", make_checkpoint("other", created_at=T0 + timedelta(days=1)))
    latest = await store.get_latest_checkpoint(NS, "e")
    assert latest is not None
    assert latest.checkpoint_id == "cp-4"

    run_end = make_checkpoint("e", "end", step_type="run_end", created_at=T0 - timedelta(days=9))
    await store.put_checkpoint(NS, "", run_end)
    newest = await store.get_latest_checkpoint(NS, "e")
    assert newest is not None
    assert newest.checkpoint_id == "end"
    stepped = await store.get_latest_checkpoint(NS, "e", skip_run_end=True)
    assert stepped is not None
    assert stepped.checkpoint_id == "cp-4"
    assert await store.get_latest_checkpoint("elsewhere", "e") is None


async def test_c4_list_pages_in_both_directions(store: PostgresStore) -> None:
    """250 rows read completely in write order, forwards and backwards, by keyset pages."""
    written = []
    for i in range(250):
        cp = make_checkpoint("e", f"cp-{i:03}", node_index=250 - i, created_at=T0 - timedelta(i))
        written.append((await store.put_checkpoint(NS, "", cp)).checkpoint_id)
        if i % 10 == 0:  # interleave rows of another execution and another namespace
            await store.put_checkpoint(NS, "", make_checkpoint("other"))
            await store.put_checkpoint("ns-b", "", make_checkpoint("e"))

    async def read_all(descending: bool) -> list[str]:
        out: list[str] = []
        after: int | None = None
        while True:
            page = await store.list_checkpoints(
                NS, "e", after_sequence=after, descending=descending, limit=40
            )
            out += [r.checkpoint_id for r in page]
            if len(page) < 40:
                return out
            after = page[-1].sequence

    assert await read_all(descending=False) == written
    assert await read_all(descending=True) == written[::-1]
    newest = await store.list_checkpoints(NS, "e", after_sequence=None, descending=True, limit=3)
    assert [r.checkpoint_id for r in newest] == written[:-4:-1]
    assert (
        await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=0) == []
    )
    assert (
        await store.list_checkpoints(NS, "none", after_sequence=None, descending=False, limit=9)
        == []
    )


async def test_c5_get_by_id_needs_matching_execution_and_namespace(store: PostgresStore) -> None:
    """A checkpoint is found only under its own execution and namespace."""
    stored = await store.put_checkpoint(NS, "", make_checkpoint("e", "cp-1"))
    assert await store.get_checkpoint(NS, "e", "cp-1") == stored
    assert await store.get_checkpoint(NS, "other", "cp-1") is None
    assert await store.get_checkpoint("ns-b", "e", "cp-1") is None
    assert await store.get_checkpoint(NS, "e", "missing") is None


async def test_c6_delete_execution_counts_and_removed_event(
    store: PostgresStore, raw: asyncpg.Connection
) -> None:
    """Delete removes checkpoints, the pending row and idempotency rows of one execution only,
    and announces the pending row's removal once."""
    for _ in range(3):
        await store.put_checkpoint(NS, "", make_checkpoint("e"))
    await record(store, "e")
    await store.put_idempotent(NS, "", "e", "k1", "1", T0)
    await store.put_idempotent(NS, "", "e", "k2", "2", T0)
    keep = await store.put_checkpoint(NS, "", make_checkpoint("keep"))
    await store.put_idempotent(NS, "", "keep", "k1", "1", T0)
    await store.put_checkpoint("ns-b", "", make_checkpoint("e"))

    result = await store.delete_execution(NS, "e")
    assert (
        result.checkpoints_deleted,
        result.pending_interrupt_deleted,
        result.idempotency_results_deleted,
    ) == (4, True, 2)
    assert await store.get_latest_checkpoint(NS, "e") is None
    assert await store.get_idempotent(NS, "e", "k1") is None
    assert (
        await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter()) == []
    )
    assert await store.get_latest_checkpoint(NS, "keep") == keep
    assert await store.get_idempotent(NS, "keep", "k1") == "1"
    assert await store.get_latest_checkpoint("ns-b", "e") is not None
    assert [(k, e) for _, k, e in await events(raw, store.schema)] == [
        ("added", "e"),
        ("removed", "e"),
    ]

    again = await store.delete_execution(NS, "e")
    assert (again.checkpoints_deleted, again.pending_interrupt_deleted) == (0, False)
    assert len(await events(raw, store.schema)) == 2


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
        await store.put_checkpoint(
            NS, "", make_checkpoint("e", status=statuses[i % 4], created_at=when)
        )
    await store.put_checkpoint(
        NS, "", make_checkpoint("e", status=CheckpointStatus.FAILED, created_at=old)
    )
    for _ in range(3):  # recent rows stay
        await store.put_checkpoint(NS, "", make_checkpoint("e", created_at=T0))
    await store.put_checkpoint("ns-b", "", make_checkpoint("e", created_at=old))  # other namespace

    await record(store, "waiting")  # an interrupted checkpoint and a pending row
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


async def test_i1_record_interrupt_writes_checkpoint_pending_row_and_event_together(
    store: PostgresStore, raw: asyncpg.Connection
) -> None:
    """One record_interrupt stores the interrupted checkpoint, the pending row and an event."""
    result = await record(store, "e", "req-1")
    assert result.pending_created
    assert result.checkpoint.status == "interrupted"
    assert await store.get_latest_checkpoint(NS, "e") == result.checkpoint
    assert result.pending.checkpoint_id == result.checkpoint.checkpoint_id
    assert result.pending.sequence == result.checkpoint.sequence
    assert [(k, e) for _, k, e in await events(raw, store.schema)] == [("added", "e")]


async def test_i2_record_twice_keeps_first_pending_row(
    store: PostgresStore, raw: asyncpg.Connection
) -> None:
    """A second record keeps the first pending row, still stores its checkpoint, and says so;
    retries of either call answer as the first time."""
    first = await record(store, "e", "req-1", reason="first")
    second = await record(store, "e", "req-2", reason="second")
    assert not second.pending_created
    assert second.pending == first.pending
    assert await store.get_latest_checkpoint(NS, "e") == second.checkpoint
    assert [k for _, k, _ in await events(raw, store.schema)] == ["added"]

    cp1 = make_checkpoint("e", first.checkpoint.checkpoint_id, status=CheckpointStatus.INTERRUPTED)
    retry1 = await store.record_interrupt(NS, "req-1", cp1, make_pending("e", reason="first"))
    assert retry1 == first
    cp2 = make_checkpoint("e", second.checkpoint.checkpoint_id, status=CheckpointStatus.INTERRUPTED)
    retry2 = await store.record_interrupt(NS, "req-2", cp2, make_pending("e", reason="second"))
    assert retry2 == second

    claimed = await store.claim_interrupt(NS, "e", "tok", T0)
    assert claimed == first.pending
    # Retried after the claim: the pending row is rebuilt from the request.
    late = await store.record_interrupt(NS, "req-1", cp1, make_pending("e", reason="first"))
    assert late.checkpoint == first.checkpoint
    assert late.pending == first.pending
    assert late.pending_created
    assert [k for _, k, _ in await events(raw, store.schema)] == ["added", "claimed"]


async def test_i3_exactly_one_of_32_concurrent_claimers_wins(
    pg_dsn: str, pg_schema: str, raw: asyncpg.Connection
) -> None:
    """Over 50 rounds, 32 concurrent claims through two stores (two pools) yield exactly one
    winner per round; every loser gets None; each claim is announced once, in order."""
    a = PostgresStore(pg_dsn, schema=pg_schema, max_pool_size=8)
    b = PostgresStore(pg_dsn, schema=pg_schema, max_pool_size=8)
    await a.open()
    await b.open()
    try:
        for round_no in range(50):
            execution = f"e-{round_no}"
            recorded = await record(a, execution)
            claims = [
                (a if i % 2 else b).claim_interrupt(
                    NS, execution, "" if i % 8 == 0 else f"tok-{round_no}-{i}", T0
                )
                for i in range(32)
            ]
            results = await asyncio.gather(*claims)
            winners = [r for r in results if r is not None]
            assert winners == [recorded.pending], f"round {round_no}"
            assert await a.claim_interrupt(NS, execution, "late", T0) is None
        kinds = [k for _, k, _ in await events(raw, pg_schema)]
        assert kinds == ["added", "claimed"] * 50
    finally:
        await a.close()
        await b.close()


async def test_i3_retry_with_same_claim_token_returns_same_row(pg_dsn: str, pg_schema: str) -> None:
    """A retried claim with the winner's token gets the same row (also when retries race and
    across stores); other tokens get None; purge_claims ends the retention."""
    a = PostgresStore(pg_dsn, schema=pg_schema)
    b = PostgresStore(pg_dsn, schema=pg_schema)
    await a.open()
    await b.open()
    try:
        recorded = await record(a, "e")
        won = await a.claim_interrupt(NS, "e", "tok-1", T0)
        assert won == recorded.pending
        assert await b.claim_interrupt(NS, "e", "tok-1", T0 + timedelta(seconds=5)) == won
        assert await a.claim_interrupt(NS, "e", "tok-2", T0) is None
        assert await a.claim_interrupt(NS, "e", "", T0) is None
        assert await a.claim_interrupt("ns-b", "e", "tok-1", T0) is None  # namespaces (N1)

        again = await record(a, "f")
        racing = await asyncio.gather(
            *((a, b)[i % 2].claim_interrupt(NS, "f", "same", T0) for i in range(12))
        )
        assert racing == [again.pending] * 12

        assert await a.purge_claims(T0 - timedelta(seconds=1)) == 0
        assert await a.purge_claims(T0 + timedelta(seconds=1)) == 2
        assert await a.claim_interrupt(NS, "e", "tok-1", T0) is None
    finally:
        await a.close()
        await b.close()


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


async def test_i4_list_pending_newest_first_paged_and_filtered(store: PostgresStore) -> None:
    """Pending rows list newest first by sequence, page by before_sequence, and filter by chain
    name, reason and a literal agent_path prefix (LIKE wildcards match only themselves)."""
    paths = ["a_b/x", "axb/y", "a%/z", None, "a_b"]
    for i in range(30):
        await record(
            store,
            f"e-{i:02}",
            chain_name=f"chain-{i % 3}",
            reason=f"reason-{i % 2}",
            agent_path=paths[i % 5],
            created_at=T0 - timedelta(minutes=i),  # created_at must not decide the order
        )
    everything = PendingFilter()
    seen: list[str] = []
    before: int | None = None
    while True:
        page = await store.list_pending(NS, before_sequence=before, limit=7, filters=everything)
        seen += [p.execution_id for p in page]
        if len(page) < 7:
            break
        before = page[-1].sequence
    assert seen == [f"e-{i:02}" for i in range(29, -1, -1)]

    async def ids(**f: Any) -> list[str]:
        rows = await store.list_pending(
            NS, before_sequence=None, limit=50, filters=PendingFilter(**f)
        )
        return [p.execution_id for p in rows]

    assert await ids(chain_name="chain-1") == [f"e-{i:02}" for i in range(29, -1, -1) if i % 3 == 1]
    assert await ids(chain_name="chain-1", reason="reason-0") == [
        f"e-{i:02}" for i in range(29, -1, -1) if i % 6 == 4
    ]
    assert await ids(agent_path_prefix="a_b") == [
        f"e-{i:02}" for i in range(29, -1, -1) if i % 5 in (0, 4)
    ]
    assert await ids(agent_path_prefix="a%") == [
        f"e-{i:02}" for i in range(29, -1, -1) if i % 5 == 2
    ]
    assert await ids(agent_path_prefix="") == seen
    assert await ids(reason="nope") == []
    assert await store.list_pending("ns-b", before_sequence=None, limit=5, filters=everything) == []


# --- idempotency ---------------------------------------------------------------------------


async def test_d1_put_replaces_and_get_returns_exact_text(store: PostgresStore) -> None:
    """Put replaces the cached value; get returns its exact text, and a cached null is found."""
    assert await store.get_idempotent(NS, "e", "k") is None
    await store.put_idempotent(NS, "", "e", "k", "null", T0)
    assert await store.get_idempotent(NS, "e", "k") == "null"
    await store.put_idempotent(NS, "", "e", "k", '{"b": 1,  "a": 2}', T0)
    await store.put_idempotent(NS, "", "e", "k", '{"b": 1,  "a": 2}', T0)  # a retry
    assert await store.get_idempotent(NS, "e", "k") == '{"b": 1,  "a": 2}'
    assert await store.get_idempotent("ns-b", "e", "k") is None


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
        await record(store, f"e-{i}")
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
    early = datetime(2025, 1, 1, 3, tzinfo=UTC)
    start = datetime(1, 1, 1, tzinfo=UTC)
    cases: list[tuple[str, str, tuple[object, ...]]] = [
        ("latest", sql.latest, ("ns", "e5")),
        ("latest_skip_run_end", sql.latest_skip_run_end, ("ns", "e5", "run_end")),
        ("list_ascending", sql.list_ascending, ("ns", "e5", 0, 20)),
        ("list_descending", sql.list_descending, ("ns", "e5", 2**63 - 1, 20)),
        ("list_page", sql.list_ascending, ("ns", "e5", 2500, 20)),
        ("list_ascending_sizes", sql.list_ascending_sizes, ("ns", "e5", 0, 20)),
        ("list_descending_sizes", sql.list_descending_sizes, ("ns", "e5", 2**63 - 1, 20)),
        (
            "list_pending_sizes",
            sql.list_pending(PendingFilter(), sizes=True)[0],
            ("ns", 2**63 - 1, 50),
        ),
        ("get_checkpoint", sql.get_checkpoint, ("ns", "c77", "e77")),
        ("checkpoint_by_id", sql.checkpoint_by_id, ("ns", "c77")),
        ("checkpoint_by_request_id", sql.checkpoint_by_request_id, ("ns", "r77")),
        ("is_tombstone", sql.is_tombstone, ("ns", "r77")),
        ("reply_of_request", sql.reply_of_request, ("ns", "r77")),
        ("list_pending", sql.list_pending(PendingFilter())[0], ("ns", 2**63 - 1, 50)),
        ("list_pending_page", sql.list_pending(PendingFilter())[0], ("ns", 1500, 50)),
        (
            "list_pending_chain",
            sql.list_pending(PendingFilter(chain_name="chain3"))[0],
            ("ns", 1500, "chain3", 50),
        ),
        (
            "list_pending_reason",
            sql.list_pending(PendingFilter(reason="r2"))[0],
            ("ns", 1500, "r2", 50),
        ),
        (
            "list_pending_path",
            sql.list_pending(PendingFilter(agent_path_prefix="a/b1"))[0],
            ("ns", 1500, "a/b1", 50),
        ),
        (
            "list_pending_all_filters",
            sql.list_pending(PendingFilter("chain3", "r2", "a/b1"))[0],
            ("ns", 1500, "chain3", "r2", "a/b1", 50),
        ),
        ("pending_by_execution", sql.pending_by_execution, ("ns", "e5")),
        ("claim_with_token", sql.claim_with_token, ("ns", "e5", "tok", T0)),
        ("claim_without_token", sql.delete_pending, ("ns", "e5")),
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
        stored = await s.put_checkpoint(NS, "", make_checkpoint("e"))
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
    s = PostgresStore(pg_dsn, schema=pg_schema, timeout=0.5, max_pool_size=1)
    await s.open()
    try:
        await s.put_checkpoint(NS, "", make_checkpoint("e"))
        blocker = raw.transaction()
        await blocker.start()
        await raw.execute(f'LOCK TABLE "{pg_schema}".checkpoints IN ACCESS EXCLUSIVE MODE')
        # The message names the store timeout as what ended the wait (a hang would meet the
        # test's timeout instead).
        with pytest.raises(StoreUnavailable, match=r"did not answer within 0\.5s") as info:
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
