"""Contract I5 at the store: reading the outbox, purging it, and noticing new events, on both
backends, with two store instances on one database standing for two server processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from checkpointd.domain import (
    EventKind,
    PendingFilter,
)
from checkpointd.store.interface import Store
from checkpointd.store.postgres import PostgresStore
from tests.support.records import interrupt
from tests.support.sidecar import StoreSpec
from tests.support.stores import open_store

NS = "default"
#: Bounds a wait that must end; reached only when a test is failing.
PATIENCE = 30.0


@pytest.fixture
async def stores(store_spec: StoreSpec) -> AsyncIterator[tuple[Store, Store]]:
    """Two open stores on one database, as two server processes would hold."""
    first, second = open_store(store_spec), open_store(store_spec)
    await first.open()
    await second.open()
    yield first, second
    await first.close()
    await second.close()


async def _record(store: Store, execution_id: str, *, chain_name: str = "flow") -> None:
    await interrupt(
        store,
        execution_id,
        request_id="",
        created_at=datetime.now(UTC),
        chain_name=chain_name,
        context_json='{"n": 1}',
        agent_path="a/b",
    )


async def test_i5_read_events_returns_complete_events_in_cursor_order(
    stores: tuple[Store, Store],
) -> None:
    """Events come back ascending, with their pending rows, bounded by cursor, limit and
    namespace, and the bounds name the newest cursor."""
    first, second = stores
    await _record(first, "e1")
    await _record(second, "e2", chain_name="other")
    await first.claim_interrupt(NS, "e1", "", datetime.now(UTC))
    page = await second.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=NS)
    assert [(e.kind, e.pending.execution_id) for e in page.events] == [
        (EventKind.ADDED, "e1"),
        (EventKind.ADDED, "e2"),
        (EventKind.CLAIMED, "e1"),
    ]
    cursors = [e.cursor for e in page.events]
    assert cursors == sorted(cursors)
    assert (page.latest_cursor, page.purged_through) == (cursors[-1], 0)
    added = page.events[1].pending
    assert (added.chain_name, added.context_json, added.agent_path) == ("other", '{"n": 1}', "a/b")
    assert added.sequence > 0
    some = await first.read_events(
        after_cursor=cursors[0], up_to_cursor=cursors[1], limit=10, namespace=NS
    )
    assert [e.cursor for e in some.events] == [cursors[1]]
    assert (
        await first.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace="elsewhere")
    ).events == []
    bounds = await first.read_events(after_cursor=0, up_to_cursor=None, limit=0, namespace=None)
    assert (bounds.events, bounds.latest_cursor) == ([], cursors[-1])
    snapshot = await second.snapshot_pending(
        NS,
        PendingFilter(chain_name="other"),
        as_of_cursor=cursors[-1],
        before_sequence=None,
        limit=10,
    )
    assert ([r.execution_id for r in snapshot.rows], snapshot.more) == (["e2"], False)


async def test_i5_purge_drops_the_old_prefix_and_remembers_how_far(
    stores: tuple[Store, Store],
) -> None:
    """Purging deletes events in cursor order up to the first young one, in batches, and
    purged_through stays exact after every event is gone."""
    first, second = stores
    await _record(first, "old-1")
    await _record(second, "old-2")
    cutoff = datetime.now(UTC)
    await asyncio.sleep(0.01)
    await _record(first, "young")
    everything = await first.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=NS)
    old_2, young = everything.events[1].cursor, everything.events[2].cursor
    assert await second.purge_events(cutoff, batch_size=1) == 2
    page = await first.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=NS)
    assert [e.cursor for e in page.events] == [young]
    assert (page.purged_through, page.latest_cursor) == (old_2, young)
    assert await first.purge_events(cutoff, batch_size=100) == 0
    assert await first.purge_events(datetime.now(UTC), batch_size=100) == 1
    page = await second.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=None)
    assert (page.events, page.purged_through, page.latest_cursor) == ([], young, young)
    snapshot = await first.snapshot_pending(
        NS, PendingFilter(), as_of_cursor=young, before_sequence=None, limit=10
    )
    assert snapshot.purged_through == young
    await _record(second, "next")
    page = await first.read_events(after_cursor=young, up_to_cursor=None, limit=10, namespace=NS)
    [event] = page.events
    assert (event.pending.execution_id, event.cursor > young) == ("next", True)


async def test_i5_notifier_wakes_on_commits_of_this_and_other_instances(
    stores: tuple[Store, Store],
) -> None:
    """The first wait returns at once; later waits return when either instance commits an
    event, long before their fallback time."""
    first, second = stores
    notifier = first.event_notifier()
    try:
        async with asyncio.timeout(PATIENCE):
            await notifier.wait(3600)
        for writer, execution_id in ((second, "from-other"), (first, "from-self")):
            waiting = asyncio.create_task(notifier.wait(3600))
            await asyncio.sleep(0.1)
            await _record(writer, execution_id)
            async with asyncio.timeout(PATIENCE):
                await waiting
            page = await first.read_events(
                after_cursor=0, up_to_cursor=None, limit=10, namespace=NS
            )
            assert page.events[-1].pending.execution_id == execution_id
    finally:
        await notifier.close()


@pytest.mark.postgres
async def test_i5_listen_connection_is_reopened_after_it_is_terminated(
    pg_dsn: str, pg_schema: str
) -> None:
    """When the LISTEN connection is killed, the notifier opens a new one and hears later
    commits again."""
    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.open()
    notifier = store.event_notifier()
    admin = await asyncpg.connect(pg_dsn)
    try:
        await notifier.wait(3600)
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1",
            f"checkpointd:{pg_schema}:listen",
        )
        assert killed == 1
        async with asyncio.timeout(PATIENCE):
            # Lost connection, then the retry interval: each ends a wait, none hangs.
            while True:
                await notifier.wait(3600)
                reopened = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    f"checkpointd:{pg_schema}:listen",
                )
                if reopened == 1:
                    break
            waiting = asyncio.create_task(notifier.wait(3600))
            await asyncio.sleep(0.1)
            await _record(store, "after-reconnect")
            await waiting
    finally:
        await admin.close()
        await notifier.close()
        await store.close()


async def test_b1_snapshot_pages_are_the_pending_set_at_their_cursor(
    stores: tuple[Store, Store],
) -> None:
    """Pages of a snapshot read after changes made through another instance are still the
    pending set at the snapshot's cursor: claimed and removed rows come back from their
    events, added ones stay out; filters apply to both; the row and byte budgets cut pages
    without losing or repeating a row."""
    first, second = stores
    for i in range(9):
        await _record(first, f"e{i}", chain_name="odd" if i % 2 else "even")
    bounds = await first.read_events(after_cursor=0, up_to_cursor=0, limit=0, namespace=None)
    cursor = bounds.latest_cursor
    assert await second.claim_interrupt(NS, "e1", "tok", datetime.now(UTC)) is not None
    await second.delete_execution(NS, "e4")
    await _record(second, "late", chain_name="odd")
    assert await second.claim_interrupt(NS, "e7", "", datetime.now(UTC)) is not None

    async def read_all(
        cursor: int, filters: PendingFilter, limit: int, max_bytes: int | None = None
    ) -> list[str]:
        ids: list[str] = []
        before: int | None = None
        while True:
            page = await first.snapshot_pending(
                NS,
                filters,
                as_of_cursor=cursor,
                before_sequence=before,
                limit=limit,
                max_bytes=max_bytes,
            )
            assert page.purged_through <= cursor
            assert len(page.rows) <= limit
            ids += [row.execution_id for row in page.rows]
            if not page.more:
                return ids
            before = page.rows[-1].sequence

    everything = [f"e{i}" for i in range(8, -1, -1)]
    assert await read_all(cursor, PendingFilter(), 100) == everything
    assert await read_all(cursor, PendingFilter(), 2) == everything
    assert await read_all(cursor, PendingFilter(), 100, max_bytes=1) == everything  # a row a page
    odd = await read_all(cursor, PendingFilter(chain_name="odd"), 3)
    assert odd == ["e7", "e5", "e3", "e1"]
    # At the newest cursor the same pages are the current set.
    now = await first.read_events(after_cursor=0, up_to_cursor=0, limit=0, namespace=None)
    current = ["late", "e8", "e6", "e5", "e3", "e2", "e0"]
    assert await read_all(now.latest_cursor, PendingFilter(), 2) == current


async def test_b1_event_reads_stop_at_their_byte_budget(stores: tuple[Store, Store]) -> None:
    """A batch of events stops where its stored sizes reach the budget (one event at least),
    says that more follow, and the next read goes on from there: nothing lost or repeated."""
    first, _ = stores
    for i in range(5):
        await _record(first, f"e{i}")
    every = await first.read_events(after_cursor=0, up_to_cursor=None, limit=100, namespace=NS)
    assert len(every.events) == 5
    assert not every.more
    seen: list[int] = []
    after = 0
    while True:
        page = await first.read_events(
            after_cursor=after, up_to_cursor=None, limit=100, namespace=None, max_bytes=1
        )
        assert len(page.events) == 1 or not page.events
        seen += [event.cursor for event in page.events]
        if not page.more:
            break
        after = page.events[-1].cursor
    assert seen == [event.cursor for event in every.events]
    capped = await first.read_events(after_cursor=0, up_to_cursor=None, limit=2, namespace=NS)
    assert (len(capped.events), capped.more) == (2, True)
