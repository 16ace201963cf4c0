"""G12 and G13 at the store level, on both backends, with the store's clock in the test's
hands: idle threads go whole, crowded checkpoint_ns keep their newest K with every value and
write those need, in batch-size steps; paused threads stay; a dry run counts what a run
deletes and changes nothing; a request id answers a retry from memory."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from checkpointd.app import build_graph_store
from checkpointd.graph.interrupts import GraphInterrupt
from checkpointd.graph.records import (
    ChannelValue,
    GraphCheckpoint,
    GraphListQuery,
    GraphTuple,
    GraphWrite,
    TypedValue,
)
from checkpointd.graph.retention import RetentionCounts, RetentionRule
from checkpointd.graph.store import GraphStore
from checkpointd.store.base import RequestIdReused
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.records import NS, T0

DAY = timedelta(days=1)
ALL = GraphListQuery("", None, "", "", "")


def _json(text: str) -> TypedValue:
    return TypedValue("json", text.encode())


async def _thread(
    graph: GraphStore, thread: str, count: int, *, at: timedelta = timedelta(0), ns: str = ""
) -> list[str]:
    """``count`` checkpoints: channel "a" changes at each one, "b" only at the first (so
    every later checkpoint reads b's value written by the first), each with a write."""
    ids = [f"c{i:03d}" for i in range(count)]
    parent = ""
    for i, checkpoint_id in enumerate(ids):
        versions = {"a": f"{i:03d}", "b": "000"}
        values = [ChannelValue("a", versions["a"], _json(f'"a{i}"'))]
        if i == 0:
            values.append(ChannelValue("b", "000", _json('"b"')))
        checkpoint = GraphCheckpoint(thread, ns, checkpoint_id, parent, _json("{}"), "{}", versions)
        await graph.put_checkpoint(NS, "", checkpoint, values, T0 + at)
        write = GraphWrite("task", "path", 0, "a", _json(f'"w{i}"'))
        await graph.put_writes(NS, "", thread, ns, checkpoint_id, [write], T0 + at)
        parent = checkpoint_id
    return ids


async def _pause(graph: GraphStore, thread: str, checkpoint_id: str) -> None:
    """What LangGraph writes when a node calls interrupt(): an __interrupt__ write."""
    write = GraphWrite("task", "path", -3, "__interrupt__", _json('[{"value": "ok?"}]'))
    await graph.put_writes(NS, "", thread, "", checkpoint_id, [write], T0)


async def _everything(graph: GraphStore) -> list[GraphTuple]:
    """Every tuple of the namespace, each read back whole by get."""
    page = await graph.list_tuples(NS, ALL, after=None, limit=1000)
    found = []
    for listed in page.tuples:
        cp = listed.checkpoint
        got = await graph.get_tuple(NS, cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id)
        assert got is not None
        found.append(got)
    return found


@pytest.fixture
def graph(store: SQLiteStore | PostgresStore) -> GraphStore:
    return build_graph_store(store)


async def test_g12_idle_threads_go_whole_and_active_ones_stay(graph: GraphStore) -> None:
    """A thread whose newest checkpoint is older than idle_for goes in every checkpoint_ns,
    values and writes too; one written since stays; several idle threads share batches."""
    for name in ("old-1", "old-2", "old-3"):
        await _thread(graph, name, 3)
        await _thread(graph, name, 2, ns="sub:1")
    await _thread(graph, "active", 2)
    await _thread(graph, "active", 1, at=9 * DAY)  # rewrites its first checkpoint later
    rule = RetentionRule(idle_for=7 * DAY)
    counts = await graph.apply_retention(NS, "", rule, T0 + 10 * DAY, batch_size=4)
    assert counts == RetentionCounts(
        threads_deleted=3, checkpoints_deleted=15, writes_deleted=15, channel_values_deleted=21
    )
    assert {t.checkpoint.thread_id for t in await _everything(graph)} == {"active"}


async def test_g12_keep_newest_keeps_every_value_and_write_the_kept_need(
    graph: GraphStore,
) -> None:
    """Of 10 checkpoints 3 stay, read back exactly as before (b's value, written by the
    first checkpoint, included); the cut goes in steps of the batch size."""
    await _thread(graph, "t", 10)
    await _thread(graph, "t", 2, ns="sub:1")
    before = {
        t.checkpoint.checkpoint_id: t
        for t in await _everything(graph)
        if not t.checkpoint.checkpoint_ns
    }
    counts = await graph.apply_retention(
        NS, "", RetentionRule(keep_newest=3), T0 + DAY, batch_size=2
    )
    assert counts == RetentionCounts(
        checkpoints_deleted=7, writes_deleted=7, channel_values_deleted=7
    )
    after = await _everything(graph)
    root = {t.checkpoint.checkpoint_id: t for t in after if not t.checkpoint.checkpoint_ns}
    assert sorted(root) == ["c007", "c008", "c009"]
    for checkpoint_id, found in root.items():
        kept = before[checkpoint_id]
        assert found.channel_values == kept.channel_values
        assert {v.channel for v in found.channel_values} == {"a", "b"}
        assert found.pending_writes == kept.pending_writes
    assert root["c007"].checkpoint.parent_checkpoint_id == ""  # its parent went
    assert root["c008"].checkpoint.parent_checkpoint_id == "c007"
    assert len([t for t in after if t.checkpoint.checkpoint_ns]) == 2  # within K


async def test_g13_a_paused_thread_is_never_cut(graph: GraphStore) -> None:
    """An __interrupt__ write on the newest root checkpoint keeps the thread whole under
    both rules; once a newer checkpoint follows it, the thread is cut again."""
    ids = await _thread(graph, "p", 5)
    await _pause(graph, "p", ids[-1])
    rule = RetentionRule(idle_for=DAY, keep_newest=1)
    counts = await graph.apply_retention(NS, "", rule, T0 + 3 * DAY, batch_size=100)
    assert counts == RetentionCounts(paused_threads_kept=1)
    assert len(await _everything(graph)) == 5
    # An interrupt on an older checkpoint (answered: a checkpoint followed) pauses nothing.
    await _thread(graph, "q", 3)
    await _pause(graph, "q", "c000")
    counts = await graph.apply_retention(
        NS, "", RetentionRule(keep_newest=1), T0 + DAY, batch_size=100
    )
    assert counts.paused_threads_kept == 1
    assert counts.checkpoints_deleted == 2


async def test_g12_a_dry_run_counts_what_a_run_deletes_and_changes_nothing(
    graph: GraphStore,
) -> None:
    await _thread(graph, "idle", 4)
    await _thread(graph, "busy", 6, at=5 * DAY)
    await _thread(graph, "paused", 2)
    await _pause(graph, "paused", "c001")
    rule = RetentionRule(idle_for=2 * DAY, keep_newest=2)
    before = await _everything(graph)
    now = T0 + 6 * DAY
    dry = await graph.apply_retention(NS, "d1", rule, now, batch_size=3, dry_run=True)
    assert await _everything(graph) == before
    real = await graph.apply_retention(NS, "d1", rule, now, batch_size=3)
    assert (
        dry
        == real
        == RetentionCounts(
            threads_deleted=1,
            checkpoints_deleted=8,
            writes_deleted=8,
            channel_values_deleted=9,
            paused_threads_kept=1,
        )
    )


async def test_g12_a_retry_is_answered_from_memory(graph: GraphStore) -> None:
    """The same request id and fingerprint: the first counts, nothing deleted again; the id
    with another fingerprint: RequestIdReused, nothing deleted."""
    await _thread(graph, "t", 4)
    rule = RetentionRule(keep_newest=1)
    first = await graph.apply_retention(NS, "r1", rule, T0, batch_size=10, fingerprint="A:1")
    await _thread(graph, "u", 4)
    again = await graph.apply_retention(NS, "r1", rule, T0, batch_size=10, fingerprint="A:1")
    assert again == first
    with pytest.raises(RequestIdReused):
        await graph.apply_retention(NS, "r1", rule, T0, batch_size=10, fingerprint="A:2")
    assert len([t for t in await _everything(graph) if t.checkpoint.thread_id == "u"]) == 4


async def test_g12_keep_leaves_a_delta_channel_thread_whole(graph: GraphStore) -> None:
    checkpoint = GraphCheckpoint(
        "d", "", "c9", "", _json("{}"), '{"counters_since_delta_snapshot": {}}', {}
    )
    await _thread(graph, "d", 3)
    await graph.put_checkpoint(NS, "", checkpoint, [], T0)
    counts = await graph.apply_retention(NS, "", RetentionRule(keep_newest=1), T0, batch_size=10)
    assert counts == RetentionCounts(delta_threads_kept=1)
    assert await graph.retention_namespaces() == [NS]


async def test_g12_sqlite_checkpoints_from_before_the_upgrade_count_as_written_then(
    tmp_path: Path,
) -> None:
    """Schema version 10 adds written_at without rewriting rows (0 for the older ones): such
    a thread is idle only once the idle time has passed since the upgrade."""
    store = SQLiteStore(tmp_path / "upgrade.db")
    await store.open()
    try:
        graph = build_graph_store(store)
        await _thread(graph, "legacy", 2)
        with sqlite3.connect(tmp_path / "upgrade.db") as raw:
            raw.execute("UPDATE graph_checkpoints SET written_at = 0")
        upgraded = datetime.now(tz=UTC)
        rule = RetentionRule(idle_for=7 * DAY)
        early = await graph.apply_retention(NS, "", rule, upgraded + 6 * DAY, batch_size=10)
        assert early == RetentionCounts()
        late = await graph.apply_retention(NS, "", rule, upgraded + 8 * DAY, batch_size=10)
        assert late.threads_deleted == 1
    finally:
        await store.close()


async def test_g12_an_idle_thread_goes_with_its_graph_pauses(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A pause left in a subgraph's checkpoint_ns (the parent went on without resuming it)
    does not pause the thread; when the idle rule deletes the thread its pending row goes
    too, as DeleteGraphThread's does (G10)."""
    graph = build_graph_store(store)
    await _thread(graph, "t", 2)
    await _thread(graph, "t", 1, ns="sub:1")
    interrupt = GraphInterrupt("i-1", "g", "ask", "interrupt", '{"q": "ok?"}')
    write = GraphWrite("task", "sub:1|ask", -3, "__interrupt__", _json("[]"))
    await graph.put_writes(
        NS, "", "t", "sub:1", "c000", [write], T0, task_id="task", interrupts=[interrupt]
    )
    assert await store.count_pending_by_namespace() == {NS: 1}
    counts = await graph.apply_retention(
        NS, "", RetentionRule(idle_for=DAY), T0 + 2 * DAY, batch_size=10
    )
    assert (counts.threads_deleted, counts.paused_threads_kept) == (1, 0)
    assert await store.count_pending_by_namespace() == {}
