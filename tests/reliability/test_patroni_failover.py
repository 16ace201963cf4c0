"""Postgres failover under load with Patroni (contract E1, E3, I3, I5, P3, P4; docs/ha.md
"Patroni").

A Patroni cluster on loopback (tests/support/patroni.py): a single-node etcd, a primary and a
synchronous standby (``synchronous_mode: true``), configured as tests/support/patroni.py's
PATRONI_YAML says, which is what docs/ha.md shows as tested. The scenario is test_failover.py's
(tests/reliability/failover_load.py): a server on the multi-host URL of both members with
``target_session_attrs=read-write``, writers, a pauser-claimer and a watcher; then the
primary's machine is lost (SIGKILL of its Patroni and of its Postgres), Patroni promotes the
standby once the old primary's leader key expires, and the load goes on until writes are
acknowledged again. Nothing acknowledged is lost, no call ends INTERNAL, no interrupt is claimed
twice, the watch goes on without a duplicate, health is SERVING.

Reduced size: a few seconds of load either side of one failover (about 40 s in all, most of it
the cluster's start and the leader key's expiry); full size (CHECKPOINTD_RELIABILITY=full): a
minute either side.

Needs Debian's patroni and etcd-server, PostgreSQL 15 and the ``postgres`` user; without them
the test is skipped, or fails under ``CHECKPOINTD_REQUIRE_FAULTS=1`` (CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest

from tests.reliability.failover_load import crash_under_load, started_cluster
from tests.reliability.figures import size
from tests.support.patroni import Cluster, PatroniMissing

pytestmark = pytest.mark.timeout(size(180, 900))

#: Seconds of load before the crash, and after writes are acknowledged again.
LOAD_BEFORE = size(3, 60)
LOAD_AFTER = size(3, 60)
#: How long Patroni may take to promote the standby: the leader key's ttl (10 s) and a
#: few loops of loop_wait (2 s), with room to spare.
PROMOTION_TIMEOUT = 60.0


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """etcd, a primary and a synchronous standby, torn down after the test."""
    with started_cluster(Cluster, PatroniMissing, "Patroni's Postgres") as built:
        yield built


def test_e1_e3_patroni_failover_to_the_synchronous_standby_loses_nothing(
    cluster: Cluster,
) -> None:
    """Lose the primary's machine under load: Patroni promotes the synchronous standby, the
    server reconnects to it through the multi-host URL, writes come back, nothing
    acknowledged is lost, nothing ends INTERNAL, no interrupt is claimed twice, the watch goes
    on, health is SERVING."""
    standby_names, synchronous_commit = cluster.sync_settings("node1")
    assert "node2" in standby_names, standby_names
    assert synchronous_commit == "on", synchronous_commit
    crash_under_load(
        "postgres failover (Patroni)",
        cluster.url(),
        crash=partial(cluster.kill, "node1"),
        await_promotion=partial(cluster.await_primary, "node2", PROMOTION_TIMEOUT),
        load_before=LOAD_BEFORE,
        load_after=LOAD_AFTER,
    )
