"""Contract I5: the WatchInterrupts stream, on both backends, through real server processes.

The stream is read with the raw generated stub, one background thread per stream, so each
test sees exactly what a client in any language would receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import queue
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient, UnavailableError
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import interrupted
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar, StoreSpec
from tests.support.tcp_proxy import TcpProxy

KINDS = {
    svc.INTERRUPT_EVENT_TYPE_ADDED: "added",
    svc.INTERRUPT_EVENT_TYPE_CLAIMED: "claimed",
    svc.INTERRUPT_EVENT_TYPE_REMOVED: "removed",
}
#: Longest wait for one expected message; reached only when a test is failing.
PATIENCE = 30.0


class Stream:
    """One WatchInterrupts call; unless ``stalled``, a thread reads it into a queue."""

    def __init__(
        self,
        target: str,
        *,
        stalled: bool = False,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float | None = None,
        **request: Any,
    ) -> None:
        self.channel = grpc.insecure_channel(target, options=list(options))
        stub = svc_grpc.InterruptServiceStub(self.channel)
        self.call = stub.WatchInterrupts(svc.WatchInterruptsRequest(**request), timeout=timeout)
        self._items: queue.Queue[svc.WatchInterruptsResponse | grpc.RpcError | None] = queue.Queue()
        self.error: grpc.RpcError | None = None
        if not stalled:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self._items.put(message)
        except grpc.RpcError as exc:
            self._items.put(exc)
        else:
            self._items.put(None)

    def next(self, patience: float = PATIENCE) -> svc.WatchInterruptsResponse:
        """The next message; fails the test when the stream ends or stays silent."""
        try:
            item = self._items.get(timeout=patience)
        except queue.Empty:
            raise AssertionError(f"no watch message within {patience} s") from None
        if not isinstance(item, svc.WatchInterruptsResponse):
            self.error = item
            raise AssertionError(f"the stream ended: {_describe(item)}")
        return item

    def snapshot(self) -> tuple[list[pb.PendingInterrupt], int]:
        """Read the snapshot part: its rows and the cursor of its completion marker."""
        rows: list[pb.PendingInterrupt] = []
        while True:
            message = self.next()
            if message.HasField("snapshot_complete"):
                return rows, message.snapshot_complete.cursor
            assert message.HasField("snapshot"), message
            rows.append(message.snapshot)

    def events_until(self, done: Callable[[svc.InterruptEvent], bool]) -> list[svc.InterruptEvent]:
        """Read events (skipping progress) until ``done`` holds for one; return them all."""
        events = []
        while True:
            message = self.next()
            if message.HasField("progress"):
                continue
            assert message.HasField("event"), message
            events.append(message.event)
            if done(message.event):
                return events

    def ending(self, patience: float = PATIENCE) -> grpc.RpcError:
        """Skip messages until the stream ends with an error; return the error."""
        deadline = time.monotonic() + patience
        while True:
            try:
                item = self._items.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"the stream did not end within {patience} s") from None
            if isinstance(item, grpc.RpcError):
                self.error = item
                return item
            assert item is not None, "the stream ended with OK"

    def close(self) -> None:
        """Cancel the call and close the channel."""
        self.call.cancel()
        self.channel.close()


@contextlib.contextmanager
def watching(target: str, **kwargs: Any) -> Iterator[Stream]:
    """A Stream closed when the block ends."""
    stream = Stream(target, **kwargs)
    try:
        yield stream
    finally:
        stream.close()


def _describe(error: object) -> str:
    if isinstance(error, grpc.Call):
        return f"{error.code()} {error.details()}"
    return repr(error)


def _reason(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of a failed call."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no status details: {_describe(error)}"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return str(info.reason)


def _record(client: CheckpointdClient, execution_id: str | None = None, **fields: Any) -> str:
    execution_id = execution_id or f"exec-{uuid.uuid4().hex[:12]}"
    cp, pending = interrupted(execution_id, **fields)
    client.record_interrupt(cp, pending)
    return execution_id


def _outbox(
    spec: StoreSpec, after: int, namespace: str | None = None
) -> list[tuple[int, str, str]]:
    """(cursor, kind, execution_id) of every event after ``after`` (in ``namespace`` if given),
    read from the store."""
    sql = "SELECT cursor, kind, execution_id FROM {t} WHERE cursor > {p}"
    sql += " AND namespace = {n}" if namespace is not None else ""
    sql += " ORDER BY cursor"
    args: tuple[object, ...] = (after,) if namespace is None else (after, namespace)
    if spec.backend == "sqlite":
        path = spec.url.removeprefix("sqlite://")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            rows = conn.execute(sql.format(t="interrupt_events", p="?", n="?"), args).fetchall()
        return [(int(c), str(k), str(e)) for c, k, e in rows]

    import asyncpg

    async def fetch() -> list[tuple[int, str, str]]:
        conn = await asyncpg.connect(spec.url)
        try:
            table = f'"{spec.pg_schema}".interrupt_events'
            records = await conn.fetch(sql.format(t=table, p="$1", n="$2"), *args)
        finally:
            await conn.close()
        return [(r["cursor"], r["kind"], r["execution_id"]) for r in records]

    return asyncio.run(fetch())


def _seen(events: Sequence[svc.InterruptEvent]) -> list[tuple[int, str, str]]:
    return [(e.cursor, KINDS[e.type], e.pending.execution_id) for e in events]


# --- snapshot and live ---------------------------------------------------------------------


def test_i5_snapshot_then_live_events_without_gap_or_duplicate(sidecar: SharedSidecar) -> None:
    """Interrupts recorded and claimed by four threads while a watcher connects are each seen
    exactly once, in the snapshot or as a live event, and the pending set the watcher
    rebuilds equals the store's."""
    writers, per_writer = 4, 30
    recorded: list[str] = []
    started = threading.Event()
    failures: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            with CheckpointdClient(
                sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
            ) as c:
                for i in range(per_writer):
                    execution_id = _record(c, f"w{worker}-{i}")
                    recorded.append(execution_id)
                    if i % 3 == 2:
                        c.claim_interrupt(f"w{worker}-{i - 1}")
                    if i == 5:
                        started.set()
        except BaseException as exc:
            failures.append(exc)
            started.set()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    assert started.wait(PATIENCE)
    with watching(sidecar.target, namespace=sidecar.namespace) as stream:
        rows, snapshot_cursor = stream.snapshot()
        for thread in threads:
            thread.join()
        assert not failures, failures
        with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as c:
            sentinel = _record(c, "sentinel")
            events = stream.events_until(lambda e: e.pending.execution_id == sentinel)
            page = c.list_pending_interrupts(page_size=1000)
            pending_now = {p.execution_id for p in page.pending_interrupts}

    assert len(recorded) == writers * per_writer
    assert len({r.execution_id for r in rows}) == len(rows), "a snapshot row came twice"
    cursors = [e.cursor for e in events]
    assert cursors == sorted(set(cursors)), "events out of order or repeated"
    assert all(c > snapshot_cursor for c in cursors)
    added = [e.pending.execution_id for e in events if e.type == svc.INTERRUPT_EVENT_TYPE_ADDED]
    seen = Counter([r.execution_id for r in rows] + added)
    # Each recorded interrupt is seen once: in the snapshot, or added live, never both.
    # (Claimed before the watcher connected and so in neither is fine; no interrupt was
    # both claimed before the snapshot and added after it.)
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1]
    rebuilt = {r.execution_id for r in rows}
    for event in events:
        if event.type == svc.INTERRUPT_EVENT_TYPE_ADDED:
            rebuilt.add(event.pending.execution_id)
        else:
            rebuilt.discard(event.pending.execution_id)
    assert rebuilt == pending_now
    assert _seen(events) == [
        e for e in _outbox(sidecar.store, snapshot_cursor, sidecar.namespace) if e[0] <= cursors[-1]
    ]


def test_i5_events_written_through_one_server_reach_watchers_on_another(
    sidecar_factory: Callable[..., Sidecar],
) -> None:
    """A watcher on server A sees interrupts recorded, claimed and deleted through server B,
    with their pending rows."""
    server_a, server_b = sidecar_factory(), sidecar_factory()
    with (
        watching(server_a.target) as stream,
        CheckpointdClient(server_b.target, retry=NO_RETRY) as via_b,
    ):
        assert stream.snapshot() == ([], 0)
        ids = [_record(via_b, agent_path=f"team/{n}") for n in range(3)]
        via_b.claim_interrupt(ids[0])
        via_b.delete_execution(ids[1])
        events = stream.events_until(lambda e: e.type == svc.INTERRUPT_EVENT_TYPE_REMOVED)
    assert [(KINDS[e.type], e.pending.execution_id) for e in events] == [
        ("added", ids[0]),
        ("added", ids[1]),
        ("added", ids[2]),
        ("claimed", ids[0]),
        ("removed", ids[1]),
    ]
    assert [e.pending.agent_path for e in events[:3]] == ["team/0", "team/1", "team/2"]
    assert json.loads(events[0].pending.context_json) == {"amount": 500}
    assert all(e.event_time.seconds > 0 for e in events)


def test_i5_watchers_opened_on_an_idle_server_get_another_servers_events(
    sidecar_factory: Callable[..., Sidecar],
) -> None:
    """A server with no watcher follows nobody's commits (its reader only moves its cursor
    on); a watcher opened on it still gets what another server recorded before (in its
    snapshot) and after (live), and so does a watcher resuming after the server went idle
    again."""
    server_a, server_b = sidecar_factory(), sidecar_factory()
    with CheckpointdClient(server_b.target, retry=NO_RETRY) as via_b:
        before = _record(via_b)
        with watching(server_a.target) as stream:
            rows, _ = stream.snapshot()
            assert [row.execution_id for row in rows] == [before]
            live = _record(via_b)
            (added,) = stream.events_until(lambda e: e.pending.execution_id == live)
        assert KINDS[added.type] == "added"
        while_idle = _record(via_b)  # no watcher on A now
        with watching(server_a.target, after_cursor=added.cursor) as resumed:
            later = _record(via_b)
            events = resumed.events_until(lambda e: e.pending.execution_id == later)
    assert [(KINDS[e.type], e.pending.execution_id) for e in events] == [
        ("added", while_idle),
        ("added", later),
    ]


def test_i5_resume_after_server_kill_delivers_the_outbox_exactly_once(
    sidecar_factory: Callable[..., Sidecar], store_spec: StoreSpec
) -> None:
    """A watcher whose server is killed mid-stream resumes from its last cursor on the
    restarted server; the events it saw, in order, are exactly the outbox."""
    watched, writer = sidecar_factory(), sidecar_factory()
    total = 60
    done_writing = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with CheckpointdClient(writer.target, retry=NO_RETRY) as c:
                for i in range(total):
                    _record(c, f"run-{i}")
                    if i % 4 == 3:
                        c.claim_interrupt(f"run-{i - 2}")
                    time.sleep(0.01)
        except BaseException as exc:
            failures.append(exc)
        finally:
            done_writing.set()

    stream = Stream(watched.target)
    try:
        _, start = stream.snapshot()
        thread = threading.Thread(target=write)
        thread.start()
        seen = stream.events_until(lambda e: e.cursor >= start + 10)
        watched.kill()
        assert stream.ending().code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stream.close()
    watched.start()
    done_writing.wait(PATIENCE)
    thread.join()
    assert not failures, failures
    last = _outbox(store_spec, start)[-1][0]
    with watching(watched.target, after_cursor=seen[-1].cursor) as resumed:
        seen += resumed.events_until(lambda e: e.cursor >= last)
    outbox = _outbox(store_spec, start)
    assert len(outbox) == total + total // 4
    assert _seen(seen) == outbox


# --- slow watchers -------------------------------------------------------------------------


def test_i5_stalled_watcher_never_blocks_writers_and_ends_too_slow(
    sidecar_factory: Callable[..., Sidecar],
) -> None:
    """A watcher that stops reading does not hold up writes or another watcher; its stream
    ends RESOURCE_EXHAUSTED (WATCHER_TOO_SLOW) and a resume from its last cursor gets every
    later event."""
    server = sidecar_factory("--watch-buffer", "16")
    big = "x" * 32_768  # fills the transport's buffers with few events
    total = 250
    stalled = Stream(
        server.target,
        stalled=True,
        timeout=60,
        options=[("grpc.http2.bdp_probe", 0)],
        progress_interval=Duration(seconds=1),
    )
    try:
        first = next(stalled.call)
        assert first.HasField("snapshot_complete")
        # A progress before any write: the stream is live, handed each event as it is
        # written. (Writes that came while it still caught up from the store would be read
        # at its own pace, a page at a time: never too slow, so never ended.)
        assert next(stalled.call).HasField("progress")
        with (
            watching(server.target) as healthy,
            CheckpointdClient(server.target, retry=NO_RETRY) as c,
        ):
            healthy.snapshot()
            ids = [
                _record(c, f"slow-{i}", interrupt_context={"blob": big, "i": i})
                for i in range(total)
            ]  # every write completes although the stalled watcher reads nothing
            events = healthy.events_until(lambda e: e.pending.execution_id == ids[-1])
            assert [e.pending.execution_id for e in events] == ids
        got: list[svc.InterruptEvent] = []

        def drain() -> None:
            for message in stalled.call:
                got.append(message.event)

        with pytest.raises(grpc.RpcError) as ended:
            drain()
    finally:
        stalled.close()
    assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, _describe(ended.value)
    assert _reason(ended.value) == "WATCHER_TOO_SLOW"
    assert len(got) < total
    assert [e.pending.execution_id for e in got] == ids[: len(got)]
    after = got[-1].cursor if got else first.snapshot_complete.cursor
    with watching(server.target, after_cursor=after) as resumed:
        rest = resumed.events_until(lambda e: e.pending.execution_id == ids[-1])
    assert [e.pending.execution_id for e in got + rest] == ids


# --- retention -----------------------------------------------------------------------------


def test_i5_cursor_older_than_retention_is_out_of_range_and_resnapshot_is_complete(
    sidecar_factory: Callable[..., Sidecar],
) -> None:
    """After the retention time a resume from an old cursor gets OUT_OF_RANGE
    (CURSOR_EXPIRED); a new snapshot then holds every pending interrupt and live events
    follow it."""
    server = sidecar_factory("--event-retention", "1")
    with CheckpointdClient(server.target, retry=NO_RETRY) as c:
        first = _record(c)
        with watching(server.target) as stream:
            rows, cursor = stream.snapshot()
        assert [r.execution_id for r in rows] == [first]
        later = [_record(c) for _ in range(2)]
        deadline = time.monotonic() + PATIENCE
        while True:
            probe = Stream(server.target, after_cursor=cursor, timeout=0.5)
            error = probe.ending()
            probe.close()
            if error.code() == grpc.StatusCode.OUT_OF_RANGE:
                break
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, _describe(error)
            assert time.monotonic() < deadline, "events were never purged"
            time.sleep(0.2)
        assert _reason(error) == "CURSOR_EXPIRED"
        assert "without after_cursor" in (error.details() or "")
        with watching(server.target) as again:
            rows, new_cursor = again.snapshot()
            assert {r.execution_id for r in rows} == {first, *later}
            assert new_cursor >= cursor + 2
            live = _record(c)
            [event] = again.events_until(lambda e: True)
        assert (event.pending.execution_id, event.cursor) == (live, new_cursor + 1)


# --- shutdown ------------------------------------------------------------------------------


@pytest.mark.own_server  # stops its server
def test_i5_sigterm_ends_an_open_stream_with_unavailable_shutting_down(sidecar: Sidecar) -> None:
    """SIGTERM ends an open watch at once with UNAVAILABLE (SHUTTING_DOWN), and the server
    exits cleanly."""
    with watching(sidecar.target) as stream:
        stream.snapshot()
        assert sidecar.stop() == 0
        error = stream.ending()
    assert error.code() == grpc.StatusCode.UNAVAILABLE, _describe(error)
    assert _reason(error) == "SHUTTING_DOWN"


@pytest.mark.own_server  # leaves its server a connection frozen half-open
def test_i5_keepalive_ends_a_stream_whose_server_vanished_without_closing(
    sidecar: Sidecar,
) -> None:
    """A watch whose server stops answering without closing the connection (a proxy in
    between freezes: nothing forwarded, nothing closed) is not left hanging: the keepalive
    pings go unanswered and the stream ends UNAVAILABLE, while the server and the store are
    fine. The server answers the pings at this rate while the link works (no GOAWAY)."""
    host, port = sidecar.tcp_target.rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    # Ping every 0.3 s and give up on a ping after 1 s (gRPC bounds the wait for a ping's
    # answer with grpc.http2.ping_timeout_ms, default one minute); keep pinging between data
    # frames (gRPC sends only two pings without data by default), as the Python client does.
    keepalive = [
        ("grpc.keepalive_time_ms", 300),
        ("grpc.keepalive_timeout_ms", 1000),
        ("grpc.http2.ping_timeout_ms", 1000),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    try:
        with watching(f"127.0.0.1:{proxy.port}", options=keepalive) as stream:
            stream.snapshot()
            with CheckpointdClient(
                sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
            ) as c:
                live = _record(c)
                [event] = stream.events_until(lambda e: True)  # pings flowed meanwhile
                assert event.pending.execution_id == live
                proxy.freeze()
                error = stream.ending()
                assert error.code() == grpc.StatusCode.UNAVAILABLE, _describe(error)
                assert sidecar.process is not None
                assert sidecar.process.poll() is None
                assert c.list_pending_interrupts().pending_interrupts  # the server is fine
    finally:
        proxy.close()


class _StoreOutage:
    """Takes the store away from a running server, reads included.

    Postgres: the server reaches the database through a TCP proxy that cuts every connection.
    SQLite: another process (this one) holds every lock of the WAL index (the ``-shm`` file's
    lock bytes), so no connection of the server can start even a read: SQLite answers BUSY
    and then SQLITE_PROTOCOL, and the server's store timeout ends each call first. This is
    what a stuck process sharing the file does to it.
    """

    #: The WAL index's locks: 8 bytes at offset 120 of the -shm file (sqlite.org/walformat).
    SHM_LOCKS = (120, 8)

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self._proxy: TcpProxy | None = None
        self._shm: int | None = None
        self.server_spec = spec
        if spec.backend == "postgres":
            url = urlsplit(spec.url)
            self._proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
            netloc = f"{url.username or 'postgres'}@127.0.0.1:{self._proxy.port}"
            self.server_spec = replace(spec, url=urlunsplit(url._replace(netloc=netloc)))
        elif spec.backend == "pgbouncer":
            # The proxy sits between the server and PgBouncer: the store URL the server uses.
            url = urlsplit(spec.server_url)
            self._proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 6432)
            netloc = f"{url.username or 'postgres'}@127.0.0.1:{self._proxy.port}"
            self.server_spec = replace(spec, server_url=urlunsplit(url._replace(netloc=netloc)))

    def begin(self) -> None:
        if self._proxy is not None:
            self._proxy.cut()
            return
        shm = os.open(self.spec.url.removeprefix("sqlite://") + "-shm", os.O_RDWR)
        length, start = self.SHM_LOCKS[1], self.SHM_LOCKS[0]
        deadline = time.monotonic() + PATIENCE
        while True:  # the server holds some of them for a moment at a time
            try:
                fcntl.lockf(shm, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
                break
            except OSError:
                assert time.monotonic() < deadline, "never got the WAL index's locks"
                time.sleep(0.001)
        self._shm = shm

    def end(self) -> None:
        if self._proxy is not None:
            self._proxy.restore()
        if self._shm is not None:
            os.close(self._shm)  # drops its locks
            self._shm = None

    def close(self) -> None:
        self.end()
        if self._proxy is not None:
            self._proxy.close()


def test_i5_store_outage_ends_streams_unavailable_and_watching_resumes_after_it(
    store_spec: StoreSpec,
) -> None:
    """When the database goes away, open streams end UNAVAILABLE (STORE_UNAVAILABLE) instead
    of hanging; once it is back, a watch resumed from the last cursor gets later events."""
    outage = _StoreOutage(store_spec)
    server = Sidecar(outage.server_spec, extra_args=["--store-timeout", "1"]).start()
    try:
        with CheckpointdClient(server.target, retry=NO_RETRY) as c:
            before = _record(c)
            with watching(server.target) as stream:
                rows, cursor = stream.snapshot()
                assert [r.execution_id for r in rows] == [before]
                outage.begin()
                error = stream.ending()
            assert error.code() == grpc.StatusCode.UNAVAILABLE, _describe(error)
            assert _reason(error) == "STORE_UNAVAILABLE"
            outage.end()
            deadline = time.monotonic() + PATIENCE
            while True:  # the first calls after the outage may still meet broken connections
                try:
                    after = _record(c)
                    break
                except UnavailableError:
                    assert time.monotonic() < deadline, "the store never came back"
                    time.sleep(0.2)
            with watching(server.target, after_cursor=cursor) as resumed:
                [event] = resumed.events_until(lambda e: True)
            assert (KINDS[event.type], event.pending.execution_id) == ("added", after)
    finally:
        server.close()
        outage.close()


# --- filters and arguments -----------------------------------------------------------------


def test_i5_filters_apply_to_snapshot_and_events_and_progress_is_sent(
    sidecar: SharedSidecar,
) -> None:
    """Filters select snapshot rows and events alike; while nothing matches, progress
    messages carry the cursor read so far; other namespaces are never seen."""
    target, namespace = sidecar.target, sidecar.namespace
    with (
        CheckpointdClient(target, retry=NO_RETRY, namespace=namespace) as c,
        CheckpointdClient(target, retry=NO_RETRY, namespace=f"{namespace}-other") as other,
    ):
        match = _record(c, chain_name="pay", interrupt_reason="approve", agent_path="ops/eu/1")
        _record(c, chain_name="ship", interrupt_reason="approve", agent_path="ops/eu/2")
        _record(c, chain_name="pay", interrupt_reason="review", agent_path="ops/eu/3")
        _record(c, chain_name="pay", interrupt_reason="approve", agent_path="ops/us/4")
        _record(c, chain_name="pay", interrupt_reason="approve")  # no agent_path
        _record(other, chain_name="pay", interrupt_reason="approve", agent_path="ops/eu/5")
        filters = {"chain_name": "pay", "reason": "approve", "agent_path_prefix": "ops/eu"}
        fast = Duration(seconds=1)  # progress within a second of silence (I6)
        with (
            watching(target, namespace=namespace, progress_interval=fast, **filters) as stream,
            watching(target, namespace=namespace, reason="review") as by_reason,
        ):
            rows, cursor = stream.snapshot()
            assert [r.execution_id for r in rows] == [match]
            assert len(by_reason.snapshot()[0]) == 1
            skipped = _record(c, chain_name="ship", agent_path="ops/eu/6")
            _record(other, chain_name="pay", interrupt_reason="approve", agent_path="ops/eu/7")
            c.claim_interrupt(skipped)
            message = stream.next()
            assert message.HasField("progress"), message
            assert message.progress.cursor >= cursor + 2
            # The progress names the time of the event at its own cursor, not of the last one
            # sent: a watch resumed from it goes on, where a wrong time reads as a store gone
            # back in time (CURSOR_EXPIRED, a needless new snapshot).
            progress = message.progress
            with watching(
                target,
                namespace=namespace,
                after_cursor=progress.cursor,
                after_cursor_event_time=progress.event_time,
                progress_interval=fast,
                **filters,
            ) as resumed:
                assert resumed.next().HasField("progress")
            wanted = _record(c, chain_name="pay", interrupt_reason="approve", agent_path="ops/eu")
            c.claim_interrupt(match)
            events = stream.events_until(lambda e: e.type == svc.INTERRUPT_EVENT_TYPE_CLAIMED)
        assert [(KINDS[e.type], e.pending.execution_id) for e in events] == [
            ("added", wanted),
            ("claimed", match),
        ]


BAD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"after_cursor": -1}, "after_cursor"),
    ({"namespace": "bad namespace!"}, "namespace"),
    ({"chain_name": "x" * 10_000}, "chain_name"),
]


def test_i5_bad_request_is_invalid_argument(sidecar: SharedSidecar) -> None:
    """A negative cursor, a bad namespace or an oversize filter is INVALID_ARGUMENT naming the
    field (a cursor above the store's newest event is not the client's mistake: it is answered
    as an expired one, tests/contract/test_watch_client.py)."""
    for request_fields, field in BAD_REQUESTS:
        with watching(sidecar.target, **request_fields) as stream:
            error = stream.ending()
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, _describe(error))
        assert field in (error.details() or ""), (field, error.details())


def test_i6_a_quiet_stream_sends_progress_at_its_interval(sidecar: SharedSidecar) -> None:
    """A live stream with nothing to say still says "nothing, at cursor C" every progress
    interval it asked for, with the cursor it has read up to, even though it has not moved;
    an event resets the interval and moves the cursor."""
    interval = Duration(seconds=1)
    with (
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as client,
        watching(sidecar.target, namespace=sidecar.namespace, progress_interval=interval) as stream,
    ):
        _, cursor = stream.snapshot()
        for _ in range(2):
            started = time.monotonic()
            message = stream.next(patience=10)
            assert message.HasField("progress"), message
            assert message.progress.cursor == cursor
            # Not before its interval (a bounded wait, not a speed figure).
            assert time.monotonic() - started >= 0.5
        execution_id = _record(client)
        event = stream.events_until(lambda e: e.pending.execution_id == execution_id)[-1]
        message = stream.next(patience=10)
        assert message.HasField("progress"), message
        assert message.progress.cursor == event.cursor


BAD_PROGRESS_INTERVALS = [Duration(seconds=-1), Duration(nanos=500_000_000), Duration(nanos=-1)]


def test_i6_a_progress_interval_out_of_bounds_is_invalid_argument(sidecar: SharedSidecar) -> None:
    """A negative progress interval or one under a second is INVALID_ARGUMENT naming the
    field; one above the most (300 s) is served as the most, so the stream opens."""
    for interval in BAD_PROGRESS_INTERVALS:
        with watching(sidecar.target, progress_interval=interval) as stream:
            error = stream.ending()
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (interval, _describe(error))
        assert "progress_interval" in (error.details() or ""), error.details()
    with watching(sidecar.target, progress_interval=Duration(seconds=86_400)) as stream:
        stream.snapshot()
