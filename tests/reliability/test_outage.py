"""Store outages under load (contract E1, E2, E3, I5, P3, P4).

* Postgres: a TCP proxy between the server and the database cuts every connection and
  refuses new ones, then forwards again (the shared Postgres cluster itself is never touched).
  While it is down, calls are answered UNAVAILABLE well inside their deadline (never INTERNAL,
  never a hang), health is NOT_SERVING; afterwards health is SERVING again, the clients'
  retries have finished the work, nothing acknowledged is lost and the watcher continues
  from its cursor. Full size: 10 outages; reduced: 2.
* SQLite, full disk: the database lives on a small tmpfs filled up by another file, so the
  kernel answers ENOSPC; writes are UNAVAILABLE naming the full disk, reads go on, and writes
  succeed again once space is freed. The same fault is also reached without the right to
  mount: the server's RLIMIT_FSIZE lowered to the size of its files (EFBIG).
* SQLite, read-only file: ``chattr +i`` on the database and its WAL (the immutable flag binds
  root too, and already open descriptors); writes are UNAVAILABLE, reads go on, and writes
  succeed again once the flag is cleared. On a file system without the flag, on a
  loop-mounted ext4 image.

A route whose capability the machine lacks is skipped, except under
``CHECKPOINTD_REQUIRE_FAULTS=1`` (CI), where it fails (tests/reliability/faults.py).

Each SQLite fault ends with ``PRAGMA integrity_check`` = ok and every acknowledged write there.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    CheckpointdError,
    InterruptEvent,
    PendingInterrupt,
    RetryPolicy,
    SnapshotComplete,
    UnavailableError,
)
from tests.reliability.faults import FULL_DISK_ROUTES, READ_ONLY_ROUTES, full_disk, read_only_file
from tests.reliability.figures import record, size
from tests.support.sidecar import Sidecar, StoreSpec
from tests.support.store_dump import StoreReader
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.timeout(size(120, 1200))

OUTAGES = size(2, 10)
NAMESPACE = "outage"
# Long enough to ride over any outage of this suite; a retried call gives up after 60 s.
RETRY = RetryPolicy(max_attempts=10_000, initial_backoff=0.05, max_backoff=0.3)
NO_RETRY = RetryPolicy(max_attempts=1)
PROBE_DEADLINE = 5.0
LEAKS = (
    "Traceback",
    'File "',
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "DELETE FROM",
    "asyncpg",
    "sqlite3",
)


def _health(target: str) -> int:
    """The server's overall health status (grpc.health.v1 Check, service "")."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(response.status)


def _await_health(target: str, wanted: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _health(target) != wanted:
        assert time.monotonic() < deadline, f"health never became {wanted}"
        time.sleep(0.05)


def _assert_unavailable(call: object, what: str) -> str:
    """Run ``call`` (a no-retry client call) and check it fails UNAVAILABLE, leaking nothing."""
    started = time.monotonic()
    with pytest.raises(CheckpointdError) as err:
        call()  # type: ignore[operator]
    assert time.monotonic() - started < PROBE_DEADLINE + 1, f"{what} hung past its deadline"
    assert isinstance(err.value, UnavailableError), f"{what}: {err.value!r}"
    assert err.value.reason == "STORE_UNAVAILABLE", err.value
    for leak in LEAKS:
        assert leak not in err.value.message, err.value.message
    return err.value.message


class Load:
    """Writers and a pauser with retrying clients, and a watcher, until stopped."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acknowledged: dict[str, Checkpoint] = {}
        self.failures: list[BaseException] = []
        self.events: list[int] = []
        self.snapshot_cursor: int | None = None
        self.watch_client = CheckpointdClient(target, namespace=NAMESPACE, retry=RETRY)
        self.watch = self.watch_client.watch_interrupts()
        self.threads = [
            threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(3)
        ] + [
            threading.Thread(target=self._pause, daemon=True),
            threading.Thread(target=self._follow, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _client(self) -> CheckpointdClient:
        return CheckpointdClient(self.target, namespace=NAMESPACE, retry=RETRY, timeout=60)

    def _write(self, n: int) -> None:
        with self._client() as client:
            i = 0
            while not self.stop.is_set():
                sent = Checkpoint(
                    execution_id=f"w{n}-{i // 50}",
                    checkpoint_id=uuid.uuid4().hex,
                    node_id=f"n{i}",
                    state_snapshot={"i": i, "big": 2**63 + i},
                )
                try:
                    stored = client.put_checkpoint(sent)
                except BaseException as exc:
                    self.failures.append(exc)
                    return
                with self.lock:
                    self.acknowledged[sent.checkpoint_id] = replace(
                        sent, created_at=stored.created_at
                    )
                i += 1
                self.stop.wait(0.005)

    def _pause(self) -> None:
        with self._client() as client:
            while not self.stop.is_set():
                execution_id = f"p-{uuid.uuid4().hex[:10]}"
                cp = Checkpoint(
                    execution_id=execution_id,
                    checkpoint_id=uuid.uuid4().hex,
                    node_id="approve",
                    status="interrupted",
                    interrupt_reason="approval",
                )
                pending = PendingInterrupt(execution_id=execution_id, reason="approval")
                try:
                    stored = client.record_interrupt(cp, pending).checkpoint
                    if int(execution_id[-1], 16) % 2:
                        client.claim_interrupt(execution_id)
                except BaseException as exc:
                    self.failures.append(exc)
                    return
                with self.lock:
                    self.acknowledged[cp.checkpoint_id] = replace(cp, created_at=stored.created_at)
                self.stop.wait(0.02)

    def _follow(self) -> None:
        try:
            for item in self.watch:
                if isinstance(item, SnapshotComplete):
                    # A stream that ends before its first event reconnects from cursor 0, that
                    # is with a fresh snapshot (P4): what happened up to its cursor is in its
                    # rows, and the events to expect are the ones after it.
                    self.snapshot_cursor = item.cursor
                    self.events.clear()
                elif isinstance(item, InterruptEvent):
                    self.events.append(item.cursor)
        except BaseException as exc:
            self.failures.append(exc)

    def acknowledged_count(self) -> int:
        """How many writes have been acknowledged so far."""
        with self.lock:
            return len(self.acknowledged)

    def finish(self) -> None:
        """Stop the writers (their calls in flight complete) and wait for them; a writer
        still running after its call's deadline has passed is a hang, and fails the test."""
        self.stop.set()
        for t in self.threads[:-1]:
            t.join(90)
        stuck = [t.name for t in self.threads[:-1] if t.is_alive()]
        assert not stuck, f"load threads still running after stop: {stuck}"

    def close(self) -> None:
        self.stop.set()
        self.watch.close()
        self.threads[-1].join(30)
        self.watch_client.close()

    def lost(self, client: CheckpointdClient) -> int:
        """How many acknowledged writes are missing or different."""
        stored: dict[str, Checkpoint] = {}
        for execution_id in {cp.execution_id for cp in self.acknowledged.values()}:
            for cp in client.iter_checkpoints(execution_id, page_size=1000):
                stored[cp.checkpoint_id] = replace(cp, sequence=0)
        return sum(stored.get(k) != v for k, v in self.acknowledged.items())


#: Writes (and watch events) the load must add between outages, and after the last one,
#: before the test goes on: an outage test whose load stalled would prove nothing.
PROGRESS_WRITES = 10
PROGRESS_TIMEOUT = 60.0


def _outbox_size(reader: StoreReader) -> int:
    """How many events of the load's namespace the outbox holds (read around the server)."""
    return sum(1 for _, ns, _, _ in reader.outbox() if ns == NAMESPACE)


def _await_progress(load: Load, reader: StoreReader, writes: int, events: int) -> tuple[int, int]:
    """Wait until the load has more than ``writes`` acknowledged writes and the outbox more
    than ``events`` events (at least PROGRESS_WRITES new writes); fail if it stalls."""
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    while True:
        now = (load.acknowledged_count(), _outbox_size(reader))
        if now[0] >= writes + PROGRESS_WRITES and now[1] > events:
            return now
        assert not load.failures, load.failures[:3]
        assert time.monotonic() < deadline, (
            f"the load stalled: {now[0] - writes} writes and {now[1] - events} events "
            f"in {PROGRESS_TIMEOUT:.0f} s"
        )
        time.sleep(0.05)


@pytest.mark.postgres
def test_e3_postgres_outage_under_load_is_unavailable_and_recovers(pg_dsn, pg_schema):
    """Repeated database outages under load: UNAVAILABLE within the deadline, health
    NOT_SERVING then SERVING, retries finish the work, nothing lost, the watch continues.
    The load is shown to be live: writes are acknowledged and events written before every
    outage and after the last one, the outbox holds events while the database is away, and
    every load thread ends."""
    url = urlsplit(pg_dsn)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
    user = f"{url.username}@" if url.username else ""
    spec = StoreSpec(
        "postgres", url._replace(netloc=f"{user}127.0.0.1:{proxy.port}").geturl(), pg_schema
    )
    server = Sidecar(spec, extra_args=["--health-interval", "0.2", "--store-timeout", "3"]).start()
    load = Load(server.target)
    # Straight to the database, not through the proxy: readable while the server's link is cut.
    direct = StoreReader(StoreSpec("postgres", pg_dsn, pg_schema))
    probes = 0
    writes = events = 0
    try:
        with CheckpointdClient(
            server.target, namespace=NAMESPACE, retry=NO_RETRY, timeout=PROBE_DEADLINE
        ) as probe:
            for n in range(OUTAGES):
                writes, events = _await_progress(load, direct, writes, events)
                proxy.cut()
                try:
                    _await_health(server.target, health_pb2.HealthCheckResponse.NOT_SERVING)
                    assert _outbox_size(direct) >= events > 0  # the watcher has events at stake
                    cp = Checkpoint(execution_id=f"probe-{n}", node_id="x")
                    _assert_unavailable(lambda cp=cp: probe.put_checkpoint(cp), "put")
                    _assert_unavailable(lambda: probe.get_latest_checkpoint("w0-0"), "read")
                    _assert_unavailable(lambda: probe.claim_interrupt("p-none"), "claim")
                    probes += 3
                    assert server.process is not None
                    assert server.process.poll() is None
                finally:
                    proxy.restore()
                _await_health(server.target, health_pb2.HealthCheckResponse.SERVING)
            # The retried calls got through, and the load goes on after the last outage.
            writes, events = _await_progress(load, direct, writes, events)
        load.finish()
        assert not load.failures, load.failures[:3]
        with CheckpointdClient(server.target, namespace=NAMESPACE, retry=RETRY) as client:
            lost = load.lost(client)
        outbox = [c for c, ns, _, _ in direct.outbox() if ns == NAMESPACE]
        deadline = time.monotonic() + 30
        while load.watch.cursor < (outbox[-1] if outbox else 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        record(
            "database outage (postgres)",
            outages=OUTAGES,
            unavailable_probes=probes,
            writes_acknowledged=len(load.acknowledged),
            writes_lost=lost,
            events_in_outbox=len([c for c in outbox if c > (load.snapshot_cursor or 0)]),
            events_delivered=len(load.events),
        )
        assert len(load.acknowledged) >= writes > 0
        assert lost == 0
        assert load.snapshot_cursor is not None
        assert load.events, "the watcher saw no event"
        assert load.events == [c for c in outbox if c > load.snapshot_cursor]
    finally:
        direct.close()
        load.close()
        server.close()
        proxy.close()


# --- SQLite: a full disk and a read-only file ------------------------------------------------


def _sqlite_fault_run(server: Sidecar, spec: StoreSpec, begin, end, expect: str) -> None:
    """Write until the fault bites, check reads and health, end the fault, write again, and
    check the file and every acknowledged write."""
    acknowledged: list[Checkpoint] = []
    with CheckpointdClient(server.target, retry=NO_RETRY, timeout=PROBE_DEADLINE) as client:
        for i in range(5):
            acknowledged.append(
                client.put_checkpoint(Checkpoint(execution_id="e", node_id=f"a{i}"))
            )
        begin()
        try:
            message = ""
            for i in range(200):  # the first writes may still fit in the WAL's free pages
                cp = Checkpoint(
                    execution_id="e", node_id=f"b{i}", state_snapshot={"pad": "x" * 20_000}
                )
                try:
                    acknowledged.append(client.put_checkpoint(cp))
                except CheckpointdError:
                    message = _assert_unavailable(lambda cp=cp: client.put_checkpoint(cp), "write")
                    break
            assert message, "the fault never stopped a write"
            assert expect in message, message
            assert client.get_latest_checkpoint("e") == acknowledged[-1]  # reads go on
            assert server.process is not None
            assert server.process.poll() is None
        finally:
            end()
        with CheckpointdClient(server.target, retry=RETRY, timeout=30) as retrying:
            acknowledged.append(
                retrying.put_checkpoint(Checkpoint(execution_id="e", node_id="after"))
            )
        assert list(client.iter_checkpoints("e")) == acknowledged
    server.stop()
    reader = StoreReader(spec)
    try:
        assert reader.integrity_check() == "ok"
    finally:
        reader.close()


@pytest.mark.parametrize("route", FULL_DISK_ROUTES)
@pytest.mark.parametrize("backend", ["sqlite"])
def test_e2_sqlite_full_disk_is_unavailable_and_recovers(
    tmp_path: Path, store_spec, route: str
) -> None:
    """On a full disk (ENOSPC), or a file that may not grow (EFBIG), writes are UNAVAILABLE
    naming the fault, reads go on, nothing is corrupted, and writes succeed again when space
    is freed."""
    with full_disk(route, tmp_path / "disk") as fault:
        spec = StoreSpec("sqlite", f"sqlite://{fault.db}")
        server = Sidecar(spec).start()
        try:
            _sqlite_fault_run(
                server, spec, lambda: fault.begin(server), lambda: fault.end(server), fault.expect
            )
        finally:
            server.close()
    record("sqlite faults", **{f"full_disk ({route})": "UNAVAILABLE, integrity ok"})


@pytest.mark.parametrize("route", READ_ONLY_ROUTES)
@pytest.mark.parametrize("backend", ["sqlite"])
def test_e2_sqlite_read_only_file_is_unavailable_and_recovers(
    tmp_path: Path, store_spec, route: str
) -> None:
    """With the database file immutable (chattr +i: read-only even for root and for open
    descriptors) writes are UNAVAILABLE, reads go on, nothing is corrupted, and writes succeed
    again when the flag is cleared."""
    with read_only_file(route, tmp_path / "store") as fault:
        spec = StoreSpec("sqlite", f"sqlite://{fault.db}")
        server = Sidecar(spec).start()
        try:
            _sqlite_fault_run(
                server, spec, lambda: fault.begin(server), lambda: fault.end(server), fault.expect
            )
        finally:
            server.close()
    record("sqlite faults", **{f"read_only_file ({route})": "UNAVAILABLE, integrity ok"})
