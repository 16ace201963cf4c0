"""The Python watch iterators over a real server (contract I5, P4), on both backends.

The sync :class:`~checkpointd_client.InterruptWatch` and the asyncio
:class:`~checkpointd_client.AsyncInterruptWatch` see the snapshot, its marker and then live
events; they reconnect by themselves after the server is killed or restarted, delivering every
event exactly once, in outbox order; and they take a new snapshot, flagged as such, when their
cursor has expired.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from checkpointd_client import (
    AsyncCheckpointdClient,
    CheckpointdClient,
    InterruptEvent,
    InterruptWatch,
    InvalidArgumentError,
    OutOfRangeError,
    RetryPolicy,
    SnapshotComplete,
    SnapshotItem,
    UnavailableError,
    WatchItem,
    WatchProgress,
)
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar
from tests.support.store_history import lose_events_from
from tests.support.watch_blackhole_proxy import WatchBlackholeProxy

from .helpers import interrupted

#: Reconnect quickly: a test waits for the server to come back, not for a long backoff.
FAST = RetryPolicy(initial_backoff=0.02, max_backoff=0.2)
#: The bound of every watch here: a broken server fails the test instead of hanging it.
WATCH_TIMEOUT = 60.0


def record(client: CheckpointdClient, execution_id: str, **fields: object) -> None:
    """Record an interrupt for ``execution_id``."""
    cp, pending = interrupted(execution_id, **fields)
    client.record_interrupt(cp, pending)


def events_only(items: list[WatchItem]) -> list[InterruptEvent]:
    """The events among watch items."""
    return [i for i in items if isinstance(i, InterruptEvent)]


def key(event: InterruptEvent) -> tuple[int, str, str]:
    """What identifies an event in the outbox: its cursor, type and execution."""
    return (event.cursor, event.type, event.pending.execution_id)


def next_event(watch: Iterator[WatchItem]) -> InterruptEvent:
    """The next event of a watch, passing over progress."""
    for item in watch:
        if isinstance(item, InterruptEvent):
            return item
        assert isinstance(item, WatchProgress), item
    raise AssertionError("the watch ended")


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Collector:
    """Runs a sync watch in a thread and keeps every item it yields."""

    def __init__(self, watch: InterruptWatch) -> None:
        self.watch = watch
        self.items: list[WatchItem] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for item in self.watch:
                self.items.append(item)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def events(self) -> list[InterruptEvent]:
        return events_only(list(self.items))

    def wait_events(self, count: int) -> list[InterruptEvent]:
        wait_until(lambda: len(self.events()) >= count or self.error is not None, f"{count} events")
        assert self.error is None, self.error
        return self.events()

    def stop(self) -> None:
        self.watch.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "close() did not end the iteration"
        assert self.error is None, self.error


def replay(target: str, after_cursor: int, count: int) -> list[InterruptEvent]:
    """Read ``count`` events after ``after_cursor`` from the outbox with a fresh watch."""
    with CheckpointdClient(target) as client:
        watch = client.watch_interrupts(
            after_cursor=after_cursor, reconnect=False, timeout=WATCH_TIMEOUT
        )
        with watch:
            return [next_event(watch) for _ in range(count)]


def test_i5_p4_sync_watch_sees_snapshot_marker_then_live_events(sidecar: SharedSidecar):
    """The sync iterator yields the pending set newest first, the marker, then each change."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=FAST) as client:
        record(client, "old-1")
        record(client, "old-2")
        record(client, "other", chain_name="elsewhere")
        with client.watch_interrupts(chain_name="flow", timeout=WATCH_TIMEOUT) as watch:
            first = [next(watch), next(watch), next(watch)]
            assert [type(i) for i in first] == [SnapshotItem, SnapshotItem, SnapshotComplete]
            assert [i.pending.execution_id for i in first[:2]] == ["old-2", "old-1"]  # type: ignore[union-attr]
            assert not any(i.resnapshot for i in first)  # type: ignore[union-attr]
            marker = first[2]
            assert isinstance(marker, SnapshotComplete)
            assert watch.cursor == marker.cursor

            record(client, "new-1", interrupt_context={"amount": 2**70})
            record(client, "other-2", chain_name="elsewhere")  # filtered out
            client.claim_interrupt("old-1")
            client.delete_execution("old-2")
            events = [next_event(watch) for _ in range(3)]
            assert [(e.type, e.pending.execution_id) for e in events] == [
                ("added", "new-1"),
                ("claimed", "old-1"),
                ("removed", "old-2"),
            ]
            assert events[0].pending.context == {"amount": 2**70}
            cursors = [marker.cursor, *(e.cursor for e in events)]
            assert cursors == sorted(set(cursors)), "cursors must increase"
            assert watch.cursor == events[-1].cursor
            assert all(e.event_time.tzinfo is not None for e in events)
        assert watch.closed
        assert list(watch) == []


async def test_i5_p4_async_watch_sees_snapshot_marker_then_live_events(
    sidecar: SharedSidecar,
):
    """The async iterator yields the same shape: snapshot, marker, then live events."""
    async with AsyncCheckpointdClient(
        sidecar.target, namespace=sidecar.namespace, retry=FAST
    ) as client:
        cp, pending = interrupted("old-1")
        await client.record_interrupt(cp, pending)
        async with client.watch_interrupts(timeout=WATCH_TIMEOUT) as watch:
            seen: list[WatchItem] = []
            async for item in watch:
                seen.append(item)
                if isinstance(item, SnapshotComplete):
                    cp, pending = interrupted("new-1")
                    await client.record_interrupt(cp, pending)
                    await client.claim_interrupt("new-1")
                if len(events_only(seen)) == 2:
                    break
            assert isinstance(seen[0], SnapshotItem)
            assert seen[0].pending.execution_id == "old-1"
            assert isinstance(seen[1], SnapshotComplete)
            assert [(e.type, e.pending.execution_id) for e in events_only(seen)] == [
                ("added", "new-1"),
                ("claimed", "new-1"),
            ]
            assert watch.cursor == events_only(seen)[-1].cursor


def test_p4_sync_watch_survives_kill_9_with_no_gap_or_duplicate(
    sidecar_factory: Callable[..., Sidecar],
):
    """Killed mid-stream and restarted, the watched server's stream resumes from the cursor:
    the events delivered equal the outbox, in order, while writes went on through a replica."""
    watched, writer_server = sidecar_factory(), sidecar_factory()
    with (
        CheckpointdClient(writer_server.target, retry=FAST) as writer,
        CheckpointdClient(watched.target, retry=FAST) as client,
    ):
        record(writer, "before")
        collector = Collector(client.watch_interrupts(timeout=WATCH_TIMEOUT))
        wait_until(lambda: any(isinstance(i, SnapshotComplete) for i in collector.items), "marker")
        marker = next(i for i in collector.items if isinstance(i, SnapshotComplete))

        expected: list[tuple[str, str]] = []
        for n in range(4):
            record(writer, f"live-{n}")
            expected.append(("added", f"live-{n}"))
        collector.wait_events(4)

        watched.kill()  # the stream breaks mid-flight; the watch keeps retrying
        for n in range(4):
            record(writer, f"gap-{n}")
            expected.append(("added", f"gap-{n}"))
        writer.claim_interrupt("live-0")
        expected.append(("claimed", "live-0"))
        writer.delete_execution("before")
        expected.append(("removed", "before"))
        watched.start()
        record(writer, "after")
        expected.append(("added", "after"))

        delivered = collector.wait_events(len(expected))
        collector.stop()
        assert [(e.type, e.pending.execution_id) for e in delivered] == expected
        outbox = replay(writer_server.target, marker.cursor, len(expected))
        assert [key(e) for e in delivered] == [key(e) for e in outbox]
        assert not any(isinstance(i, SnapshotItem) for i in collector.items[2:])


async def test_p4_async_watch_resumes_after_a_graceful_restart(
    sidecar_factory: Callable[..., Sidecar],
):
    """A server stopped with SIGTERM ends the stream; the async watch reconnects from its
    cursor to the restarted server and misses none of the events a replica wrote meanwhile."""
    watched, writer_server = sidecar_factory(), sidecar_factory()
    async with (
        AsyncCheckpointdClient(watched.target, retry=FAST) as client,
        AsyncCheckpointdClient(writer_server.target, retry=FAST) as writer,
    ):
        seen: list[WatchItem] = []
        live = asyncio.Event()
        first_event = asyncio.Event()

        async def consume() -> None:
            async with client.watch_interrupts(timeout=WATCH_TIMEOUT) as watch:
                async for item in watch:
                    seen.append(item)
                    if isinstance(item, SnapshotComplete):
                        live.set()
                    if isinstance(item, InterruptEvent):
                        first_event.set()
                    if len(events_only(seen)) == 3:
                        return

        task = asyncio.create_task(consume())
        # Write only once the snapshot is complete, so "one" arrives as a live event.
        await asyncio.wait_for(live.wait(), WATCH_TIMEOUT)
        for name in ("one", "two", "three"):
            cp, pending = interrupted(name)
            await writer.record_interrupt(cp, pending)
            if name == "one":
                await asyncio.wait_for(first_event.wait(), WATCH_TIMEOUT)
                await asyncio.to_thread(watched.stop)
            elif name == "two":
                await asyncio.to_thread(watched.start)
        await asyncio.wait_for(task, WATCH_TIMEOUT)
        events = events_only(seen)
        assert [e.pending.execution_id for e in events] == ["one", "two", "three"]
        assert [e.cursor for e in events] == sorted({e.cursor for e in events})
        assert isinstance(seen[0], SnapshotComplete)
        assert not any(isinstance(i, SnapshotItem) for i in seen)


def test_p4_close_from_another_thread_ends_a_blocked_iteration(sidecar: SharedSidecar):
    """close() while next() waits for an event ends the iteration; the client still works."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        collector = Collector(client.watch_interrupts(timeout=WATCH_TIMEOUT))
        wait_until(lambda: bool(collector.items), "the marker")
        collector.stop()
        assert [type(i) for i in collector.items] == [SnapshotComplete]
        assert client.list_pending_interrupts().pending_interrupts == []


async def test_p4_aclose_from_another_task_ends_a_waiting_iteration(sidecar: SharedSidecar):
    """aclose() while __anext__ waits ends the iteration with StopAsyncIteration."""
    async with AsyncCheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        watch = client.watch_interrupts(timeout=WATCH_TIMEOUT)
        assert isinstance(await anext(watch), SnapshotComplete)
        waiting = asyncio.create_task(anext(watch))
        await asyncio.sleep(0.1)
        await watch.aclose()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiting, 10)
        assert (await client.list_pending_interrupts()).pending_interrupts == []


def test_p4_errors_that_are_not_transient_are_raised(sidecar_factory: Callable[..., Sidecar]):
    """A bad namespace is raised at once, not retried; without reconnect a lost server is
    raised as UNAVAILABLE; a negative cursor is refused before anything is sent."""
    sidecar = sidecar_factory()  # a server of its own, to kill
    bad = CheckpointdClient(sidecar.target, namespace="Bad Namespace!", retry=FAST)
    with bad, pytest.raises(InvalidArgumentError):
        next(bad.watch_interrupts(timeout=WATCH_TIMEOUT))
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=FAST) as client:
        with pytest.raises(ValueError, match="after_cursor"):
            client.watch_interrupts(after_cursor=-1)
        watch = client.watch_interrupts(reconnect=False, timeout=WATCH_TIMEOUT)
        assert isinstance(next(watch), SnapshotComplete)
        sidecar.kill()
        with pytest.raises(UnavailableError):
            next(watch)
        assert list(watch) == []


def test_p4_namespaces_are_watched_apart(sidecar: SharedSidecar):
    """A watch sees its own namespace only (N1)."""
    ns = f"{sidecar.namespace}-other"
    with (
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as default,
        CheckpointdClient(sidecar.target, namespace=ns) as other,
    ):
        record(other, "theirs")
        with default.watch_interrupts(timeout=WATCH_TIMEOUT) as watch:
            assert isinstance(next(watch), SnapshotComplete)
            record(other, "theirs-2")
            record(default, "mine")
            assert next_event(watch).pending.execution_id == "mine"


def test_p4_i5_expired_cursor_leads_to_a_flagged_resnapshot(
    sidecar_factory: Callable[..., Sidecar],
):
    """A cursor older than --event-retention is OUT_OF_RANGE; the reconnecting watch answers
    it with a new snapshot whose items and marker say resnapshot, then goes on live."""
    server = sidecar_factory("--event-retention", "1")
    with CheckpointdClient(server.target, retry=FAST) as client:
        record(client, "a")
        with client.watch_interrupts(reconnect=False, timeout=WATCH_TIMEOUT) as first:
            assert isinstance(next(first), SnapshotItem)
            marker = next(first)
            assert isinstance(marker, SnapshotComplete)
        record(client, "b")
        reasons: list[str] = []

        def expired() -> bool:
            probe = client.watch_interrupts(
                after_cursor=marker.cursor, reconnect=False, timeout=WATCH_TIMEOUT
            )
            with probe:
                try:
                    next(probe)
                except OutOfRangeError as exc:
                    reasons.append(exc.reason)
                    return True
                return False

        wait_until(expired, "the events to expire", timeout=WATCH_TIMEOUT)
        assert reasons == ["CURSOR_EXPIRED"]
        with client.watch_interrupts(after_cursor=marker.cursor, timeout=WATCH_TIMEOUT) as watch:
            again = [next(watch), next(watch), next(watch)]
            assert [type(i) for i in again] == [SnapshotItem, SnapshotItem, SnapshotComplete]
            assert [i.pending.execution_id for i in again[:2]] == ["b", "a"]  # type: ignore[union-attr]
            assert all(i.resnapshot for i in again)  # type: ignore[union-attr]
            resnapshot_cursor = watch.cursor
            assert resnapshot_cursor > marker.cursor
            client.claim_interrupt("a")
            claimed = next_event(watch)
            assert (claimed.type, claimed.pending.execution_id) == ("claimed", "a")
            assert claimed.cursor > resnapshot_cursor


def test_p4_i5_a_store_behind_the_cursor_leads_to_a_flagged_resnapshot(sidecar):
    """A cursor above the store's newest event (the store went back in time under the
    watcher: a failover that lost commits, a restored backup) is OUT_OF_RANGE like an expired
    one; the reconnecting watch answers it with a flagged snapshot and goes on live, where it
    used to end for good on INVALID_ARGUMENT."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=FAST) as client:
        record(client, "a")
        with client.watch_interrupts(reconnect=False, timeout=WATCH_TIMEOUT) as first:
            assert isinstance(next(first), SnapshotItem)
            marker = next(first)
            assert isinstance(marker, SnapshotComplete)
        beyond = marker.cursor + 10**9  # a cursor from a longer history of the store
        probe = client.watch_interrupts(after_cursor=beyond, reconnect=False, timeout=WATCH_TIMEOUT)
        with probe, pytest.raises(OutOfRangeError) as refused:
            next(probe)
        assert refused.value.reason == "CURSOR_EXPIRED"
        assert refused.value.metadata["after_cursor"] == str(beyond)
        with client.watch_interrupts(after_cursor=beyond, timeout=WATCH_TIMEOUT) as watch:
            again = [next(watch), next(watch)]
            assert [type(i) for i in again] == [SnapshotItem, SnapshotComplete]
            assert again[0].pending.execution_id == "a"  # type: ignore[union-attr]
            assert all(i.resnapshot for i in again)  # type: ignore[union-attr]
            assert watch.cursor < beyond
            client.claim_interrupt("a")
            claimed = next_event(watch)
            assert (claimed.type, claimed.pending.execution_id) == ("claimed", "a")


def _resnapshot_of(collector: Collector, after: int, execution_ids: set[str]) -> list[WatchItem]:
    """The items after the first ``after`` once a flagged snapshot has completed and every one
    of ``execution_ids`` has been seen pending (in that snapshot or as a later event)."""

    def seen() -> set[str]:
        items = collector.items[after:]
        done = [i for i, item in enumerate(items) if isinstance(item, SnapshotComplete)]
        if not done:
            return set()
        return {
            item.pending.execution_id
            for item in items
            if isinstance(item, SnapshotItem)
            or (isinstance(item, InterruptEvent) and item.type == "added")
        }

    wait_until(
        lambda: execution_ids <= seen() or collector.error is not None,
        f"a fresh snapshot holding {sorted(execution_ids)}",
        timeout=WATCH_TIMEOUT,
    )
    assert collector.error is None, collector.error
    return collector.items[after:]


def test_p4_i5_a_cursor_the_store_reused_leads_to_a_flagged_resnapshot(
    sidecar_factory: Callable[..., Sidecar],
):
    """The store went back in time while the watched server was down (a failover that lost
    "b"'s commit) and has written "c" under b's cursor since. The reconnecting watch sends
    the time of the event it saw there, the server answers CURSOR_EXPIRED, and a flagged
    snapshot holds "c"; resuming after the cursor would have skipped "c" for good."""
    watched, writer_server = sidecar_factory(), sidecar_factory()
    with (
        CheckpointdClient(writer_server.target, retry=FAST) as writer,
        CheckpointdClient(watched.target, retry=FAST) as client,
    ):
        record(writer, "a")
        collector = Collector(client.watch_interrupts(timeout=WATCH_TIMEOUT))
        wait_until(lambda: any(isinstance(i, SnapshotComplete) for i in collector.items), "marker")
        record(writer, "b")
        (b_added,) = collector.wait_events(1)
        watched.stop()
        seen_before = len(collector.items)
        lose_events_from(watched.store, b_added.cursor, ["b"])
        record(writer, "c")  # the store's new event under b's cursor
        assert replay(writer_server.target, b_added.cursor - 1, 1)[0].cursor == b_added.cursor
        watched.start()
        after = _resnapshot_of(collector, seen_before, {"a", "c"})
        collector.stop()
        flagged = [i for i in after if isinstance(i, SnapshotItem | SnapshotComplete)]
        assert flagged
        assert all(i.resnapshot for i in flagged)
        assert "b" not in {i.pending.execution_id for i in flagged if isinstance(i, SnapshotItem)}


def test_p4_i5_live_watches_snapshot_again_when_the_store_went_back_in_time(
    sidecar_factory: Callable[..., Sidecar],
):
    """Under a live watch the store loses "b"'s event and writes "c" under its cursor: the
    server's reader finds its own cursor rewritten and ends the stream with CURSOR_EXPIRED,
    and the watch snapshots again, flagged, where "c" would otherwise never have come."""
    server = sidecar_factory()
    with CheckpointdClient(server.target, retry=FAST) as client:
        record(client, "a")
        collector = Collector(client.watch_interrupts(timeout=WATCH_TIMEOUT))
        wait_until(lambda: any(isinstance(i, SnapshotComplete) for i in collector.items), "marker")
        record(client, "b")
        (b_added,) = collector.wait_events(1)
        seen_before = len(collector.items)
        lose_events_from(server.store, b_added.cursor, ["b"])
        record(client, "c")
        after = _resnapshot_of(collector, seen_before, {"a", "c"})
        collector.stop()
        assert any(isinstance(i, SnapshotComplete) and i.resnapshot for i in after)


#: The progress interval the P6 watches ask for: a silent stream is dead after 3 s.
PROGRESS = 1.0
#: Silence (3 intervals), a reconnect's backoff and a busy machine's delays: the bound on
#: how late an event written after the stream went dark may arrive.
DARK_BOUND = 3 * PROGRESS + 12.0


def test_p6_sync_watch_through_a_black_hole_sees_every_later_event_once(
    sidecar: SharedSidecar,
):
    """A blocking watch whose stream a proxy black-holes (the connection up, no replies)
    takes the silence for a dead stream and reconnects from its cursor: every event written
    after the stream went dark arrives once, in order, within a bounded time."""
    with (
        WatchBlackholeProxy(sidecar.target) as proxy,
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=FAST) as writer,
        CheckpointdClient(proxy.target, namespace=sidecar.namespace, retry=FAST) as client,
    ):
        record(writer, "before")  # a cursor above 0: a reconnect resumes, not re-snapshots
        with client.watch_interrupts(progress_interval=PROGRESS, timeout=WATCH_TIMEOUT) as watch:
            assert isinstance(next(watch), SnapshotItem)
            assert isinstance(next(watch), SnapshotComplete)
            assert proxy.go_dark() == 1
            dark_at = time.monotonic()
            ids = [f"dark-{i}" for i in range(3)]
            for execution_id in ids:
                record(writer, execution_id)
            events = [next_event(watch) for _ in ids]
            assert time.monotonic() - dark_at < DARK_BOUND
        assert [(e.type, e.pending.execution_id) for e in events] == [("added", i) for i in ids]
        assert [e.cursor for e in events] == sorted({e.cursor for e in events})
        assert proxy.streams_opened == 2  # one reconnect, not a reconnect per progress


async def test_p6_async_watch_through_a_black_hole_sees_every_later_event_once(
    sidecar: SharedSidecar,
):
    """The asyncio watch does the same: silence for three progress intervals is a dead
    stream, and the reconnect from its cursor delivers each later event once, in order."""
    with WatchBlackholeProxy(sidecar.target) as proxy:
        async with (
            AsyncCheckpointdClient(
                sidecar.target, namespace=sidecar.namespace, retry=FAST
            ) as writer,
            AsyncCheckpointdClient(proxy.target, namespace=sidecar.namespace, retry=FAST) as client,
        ):
            cp, pending = interrupted("before")  # a cursor above 0: a reconnect resumes
            await writer.record_interrupt(cp, pending)
            watch = client.watch_interrupts(progress_interval=PROGRESS, timeout=WATCH_TIMEOUT)
            async with watch:
                assert isinstance(await anext(watch), SnapshotItem)
                assert isinstance(await anext(watch), SnapshotComplete)
                assert proxy.go_dark() == 1
                dark_at = time.monotonic()
                ids = [f"dark-{i}" for i in range(3)]
                for execution_id in ids:
                    cp, pending = interrupted(execution_id)
                    await writer.record_interrupt(cp, pending)
                events: list[InterruptEvent] = []
                async for item in watch:
                    if isinstance(item, InterruptEvent):
                        events.append(item)
                        if len(events) == len(ids):
                            break
                    else:
                        assert isinstance(item, WatchProgress), item
                assert time.monotonic() - dark_at < DARK_BOUND
        assert [(e.type, e.pending.execution_id) for e in events] == [("added", i) for i in ids]
        assert [e.cursor for e in events] == sorted({e.cursor for e in events})
        assert proxy.streams_opened == 2
