"""Crash suite (contract E1, I3, I5, P4): ``kill -9`` of the server at random moments while
writers, a pauser, claimers and a watcher run against it, on both backends.

After every restart: every acknowledged write is readable and equal to what was sent, no
interrupt was claimed twice, and (at the end) every event in the outbox reached the watcher,
which reconnected by itself, exactly once and in order. Full size: 100 cycles per backend;
reduced: 5. Half the writers and claimers send on the Write stream, the others unary calls
(S1), so both paths are killed under the same load. The stream half goes through a fault
proxy that forwards the stream (S2) and, each cycle, loses a reply (the stream ends),
drops or withholds one (the stream goes silent until a call's deadline passes), or recycles
every stream; those clients' calls have a shorter deadline so a silent stream is found out
within the cycle.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pytest

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    CheckpointdError,
    InterruptEvent,
    NotFoundError,
    PendingInterrupt,
    RetryPolicy,
    SnapshotComplete,
    SnapshotItem,
)
from tests.reliability.figures import record, size
from tests.reliability.store_dump import StoreReader
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

NAMESPACE = "crash"
CYCLES = size(5, 100)
# Retries ride over a restart (about a second); a call gives up only after 30 s.
RETRY = RetryPolicy(max_attempts=200, initial_backoff=0.05, max_backoff=0.3)
TIMEOUT = 30.0
#: The deadline of the calls through the fault proxy: a silent stream costs one call this long.
PROXIED_TIMEOUT = 8.0
ROWS_PER_EXECUTION = 40
#: One per cycle, on the proxied stream: what happens to the replies (S2).
STREAM_FAULTS = ("lose", "drop", "withhold", "recycle")
STREAM_METHODS = ("PutCheckpoint", "PutIdempotencyResult", "ClaimInterrupt")


@dataclass
class Ledger:
    """What the clients were told: acknowledged writes and granted claims."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    idempotent: dict[tuple[str, str], object] = field(default_factory=dict)
    paused: list[tuple[str, PendingInterrupt]] = field(default_factory=list)
    wins: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    unacknowledged: int = 0
    unknown_claims: int = 0
    errors: list[str] = field(default_factory=list)


def _client(server: Sidecar, *, write_stream: bool = True) -> CheckpointdClient:
    return CheckpointdClient(
        server.target,
        namespace=NAMESPACE,
        retry=RETRY,
        timeout=TIMEOUT,
        write_stream=write_stream,
    )


def _worker_client(server: Sidecar, proxy: GrpcFaultProxy, n: int) -> CheckpointdClient:
    """Even workers: the Write stream, through the fault proxy; odd ones: unary, direct."""
    if n % 2:
        return _client(server, write_stream=False)
    return CheckpointdClient(
        proxy.target, namespace=NAMESPACE, retry=RETRY, timeout=PROXIED_TIMEOUT
    )


def _stream_fault(proxy: GrpcFaultProxy, rng: random.Random) -> str:
    """Script one fault of the proxied stream; return its name."""
    fault = rng.choice(STREAM_FAULTS)
    method = rng.choice(STREAM_METHODS)
    if fault == "lose":
        proxy.lose_reply_next(method)
    elif fault == "drop":
        proxy.drop_reply_next(method)
    elif fault == "withhold":
        proxy.withhold_replies_next(method)
    else:
        proxy.recycle_streams()
    return fault


def _writer(
    server: Sidecar, proxy: GrpcFaultProxy, ledger: Ledger, stop: threading.Event, n: int
) -> None:
    rng = random.Random(n)
    with _worker_client(server, proxy, n) as client:
        i = 0
        while not stop.is_set():
            execution_id = f"w{n}-{i // ROWS_PER_EXECUTION}"
            sent = Checkpoint(
                execution_id=execution_id,
                checkpoint_id=uuid.uuid4().hex,
                chain_name="crash",
                node_id=f"n{i}",
                node_index=i,
                state_snapshot={"i": i, "big": 2**62 + i, "f": rng.random(), "s": "žluť ☃"},
                node_output={"nested": {"list": [i, None, True]}},
                created_at=datetime.now(UTC),
            )
            try:
                stored = client.put_checkpoint(sent)
            except CheckpointdError:
                with ledger.lock:
                    ledger.unacknowledged += 1
            else:
                if replace(stored, sequence=0) != sent:
                    ledger.errors.append(f"put answered {stored} for {sent}")
                with ledger.lock:
                    ledger.checkpoints[sent.checkpoint_id] = sent
            if i % 4 == 0:
                value = {"charge": i, "big": 2**70 + i}
                try:
                    client.put_idempotent(execution_id, f"k{i}", value)
                except CheckpointdError:
                    with ledger.lock:
                        ledger.unacknowledged += 1
                else:
                    with ledger.lock:
                        ledger.idempotent[(execution_id, f"k{i}")] = value
            i += 1


def _pauser(server: Sidecar, ledger: Ledger, stop: threading.Event) -> None:
    with _client(server) as client:
        i = 0
        while not stop.is_set():
            execution_id = f"p-{uuid.uuid4().hex[:12]}"
            cp = Checkpoint(
                execution_id=execution_id,
                checkpoint_id=uuid.uuid4().hex,
                chain_name="crash",
                node_id="approve",
                status="interrupted",
                interrupt_reason="approval",
                interrupt_context={"amount": i},
            )
            pending = PendingInterrupt(
                execution_id=execution_id,
                chain_name="crash",
                node_id="approve",
                reason="approval",
                context={"amount": i},
            )
            try:
                result = client.record_interrupt(cp, pending)
            except CheckpointdError:
                with ledger.lock:
                    ledger.unacknowledged += 1
            else:
                with ledger.lock:
                    ledger.checkpoints[cp.checkpoint_id] = replace(
                        cp, created_at=result.checkpoint.created_at
                    )
                    ledger.paused.append((execution_id, result.pending))
            i += 1
            stop.wait(0.02)


def _claimer(
    server: Sidecar, proxy: GrpcFaultProxy, ledger: Ledger, stop: threading.Event, n: int
) -> None:
    rng = random.Random(1000 + n)
    with _worker_client(server, proxy, n) as client:
        while not stop.is_set():
            with ledger.lock:
                recent = ledger.paused[-6:]
            if not recent:
                stop.wait(0.01)
                continue
            execution_id, pending = rng.choice(recent)
            token = uuid.uuid4().hex
            try:
                won = client.claim_interrupt(execution_id, claim_token=token)
            except NotFoundError:
                continue
            except CheckpointdError:
                with ledger.lock:
                    ledger.unknown_claims += 1
                continue
            if won != pending:
                ledger.errors.append(f"claim of {execution_id} answered {won}, recorded {pending}")
            with ledger.lock:
                ledger.wins[execution_id].append(token)


class Watcher(threading.Thread):
    """Follows the namespace's interrupt events through every crash (the client reconnects)."""

    def __init__(self, server: Sidecar) -> None:
        super().__init__(daemon=True)
        self.client = _client(server)
        self.watch = self.client.watch_interrupts()
        self.snapshot_cursor: int | None = None
        self.events: list[tuple[int, str, str]] = []
        self.resnapshots = 0
        self.resnapshot_after: list[int] = []
        """The cursor the watch had reached before each new snapshot."""
        self.failure: BaseException | None = None
        self._reached = 0

    def run(self) -> None:
        try:
            for item in self.watch:
                if isinstance(item, (SnapshotItem, SnapshotComplete)) and item.resnapshot:
                    self.resnapshots += 1
                    if not self.resnapshot_after or self._reached:
                        self.resnapshot_after.append(self._reached)
                    self._reached = 0
                if isinstance(item, SnapshotComplete):
                    if self.snapshot_cursor is None:
                        self.snapshot_cursor = item.cursor
                    self._reached = item.cursor
                elif isinstance(item, InterruptEvent):
                    self.events.append((item.cursor, item.type, item.pending.execution_id))
                    self._reached = item.cursor
        except BaseException as exc:
            self.failure = exc

    @property
    def cursor(self) -> int:
        return self.watch.cursor

    def close(self) -> None:
        self.watch.close()
        self.join(30)
        self.client.close()


def _verify_checkpoints(
    client: CheckpointdClient, expected: dict[str, Checkpoint], executions: set[str]
) -> int:
    """Read every named execution and compare with the acknowledged writes; return the lost."""
    stored: dict[str, Checkpoint] = {}
    for execution_id in sorted(executions):
        for cp in client.iter_checkpoints(execution_id, page_size=1000):
            stored[cp.checkpoint_id] = replace(cp, sequence=0)
    lost = 0
    for checkpoint_id, sent in expected.items():
        got = stored.get(checkpoint_id)
        if got is None or replace(got, sequence=0) != sent:
            lost += 1
    return lost


# Each cycle kills and restarts the server (2-3 s): the full-size run's 100 cycles take minutes.
@pytest.mark.timeout(size(120, 900))
def test_e1_i3_i5_s1_s2_kill_9_under_load_loses_nothing_on_either_write_path(
    sidecar: Sidecar, store_spec
) -> None:
    """Across kill -9 cycles under concurrent writers, claimers and a watcher, the stream
    half through a proxy that loses, drops, withholds or recycles: no acknowledged write is
    lost or changed, no claim is granted twice, every outbox event is delivered."""
    ledger = Ledger()
    stop = threading.Event()
    rng = random.Random(7)
    proxy = GrpcFaultProxy(sidecar.target, write_stream=True)
    faults: list[str] = []
    watcher = Watcher(sidecar)
    watcher.start()
    workers = [
        *(
            threading.Thread(target=_writer, args=(sidecar, proxy, ledger, stop, n))
            for n in range(3)
        ),
        threading.Thread(target=_pauser, args=(sidecar, ledger, stop)),
        *(
            threading.Thread(target=_claimer, args=(sidecar, proxy, ledger, stop, n))
            for n in range(3)
        ),
    ]
    for worker in workers:
        worker.start()
    lost = 0
    double_claims = 0
    verified: set[str] = set()
    rechecked: set[str] = set()
    try:
        # The first kill comes once the watch holds a cursor: before any event a watch has
        # none to resume from (cursor 0 asks for a snapshot), and a new snapshot is its only way.
        deadline = time.monotonic() + 60
        while watcher.cursor == 0 and watcher.failure is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.cursor > 0, f"no event reached the watch in 60 s: {watcher.failure}"
        with _client(sidecar) as checker:
            for _ in range(CYCLES):
                faults.append(_stream_fault(proxy, rng))
                time.sleep(rng.uniform(0.3, 1.0))
                sidecar.kill()
                with ledger.lock:
                    acknowledged = dict(ledger.checkpoints)
                    won = {e: list(t) for e, t in ledger.wins.items()}
                time.sleep(rng.uniform(0.0, 0.3))
                sidecar.start()
                # Every write acknowledged before the kill, and not checked yet, is there.
                new = {k: v for k, v in acknowledged.items() if k not in verified}
                lost += _verify_checkpoints(checker, new, {cp.execution_id for cp in new.values()})
                verified.update(new)
                # A claim granted before the kill stays granted: nobody else can claim it now.
                for execution_id in set(won) - rechecked:
                    try:
                        checker.claim_interrupt(execution_id, claim_token=uuid.uuid4().hex)
                    except NotFoundError:
                        pass
                    else:
                        double_claims += 1
                    rechecked.add(execution_id)
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
        streamed = sum(c.stream is not None for c in proxy.calls())
        streams = proxy.streams_opened()
        proxy.close()

    with _client(sidecar) as checker:
        # The final state: every acknowledged write of the whole run, exactly as sent.
        executions = {cp.execution_id for cp in ledger.checkpoints.values()}
        lost += _verify_checkpoints(checker, ledger.checkpoints, executions)
        for (execution_id, key), value in ledger.idempotent.items():
            result = checker.get_idempotent(execution_id, key)
            if not result.found or result.value != value:
                lost += 1
    double_claims += sum(len(tokens) - 1 for tokens in ledger.wins.values() if len(tokens) > 1)

    reader = StoreReader(store_spec)
    try:
        outbox = [(c, kind, ex) for c, ns, kind, ex in reader.outbox() if ns == NAMESPACE]
        deadline = time.monotonic() + 60
        while watcher.cursor < (outbox[-1][0] if outbox else 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        integrity = reader.integrity_check() if store_spec.backend == "sqlite" else "ok"
    finally:
        reader.close()
    watcher.close()
    assert watcher.snapshot_cursor is not None, watcher.failure
    expected_events = [e for e in outbox if e[0] > watcher.snapshot_cursor]

    writes = len(ledger.checkpoints) + len(ledger.idempotent)
    record(
        f"crash ({store_spec.backend})",
        cycles=CYCLES,
        writes_acknowledged=writes,
        writes_unacknowledged=ledger.unacknowledged,
        writes_lost=lost,
        claims_granted=sum(len(t) for t in ledger.wins.values()),
        double_claims=double_claims,
        events_in_outbox=len(expected_events),
        events_delivered=len(watcher.events),
        stream_faults=len(faults),
        stream_items_proxied=streamed,
        streams_through_proxy=streams,
    )
    assert not ledger.errors, ledger.errors[:5]
    assert watcher.failure is None, watcher.failure
    assert writes > CYCLES, "the load did not run"
    assert streamed > CYCLES, "the proxied stream carried no load"
    assert ledger.wins, "no claim was ever granted"
    assert lost == 0
    assert double_claims == 0
    assert watcher.resnapshots == 0, f"new snapshots after cursors {watcher.resnapshot_after}"
    assert watcher.events == expected_events
    assert integrity == "ok"
