"""A Postgres failover that loses commits (contract E1, E3, I5; docs/ha.md "Postgres failover").

A primary and an asynchronous streaming standby on loopback (tests/support/pg_async_pair.py),
a server on their multi-host URL with ``target_session_attrs=read-write``, and the failover
load of the synchronous tests (tests/reliability/failover_load.py: writers, a pauser-claimer,
a watch). Replication is then held back for a while (the standby receives nothing more, as
when it lags), the primary is killed and the standby promoted with what it has.

What asynchronous replication may lose, it loses: the writes acknowledged while replication
was held back. What it must not: any write acknowledged before; an ``INTERNAL``; health other
than SERVING after. And the watches follow the store back in time by themselves: the events
they had seen were lost, the store reuses their cursors, and a watch's view of the pending set
must end equal to the store's (I5: its cursor is refused as CURSOR_EXPIRED and it snapshots
again), where resuming after its cursor would keep pauses that no longer exist and skip the
ones written under the reused cursors.

Needs PostgreSQL 15's binaries and the ``postgres`` user; without them the test is skipped,
or fails under ``CHECKPOINTD_REQUIRE_FAULTS=1`` (CI).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from grpc_health.v1 import health_pb2

from checkpointd_client import (
    CheckpointdClient,
    InterruptEvent,
    SnapshotComplete,
    SnapshotItem,
)
from tests.reliability.failover_load import (
    EXPECTED,
    NAMESPACE,
    RETRY,
    Load,
    await_until,
    await_writes_back,
    health,
    lost_writes,
    started_cluster,
)
from tests.reliability.figures import record, size
from tests.support.pg_async_pair import AsyncPair
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = pytest.mark.timeout(size(180, 600))

#: Seconds of load before replication is held back, and after writes are acknowledged again.
LOAD_BEFORE = size(3, 30)
LOAD_AFTER = size(3, 30)
#: How long the standby receives nothing before the primary is lost: the writes acknowledged
#: meanwhile are on the primary alone.
LAG = 1.0


@pytest.fixture
def pair() -> Iterator[AsyncPair]:
    with started_cluster(AsyncPair, FileNotFoundError, "Postgres") as built:
        yield built


class PendingView:
    """The pending set as a watch shows it: a snapshot, then the events applied to it; a new
    snapshot (after CURSOR_EXPIRED) replaces what was built before."""

    def __init__(self, target: str) -> None:
        self.client = CheckpointdClient(target, namespace=NAMESPACE, retry=RETRY)
        self.watch = self.client.watch_interrupts()
        self.lock = threading.Lock()
        self.pending: set[str] = set()
        self.resnapshots = 0
        self.failure: BaseException | None = None
        self._rebuilding = False
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        try:
            for item in self.watch:
                with self.lock:
                    self._apply(item)
        except BaseException as exc:
            self.failure = exc

    def _apply(self, item: object) -> None:
        if isinstance(item, SnapshotItem):
            if item.resnapshot and not self._rebuilding:
                self.pending.clear()
                self._rebuilding = True
            self.pending.add(item.pending.execution_id)
        elif isinstance(item, SnapshotComplete):
            if item.resnapshot:
                if not self._rebuilding:
                    self.pending.clear()  # an empty snapshot replaced the view too
                self.resnapshots += 1
            self._rebuilding = False
        elif isinstance(item, InterruptEvent):
            if item.type == "added":
                self.pending.add(item.pending.execution_id)
            elif item.type in ("claimed", "removed"):
                self.pending.discard(item.pending.execution_id)

    def snapshot(self) -> set[str]:
        with self.lock:
            return set(self.pending)

    def close(self) -> None:
        self.watch.close()
        self.thread.join(30)
        self.client.close()


def test_e1_i5_async_failover_loses_only_the_unreplicated_writes_and_watches_follow(
    pair: AsyncPair,
) -> None:
    """Writes acknowledged before replication was held back survive; those after are lost
    with the primary; no call ends INTERNAL; health is SERVING; a watch's view of the pending
    set ends equal to the store's, through a fresh snapshot."""
    spec = StoreSpec("postgres", pair.url(), pg_schema="checkpointd_async")
    server = Sidecar(spec, extra_args=["--health-interval", "0.2", "--store-timeout", "3"])
    server.start()
    load = Load(server.target)
    view = PendingView(server.target)
    try:
        started = time.monotonic()
        await_until(
            lambda: load.ledger.acknowledged_since(started) >= 20 and load.events,
            30,
            "the load made no progress before the failover",
            load,
        )
        time.sleep(LOAD_BEFORE)
        with load.ledger.lock:
            replicated = dict(load.ledger.acknowledged)
        pair.await_replicated()  # what was acknowledged so far is on the standby too
        held_back = time.monotonic()
        pair.lag()
        time.sleep(LAG)
        crashed = time.monotonic()
        pair.fail_over()
        promoted = time.monotonic()
        await_writes_back(load, promoted)
        outage = load.ledger.longest_gap_after(crashed)
        time.sleep(LOAD_AFTER)
        load.finish()
        assert not load.ledger.failures, load.ledger.failures[:3]

        ledger = load.ledger
        with CheckpointdClient(
            server.target, namespace=NAMESPACE, retry=RETRY, timeout=30
        ) as checker:
            lost_before_lag = lost_writes(checker, replicated)
            lost = lost_writes(checker, ledger.acknowledged)
            stored_pending = {
                p.execution_id for p in checker.iter_pending_interrupts(page_size=1000)
            }
        # The watch's view converges on the store's pending set (nothing changes it now).
        deadline = time.monotonic() + 30
        while view.snapshot() != stored_pending and time.monotonic() < deadline:
            assert view.failure is None, view.failure
            time.sleep(0.1)
        seen = view.snapshot()
        errors = {k: v for k, v in ledger.statuses.items() if k != "OK"}
        record(
            "postgres failover (asynchronous, commits lost)",
            failovers=1,
            replication_held_back_ms=round(LAG * 1000),
            write_outage_ms=round(outage * 1000),
            promotion_ms=round((promoted - crashed) * 1000),
            writes_acknowledged=len(ledger.acknowledged),
            writes_acknowledged_while_held_back=(
                ledger.acknowledged_since(held_back) - ledger.acknowledged_since(crashed)
            ),
            writes_lost=lost,
            writes_lost_from_before=lost_before_lag,
            watch_resnapshots=view.resnapshots,
            watch_view_differs_by=len(seen ^ stored_pending),
            **{f"calls_{k.lower()}": v for k, v in sorted(ledger.statuses.items())},
        )
        assert lost_before_lag == 0, f"{lost_before_lag} writes replicated before were lost"
        assert lost > 0, "nothing was lost: replication was not held back"
        # A claim of a pause whose recording was lost is NOT_FOUND: the pause is gone too.
        assert set(ledger.statuses) <= EXPECTED | {"NOT_FOUND"}, (errors, ledger.unexpected[:3])
        assert seen == stored_pending, (
            sorted(seen - stored_pending),
            sorted(stored_pending - seen),
        )
        assert view.resnapshots >= 1
        assert health(server.target) == health_pb2.HealthCheckResponse.SERVING
        assert server.process is not None
        assert server.process.poll() is None
    finally:
        view.close()
        load.close()
        server.close()
