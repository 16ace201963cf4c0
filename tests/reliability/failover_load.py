"""The load and the checks of the Postgres failover suites (test_failover.py on
pg_auto_failover, test_patroni_failover.py on Patroni): one scenario, two failover managers.

:func:`crash_under_load` starts a checkpointd server on a multi-host URL, runs writers
(put_checkpoint), a pauser-claimer (record_interrupt then claim_interrupt) and a watcher
(watch_interrupts) against it, crashes the primary, waits for the standby's promotion and for
writes to come back, and then checks: every acknowledged write is readable and equal to what
was sent; no call ended other than OK, UNAVAILABLE or DEADLINE_EXCEEDED (never INTERNAL); no
interrupt was claimed twice; the watcher went on by itself, delivered events of pauses made
after the failover, and no event twice; health is SERVING. The figures go to
tests/reliability/figures.py under the suite's name.
"""

from __future__ import annotations

import contextlib
import pwd
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import pairwise
from typing import Protocol, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    CheckpointdError,
    InterruptEvent,
    NotFoundError,
    PendingInterrupt,
    RetryPolicy,
    SnapshotComplete,
)
from tests.reliability.faults import capability_missing
from tests.reliability.figures import record
from tests.support.sidecar import Sidecar, StoreSpec

__all__ = [
    "EXPECTED",
    "NAMESPACE",
    "RETRY",
    "TIMEOUT",
    "Ledger",
    "Load",
    "await_until",
    "crash_under_load",
    "health",
    "lost_writes",
]

NAMESPACE = "failover"
#: Each call retries UNAVAILABLE a few times within its deadline; the load threads retry the
#: same request (same checkpoint_id, claim_token) after that, counting each failed call.
RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.3)
TIMEOUT = 5.0
#: The statuses a call may end with while the database fails over.
EXPECTED = {"OK", "UNAVAILABLE", "DEADLINE_EXCEEDED"}
#: The statuses after which the load sends the same request again.
RETRIED = {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
#: How long writes may take to come back after the promotion.
RECOVERY_TIMEOUT = 60.0

T = TypeVar("T")


@dataclass
class Ledger:
    """What the load's clients were told."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: checkpoint_id -> (the checkpoint as sent, with the created_at stored, when acknowledged)
    acknowledged: dict[str, Checkpoint] = field(default_factory=dict)
    acknowledged_at: list[float] = field(default_factory=list)
    #: The status every call ended with ("OK" included), by name.
    statuses: Counter[str] = field(default_factory=Counter)
    #: execution_id -> the claim tokens granted on it.
    wins: dict[str, list[str]] = field(default_factory=dict)
    #: execution_id of each pause acknowledged, with when.
    paused: list[tuple[float, str]] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    #: The calls that ended with a status outside RETRIED (not NOT_FOUND), as raised.
    unexpected: list[str] = field(default_factory=list)

    def ended(self, status: str) -> None:
        with self.lock:
            self.statuses[status] += 1

    def acknowledge(self, sent: Checkpoint, stored: Checkpoint) -> None:
        with self.lock:
            self.acknowledged[sent.checkpoint_id] = replace(sent, created_at=stored.created_at)
            self.acknowledged_at.append(time.monotonic())

    def longest_gap_after(self, moment: float) -> float:
        """The write outage: the longest time without a write acknowledged, ending after
        ``moment`` (the crash)."""
        with self.lock:
            moments = sorted(self.acknowledged_at)
        return max(b - a for a, b in pairwise(moments) if b > moment)

    def acknowledged_since(self, moment: float) -> int:
        with self.lock:
            return sum(t > moment for t in self.acknowledged_at)


def _status(exc: CheckpointdError) -> str:
    return exc.code.name if exc.code is not None else "NONE"


class Load:
    """Writers, a pauser-claimer and a watcher against one server, until stopped."""

    def __init__(self, target: str, writers: int = 3) -> None:
        self.target = target
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.watch_client = self._client()
        self.watch = self.watch_client.watch_interrupts()
        self.snapshot_cursor: int | None = None
        self.resnapshots = 0
        self.events: list[tuple[int, str, str]] = []
        self.threads = [
            *(threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(writers)),
            threading.Thread(target=self._pause_and_claim, daemon=True),
        ]
        self.watcher = threading.Thread(target=self._follow, daemon=True)
        for thread in [*self.threads, self.watcher]:
            thread.start()

    def _client(self) -> CheckpointdClient:
        return CheckpointdClient(self.target, namespace=NAMESPACE, retry=RETRY, timeout=TIMEOUT)

    def _until_done(self, call: Callable[[], T]) -> T | None:
        """Call ``call`` until it succeeds (None if the load stopped first, or it ended with
        a status no retry can change, which the assertions then report), counting how each
        attempt ended. ``call`` sends the same request each time (the same request_id, and
        claim_token): a retry, never a second write. A NotFoundError is raised as it is."""
        while not self.stop.is_set():
            try:
                result = call()
            except NotFoundError:
                self.ledger.ended("NOT_FOUND")
                raise
            except CheckpointdError as exc:
                status = _status(exc)
                self.ledger.ended(status)
                if status not in RETRIED:
                    self.ledger.unexpected.append(repr(exc))
                    return None
                self.stop.wait(0.05)
                continue
            self.ledger.ended("OK")
            return result
        return None

    def _write(self, n: int) -> None:
        try:
            with self._client() as client:
                i = 0
                while not self.stop.is_set():
                    sent = Checkpoint(
                        execution_id=f"w{n}-{i // 50}",
                        checkpoint_id=uuid.uuid4().hex,
                        node_id=f"n{i}",
                        state_snapshot={"i": i, "big": 2**63 + i, "s": "žluť ☃"},
                    )
                    stored = self._until_done(
                        partial(client.put_checkpoint, sent, request_id=uuid.uuid4().hex)
                    )
                    if isinstance(stored, Checkpoint):
                        self.ledger.acknowledge(sent, stored)
                    i += 1
                    self.stop.wait(0.005)
        except BaseException as exc:
            self.ledger.failures.append(exc)

    def _pause_and_claim(self) -> None:
        try:
            with self._client() as client:
                while not self.stop.is_set():
                    execution_id = f"p-{uuid.uuid4().hex[:12]}"
                    cp = Checkpoint(
                        execution_id=execution_id,
                        checkpoint_id=uuid.uuid4().hex,
                        node_id="approve",
                        status="interrupted",
                        interrupt_reason="approval",
                    )
                    pending = PendingInterrupt(execution_id=execution_id, reason="approval")
                    result = self._until_done(
                        partial(client.record_interrupt, cp, pending, request_id=uuid.uuid4().hex)
                    )
                    if result is None:
                        continue
                    self.ledger.acknowledge(cp, result.checkpoint)
                    with self.ledger.lock:
                        self.ledger.paused.append((time.monotonic(), execution_id))
                    token = uuid.uuid4().hex
                    try:
                        won = self._until_done(
                            partial(
                                client.claim_interrupt,
                                execution_id,
                                claim_token=token,
                                request_id=uuid.uuid4().hex,
                            )
                        )
                    except NotFoundError:
                        continue
                    if won is not None:
                        with self.ledger.lock:
                            self.ledger.wins.setdefault(execution_id, []).append(token)
                    self.stop.wait(0.02)
        except BaseException as exc:
            self.ledger.failures.append(exc)

    def _follow(self) -> None:
        try:
            for item in self.watch:
                if isinstance(item, SnapshotComplete):
                    if self.snapshot_cursor is None:
                        self.snapshot_cursor = item.cursor
                    if item.resnapshot:
                        self.resnapshots += 1
                elif isinstance(item, InterruptEvent):
                    self.events.append((item.cursor, item.type, item.pending.execution_id))
        except BaseException as exc:
            if not self.stop.is_set():
                self.ledger.failures.append(exc)

    def finish(self) -> None:
        """Stop the writers and claimer and wait for them (a stuck one fails the test)."""
        self.stop.set()
        for thread in self.threads:
            thread.join(TIMEOUT * 3)
        stuck = [t.name for t in self.threads if t.is_alive()]
        assert not stuck, f"load threads still running after stop: {stuck}"

    def close(self) -> None:
        self.stop.set()
        self.watch.close()
        self.watcher.join(30)
        self.watch_client.close()


def health(target: str) -> int:
    """The server's overall health (grpc.health.v1 Check, service "")."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(response.status)


def await_until(condition: Callable[[], object], timeout: float, what: str, load: Load) -> float:
    """Wait until ``condition()``; return when it became true (time.monotonic())."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert not load.ledger.failures, load.ledger.failures[:3]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return time.monotonic()


def await_writes_back(load: Load, promoted: float) -> float:
    """Wait until a write is acknowledged after ``promoted``; return when it was."""
    return await_until(
        lambda: load.ledger.acknowledged_since(promoted) > 0,
        RECOVERY_TIMEOUT,
        "writes never succeeded after the promotion",
        load,
    )


class _Cluster(Protocol):
    def start(self) -> object: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=_Cluster)


@contextlib.contextmanager
def started_cluster(make: Callable[[], C], missing: type[Exception], runs: str) -> Iterator[C]:
    """A Postgres cluster whose processes run as the postgres user (``runs``: what they
    are, for the skip reason), started, and torn down after; skipped (a failure under
    CHECKPOINTD_REQUIRE_FAULTS=1) when the user, runuser or its packages (``missing``, raised
    by ``make``) are not here."""
    if shutil.which("runuser") is None:
        capability_missing(f"runuser is missing ({runs} must run as the postgres user)")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        capability_missing(f"there is no postgres user to run {runs} as")
    try:
        built = make()
    except missing as exc:
        capability_missing(str(exc))
    try:
        built.start()
        yield built
    finally:
        built.close()


def lost_writes(client: CheckpointdClient, acknowledged: dict[str, Checkpoint]) -> int:
    """How many acknowledged writes are missing or different."""
    stored: dict[str, Checkpoint] = {}
    for execution_id in sorted({cp.execution_id for cp in acknowledged.values()}):
        for cp in client.iter_checkpoints(execution_id, page_size=1000):
            stored[cp.checkpoint_id] = replace(cp, sequence=0)
    return sum(stored.get(k) != v for k, v in acknowledged.items())


def crash_under_load(
    suite: str,
    url: str,
    crash: Callable[[], None],
    await_promotion: Callable[[], None],
    load_before: float,
    load_after: float,
) -> None:
    """Crash the primary under load: ``crash()`` kills it, ``await_promotion()`` returns once
    the standby is the primary. The server on ``url`` (the multi-host URL) reconnects to it,
    writes come back, nothing acknowledged is lost, nothing ends INTERNAL, no interrupt is
    claimed twice, the watch goes on, health is SERVING. Figures are recorded as ``suite``."""
    spec = StoreSpec("postgres", url, pg_schema="checkpointd_failover")
    server = Sidecar(spec, extra_args=["--health-interval", "0.2", "--store-timeout", "3"])
    server.start()
    load = Load(server.target)
    try:
        started = time.monotonic()
        await_until(
            lambda: load.ledger.acknowledged_since(started) >= 20 and load.events,
            30,
            "the load made no progress before the crash",
            load,
        )
        time.sleep(load_before)
        crashed = time.monotonic()
        crash()
        await_promotion()
        promoted = time.monotonic()
        back = await_writes_back(load, promoted)
        outage = load.ledger.longest_gap_after(crashed)
        time.sleep(load_after)
        load.finish()
        assert not load.ledger.failures, load.ledger.failures[:3]

        ledger = load.ledger
        with CheckpointdClient(
            server.target, namespace=NAMESPACE, retry=RETRY, timeout=30
        ) as checker:
            lost = lost_writes(checker, ledger.acknowledged)
            double_claims = 0
            for execution_id in ledger.wins:
                try:
                    checker.claim_interrupt(execution_id, claim_token=uuid.uuid4().hex)
                except NotFoundError:
                    pass
                else:
                    double_claims += 1
        # The watcher catches up with the pauses made after the failover.
        after = {e for t, e in ledger.paused if t > back}
        await_until(
            lambda: after & {e for _, _, e in load.events},
            30,
            "the watch delivered no event of a pause made after the failover",
            load,
        )
        cursors = [c for c, _, _ in load.events]
        duplicates = len(cursors) - len(set(cursors))
        status = health(server.target)
        errors = {k: v for k, v in ledger.statuses.items() if k != "OK"}
        record(
            suite,
            failovers=1,
            write_outage_ms=round(outage * 1000),
            promotion_ms=round((promoted - crashed) * 1000),
            writes_acknowledged=len(ledger.acknowledged),
            writes_lost=lost,
            double_claims=double_claims,
            events_delivered=len(load.events),
            duplicate_events=duplicates,
            resnapshots=load.resnapshots,
            **{f"calls_{k.lower()}": v for k, v in sorted(ledger.statuses.items())},
        )
        assert lost == 0, f"{lost} of {len(ledger.acknowledged)} acknowledged writes lost"
        assert set(ledger.statuses) <= EXPECTED, (errors, ledger.unexpected[:3])
        assert double_claims == 0
        assert duplicates == 0, cursors
        assert cursors == sorted(cursors)
        assert status == health_pb2.HealthCheckResponse.SERVING
        assert server.process is not None
        assert server.process.poll() is None
    finally:
        load.close()
        server.close()
