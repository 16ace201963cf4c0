"""K1 and K2 on both stores, below the server: the decision migration keeps the outbox
whole, and a store decides, leases and reports with explicit clocks."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from checkpointd.domain import (
    CheckpointStatus,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    EventKind,
    LeaseFence,
)
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.store.test_group_commit import _checkpoint, _make_store, _open_args
from tests.support.records import pending
from tests.support.sidecar import StoreSpec
from tests.support.stores import pin_schema

NS = "default"
T0 = datetime(2025, 6, 1, 9, 0, 0, 250000, tzinfo=UTC)


def _decision(who: str = "bot", approved: bool = True) -> DecisionRecord:
    return DecisionRecord(
        approved=approved, metadata_json='{"n": 1}', decided_by=who, reason=None, decided_at=T0
    )


async def _pause(store: SQLiteStore | PostgresStore, execution_id: str, checkpoint_id: str) -> None:
    cp = dataclasses.replace(
        _checkpoint(execution_id, checkpoint_id),
        status=CheckpointStatus.INTERRUPTED,
        interrupt_reason="needs approval",
    )
    await store.record_interrupt(NS, "", cp, pending(execution_id))


async def test_k1_upgrade_keeps_the_outbox_and_its_cursors(
    store_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before the decisions schema keeps its events across the upgrade, and
    a cursor is never handed out twice, even when every earlier event was purged (SQLite
    rebuilds the outbox table to widen its event kinds)."""
    args = _open_args(store_spec)
    pin_schema(monkeypatch, store_spec.backend, 4)
    old = _make_store(args)
    await old.open()
    await old.close()
    monkeypatch.undo()
    # Three events written and purged under the old schema (only the new code runs here, so
    # the old rows are written by hand).
    columns = (
        "namespace, kind, execution_id, chain_name, node_id, reason, context_json, "
        "pending_created_at, checkpoint_id, sequence"
    )
    if args["backend"] == "sqlite":
        import sqlite3

        with sqlite3.connect(args["path"]) as conn:
            for kind in ("added", "added", "claimed"):
                conn.execute(
                    f"INSERT INTO interrupt_events ({columns}, event_at) VALUES "
                    "(?, ?, 'e', 'c', 'n', 'r', '{}', 0, 'k', 1, 0)",
                    (NS, kind),
                )
            conn.execute("DELETE FROM interrupt_events")
            conn.execute("UPDATE interrupt_events_purged SET purged_through = 3")
    else:
        import asyncpg

        pg = await asyncpg.connect(args["dsn"])
        try:
            for kind in ("added", "added", "claimed"):
                await pg.execute(
                    f'INSERT INTO "{args["schema"]}".interrupt_events ({columns}) VALUES '
                    "($1, $2, 'e', 'c', 'n', 'r', '{}', now(), 'k', 1)",
                    NS,
                    kind,
                )
            await pg.execute(f'DELETE FROM "{args["schema"]}".interrupt_events')
            await pg.execute(
                f'UPDATE "{args["schema"]}".interrupt_events_purged SET purged_through = 3'
            )
        finally:
            await pg.close()

    new = _make_store(args)
    await new.open()
    try:
        after = await new.read_events(after_cursor=0, up_to_cursor=None, limit=10, namespace=NS)
        assert (after.events, after.latest_cursor, after.purged_through) == ([], 3, 3)
        await _pause(new, "e1", "c1")
        change = await new.submit_decision(NS, "", "e1", _decision())
        assert change.outcome is DecisionOutcome.APPLIED
        page = await new.read_events(after_cursor=3, up_to_cursor=None, limit=10, namespace=NS)
        assert [e.kind for e in page.events] == [EventKind.ADDED, EventKind.DECIDED]
        assert page.events[0].pending.decision is None
        assert page.events[1].pending.decision == _decision()
    finally:
        await new.close()


async def test_k2_lease_takeover_and_reports_by_the_store_clock(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A lease runs until its time; a renewal keeps attempts, a takeover after expiry counts
    one more; only the current holder reports, once."""
    await _pause(store, "e", "c")
    assert (await store.submit_decision(NS, "r1", "e", _decision())).outcome is (
        DecisionOutcome.APPLIED
    )
    second = await store.submit_decision(NS, "r2", "e", _decision("other", approved=False))
    assert second.outcome is DecisionOutcome.CONFLICT
    assert second.pending is not None
    assert second.pending.decision == _decision()
    retry = await store.submit_decision(NS, "r1", "e", _decision())
    assert retry.outcome is DecisionOutcome.REPEATED

    lease = await store.lease_decision(NS, "e", "c", "a", T0 + timedelta(seconds=30), T0)
    assert lease.outcome is DecisionOutcome.APPLIED
    held = await store.lease_decision(
        NS, "e", "c", "b", T0 + timedelta(seconds=60), T0 + timedelta(seconds=29)
    )
    assert held.outcome is DecisionOutcome.CONFLICT
    renewed = await store.lease_decision(
        NS, "e", "c", "a", T0 + timedelta(seconds=90), T0 + timedelta(seconds=29)
    )
    assert renewed.pending is not None
    assert renewed.pending.decision is not None
    assert renewed.pending.decision.attempts == 1
    taken = await store.lease_decision(
        NS, "e", "c", "b", T0 + timedelta(seconds=200), T0 + timedelta(seconds=91)
    )
    assert taken.outcome is DecisionOutcome.APPLIED
    assert taken.pending is not None
    assert taken.pending.decision is not None
    assert taken.pending.decision.attempts == 2
    lost = await store.report_resume(
        NS, "e", "c", "a", DecisionStatus.RESUMED, None, T0 + timedelta(seconds=92)
    )
    assert lost.outcome is DecisionOutcome.CONFLICT
    done = await store.report_resume(
        NS, "e", "c", "b", DecisionStatus.RESUMED, None, T0 + timedelta(seconds=93)
    )
    assert done.outcome is DecisionOutcome.APPLIED
    again = await store.report_resume(
        NS, "e", "c", "b", DecisionStatus.RESUMED, None, T0 + timedelta(seconds=94)
    )
    assert again.outcome is DecisionOutcome.REPEATED
    assert again.pending == done.pending


async def test_k4_a_takeover_waits_for_the_holders_write_in_flight(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A write under a lease holds the pause while it runs: a takeover that starts meanwhile
    waits for it and counts one more attempt; after it, the old lease fences nothing in."""
    await _pause(store, "e", "c")
    await store.submit_decision(NS, "r1", "e", _decision())
    await store.lease_decision(NS, "e", "c", "a", T0 + timedelta(seconds=30), T0)
    fence = LeaseFence("e", "c", "", "a", 1)
    order: list[str] = []

    async def take_over() -> None:
        change = await store.lease_decision(
            NS, "e", "c", "b", T0 + timedelta(seconds=200), T0 + timedelta(seconds=31)
        )
        assert change.outcome is DecisionOutcome.APPLIED
        assert change.pending is not None
        assert change.pending.decision is not None
        assert change.pending.decision.attempts == 2
        order.append("taken over")

    async with store.fenced(NS, fence) as holds:
        assert holds
        takeover = asyncio.create_task(take_over())
        await asyncio.sleep(0.3)  # time enough for a takeover that does not wait to finish
        await store.put_checkpoint(NS, "", _checkpoint("e", "written-under-a"))
        order.append("written")
    await takeover
    assert order == ["written", "taken over"]
    async with store.fenced(NS, fence) as holds:
        assert not holds
    async with store.fenced(NS, LeaseFence("e", "c", "", "b", 2)) as holds:
        assert holds


async def test_k4_a_fence_holds_only_a_decided_leased_pause(
    store: SQLiteStore | PostgresStore,
) -> None:
    """No decision, a decision not leased, another token or attempt: the fence does not hold."""
    await _pause(store, "e", "c")
    async with store.fenced(NS, LeaseFence("e", "c", "", "a", 1)) as holds:
        assert not holds  # undecided
    await store.submit_decision(NS, "r1", "e", _decision())
    async with store.fenced(NS, LeaseFence("e", "c", "", "a", 1)) as holds:
        assert not holds  # decided, not leased
    await store.lease_decision(NS, "e", "c", "a", T0 + timedelta(seconds=30), T0)
    for fence, expected in [
        (LeaseFence("e", "c", "", "a", 1), True),
        (LeaseFence("e", "c", "", "a", 2), False),
        (LeaseFence("e", "c", "", "z", 1), False),
        (LeaseFence("e", "other", "", "a", 1), False),
        (LeaseFence("e", "c", "i", "a", 1), False),
    ]:
        async with store.fenced(NS, fence) as holds:
            assert holds is expected, fence
