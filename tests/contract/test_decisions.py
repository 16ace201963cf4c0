"""Contracts K1 and K2 at the protocol level: one decision per pause, visible wherever the
pause is and announced on the watch; a lease that lets exactly one worker at a time carry a
decision out, and lets another take over when it dies. Both backends."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import pytest

from checkpointd_client import (
    CheckpointdClient,
    FailedPreconditionError,
    InterruptEvent,
    InvalidArgumentError,
    NotFoundError,
    SnapshotComplete,
    SnapshotItem,
)
from tests.contract.helpers import interrupted
from tests.support.sidecar import Sidecar


def pause(client: CheckpointdClient, execution_id: str, **fields: object) -> str:
    """Record a pause; return its checkpoint id."""
    cp, pending = interrupted(execution_id, **fields)
    return client.record_interrupt(cp, pending).pending.checkpoint_id


# RFC 3339 in UTC, as the protobuf JSON mapping writes a Timestamp: never an offset.
_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3}|\.\d{6})?Z")


def metadata_time(text: str) -> datetime:
    """The instant of a time in ErrorInfo metadata, which must be RFC 3339 UTC with ``Z``."""
    assert _RFC3339_UTC.fullmatch(text), text
    return datetime.fromisoformat(text)


def listed(client: CheckpointdClient, execution_id: str):
    [row] = [
        p
        for p in client.list_pending_interrupts().pending_interrupts
        if p.execution_id == execution_id
    ]
    return row


def test_k1_first_decision_wins_and_is_listed(client, execution_id):
    """The first decision is stored on the pending interrupt and listed with it; a later,
    different one is ALREADY_DECIDED naming the winner (its time RFC 3339 UTC with ``Z``),
    and changes nothing."""
    checkpoint_id = pause(client, execution_id)
    decided = client.submit_decision(
        execution_id,
        approved=True,
        decided_by="bot-a",
        resume_metadata={"limit": 10**20, "who": "ünï"},
        reason="under the limit",
    )
    assert decided.checkpoint_id == checkpoint_id
    decision = decided.decision
    assert decision is not None
    assert decision.approved is True
    assert decision.metadata == {"limit": 10**20, "who": "ünï"}
    assert decision.decided_by == "bot-a"
    assert decision.reason == "under the limit"
    assert decision.status == "decided"
    assert decision.attempts == 0
    assert decision.decided_at is not None
    assert listed(client, execution_id) == decided

    with pytest.raises(FailedPreconditionError) as err:
        client.submit_decision(execution_id, approved=False, decided_by="bot-b")
    assert err.value.reason == "ALREADY_DECIDED"
    assert err.value.metadata["decided_by"] == "bot-a"
    assert err.value.metadata["approved"] == "true"
    assert metadata_time(err.value.metadata["decided_at"]) == decision.decided_at
    assert "bot-a" in str(err.value)
    assert listed(client, execution_id) == decided


def test_k1_retry_with_the_same_request_id_gets_the_first_answer(client, execution_id):
    """A retry (same request id) is answered like the first call, also after the pending
    row was claimed; it never counts as a second decision."""
    pause(client, execution_id)
    first = client.submit_decision(
        execution_id, approved=False, decided_by="human", request_id="decide-1"
    )
    again = client.submit_decision(
        execution_id, approved=False, decided_by="human", request_id="decide-1"
    )
    assert again == first
    client.claim_interrupt(execution_id)
    late = client.submit_decision(
        execution_id, approved=False, decided_by="human", request_id="decide-1"
    )
    assert late.decision == first.decision
    assert late.checkpoint_id == first.checkpoint_id


def test_k1_concurrent_deciders_exactly_one_wins(client, sidecar: Sidecar, execution_id):
    """Among concurrent deciders on separate connections, exactly one wins; every loser is
    told who did."""
    pause(client, execution_id)
    barrier = threading.Barrier(8)
    outcomes: list[tuple[str, str]] = []
    lock = threading.Lock()

    def decide(index: int) -> None:
        with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as own:
            barrier.wait()
            try:
                own.submit_decision(execution_id, approved=index % 2 == 0, decided_by=f"d{index}")
                result = ("won", f"d{index}")
            except FailedPreconditionError as exc:
                result = (f"lost:{exc.reason}", exc.metadata["decided_by"])
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = Counter(kind for kind, _ in outcomes)
    assert counts == {"won": 1, "lost:ALREADY_DECIDED": 7}
    [winner] = [who for kind, who in outcomes if kind == "won"]
    assert {who for _, who in outcomes} == {winner}
    assert listed(client, execution_id).decision.decided_by == winner


def test_k1_a_decision_after_the_resume_is_already_decided(client, execution_id):
    """Once the decided pause was resumed (its pending row claimed), a different decision is
    still refused naming the winner, not NOT_FOUND: a slow bot learns who decided."""
    pause(client, execution_id)
    client.submit_decision(execution_id, approved=True, decided_by="fast-bot")
    client.claim_interrupt(execution_id)
    with pytest.raises(FailedPreconditionError) as err:
        client.submit_decision(execution_id, approved=False, decided_by="slow-bot")
    assert err.value.reason == "ALREADY_DECIDED"
    assert err.value.metadata["decided_by"] == "fast-bot"


def test_k1_deciding_with_nothing_pending_is_not_found(client, execution_id):
    """No pending interrupt (never paused, or already claimed): NO_PENDING_INTERRUPT."""
    with pytest.raises(NotFoundError) as err:
        client.submit_decision(execution_id, approved=True, decided_by="bot")
    assert err.value.reason == "NO_PENDING_INTERRUPT"
    pause(client, execution_id)
    client.claim_interrupt(execution_id)
    with pytest.raises(NotFoundError) as err:
        client.submit_decision(execution_id, approved=True, decided_by="bot")
    assert err.value.reason == "NO_PENDING_INTERRUPT"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"decided_by": ""}, "decided_by"),
        ({"decided_by": "x" * 257}, "decided_by"),
        ({"reason": "r" * 1025}, "reason"),
        ({"execution_id": ""}, "execution_id"),
    ],
)
def test_k1_invalid_decision_is_refused_and_writes_nothing(client, execution_id, fields, field):
    """Bad input is INVALID_ARGUMENT naming the field; the pause stays undecided."""
    pause(client, execution_id)
    args: dict[str, object] = {"execution_id": execution_id, "decided_by": "bot"}
    args.update(fields)
    with pytest.raises(InvalidArgumentError) as err:
        client.submit_decision(approved=True, **args)
    assert err.value.metadata["field"] == field
    assert listed(client, execution_id).decision is None


def test_k1_metadata_must_be_a_json_object(client, execution_id):
    """Resume metadata is a JSON object (fastaiagent's Resume.metadata is a dict)."""
    from checkpointd_client.v1 import interrupt_service_pb2 as svc

    pause(client, execution_id)
    request = svc.SubmitDecisionRequest(
        namespace=client.namespace,
        execution_id=execution_id,
        approved=True,
        decided_by="bot",
        metadata_json="[1]",
    )
    with pytest.raises(InvalidArgumentError) as err:
        client._invoke(client._interrupts.SubmitDecision, request, None, ())
    assert err.value.metadata["field"] == "metadata_json"
    assert listed(client, execution_id).decision is None


def test_k1_a_new_pause_takes_a_new_decision(client, execution_id):
    """A decision belongs to one pause: when the run pauses again, the new pause is
    undecided and takes its own decision."""
    pause(client, execution_id, node_id="first")
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    client.claim_interrupt(execution_id)
    pause(client, execution_id, node_id="second")
    assert listed(client, execution_id).decision is None
    second = client.submit_decision(execution_id, approved=False, decided_by="bot")
    assert second.node_id == "second"
    assert second.decision is not None
    assert not second.decision.approved


def test_k1_delete_execution_removes_the_decision(client, execution_id):
    """DeleteExecution takes the decision with the run: a new run under the same id starts
    undecided."""
    pause(client, execution_id)
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    client.delete_execution(execution_id)
    pause(client, execution_id)
    assert listed(client, execution_id).decision is None
    client.submit_decision(execution_id, approved=False, decided_by="other")


def test_k1_decision_is_in_the_watch_snapshot_and_a_decided_event(client, execution_id):
    """A watcher sees a decided pause with its decision in the snapshot, and a live
    decision as a ``decided`` event carrying it."""
    decided_before = f"{execution_id}-a"
    pause(client, decided_before)
    client.submit_decision(decided_before, approved=True, decided_by="early")
    with client.watch_interrupts(timeout=60) as watch:
        snapshot: list[SnapshotItem] = []
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
            assert isinstance(item, SnapshotItem)
            snapshot.append(item)
        [row] = [i.pending for i in snapshot if i.pending.execution_id == decided_before]
        assert row.decision is not None
        assert row.decision.decided_by == "early"

        pause(client, execution_id)
        client.submit_decision(
            execution_id, approved=False, decided_by="late", resume_metadata={"why": "no"}
        )
        seen: list[InterruptEvent] = []
        for item in watch:
            if isinstance(item, InterruptEvent) and item.pending.execution_id == execution_id:
                seen.append(item)
                if item.type == "decided":
                    break
    assert [e.type for e in seen] == ["added", "decided"]
    assert seen[0].pending.decision is None
    decision = seen[1].pending.decision
    assert decision is not None
    assert (decision.approved, decision.decided_by, decision.metadata) == (
        False,
        "late",
        {"why": "no"},
    )


def test_k2_one_lease_at_a_time_and_takeover_after_it_runs_out(client, execution_id):
    """One worker holds a decision's lease; another gets LEASE_HELD (with the lease's end,
    RFC 3339 UTC with ``Z``) until it runs out, then takes it over (attempts counts the
    takeover). The first worker's late report is LEASE_LOST; the holder's report is final,
    its retry gets the same answer, and a lease after it is DECISION_CLOSED (``resumed``)."""
    checkpoint_id = pause(client, execution_id)
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    a, b = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    held = client.lease_decision(execution_id, checkpoint_id, lease_token=a, lease_seconds=1)
    assert held.decision is not None
    assert (held.decision.status, held.decision.attempts) == ("resuming", 1)
    assert held.decision.lease_expires_at is not None
    renewed = client.lease_decision(execution_id, checkpoint_id, lease_token=a, lease_seconds=1)
    assert renewed.decision is not None
    assert renewed.decision.attempts == 1
    with pytest.raises(FailedPreconditionError) as err:
        client.lease_decision(execution_id, checkpoint_id, lease_token=b)
    assert err.value.reason == "LEASE_HELD"
    expires = metadata_time(err.value.metadata["lease_expires_at"])
    assert expires == renewed.decision.lease_expires_at

    deadline = time.monotonic() + 30
    taken = None
    refused = ""
    while taken is None and time.monotonic() < deadline:
        try:
            taken = client.lease_decision(execution_id, checkpoint_id, lease_token=b)
        except FailedPreconditionError as exc:
            refused = exc.reason
            time.sleep(0.2)
    assert taken is not None, f"the lease never ran out ({refused})"
    assert taken.decision is not None
    assert taken.decision.attempts == 2

    with pytest.raises(FailedPreconditionError) as err:
        client.report_resume(execution_id, checkpoint_id, lease_token=a)
    assert err.value.reason == "LEASE_LOST"

    reported = client.report_resume(execution_id, checkpoint_id, lease_token=b)
    assert reported.decision is not None
    assert reported.decision.status == "resumed"
    assert reported.decision.reported_at is not None
    assert client.report_resume(execution_id, checkpoint_id, lease_token=b) == reported
    with pytest.raises(FailedPreconditionError) as err:
        client.lease_decision(execution_id, checkpoint_id, lease_token=b)
    assert err.value.reason == "DECISION_CLOSED"
    assert err.value.metadata["status"] == "resumed"
    with pytest.raises(FailedPreconditionError) as err:
        client.report_resume(execution_id, checkpoint_id, lease_token=b, error="late failure")
    assert err.value.reason == "DECISION_CLOSED"


def test_k2_failed_resume_is_recorded_and_announced(client, execution_id):
    """A worker's failure is stored on the decision (status and error) and is a
    ``resume_failed`` event, so the bot that decided sees it; a lease after it is
    DECISION_CLOSED with status ``resume_failed``."""
    checkpoint_id = pause(client, execution_id)
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    with client.watch_interrupts(timeout=60) as watch:
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
        client.lease_decision(execution_id, checkpoint_id, lease_token="w1")
        failed = client.report_resume(
            execution_id, checkpoint_id, lease_token="w1", error="boom\x00" + "x" * 5000
        )
        for item in watch:
            if isinstance(item, InterruptEvent) and item.pending.execution_id == execution_id:
                break
    assert failed.decision is not None
    assert failed.decision.status == "resume_failed"
    assert failed.decision.error.startswith("boomx")
    assert len(failed.decision.error) == 4096
    assert item.type == "resume_failed"
    assert item.pending.decision == failed.decision
    assert listed(client, execution_id).decision == failed.decision
    with pytest.raises(FailedPreconditionError) as err:
        client.lease_decision(execution_id, checkpoint_id, lease_token="w2")
    assert err.value.reason == "DECISION_CLOSED"
    assert err.value.metadata["status"] == "resume_failed"


def test_k2_lease_and_report_need_a_decision(client, execution_id):
    """A pause without a decision cannot be leased or reported: NO_DECISION."""
    checkpoint_id = pause(client, execution_id)
    with pytest.raises(NotFoundError) as err:
        client.lease_decision(execution_id, checkpoint_id, lease_token="w")
    assert err.value.reason == "NO_DECISION"
    with pytest.raises(NotFoundError) as err:
        client.report_resume(execution_id, checkpoint_id, lease_token="w")
    assert err.value.reason == "NO_DECISION"
    with pytest.raises(InvalidArgumentError) as invalid:
        client.lease_decision(execution_id, checkpoint_id, lease_token="w", lease_seconds=3601)
    assert invalid.value.metadata["field"] == "lease_seconds"


def test_k2_open_decisions_are_listed_after_their_pending_row_is_gone(client, execution_id):
    """ListDecisions(open_only) shows a decision until a worker reports on it, also once the
    resume has claimed the pending interrupt; all decisions page oldest first."""
    runs = [f"{execution_id}-{n}" for n in range(3)]
    pauses = {run: pause(client, run) for run in runs}
    for run in runs:
        client.submit_decision(run, approved=True, decided_by="bot")
    client.claim_interrupt(runs[0])  # what fastaiagent's resume does first
    client.lease_decision(runs[1], pauses[runs[1]], lease_token="w")
    client.report_resume(runs[1], pauses[runs[1]], lease_token="w")

    def listed_ids(open_only: bool) -> list[str]:
        ids, token = [], ""
        while True:
            page = client.list_decisions(open_only=open_only, page_size=1, page_token=token)
            ids += [p.execution_id for p in page.pending_interrupts if p.execution_id in runs]
            token = page.next_page_token
            if not token:
                return ids

    assert listed_ids(open_only=True) == [runs[0], runs[2]]
    assert listed_ids(open_only=False) == runs
    [first] = [
        p
        for p in client.list_decisions(open_only=True).pending_interrupts
        if p.execution_id == runs[0]
    ]
    assert first.checkpoint_id == pauses[runs[0]]
    assert first.decision is not None
    assert first.decision.status == "decided"
