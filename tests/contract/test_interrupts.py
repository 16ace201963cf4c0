"""Contract I1-I4: recording, claiming and listing pending interrupts, on both backends."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from checkpointd_client import CheckpointdClient, InvalidArgumentError, NotFoundError
from tests.contract.conftest import NO_RETRY, WRITE_PATHS
from tests.contract.helpers import checkpoint, interrupted
from tests.reliability.figures import FULL


@pytest.fixture(params=WRITE_PATHS)
def write_path(request: pytest.FixtureRequest) -> str:
    """Every rule here holds on both write paths: the Write stream and unary calls (S1)."""
    return str(request.param)


def test_i1_record_writes_checkpoint_and_pending_row_together(client, execution_id):
    """After a record, the interrupted checkpoint is the latest and the pending row is listed."""
    cp, pending = interrupted(execution_id, agent_path="agent:a")
    result = client.record_interrupt(cp, pending)
    assert result.pending_created
    assert result.checkpoint.status == "interrupted"
    assert client.get_latest_checkpoint(execution_id) == result.checkpoint
    [listed] = client.list_pending_interrupts().pending_interrupts
    assert listed == result.pending
    assert listed.checkpoint_id == result.checkpoint.checkpoint_id
    assert listed.context == {"amount": 500}
    assert listed.created_at == result.checkpoint.created_at


def test_i1_invalid_record_writes_neither_row(client, execution_id):
    """A record refused for its pending row leaves no checkpoint behind."""
    cp, pending = interrupted(execution_id)
    bad = dataclasses.replace(pending, execution_id="someone-else")
    with pytest.raises(InvalidArgumentError) as err:
        client.record_interrupt(cp, bad)
    assert err.value.metadata["field"] == "pending.execution_id"
    with pytest.raises(InvalidArgumentError) as err:
        client.record_interrupt(checkpoint(execution_id, status="completed"), pending)
    assert err.value.metadata["field"] == "checkpoint.status"
    assert client.list_checkpoints(execution_id).checkpoints == []
    assert client.list_pending_interrupts().pending_interrupts == []


def test_i1_readers_racing_record_never_see_one_row_without_the_other(sidecar, execution_id):
    """While one writer records interrupts, readers on their own connections look from both
    sides: a visible interrupted checkpoint always has its pending row, and a visible pending
    row always has its checkpoint. Nothing is claimed or deleted, so whatever one read saw,
    the next read must see too; the readers must also have looked while records were landing
    (runs seen missing, then present), or the race never happened."""
    runs = [f"{execution_id}-{i}" for i in range(60)]
    writing = threading.Event()
    done = threading.Event()
    problems: list[str] = []
    seen_missing_then_present: set[str] = set()
    pending_samples = 0

    # Orders, not timings, make the race happen on a loaded machine: the writer starts once
    # both readers have looked (and seen every run missing), and at every 15th run it waits
    # for the pending-side reader to take a sample while the records are landing.
    looked = threading.Barrier(3)
    sampled = threading.Condition()

    def write() -> None:
        with CheckpointdClient(
            sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
        ) as writer:
            looked.wait(60)
            writing.set()
            for index, run in enumerate(runs):
                if index and index % 15 == 0:
                    with sampled:
                        before = pending_samples

                        def sampled_since(b: int = before) -> bool:
                            return pending_samples > b

                        sampled.wait_for(sampled_since, timeout=30)
                writer.record_interrupt(*interrupted(run, chain_name=run))
        done.set()

    def checkpoint_first() -> None:
        missing: set[str] = set()
        with CheckpointdClient(
            sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
        ) as reader:
            first_pass = True
            while not done.is_set():
                for run in runs:
                    try:
                        latest = reader.get_latest_checkpoint(run)
                    except NotFoundError:
                        missing.add(run)
                        continue
                    rows = reader.list_pending_interrupts(chain_name=run).pending_interrupts
                    if [(p.execution_id, p.checkpoint_id) for p in rows] != [
                        (run, latest.checkpoint_id)
                    ]:
                        problems.append(f"{run}: checkpoint visible, pending rows {rows}")
                    if run in missing:
                        seen_missing_then_present.add(run)
                if first_pass:
                    first_pass = False
                    looked.wait(60)

    def pending_first() -> None:
        nonlocal pending_samples
        with CheckpointdClient(
            sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
        ) as reader:
            first_pass = True
            while not done.is_set():
                rows = reader.list_pending_interrupts(page_size=1000).pending_interrupts
                if 0 < len(rows) < len(runs):
                    with sampled:
                        pending_samples += 1  # a sample taken while records were landing
                        sampled.notify_all()
                for row in rows:
                    try:
                        reader.get_checkpoint(row.execution_id, row.checkpoint_id)
                    except NotFoundError:
                        problems.append(f"{row.execution_id}: pending visible, no checkpoint")
                if first_pass:
                    first_pass = False
                    looked.wait(60)

    readers = [threading.Thread(target=checkpoint_first), threading.Thread(target=pending_first)]
    writer = threading.Thread(target=write)
    for thread in readers:
        thread.start()
    writer.start()
    writer.join(120)
    done.set()
    for thread in readers:
        thread.join(120)
    assert writing.is_set()
    assert problems == []
    assert len(seen_missing_then_present) >= 5, seen_missing_then_present
    assert pending_samples >= 3
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as c:
        assert len(c.list_pending_interrupts(page_size=1000).pending_interrupts) == len(runs)


def test_i2_record_twice_keeps_first_pending_row_and_stores_both_checkpoints(client, execution_id):
    """A second record while a pending row exists keeps that row and still stores the
    checkpoint; the reply says no pending row was created."""
    cp1, p1 = interrupted(execution_id, node_id="first")
    cp2, p2 = interrupted(execution_id, node_id="second")
    first = client.record_interrupt(cp1, p1)
    second = client.record_interrupt(cp2, p2)
    assert not second.pending_created
    assert second.pending == first.pending
    assert [c.node_id for c in client.list_checkpoints(execution_id).checkpoints] == [
        "first",
        "second",
    ]
    assert client.claim_interrupt(execution_id).node_id == "first"


def test_i2_record_retry_with_same_request_id_returns_the_stored_rows(client, execution_id):
    """A retried record (same request id) is answered with the stored rows, not an error."""
    cp, pending = interrupted(execution_id, checkpoint_id="cp-i")
    first = client.record_interrupt(cp, pending, request_id="rec-1")
    again = client.record_interrupt(cp, pending, request_id="rec-1")
    assert again.checkpoint == first.checkpoint
    assert again.pending == first.pending
    assert again.pending_created


def test_i3_claim_succeeds_once_then_not_found(client, execution_id):
    """The first claim gets the row; the next one gets NOT_FOUND."""
    cp, pending = interrupted(execution_id)
    recorded = client.record_interrupt(cp, pending)
    assert client.claim_interrupt(execution_id) == recorded.pending
    with pytest.raises(NotFoundError) as err:
        client.claim_interrupt(execution_id)
    assert err.value.reason == "NO_PENDING_INTERRUPT"
    assert client.list_pending_interrupts().pending_interrupts == []


def test_i3_claim_retry_with_same_token_gets_the_same_row(client, execution_id):
    """A claim retried with its token after a lost reply gets the row again, not NOT_FOUND;
    another token does not."""
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending)
    won = client.claim_interrupt(execution_id, claim_token="tok-1")
    assert client.claim_interrupt(execution_id, claim_token="tok-1") == won
    with pytest.raises(NotFoundError):
        client.claim_interrupt(execution_id, claim_token="tok-2")


def _claim_race(clients: list[CheckpointdClient], execution_id: str, claimers: int) -> Counter[str]:
    """Release ``claimers`` threads at once on one execution, spread over the clients, and
    count the outcomes by kind."""
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(claimers)

    def claim(i: int) -> None:
        barrier.wait()
        try:
            clients[i % len(clients)].claim_interrupt(execution_id)
            outcome = "won"
        except NotFoundError:
            outcome = "not_found"
        except Exception as exc:  # any other outcome is a defect to report
            outcome = type(exc).__name__
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_i3_exactly_one_of_32_concurrent_claimers_on_two_servers_wins(
    sidecar_factory, execution_id
):
    """32 threads claiming through two server processes sharing one store, 30 rounds (100
    at full size, CHECKPOINTD_RELIABILITY=full): one winner and 31 NOT_FOUND every round, no
    other error. (tests/reliability/test_lost_replies.py races 64 claimers on 3 servers.)"""
    servers = [sidecar_factory(), sidecar_factory()]
    clients = [CheckpointdClient(s.target, retry=NO_RETRY) for s in servers]
    try:
        for round_no in range(100 if FULL else 30):
            exec_id = f"{execution_id}-{round_no}"
            cp, pending = interrupted(exec_id)
            clients[round_no % 2].record_interrupt(cp, pending)
            outcomes = _claim_race(clients, exec_id, claimers=32)
            assert outcomes == Counter(won=1, not_found=31), (round_no, outcomes)
    finally:
        for c in clients:
            c.close()


def test_i4_pending_listed_newest_first_paged_and_filtered(client):
    """Pending interrupts come newest first, page completely, and filter by chain name,
    reason and agent_path prefix."""
    specs = [
        ("e0", "billing", "approval", "swarm:s/agent:a"),
        ("e1", "billing", "review", "swarm:s/agent:b"),
        ("e2", "support", "approval", "supervisor:x/worker:y"),
        ("e3", "billing", "approval", None),
        ("e4", "support", "approval", "swarm:s/agent:a/tool:t"),
    ]
    for exec_id, chain, reason, path in specs:
        cp, pending = interrupted(
            exec_id, chain_name=chain, interrupt_reason=reason, agent_path=path
        )
        client.record_interrupt(cp, pending)

    def ids(**filters: str) -> list[str]:
        return [p.execution_id for p in client.iter_pending_interrupts(page_size=2, **filters)]

    assert ids() == ["e4", "e3", "e2", "e1", "e0"]
    assert ids(chain_name="billing") == ["e3", "e1", "e0"]
    assert ids(reason="approval") == ["e4", "e3", "e2", "e0"]
    assert ids(agent_path_prefix="swarm:s/agent:a") == ["e4", "e0"]
    assert ids(chain_name="support", reason="approval", agent_path_prefix="swarm:") == ["e4"]
    assert ids(agent_path_prefix="%") == []
    page = client.list_pending_interrupts(page_size=2)
    assert len(page.pending_interrupts) == 2
    assert page.next_page_token


def test_i4_pending_created_at_is_the_callers_when_given(client, execution_id):
    """A backdated pending row keeps its created_at, to the microsecond and in UTC (J4), in
    the reply and as stored."""
    # Microseconds that a millisecond or float round trip would change; a non-UTC offset that
    # must come back as the same instant in UTC.
    when = datetime(2024, 2, 29, 23, 59, 58, 123457, tzinfo=timezone(timedelta(hours=5)))
    cp, pending = interrupted(execution_id, created_at=when)
    result = client.record_interrupt(cp, pending)
    assert result.pending.created_at == when
    assert result.pending.created_at.utcoffset() == timedelta(0)
    assert result.pending.created_at.microsecond == 123457
    [listed] = client.list_pending_interrupts().pending_interrupts
    assert listed.created_at == when
    assert client.get_latest_checkpoint(execution_id).created_at == when
