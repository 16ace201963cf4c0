"""What a Postgres store call costs on the network, counted, directly and through a
transaction-pooling PgBouncer: round trips are what a call costs the sidecar's CPU (each is a
wake of the event loop and a protocol exchange), so the hot calls are held to their number.

A round trip is one ``ReadyForQuery`` from the server (see
:mod:`tests.support.pg_round_trips`). Each store has one pooled connection, warmed up by the
same calls first, so no count includes a connect or a first prepare.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from checkpointd.app import build_graph_store
from checkpointd.graph.records import (
    ChannelValue,
    GraphCheckpoint,
    GraphWrite,
    TypedValue,
)
from checkpointd.store.base import StoreError
from checkpointd.store.postgres import PostgresStore
from tests.support.pg_round_trips import RoundTripCounter
from tests.support.records import NS, checkpoint, interrupt

pytestmark = pytest.mark.postgres

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
#: Puts at once: the first goes alone, the others form one group behind it.
PUTS = 11


@pytest.fixture(params=["direct", "pgbouncer"])
async def counted(
    request: pytest.FixtureRequest, pg_dsn: str, pg_schema: str
) -> AsyncIterator[tuple[PostgresStore, RoundTripCounter]]:
    """A store with one connection, through a counting proxy (to Postgres or to PgBouncer)."""
    pooled = request.param == "pgbouncer"
    upstream = request.getfixturevalue("pgbouncer").url() if pooled else pg_dsn
    proxy = RoundTripCounter(upstream)
    store = PostgresStore(
        proxy.dsn(), schema=pg_schema, min_pool_size=1, max_pool_size=1, pooled=pooled
    )
    await store.open()
    try:
        yield store, proxy
    finally:
        await store.close()
        proxy.close()


async def round_trips(proxy: RoundTripCounter, call: Callable[[], Awaitable[Any]]) -> int:
    """The round trips of ``call()``, after one warm-up call."""
    await call()
    before = proxy.count
    await call()
    return proxy.count - before


async def test_a_group_of_puts_is_one_round_trip(
    counted: tuple[PostgresStore, RoundTripCounter],
) -> None:
    """One put is one round trip, and PUTS concurrent puts two: the first alone, the rest
    as one group (one statement), whatever their number; no reset query on release."""
    store, proxy = counted

    async def puts() -> None:
        run = uuid.uuid4().hex
        await asyncio.gather(
            *(store.put_checkpoint(NS, "", checkpoint(f"{run}-{i}")) for i in range(PUTS))
        )

    assert await round_trips(proxy, lambda: store.put_checkpoint(NS, "", checkpoint())) == 1
    assert await round_trips(proxy, puts) == 2


async def test_record_and_claim_round_trips(
    counted: tuple[PostgresStore, RoundTripCounter],
) -> None:
    """record_interrupt: BEGIN, the checkpoint, the pending row with its event, COMMIT. A
    claim, its event and (with a token) the look for the token's earlier claim are one
    statement, and so is a retry answered with that claim."""
    store, proxy = counted
    runs: list[str] = []

    async def record() -> None:
        runs.append(uuid.uuid4().hex)
        await interrupt(store, runs[-1])

    assert await round_trips(proxy, record) == 4
    for _ in range(2):
        await record()

    async def claim(token: str) -> None:
        assert await store.claim_interrupt(NS, runs.pop(), token, T0) is not None

    assert await round_trips(proxy, lambda: claim("")) == 1
    assert await round_trips(proxy, lambda: claim(uuid.uuid4().hex)) == 1
    await record()
    token = uuid.uuid4().hex
    first = await store.claim_interrupt(NS, runs[-1], token, T0)
    before = proxy.count
    assert await store.claim_interrupt(NS, runs[-1], token, T0) == first
    assert proxy.count - before == 1
    before = proxy.count
    assert await store.claim_interrupt(NS, "no-such-run", "", T0) is None
    assert proxy.count - before == 1


async def test_the_watch_readers_look_at_the_outbox_bounds_is_one_round_trip(
    counted: tuple[PostgresStore, RoundTripCounter],
) -> None:
    """The watch reader reads the outbox's bounds alone (``limit=0``) once a second while no
    stream is open: one statement, no BEGIN and COMMIT around it; its answer moves with the
    outbox. A page of events stays one transaction (its bounds and its rows agree)."""
    store, proxy = counted

    async def bounds() -> int:
        page = await store.read_events(after_cursor=0, up_to_cursor=0, limit=0, namespace=None)
        assert (page.events, page.more) == ([], False)
        return page.latest_cursor

    assert await round_trips(proxy, bounds) == 1
    before = await bounds()
    await interrupt(store, "moves-the-bounds")
    assert await bounds() > before

    async def page() -> None:
        await store.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=None)

    assert await round_trips(proxy, page) == 5  # BEGIN, bounds, sizes, rows, COMMIT


async def test_a_bad_row_in_a_group_fails_alone(pg_dsn: str, pg_schema: str) -> None:
    """A row Postgres refuses (a NUL character, which the servicers refuse before it gets
    here) fails its own put; the other rows of its group are written. The same for a group
    of idempotency results."""
    store = PostgresStore(pg_dsn, schema=pg_schema, max_pool_size=2)
    await store.open()
    try:
        records = [checkpoint(f"run-{i}") for i in range(6)]
        records[3] = checkpoint("run-3", node_id="a\x00b")
        outcomes = await asyncio.gather(
            *(store.put_checkpoint(NS, "", r) for r in records), return_exceptions=True
        )
        assert isinstance(outcomes[3], StoreError)
        for i in (0, 1, 2, 4, 5):
            stored = await store.get_latest_checkpoint(NS, f"run-{i}")
            assert stored is not None
            assert stored.checkpoint_id == records[i].checkpoint_id
        assert await store.get_latest_checkpoint(NS, "run-3") is None
        results = ['{"n": 1}'] * 6
        results[2] = '"a\x00b"'
        written = await asyncio.gather(
            *(
                store.put_idempotent(NS, f"request-{i}", "run-0", f"k{i}", r, T0)
                for i, r in enumerate(results)
            ),
            return_exceptions=True,
        )
        assert isinstance(written[2], StoreError)
        assert [await store.get_idempotent(NS, "run-0", f"k{i}") for i in range(6)] == [
            None if i == 2 else '{"n": 1}' for i in range(6)
        ]
    finally:
        await store.close()


async def test_every_record_and_claim_writes_its_event_with_the_lock_in_its_statement(
    pg_dsn: str, pg_schema: str
) -> None:
    """Concurrent records and claims through two stores, each event written with its lock in
    one statement: each wrote exactly one event, and no event statement failed (the cursors
    have no gap). The order readers rely on is test_postgres_only's I5 test."""
    stores = [PostgresStore(pg_dsn, schema=pg_schema, max_pool_size=4) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        await asyncio.gather(*(interrupt(stores[i % 2], f"e-{i}") for i in range(30)))
        await asyncio.gather(
            *(stores[(i + 1) % 2].claim_interrupt(NS, f"e-{i}", "", T0) for i in range(30))
        )
        conn = await asyncpg.connect(pg_dsn)
        try:
            found = await conn.fetch(
                f'SELECT cursor, kind FROM "{pg_schema}".interrupt_events ORDER BY cursor'
            )
        finally:
            await conn.close()
        assert len(found) == 60
        assert sorted(r["kind"] for r in found) == ["added"] * 30 + ["claimed"] * 30
        cursors = [r["cursor"] for r in found]
        assert cursors == list(range(cursors[0], cursors[0] + 60))
    finally:
        for s in stores:
            await s.close()


async def test_graph_puts_round_trips(counted: tuple[PostgresStore, RoundTripCounter]) -> None:
    """A graph checkpoint with its new values: BEGIN, the checkpoint's lock (G18), the values
    with the checkpoint, the release of its held interrupts and its parent's pauses (one
    statement), COMMIT; writes: BEGIN, the writes with the task's pauses (one statement), COMMIT.
    A request id is recorded first, with its lock (the checkpoint's after it), in one statement
    that takes the checkpoint's lock's place: a put costs the same with one. Only a retry
    looks its id up: BEGIN, the record that finds it, the look-up, COMMIT."""
    store, proxy = counted
    graph = build_graph_store(store)
    parent = [""]

    async def put(request_id: str) -> None:
        checkpoint_id = uuid.uuid4().hex
        body = TypedValue("json", b"{}")
        versions = {"a": checkpoint_id, "b": checkpoint_id}
        values = [ChannelValue(c, v, TypedValue("json", b"1")) for c, v in versions.items()]
        cp = GraphCheckpoint("t", "", checkpoint_id, parent[0], body, "{}", versions, "")
        await graph.put_checkpoint(NS, request_id, cp, values, T0, fingerprint="f")
        parent[0] = checkpoint_id

    async def put_writes(request_id: str) -> None:
        writes = [GraphWrite("task", "", i, "a", TypedValue("json", b"1")) for i in range(3)]
        await graph.put_writes(
            NS, request_id, "t", "", parent[0], writes, T0, fingerprint="f", task_id="task"
        )

    assert await round_trips(proxy, lambda: put("")) == 4
    assert await round_trips(proxy, lambda: put(uuid.uuid4().hex)) == 4
    assert await round_trips(proxy, lambda: put_writes("")) == 3
    assert await round_trips(proxy, lambda: put_writes(uuid.uuid4().hex)) == 4
    retried = uuid.uuid4().hex  # the warm-up call records it: the counted one is a retry
    assert await round_trips(proxy, lambda: put_writes(retried)) == 4
