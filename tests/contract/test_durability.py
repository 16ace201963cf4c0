"""Contract E1, E3 and P1/P3: acknowledged writes survive kill -9; outages are UNAVAILABLE,
retried, and recovered from without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest

from checkpointd_client import (
    AsyncCheckpointdClient,
    CheckpointdClient,
    DeadlineExceededError,
    NotFoundError,
    RetryPolicy,
    UnavailableError,
)
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.support.sidecar import Sidecar, StoreSpec
from tests.support.tcp_proxy import TcpProxy


@pytest.mark.own_server  # kills or stops its server
def test_e1_acknowledged_writes_survive_kill_9(sidecar, execution_id):
    """Every write acknowledged before a SIGKILL is there, unchanged, after a restart."""
    acknowledged = []
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as client:
        for i in range(50):
            acknowledged.append(client.put_checkpoint(checkpoint(execution_id, node_id=f"n{i}")))
        cp, pending = interrupted(execution_id)
        recorded = client.record_interrupt(cp, pending)
        client.put_idempotent(execution_id, "charge", {"id": 7})
    sidecar.kill()
    sidecar.start()
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as client:
        stored = list(client.iter_checkpoints(execution_id))
        assert stored == [*acknowledged, recorded.checkpoint]
        assert client.claim_interrupt(execution_id) == recorded.pending
        assert client.get_idempotent(execution_id, "charge").value == {"id": 7}


@pytest.mark.own_server  # kills or stops its server
def test_e1_writes_acknowledged_during_a_kill_are_all_durable(sidecar, execution_id):
    """Writers racing a SIGKILL lose nothing that was acknowledged. A writer stops only on
    UNAVAILABLE after the kill (the one retriable code: the server died mid-call), or on its
    deadline after the kill; any other error, or an error before the kill, fails the test."""
    writers = 4
    acknowledged: list[str] = []
    counts = [0] * writers
    progress = threading.Condition()
    stop = threading.Event()
    killed = threading.Event()
    stopped_before_kill: list[BaseException] = []
    unexpected: list[BaseException] = []

    def write(n: int) -> None:
        with CheckpointdClient(sidecar.target, retry=NO_RETRY, timeout=5) as client:
            i = 0
            while not stop.is_set():
                try:
                    stored = client.put_checkpoint(checkpoint(execution_id, node_id=f"w{n}-{i}"))
                except UnavailableError as exc:
                    if not killed.is_set():
                        stopped_before_kill.append(exc)
                    return  # the server died mid-call: this write was not acknowledged
                except DeadlineExceededError as exc:
                    # A put still waiting when the server died may reach its deadline before
                    # the broken connection is noticed (a loaded machine): not acknowledged
                    # either. Before the kill it is a failure.
                    if not killed.is_set():
                        unexpected.append(exc)
                    return
                except BaseException as exc:
                    unexpected.append(exc)
                    return
                with progress:
                    acknowledged.append(stored.checkpoint_id)
                    counts[n] += 1
                    progress.notify_all()
                i += 1

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    # Kill only once every writer is under way, so the kill lands among live writes.
    with progress:
        assert progress.wait_for(
            lambda: min(counts) >= 5 or bool(unexpected or stopped_before_kill), timeout=60
        ), counts
    killed.set()
    sidecar.kill()
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a writer hung after the kill"
    assert not unexpected, unexpected
    assert not stopped_before_kill, stopped_before_kill
    assert min(counts) >= 5, counts
    sidecar.start()
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as client:
        stored = {c.checkpoint_id for c in client.iter_checkpoints(execution_id)}
    assert set(acknowledged) <= stored


def test_e3_store_outage_is_unavailable_and_recovers_without_restart(store_spec, execution_id):
    """While the database is unreachable the server answers UNAVAILABLE (never INTERNAL, no
    SQL in the message) and keeps running; it serves again by itself once the database is
    back, and nothing acknowledged is lost."""
    with (
        _outage_rig(store_spec) as (server, outage),
        CheckpointdClient(server.target, retry=NO_RETRY, timeout=30) as client,
    ):
        client.put_checkpoint(checkpoint(execution_id, node_id="before"))
        outage.begin()
        try:
            with pytest.raises(UnavailableError) as err:
                client.put_checkpoint(checkpoint(execution_id, node_id="during"))
            assert err.value.reason == "STORE_UNAVAILABLE"
            for sql_word in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert sql_word not in err.value.message
            assert server.process is not None
            assert server.process.poll() is None
        finally:
            outage.end()
        client.put_checkpoint(checkpoint(execution_id, node_id="after"))
        nodes = [c.node_id for c in client.iter_checkpoints(execution_id)]
        assert nodes == ["before", "after"]


class _Outage:
    """Postgres: the proxy between server and database drops every connection. SQLite:
    another process holds an exclusive lock on the file past the server's busy timeout."""

    def __init__(self, store_spec: StoreSpec, proxy: TcpProxy | None) -> None:
        self.spec = store_spec
        self.proxy = proxy
        self.lock_conn: sqlite3.Connection | None = None

    def begin(self) -> None:
        if self.proxy is not None:
            self.proxy.cut()
            return
        path = self.spec.url.removeprefix("sqlite://")
        self.lock_conn = sqlite3.connect(path, timeout=10, isolation_level=None)
        self.lock_conn.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        if self.proxy is not None:
            self.proxy.restore()
        if self.lock_conn is not None:
            self.lock_conn.execute("ROLLBACK")
            self.lock_conn.close()


@contextlib.contextmanager
def _outage_rig(store_spec: StoreSpec) -> Iterator[tuple[Sidecar, _Outage]]:
    proxy = None
    spec = store_spec
    if store_spec.backend == "postgres":
        url = urlsplit(store_spec.url)
        proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
        netloc = f"{url.username or 'postgres'}@127.0.0.1:{proxy.port}"
        spec = replace(store_spec, url=urlunsplit(url._replace(netloc=netloc)))
    elif store_spec.backend == "pgbouncer":
        # The proxy sits between the server and PgBouncer: the store URL the server uses.
        url = urlsplit(store_spec.server_url)
        proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 6432)
        netloc = f"{url.username or 'postgres'}@127.0.0.1:{proxy.port}"
        spec = replace(store_spec, server_url=urlunsplit(url._replace(netloc=netloc)))
    # A short busy timeout makes the SQLite outage answer quickly instead of waiting 5 s.
    server = Sidecar(spec, extra_env={"CHECKPOINTD_SQLITE_BUSY_TIMEOUT_MS": "300"}).start()
    try:
        yield server, _Outage(spec, proxy)
    finally:
        server.close()
        if proxy is not None:
            proxy.close()


@pytest.mark.own_server  # kills or stops its server
def test_p3_unavailable_is_retried_until_the_server_is_back(sidecar, execution_id):
    """A call made while the server is down succeeds once it returns within the retry budget."""
    sidecar.stop()
    policy = RetryPolicy(max_attempts=50, initial_backoff=0.05, max_backoff=0.2)
    with CheckpointdClient(sidecar.target, retry=policy, timeout=30) as client:
        restarter = threading.Timer(1.0, sidecar.start)
        restarter.start()
        try:
            stored = client.put_checkpoint(checkpoint(execution_id))
        finally:
            restarter.join()
        assert client.get_latest_checkpoint(execution_id) == stored


@pytest.mark.own_server  # kills or stops its server
def test_p3_call_to_a_dead_server_fails_unavailable_within_its_deadline(sidecar):
    """With the server gone, a call ends UNAVAILABLE after its retries, within the deadline."""
    sidecar.stop()
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)
    with CheckpointdClient(sidecar.target, retry=policy, timeout=5) as client:
        started = time.monotonic()
        with pytest.raises(UnavailableError):
            client.get_latest_checkpoint("x")
        assert time.monotonic() - started < 5


async def test_p1_async_client_speaks_the_same_api(sidecar, execution_id):
    """The asyncio client writes, reads, claims and caches like the sync one."""
    async with AsyncCheckpointdClient(
        sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
    ) as client:
        stored = await client.put_checkpoint(checkpoint(execution_id, node_id="a"))
        assert await client.get_latest_checkpoint(execution_id) == stored
        cp, pending = interrupted(execution_id)
        recorded = await client.record_interrupt(cp, pending)
        results = await asyncio.gather(
            *(client.claim_interrupt(execution_id) for _ in range(8)), return_exceptions=True
        )
        # Exactly one winner, holding the recorded row; the seven others are told there is
        # nothing left to claim (not any other error).
        [winner] = [r for r in results if not isinstance(r, BaseException)]
        assert winner == recorded.pending
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(losers) == 7
        for loser in losers:
            assert isinstance(loser, NotFoundError), repr(loser)
            assert loser.code == grpc.StatusCode.NOT_FOUND
            assert loser.reason == "NO_PENDING_INTERRUPT"
        await client.put_idempotent(execution_id, "k", [1])
        assert (await client.get_idempotent(execution_id, "k")).value == [1]
        ids = [c.node_id async for c in client.iter_checkpoints(execution_id)]
        assert ids == ["a", "node"]
        assert (await client.prune(timedelta(days=1))).checkpoints_deleted == 0


def test_p1_tcp_and_unix_targets_reach_the_same_store(sidecar, execution_id):
    """The server serves TCP and a Unix socket at once, over one store."""
    with (
        CheckpointdClient(sidecar.tcp_target, namespace=sidecar.namespace, retry=NO_RETRY) as tcp,
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as uds,
    ):
        stored = tcp.put_checkpoint(checkpoint(execution_id))
        assert uds.get_latest_checkpoint(execution_id) == stored
