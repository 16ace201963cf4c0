"""Postgres failover under load (contract E1, E3, I3, I5, P3, P4; docs/ha.md "Postgres failover").

A pg_auto_failover formation on loopback (tests/support/pg_auto_failover.py): a monitor, a
primary and a synchronous standby. A checkpointd server is given the multi-host URL of both
data nodes with ``target_session_attrs=read-write``, as docs/ha.md recommends. Writers
(put_checkpoint), a pauser-claimer (record_interrupt then claim_interrupt) and a watcher
(watch_interrupts) run against it; then the primary is crashed (SIGKILL of its pg_autoctl
service and its postmaster), the monitor promotes the standby, and the load goes on until
writes are acknowledged again. The load and the checks are tests/reliability/failover_load.py's,
shared with test_patroni_failover.py.

Afterwards: every acknowledged write is readable and equal to what was sent (0 lost: the
standby had every commit, replication being synchronous); no call ended other than OK,
UNAVAILABLE or DEADLINE_EXCEEDED (never INTERNAL); no interrupt was claimed twice; the watcher
went on by itself, delivered events of pauses made after the failover, and no event twice;
health is SERVING. Reduced size: a few seconds of load either side of one failover; full size
(CHECKPOINTD_RELIABILITY=full): a minute of load either side.

Needs Debian's postgresql-15-auto-failover (pg_autoctl) and the ``postgres`` user; without
them the test is skipped, or fails under ``CHECKPOINTD_REQUIRE_FAULTS=1`` (CI).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial

import pytest
from grpc_health.v1 import health_pb2

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    CheckpointdError,
    RetryPolicy,
    UnavailableError,
)
from tests.reliability.failover_load import (
    NAMESPACE,
    RECOVERY_TIMEOUT,
    RETRY,
    TIMEOUT,
    crash_under_load,
    health,
    started_cluster,
)
from tests.reliability.figures import FULL, record, size
from tests.support.pg_auto_failover import Formation, PgAutoFailoverMissing
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = pytest.mark.timeout(size(180, 900))

#: Seconds of load before the crash, and after writes are acknowledged again.
LOAD_BEFORE = size(3, 60)
LOAD_AFTER = size(3, 60)
#: How long the monitor may take to promote the standby.
PROMOTION_TIMEOUT = 60.0


@pytest.fixture
def formation() -> Iterator[Formation]:
    """A monitor, a primary and a synchronous standby, torn down after the test."""
    with started_cluster(Formation, PgAutoFailoverMissing, "pg_autoctl") as built:
        yield built


def test_e1_e3_failover_to_the_synchronous_standby_loses_nothing(formation: Formation) -> None:
    """Crash the primary under load: the standby is promoted, the server reconnects to it
    through the multi-host URL, writes come back, nothing acknowledged is lost, nothing ends
    INTERNAL, no interrupt is claimed twice, the watch goes on, health is SERVING."""
    standby_names, synchronous_commit = formation.sync_settings("node1")
    assert "node2" in standby_names or "standby_2" in standby_names, standby_names
    assert synchronous_commit == "on", synchronous_commit
    crash_under_load(
        "postgres failover (pg_auto_failover)",
        formation.url(),
        crash=partial(formation.kill, "node1"),
        await_promotion=partial(formation.await_primary, "node2", PROMOTION_TIMEOUT),
        load_before=LOAD_BEFORE,
        load_after=LOAD_AFTER,
    )


def _await_health(target: str, wanted: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (status := health(target)) != wanted:
        assert time.monotonic() < deadline, f"health stayed {status}, never {wanted}"
        time.sleep(0.1)


def _assert_write_unavailable(client: CheckpointdClient, n: int) -> None:
    """A write fails UNAVAILABLE (STORE_UNAVAILABLE) within its deadline, not INTERNAL."""
    started = time.monotonic()
    with pytest.raises(CheckpointdError) as err:
        client.put_checkpoint(Checkpoint(execution_id="single", node_id=f"probe-{n}"))
    assert time.monotonic() - started < TIMEOUT + 1, "the write hung past its deadline"
    assert isinstance(err.value, UnavailableError), repr(err.value)
    assert err.value.reason == "STORE_UNAVAILABLE", err.value


@pytest.mark.skipif(not FULL, reason="full size only (CHECKPOINTD_RELIABILITY=full)")
def test_e3_single_host_url_of_the_old_primary_is_unavailable_never_internal(
    formation: Formation,
) -> None:
    """A server given only the old primary's address (no failover in its URL): while that
    node is down, and once it is back as the new primary's standby (read-only), writes are
    UNAVAILABLE, never INTERNAL, and health is NOT_SERVING."""
    spec = StoreSpec("postgres", formation.url("node1", read_write=False), "checkpointd_single")
    server = Sidecar(spec, extra_args=["--health-interval", "0.2", "--store-timeout", "3"])
    server.start()
    no_retry = RetryPolicy(max_attempts=1)
    try:
        with CheckpointdClient(
            server.target, namespace=NAMESPACE, retry=no_retry, timeout=TIMEOUT
        ) as client:
            written = client.put_checkpoint(Checkpoint(execution_id="single", node_id="a"))
            assert health(server.target) == health_pb2.HealthCheckResponse.SERVING
            formation.kill("node1")
            _await_health(server.target, health_pb2.HealthCheckResponse.NOT_SERVING)
            _assert_write_unavailable(client, 1)
            formation.await_primary("node2", PROMOTION_TIMEOUT)
            _assert_write_unavailable(client, 2)
            formation.restart("node1")
            formation.await_state("node1", "secondary", RECOVERY_TIMEOUT)
            # Back, but as a standby: reachable, and still no writes.
            _await_health(server.target, health_pb2.HealthCheckResponse.NOT_SERVING)
            for n in range(3, 6):
                _assert_write_unavailable(client, n)
            assert health(server.target) == health_pb2.HealthCheckResponse.NOT_SERVING
            with CheckpointdClient(
                server.target, namespace=NAMESPACE, retry=RETRY, timeout=TIMEOUT
            ) as reader:
                assert reader.get_latest_checkpoint("single") == written
        assert server.process is not None
        assert server.process.poll() is None
        record("postgres failover (pg_auto_failover)", single_host_writes_unavailable=5)
    finally:
        server.close()
