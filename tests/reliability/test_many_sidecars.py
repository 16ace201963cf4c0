"""Many pods on one Postgres (contract M1, with C1, E1, I3, I5, P3): N server processes, each
a "pod" with ``--pg-pool-max 2``, all through one PgBouncer in ``pool_mode = transaction``
limited to 20 server connections (``default_pool_size`` and ``max_db_connections``).

On every sidecar at once: a writer records interrupts and writes checkpoints, a claimer
claims interrupts recorded through three other sidecars (so every claim is contested), and a
watcher follows the namespace from before the first write. Half the sidecars hear of events
over a direct LISTEN connection (``--pg-listen-dsn``), half poll through the pooler. Every
call is retried on UNAVAILABLE only (with the same request id or claim token); any other
error fails the test. At the end: every acknowledged write is in the store, every recorded
interrupt was won by exactly one claimer, every watcher saw exactly the outbox, and the
pooler never opened more than 20 connections to Postgres.

Figures (printed at the end of the run): ops/s, p99 call latency, UNAVAILABLE retries, and
the peak of Postgres connections in use, read from ``pg_stat_activity``. Reduced size: 8
sidecars; full size (``CHECKPOINTD_RELIABILITY=full``): 40.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

import asyncpg
import pytest

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    InterruptEvent,
    NotFoundError,
    PendingInterrupt,
    RetryPolicy,
    SnapshotComplete,
    UnavailableError,
)
from tests.reliability.figures import record, size
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(size(300, 1800))]

T = TypeVar("T")

SIDECARS = size(8, 40)
POOL_MAX = 2
SERVER_CONNECTIONS = 20
#: Interrupts recorded (and as many checkpoints written) through each sidecar.
PER_SIDECAR = size(30, 40)
#: Sidecars whose claimers each try every interrupt (the writer's own is not one of them).
CLAIMERS_PER_INTERRUPT = 3
NAMESPACE = "many"
NO_RETRY = RetryPolicy(max_attempts=1)
#: Attempts of one call while it is answered UNAVAILABLE (the store is saturated, not down).
ATTEMPTS = 200
#: Longest wait for the watchers to reach the end of the outbox; reached only on failure.
PATIENCE = 120.0


class Run:
    """What every thread of the run records."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.latencies: list[float] = []
        self.unavailable = 0
        self.acknowledged: set[str] = set()  # checkpoint ids
        self.recorded: list[str] = []  # execution ids with an acknowledged pending interrupt
        self.winners: dict[str, list[int]] = defaultdict(list)

    def call(self, what: str, fn: Callable[[], T]) -> T | None:
        """``fn`` retried on UNAVAILABLE only; None (and a recorded failure) otherwise."""
        for _ in range(ATTEMPTS):
            started = time.monotonic()
            try:
                result = fn()
            except UnavailableError:
                with self.lock:
                    self.unavailable += 1
                time.sleep(0.05)
                continue
            except NotFoundError:
                raise  # a lost claim: the caller decides
            except Exception as exc:
                with self.lock:
                    self.failures.append(f"{what}: {type(exc).__name__}: {exc}")
                return None
            with self.lock:
                self.latencies.append(time.monotonic() - started)
            return result
        with self.lock:
            self.failures.append(f"{what}: still UNAVAILABLE after {ATTEMPTS} attempts")
        return None


def _client(server: Sidecar) -> CheckpointdClient:
    return CheckpointdClient(server.target, namespace=NAMESPACE, retry=NO_RETRY, timeout=60)


def _write(
    run: Run, index: int, server: Sidecar, claim_queues: list[queue.Queue[str | None]]
) -> None:
    with _client(server) as client:
        for k in range(PER_SIDECAR):
            execution_id = f"m{index}-{k}"
            cp = Checkpoint(
                execution_id=execution_id,
                checkpoint_id=uuid.uuid4().hex,
                node_id="approve",
                status="interrupted",
                interrupt_reason="approval",
            )
            pending = PendingInterrupt(execution_id=execution_id, reason="approval")
            request_id = uuid.uuid4().hex  # the same on every retry (C9)
            if (
                run.call(
                    "record_interrupt",
                    partial(client.record_interrupt, cp, pending, request_id=request_id),
                )
                is not None
            ):
                with run.lock:
                    run.acknowledged.add(cp.checkpoint_id)
                    run.recorded.append(execution_id)
                for step in range(1, CLAIMERS_PER_INTERRUPT + 1):
                    claim_queues[(index + step) % len(claim_queues)].put(execution_id)
            plain = Checkpoint(
                execution_id=f"c{index}", checkpoint_id=uuid.uuid4().hex, node_id=f"n{k}"
            )
            if run.call("put_checkpoint", partial(client.put_checkpoint, plain)) is not None:
                with run.lock:
                    run.acknowledged.add(plain.checkpoint_id)


def _claim(run: Run, index: int, server: Sidecar, work: queue.Queue[str | None]) -> None:
    with _client(server) as client:
        while (execution_id := work.get()) is not None:
            token = uuid.uuid4().hex  # the same on every retry (I3)
            try:
                won = run.call(
                    "claim_interrupt",
                    partial(client.claim_interrupt, execution_id, claim_token=token),
                )
            except NotFoundError:
                continue  # another sidecar's claimer won it
            if won is not None:
                with run.lock:
                    run.winners[execution_id].append(index)


class Watcher:
    """One watch stream on a sidecar, from before the first write; reconnects by itself."""

    def __init__(self, run: Run, server: Sidecar) -> None:
        self.run = run
        self.client = CheckpointdClient(
            server.target,
            namespace=NAMESPACE,
            retry=RetryPolicy(max_attempts=1000, initial_backoff=0.05, max_backoff=0.5),
        )
        self.watch = self.client.watch_interrupts()
        self.snapshot_cursor: int | None = None
        self.ready = threading.Event()
        self.events: list[int] = []
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        try:
            for item in self.watch:
                if isinstance(item, SnapshotComplete) and self.snapshot_cursor is None:
                    self.snapshot_cursor = item.cursor
                    self.ready.set()
                elif isinstance(item, InterruptEvent):
                    self.events.append(item.cursor)
        except Exception as exc:
            if not self.watch.closed:
                with self.run.lock:
                    self.run.failures.append(f"watch: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.watch.close()
        self.thread.join(30)
        self.client.close()


def _upstream_ports(pid: int, upstream_port: int) -> list[int]:
    """The local ports of the process's open TCP connections to ``upstream_port``: its
    server connections, as pg_stat_activity's ``client_port`` names them (Linux /proc)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            for line in lines:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                if (
                    state == "01"
                    and inode in inodes
                    and int(remote.split(":")[1], 16) == (upstream_port)
                ):
                    ports.append(int(local.split(":")[1], 16))
    return ports


class ConnectionSampler:
    """Samples pg_stat_activity a few times a second: the pooler's server connections
    (open, and busy in a statement or transaction) and the sidecars' LISTEN connections."""

    def __init__(self, pg_dsn: str, schema: str, bouncer: PgBouncer) -> None:
        self.dsn, self.schema, self.bouncer = pg_dsn, schema, bouncer
        self.peak_open = self.peak_busy = self.peak_listen = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._sample()), daemon=True)
        self.thread.start()

    async def _sample(self) -> None:
        conn = await asyncpg.connect(self.dsn, timeout=10)
        assert self.bouncer.process is not None
        upstream = self.bouncer.upstream.port or 5432
        try:
            while not self.stop.is_set():
                ports = _upstream_ports(self.bouncer.process.pid, upstream)
                row = await conn.fetchrow(
                    """SELECT count(*) FILTER (WHERE client_port = ANY($1::int[])),
                              count(*) FILTER (WHERE client_port = ANY($1::int[])
                                               AND state <> 'idle'),
                              count(*) FILTER (WHERE application_name = $2)
                       FROM pg_stat_activity""",
                    ports,
                    f"checkpointd:{self.schema}:listen",
                )
                assert row is not None
                self.peak_open = max(self.peak_open, int(row[0]))
                self.peak_busy = max(self.peak_busy, int(row[1]))
                self.peak_listen = max(self.peak_listen, int(row[2]))
                self.samples += 1
                await asyncio.sleep(0.2)
        finally:
            await conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def _store_rows(pg_dsn: str, schema: str) -> tuple[set[str], int, list[int]]:
    """Checkpoint ids, pending rows left, and every event cursor of the namespace."""

    async def read() -> tuple[set[str], int, list[int]]:
        conn = await asyncpg.connect(pg_dsn, timeout=10)
        try:
            ids = await conn.fetch(
                f'SELECT checkpoint_id FROM "{schema}".checkpoints WHERE namespace = $1',
                NAMESPACE,
            )
            pending = await conn.fetchval(
                f'SELECT count(*) FROM "{schema}".pending_interrupts WHERE namespace = $1',
                NAMESPACE,
            )
            cursors = await conn.fetch(
                f'SELECT cursor FROM "{schema}".interrupt_events WHERE namespace = $1 '
                "ORDER BY cursor",
                NAMESPACE,
            )
        finally:
            await conn.close()
        return {r[0] for r in ids}, int(pending), [int(r[0]) for r in cursors]

    return asyncio.run(read())


@contextlib.contextmanager
def _fleet(pg_dsn: str, schema: str, bouncer: PgBouncer) -> Iterator[list[Sidecar]]:
    """SIDECARS servers through the pooler, even ones with a direct LISTEN connection."""
    spec = StoreSpec(
        "pgbouncer",
        pg_dsn,
        pg_schema=schema,
        server_url=bouncer.url(),
        server_args=("--pg-pooler", "transaction", "--pg-pool-max", str(POOL_MAX)),
    )
    servers = [
        Sidecar(spec, extra_args=["--pg-listen-dsn", pg_dsn] if i % 2 == 0 else [])
        for i in range(SIDECARS)
    ]
    try:
        # The first creates the schema; the others then start together, a few at a time
        # (two cores: forty interpreters starting at once would only queue for the CPU).
        servers[0].start(timeout=60)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda s: s.start(timeout=120), servers[1:]))
        yield servers
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: s.close(), servers))


def test_m1_many_sidecars_share_one_bounded_pgbouncer(pg_dsn: str, pg_schema: str) -> None:
    """Every acknowledged write stored, every interrupt claimed exactly once, every watcher
    sees the whole outbox, only UNAVAILABLE ever answered, at most 20 Postgres connections
    through the pooler."""
    if find_pgbouncer() is None:
        if os.environ.get("CHECKPOINTD_REQUIRE_PG") == "1":
            pytest.fail("pgbouncer is required (CHECKPOINTD_REQUIRE_PG=1) but not installed")
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    run = Run()
    bouncer = PgBouncer(
        pg_dsn,
        pool_size=SERVER_CONNECTIONS,
        max_db_connections=SERVER_CONNECTIONS,
        max_client_conn=SIDECARS * POOL_MAX + 100,
    ).start()
    try:
        with _fleet(pg_dsn, pg_schema, bouncer) as servers:
            sampler = ConnectionSampler(pg_dsn, pg_schema, bouncer)
            watchers = [Watcher(run, server) for server in servers]
            try:
                for watcher in watchers:
                    assert watcher.ready.wait(60), "a watcher got no snapshot"
                claim_queues: list[queue.Queue[str | None]] = [queue.Queue() for _ in servers]
                claimers = [
                    threading.Thread(target=_claim, args=(run, i, s, claim_queues[i]))
                    for i, s in enumerate(servers)
                ]
                writers = [
                    threading.Thread(target=_write, args=(run, i, s, claim_queues))
                    for i, s in enumerate(servers)
                ]
                started = time.monotonic()
                for thread in claimers + writers:
                    thread.start()
                for thread in writers:
                    thread.join()
                for work in claim_queues:
                    work.put(None)
                for thread in claimers:
                    thread.join()
                elapsed = time.monotonic() - started

                stored, pending_left, outbox = _store_rows(pg_dsn, pg_schema)
                deadline = time.monotonic() + PATIENCE
                while time.monotonic() < deadline and any(
                    w.watch.cursor < outbox[-1] for w in watchers
                ):
                    time.sleep(0.1)
            finally:
                for watcher in watchers:
                    watcher.close()
                sampler.close()
    finally:
        bouncer.close()

    latencies = sorted(run.latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else 0.0
    record(
        "many sidecars (PgBouncer, transaction pooling)",
        sidecars=SIDECARS,
        pool_max_per_sidecar=POOL_MAX,
        pgbouncer_server_connections=SERVER_CONNECTIONS,
        calls_answered=len(latencies),
        ops_per_second=f"{len(latencies) / elapsed:.0f}",
        p99_ms=f"{p99 * 1000:.1f}",
        unavailable_retried=run.unavailable,
        writes_acknowledged=len(run.acknowledged),
        writes_lost=len(run.acknowledged - stored),
        interrupts_claimed=sum(1 for w in run.winners.values() if w),
        double_claims=sum(1 for w in run.winners.values() if len(w) > 1),
        events_in_outbox=len(outbox),
        watchers_with_every_event=sum(
            1 for w in watchers if w.events == [c for c in outbox if c > (w.snapshot_cursor or 0)]
        ),
        pg_connections_peak_via_pgbouncer=sampler.peak_open,
        pg_connections_peak_busy=sampler.peak_busy,
        pg_listen_connections_peak=sampler.peak_listen,
        pg_activity_samples=sampler.samples,
    )

    assert run.failures == [], run.failures[:10]
    assert len(run.recorded) == SIDECARS * PER_SIDECAR
    assert len(run.acknowledged) == 2 * SIDECARS * PER_SIDECAR
    assert run.acknowledged <= stored
    assert {e: len(w) for e, w in run.winners.items() if len(w) != 1} == {}
    assert set(run.winners) == set(run.recorded)
    assert pending_left == 0
    # One "added" and one "claimed" event per interrupt, all after every watcher's start.
    assert len(outbox) == 2 * len(run.recorded)
    for watcher in watchers:
        assert watcher.snapshot_cursor is not None
        assert watcher.events == [c for c in outbox if c > watcher.snapshot_cursor]
    assert sampler.samples > 0
    assert sampler.peak_open <= SERVER_CONNECTIONS
    assert sampler.peak_listen <= (SIDECARS + 1) // 2
