"""Lost replies (contract C2, I3, D1, P3, S2): a real gRPC proxy between client and server lets
the server do the work, then answers UNAVAILABLE as if the reply had been lost. The client's
retries (same request id, checkpoint id, claim token) must end in exactly the state of one
successful call; and a claim raced by 64 callers over 3 server processes, with a fraction of
the replies lost, has exactly one winner. Full size: 200 claim trials; reduced: 20.

The writes the Write stream carries (the four of S1 and the graph writes of S4) are tested
on both paths: unary calls, and the stream through the proxy's stream forwarding, where a
lost reply ends the stream ``UNAVAILABLE`` (a connection lost with the reply on it), and a
dropped or withheld reply, or a black-holed stream, leaves the stream silent until the call's
deadline. Two of the race's three servers are
reached over the stream.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import grpc
import pytest

from checkpointd_client import (
    AsyncCheckpointdClient,
    Checkpoint,
    CheckpointdClient,
    CheckpointdError,
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    PendingInterrupt,
    RetryPolicy,
)
from checkpointd_client._graph_write_ahead import abegin_graph_write, begin_graph_write
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
)
from tests.reliability.figures import record, size
from tests.reliability.store_dump import StoreReader
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.sidecar import Sidecar
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.own_server, pytest.mark.timeout(size(120, 1800))]

TRIALS = size(20, 200)
CLAIMERS = 64
SERVERS = 3
RETRY = RetryPolicy(max_attempts=20, initial_backoff=0.01, max_backoff=0.1)
NO_RETRY = RetryPolicy(max_attempts=1)


def _interrupted(execution_id: str) -> tuple[Checkpoint, PendingInterrupt]:
    cp = Checkpoint(
        execution_id=execution_id,
        checkpoint_id=uuid.uuid4().hex,
        chain_name="flow",
        node_id="approve",
        status="interrupted",
        interrupt_reason="approval",
        interrupt_context={"amount": 500},
    )
    pending = PendingInterrupt(
        execution_id=execution_id,
        chain_name="flow",
        node_id="approve",
        reason="approval",
        context={"amount": 500},
    )
    return cp, pending


@pytest.fixture
def write_path() -> str:
    """How the client's writes reach the proxy: unary calls (the proxy refuses the stream, so
    the client falls back), unless a test asks for both paths."""
    return "unary"


@pytest.fixture
def proxy(sidecar: Sidecar, write_path: str) -> Iterator[GrpcFaultProxy]:
    """A fault proxy in front of the server; it forwards the Write stream on the stream path."""
    with GrpcFaultProxy(sidecar.target, write_stream=write_path == "stream") as p:
        yield p


@pytest.fixture
def client(proxy: GrpcFaultProxy) -> Iterator[CheckpointdClient]:
    """A retrying client that talks to the server through the proxy."""
    with CheckpointdClient(proxy.target, retry=RETRY, timeout=30) as c:
        yield c


#: The paths of the writes the stream carries: every lost-reply rule holds on both.
both_paths = pytest.mark.parametrize("write_path", ["unary", "stream"])


def _carried_by(proxy: GrpcFaultProxy, method: str, write_path: str) -> None:
    """Every call of the method went the expected way (not a silent fallback)."""
    streams = {c.stream is not None for c in proxy.calls(method)}
    assert streams == {write_path == "stream"}, streams


def _request_ids(proxy: GrpcFaultProxy, method: str, message: Callable[[bytes], Any]) -> set[str]:
    return {r.request_id for r in proxy.requests(method, message)}


@both_paths
def test_c2_put_retried_after_lost_replies_writes_one_row(
    proxy, client, sidecar, store_spec, write_path
):
    """A put whose first replies are lost is retried with the same ids and stores one row,
    answered with the stored row."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    sent = Checkpoint(execution_id=execution_id, checkpoint_id=uuid.uuid4().hex, node_id="a")
    proxy.lose_reply_next("PutCheckpoint", times=3)
    stored = client.put_checkpoint(sent)
    assert proxy.forwarded("PutCheckpoint") == 4
    _carried_by(proxy, "PutCheckpoint", write_path)
    assert (
        len(
            _request_ids(
                proxy, "PutCheckpoint", checkpoint_service_pb2.PutCheckpointRequest.FromString
            )
        )
        == 1
    )
    history = list(client.iter_checkpoints(execution_id))
    assert history == [stored]
    assert replace(stored, created_at=None, sequence=0) == sent


@both_paths
def test_i1_record_interrupt_retried_after_lost_reply_is_one_pause(
    proxy, client, store_spec, write_path
):
    """A lost reply to RecordInterrupt: the retry reports the pause it made; one checkpoint,
    one pending row, one 'added' event."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    cp, pending = _interrupted(execution_id)
    proxy.lose_reply_next("RecordInterrupt", times=2)
    result = client.record_interrupt(cp, pending)
    assert proxy.forwarded("RecordInterrupt") == 3
    _carried_by(proxy, "RecordInterrupt", write_path)
    assert result.pending_created
    assert [c.checkpoint_id for c in client.iter_checkpoints(execution_id)] == [cp.checkpoint_id]
    assert [p.execution_id for p in client.iter_pending_interrupts()] == [execution_id]
    reader = StoreReader(store_spec)
    try:
        events = [e for e in reader.outbox() if e[3] == execution_id]
    finally:
        reader.close()
    assert [e[2] for e in events] == ["added"]


@both_paths
def test_i3_claim_retried_after_lost_replies_keeps_the_win(proxy, client, sidecar, write_path):
    """A claim whose replies are lost is retried with the same token and still wins; any other
    claimer then gets NOT_FOUND."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    cp, pending = _interrupted(execution_id)
    recorded = client.record_interrupt(cp, pending).pending
    proxy.lose_reply_next("ClaimInterrupt", times=3)
    assert client.claim_interrupt(execution_id) == recorded
    _carried_by(proxy, "ClaimInterrupt", write_path)
    tokens = {
        r.claim_token
        for r in proxy.requests(
            "ClaimInterrupt", interrupt_service_pb2.ClaimInterruptRequest.FromString
        )
    }
    assert len(tokens) == 1
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as other, pytest.raises(NotFoundError):
        other.claim_interrupt(execution_id)


def test_k1_decision_retried_after_lost_replies_is_one_decision(proxy, client, sidecar):
    """A decision whose replies are lost is retried with the same request id and gets its own
    answer, not ALREADY_DECIDED; the pause holds that one decision, and another decider is
    refused naming it."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    cp, pending = _interrupted(execution_id)
    client.record_interrupt(cp, pending)
    proxy.lose_reply_next("SubmitDecision", times=3)
    decided = client.submit_decision(
        execution_id, approved=False, decided_by="lossy-bot", resume_metadata={"n": 1}
    )
    assert proxy.forwarded("SubmitDecision") == 4
    ids = {
        r.request_id
        for r in proxy.requests(
            "SubmitDecision", interrupt_service_pb2.SubmitDecisionRequest.FromString
        )
    }
    assert len(ids) == 1
    assert decided.decision is not None
    assert (decided.decision.decided_by, decided.decision.approved) == ("lossy-bot", False)
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as other:
        with pytest.raises(FailedPreconditionError) as refused:
            other.submit_decision(execution_id, approved=True, decided_by="other")
        assert refused.value.metadata["decided_by"] == "lossy-bot"
        [listed] = other.list_pending_interrupts().pending_interrupts
        assert listed.decision == decided.decision


def test_k2_lease_and_report_retried_after_lost_replies_count_once(proxy, client):
    """A lease and a report whose replies are lost are retried with the same token: the retry
    renews rather than counting a second attempt, and the report is answered, not refused."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    cp, pending = _interrupted(execution_id)
    checkpoint_id = client.record_interrupt(cp, pending).pending.checkpoint_id
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    proxy.lose_reply_next("LeaseDecision", times=2)
    leased = client.lease_decision(execution_id, checkpoint_id, lease_token="w1")
    assert proxy.forwarded("LeaseDecision") == 3
    assert leased.decision is not None
    assert leased.decision.attempts == 1
    proxy.lose_reply_next("ReportResume", times=2)
    reported = client.report_resume(execution_id, checkpoint_id, lease_token="w1")
    assert proxy.forwarded("ReportResume") == 3
    assert reported.decision is not None
    assert (reported.decision.status, reported.decision.attempts) == ("resumed", 1)


@both_paths
def test_d1_idempotency_put_retried_after_lost_reply_stores_the_value(proxy, client, write_path):
    """A lost reply to PutIdempotencyResult: the retry leaves exactly the value sent."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    proxy.lose_reply_next("PutIdempotencyResult", times=2)
    client.put_idempotent(execution_id, "charge", {"id": 2**64 + 1})
    assert proxy.forwarded("PutIdempotencyResult") == 3
    _carried_by(proxy, "PutIdempotencyResult", write_path)
    ids = _request_ids(
        proxy,
        "PutIdempotencyResult",
        idempotency_service_pb2.PutIdempotencyResultRequest.FromString,
    )
    assert len(ids) == 1
    assert client.get_idempotent(execution_id, "charge").value == {"id": 2**64 + 1}


def test_d1_late_retry_of_an_idempotency_put_does_not_undo_a_newer_put(proxy, sidecar):
    """A put whose reply was lost, retried after another caller stored a newer value for the
    same key, is answered like the first call and does not write again (the newer value
    stays): the state of the two successful calls, in the order they happened."""
    execution_id = f"lost-{uuid.uuid4().hex[:8]}"
    request = idempotency_service_pb2.PutIdempotencyResultRequest(
        namespace="default",
        request_id=uuid.uuid4().hex,
        execution_id=execution_id,
        key="charge",
        result_json='{"v": 1}',
    )
    channel = grpc.insecure_channel(proxy.target)
    put = channel.unary_unary(
        "/checkpointd.v1.IdempotencyService/PutIdempotencyResult",
        request_serializer=idempotency_service_pb2.PutIdempotencyResultRequest.SerializeToString,
        response_deserializer=idempotency_service_pb2.PutIdempotencyResultResponse.FromString,
    )
    try:
        proxy.lose_reply_next("PutIdempotencyResult")
        with pytest.raises(grpc.RpcError) as lost:
            put(request, timeout=10)
        assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
        with CheckpointdClient(sidecar.target, retry=NO_RETRY) as other:
            other.put_idempotent(execution_id, "charge", {"v": 2})
            put(request, timeout=10)  # the first caller's retry arrives late
            assert other.get_idempotent(execution_id, "charge").value == {"v": 2}
    finally:
        channel.close()


def _graph_put(thread: str) -> graph_service_pb2.PutGraphCheckpointRequest:
    return graph_service_pb2.PutGraphCheckpointRequest(
        request_id=uuid.uuid4().hex,
        checkpoint=graph_service_pb2.GraphCheckpoint(
            thread_id=thread,
            checkpoint_id="c1",
            checkpoint=graph_service_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
        ),
    )


def _graph_pause(thread: str) -> graph_service_pb2.PutGraphWritesRequest:
    """A task's interrupt write with its descriptor (G8): one pending interrupt."""
    return graph_service_pb2.PutGraphWritesRequest(
        request_id=uuid.uuid4().hex,
        thread_id=thread,
        checkpoint_id="c1",
        task_id="review-task",
        writes=[
            graph_service_pb2.GraphWrite(
                idx=0,
                channel="__interrupt__",
                value=graph_service_pb2.TypedValue(type="json", data=b"1"),
            )
        ],
        interrupts=[
            graph_service_pb2.GraphInterrupt(interrupt_id="i1", node="review", reason="approval")
        ],
    )


def _graph_state(client: CheckpointdClient, store_spec: Any, thread: str) -> tuple[Any, ...]:
    """The thread's pending writes, pending interrupts and interrupt event kinds."""
    found = client.call_graph(
        "GetGraphCheckpoint",
        graph_service_pb2.GetGraphCheckpointRequest(thread_id=thread, checkpoint_id="c1"),
    )
    pending = [p.execution_id for p in client.iter_pending_interrupts()]
    reader = StoreReader(store_spec)
    try:
        events = [e[2] for e in reader.outbox() if e[3] == thread]
    finally:
        reader.close()
    return (
        [(w.task_id, w.idx) for w in found.checkpoint_tuple.pending_writes],
        pending.count(thread),
        events,
    )


@both_paths
def test_g6_s4_graph_writes_retried_after_lost_replies_write_once(
    proxy, client, store_spec, write_path
):
    """A graph put and a task's interrupt writes whose first replies are lost are retried
    with the same request ids: the put is stored, the writes once, and the pause they
    describe is one pending interrupt with one 'added' event."""
    thread = f"lost-{uuid.uuid4().hex[:8]}"
    proxy.lose_reply_next("PutGraphCheckpoint", times=3)
    client.call_graph("PutGraphCheckpoint", _graph_put(thread))
    assert proxy.forwarded("PutGraphCheckpoint") == 4
    proxy.lose_reply_next("PutGraphWrites", times=2)
    client.call_graph("PutGraphWrites", _graph_pause(thread))
    assert proxy.forwarded("PutGraphWrites") == 3
    for method, message in (
        ("PutGraphCheckpoint", graph_service_pb2.PutGraphCheckpointRequest.FromString),
        ("PutGraphWrites", graph_service_pb2.PutGraphWritesRequest.FromString),
    ):
        _carried_by(proxy, method, write_path)
        assert len(_request_ids(proxy, method, message)) == 1
    assert _graph_state(client, store_spec, thread) == ([("review-task", 0)], 1, ["added"])


@pytest.mark.parametrize("saver_client", ["blocking", "asyncio"])
@pytest.mark.parametrize("write_path", ["stream"])
def test_g22_graph_writes_sent_ahead_whose_replies_are_lost_are_sent_again_once_waited_for(
    proxy, client, store_spec, write_path, saver_client
):
    """The pipelining savers' path (G22), on the blocking client and the asyncio one: a graph
    put and a task's interrupt writes sent on the stream ahead of their answers, whose
    replies are lost (the stream ends UNAVAILABLE after the server wrote), are sent again
    with the same request ids when waited for: the put is stored, the writes once, one
    pending interrupt with one 'added' event."""
    thread = f"ahead-{uuid.uuid4().hex[:8]}"
    put_request, pause_request = _graph_put(thread), _graph_pause(thread)
    if saver_client == "blocking":
        proxy.lose_reply_next("PutGraphCheckpoint", times=2)
        put = begin_graph_write(client, "PutGraphCheckpoint", put_request)
        proxy.lose_reply_next("PutGraphWrites", times=2)
        writes = begin_graph_write(client, "PutGraphWrites", pause_request)
        put.result()
        writes.result()
    else:

        async def ahead() -> None:
            async with AsyncCheckpointdClient(proxy.target, retry=RETRY, timeout=30) as aio:
                proxy.lose_reply_next("PutGraphCheckpoint", times=2)
                put = await abegin_graph_write(aio, "PutGraphCheckpoint", put_request)
                proxy.lose_reply_next("PutGraphWrites", times=2)
                writes = await abegin_graph_write(aio, "PutGraphWrites", pause_request)
                await put.result()
                await writes.result()

        asyncio.run(ahead())
    for method, message in (
        ("PutGraphCheckpoint", graph_service_pb2.PutGraphCheckpointRequest.FromString),
        ("PutGraphWrites", graph_service_pb2.PutGraphWritesRequest.FromString),
    ):
        assert proxy.forwarded(method) == 3, method
        assert any(c.stream is not None for c in proxy.calls(method)), method  # sent ahead
        assert len(_request_ids(proxy, method, message)) == 1
    assert _graph_state(client, store_spec, thread) == ([("review-task", 0)], 1, ["added"])


@pytest.mark.parametrize("fault", ["drop", "withhold", "black-hole"])
def test_s2_s4_a_graph_write_whose_stream_reply_never_comes_is_sent_again_and_written_once(
    sidecar: Sidecar, store_spec, fault: str
):
    """On the stream path, a task's interrupt writes whose reply the proxy drops (the stream
    answers on), withholds (the stream wedges) or whose whole stream is black-holed end
    DEADLINE_EXCEEDED within the call's deadline, and the stream is replaced; the same
    request sent again is answered on a fresh stream: one pending interrupt, one 'added'
    event, the writes stored once."""
    thread = f"silent-{uuid.uuid4().hex[:8]}"
    pause = _graph_pause(thread)
    with (
        GrpcFaultProxy(sidecar.target, write_stream=True) as proxy,
        CheckpointdClient(proxy.target, retry=RETRY, timeout=1.0) as client,
    ):
        if fault == "black-hole":
            proxy.black_hole_next_stream()  # the client's first stream
        elif fault == "drop":
            proxy.drop_reply_next("PutGraphWrites")
        else:
            proxy.withhold_replies_next("PutGraphWrites")
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.call_graph("PutGraphWrites", pause)
        assert time.monotonic() - started <= 1.0 + 1.5  # within its deadline, not later
        client.call_graph("PutGraphWrites", pause)
        client.call_graph("PutGraphCheckpoint", _graph_put(thread))  # the writes' checkpoint
        assert {c.stream is not None for c in proxy.calls()} == {True}
        assert len({c.stream for c in proxy.calls("PutGraphWrites")}) == 2
        assert len(_request_ids(proxy, "PutGraphWrites", type(pause).FromString)) == 1
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as check:
        assert _graph_state(check, store_spec, thread) == ([("review-task", 0)], 1, ["added"])


@pytest.mark.parametrize("fault", ["drop", "withhold"])
def test_i1_i3_s2_a_pause_and_a_claim_whose_stream_replies_never_come_are_one_pause_and_one_win(
    sidecar: Sidecar, store_spec, fault: str
):
    """On the stream path, a record and then a claim whose reply the proxy drops (the stream
    answers on) or withholds (the stream wedges) each end DEADLINE_EXCEEDED within the call's
    deadline, and the stream is replaced; each call sent again with the same request id
    (and claim token) is answered on a fresh stream like the first: one pause with one
    'added' event, one winner, and any other claimer gets NOT_FOUND."""
    execution_id = f"silent-{uuid.uuid4().hex[:8]}"
    cp, pending = _interrupted(execution_id)
    record_id, claim_id, token = (uuid.uuid4().hex for _ in range(3))
    with (
        GrpcFaultProxy(sidecar.target, write_stream=True) as proxy,
        CheckpointdClient(proxy.target, retry=RETRY, timeout=1.0) as client,
    ):
        silence = proxy.drop_reply_next if fault == "drop" else proxy.withhold_replies_next

        def unanswered(call: Callable[[], object]) -> None:
            started = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                call()
            assert time.monotonic() - started <= 1.0 + 1.5  # within its deadline, not later

        silence("RecordInterrupt")
        unanswered(lambda: client.record_interrupt(cp, pending, request_id=record_id))
        recorded = client.record_interrupt(cp, pending, request_id=record_id)
        assert recorded.pending_created
        silence("ClaimInterrupt")
        claim = functools.partial(
            client.claim_interrupt, execution_id, claim_token=token, request_id=claim_id
        )
        unanswered(claim)
        assert claim() == recorded.pending
        assert proxy.streams_opened() == 3
        assert {c.stream is not None for c in proxy.calls()} == {True}
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as other, pytest.raises(NotFoundError):
        other.claim_interrupt(execution_id)
    reader = StoreReader(store_spec)
    try:
        kinds = [e[2] for e in reader.outbox() if e[3] == execution_id]
    finally:
        reader.close()
    assert kinds.count("added") == 1
    assert len(kinds) == len(set(kinds)), kinds
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as check:
        assert [c.checkpoint_id for c in check.iter_checkpoints(execution_id)] == [cp.checkpoint_id]


async def test_i3_one_winner_among_64_claimers_on_3_servers_with_lost_replies(
    sidecar_factory: Callable[..., Sidecar], store_spec
) -> None:
    """Exactly one of 64 concurrent claimers on 3 server processes wins each pause, while a
    random share of the claim replies is lost and retried; every loser gets NOT_FOUND. The
    first server is reached by unary calls, the other two over the Write stream, where each
    lost reply ends the stream with every claim in flight on it."""
    rng = random.Random(3)
    servers = [sidecar_factory() for _ in range(SERVERS)]
    proxies = [
        GrpcFaultProxy(s.target, max_workers=CLAIMERS, write_stream=n > 0)
        for n, s in enumerate(servers)
    ]
    clients = [AsyncCheckpointdClient(p.target, retry=RETRY, timeout=60) for p in proxies]
    winners_total = 0
    lost_replies = 0
    streamed = 0
    failures: list[str] = []
    try:
        for trial in range(TRIALS):
            execution_id = f"race-{trial}-{uuid.uuid4().hex[:8]}"
            cp, pending = _interrupted(execution_id)
            recorded = (await clients[trial % SERVERS].record_interrupt(cp, pending)).pending
            for p in proxies:
                p.reset_counts()
                n = rng.randint(1, 8)
                p.lose_reply_next("ClaimInterrupt", times=n)
            results = await asyncio.gather(
                *(clients[i % SERVERS].claim_interrupt(execution_id) for i in range(CLAIMERS)),
                return_exceptions=True,
            )
            for p in proxies:
                lost_replies += sum(c.fault is not None for c in p.calls("ClaimInterrupt"))
                streamed += sum(c.stream is not None for c in p.calls("ClaimInterrupt"))
                p.clear_faults()
            wins = [r for r in results if isinstance(r, PendingInterrupt)]
            others = [r for r in results if not isinstance(r, PendingInterrupt | NotFoundError)]
            winners_total += len(wins)
            if len(wins) != 1 or wins[0] != recorded or others:
                failures.append(f"trial {trial}: {len(wins)} winners, other outcomes {others[:3]}")
    finally:
        for c in clients:
            await c.aclose()
        for p in proxies:
            p.close()
    record(
        f"lost replies ({store_spec.backend})",
        claim_trials=TRIALS,
        claimers_per_trial=CLAIMERS,
        server_processes=SERVERS,
        claim_replies_lost=lost_replies,
        claims_sent_on_the_stream=streamed,
        winners=winners_total,
        trials_without_exactly_one_winner=len(failures),
    )
    assert not failures, failures[:5]
    assert lost_replies >= TRIALS  # the faults did happen
    assert streamed >= TRIALS  # and on the stream path too


#: Silenced-connection trials (each waits out a silent connection, up to P8's 15 s).
SILENT_TRIALS = size(1, 5)
#: Each claim attempt's deadline, as a latency-bound caller sets it; no client retries.
CLAIM_TIMEOUT = 1.2
#: Three times P8's 15 s, for a loaded machine.
ANSWER_BOUND_S = 45.0


def _claim_until_answered(
    claim: Callable[[], PendingInterrupt], silenced_at: float
) -> tuple[PendingInterrupt | None, float]:
    """Send the same claim (same token) until it is answered: the row (the win) or
    NOT_FOUND; return the answer and how long after the silence it came."""
    while time.monotonic() - silenced_at < ANSWER_BOUND_S:
        try:
            won: PendingInterrupt | None = claim()
        except NotFoundError:
            won = None
        except CheckpointdError:
            continue  # DEADLINE_EXCEEDED on the silent connection, UNAVAILABLE as it closes
        return won, time.monotonic() - silenced_at
    raise AssertionError(f"a claim was not answered within {ANSWER_BOUND_S:g}s of the silence")


class _Claimer:
    """One client of a claim race through the proxy: blocking or asyncio (on an event loop of
    its own, driven from its claimer's thread), on the Write stream or on unary calls."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        write_stream = "stream" in name
        self.loop: asyncio.AbstractEventLoop | None = None
        if name.startswith("async"):
            self.loop = asyncio.new_event_loop()
            self.aio = AsyncCheckpointdClient(target, retry=NO_RETRY, write_stream=write_stream)
            self.loop.run_until_complete(self.aio.list_pending_interrupts(timeout=30))
        else:
            self.sync = CheckpointdClient(target, retry=NO_RETRY, write_stream=write_stream)
            self.sync.list_pending_interrupts(timeout=30)  # the connection is open before

    def claim(self, execution_id: str, silenced_at: float) -> tuple[PendingInterrupt | None, float]:
        token = uuid.uuid4().hex
        if self.loop is not None:
            loop, aio = self.loop, self.aio
            return _claim_until_answered(
                lambda: loop.run_until_complete(
                    aio.claim_interrupt(execution_id, claim_token=token, timeout=CLAIM_TIMEOUT)
                ),
                silenced_at,
            )
        claim = functools.partial(
            self.sync.claim_interrupt, execution_id, claim_token=token, timeout=CLAIM_TIMEOUT
        )
        return _claim_until_answered(claim, silenced_at)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.aio.aclose())
            self.loop.close()
        else:
            self.sync.close()


def _race(claimers: list[_Claimer], execution_id: str, silenced_at: float) -> dict[str, Any]:
    """Every claimer's answer (or what it raised), each claiming from a thread of its own."""
    answers: dict[str, Any] = {}

    def run(claimer: _Claimer) -> None:
        try:
            answers[claimer.name] = claimer.claim(execution_id, silenced_at)
        except BaseException as exc:  # reported by the test, with the claimer's name
            answers[claimer.name] = exc

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(ANSWER_BOUND_S + 30)
    return answers


def test_i3_p8_a_claim_race_on_a_connection_that_goes_silent_is_answered_once_left(
    sidecar_factory: Callable[..., Sidecar], store_spec
) -> None:
    """Claimers (blocking and asyncio clients, on the Write stream and on unary calls) race
    for a pause through a TCP proxy that has just silenced their connection: their claims
    reach the server, which picks a winner, but no reply comes back. Each retries its claim
    with its token (1.2 s deadline, no client retries) until answered: within P8's bound the
    clients are on new connections, the winner gets its row back and every other NOT_FOUND.
    Before P8 the winner's retries went on to the silent connection for a minute or more."""
    server = sidecar_factory()
    host, port = server.tcp_target.rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    target = f"127.0.0.1:{proxy.port}"
    names = [
        f"{kind}-{path}-{n}" for kind in ("sync", "async") for path in ("stream", "unary")
        for n in range(2)
    ]  # fmt: skip
    worst = 0.0
    failures: list[str] = []
    try:
        with CheckpointdClient(server.target, retry=RETRY, timeout=30) as direct:
            for trial in range(SILENT_TRIALS):
                claimers = [_Claimer(name, target) for name in names]
                execution_id = f"silent-race-{trial}-{uuid.uuid4().hex[:8]}"
                recorded = direct.record_interrupt(*_interrupted(execution_id)).pending
                assert proxy.silence() >= 1
                answers = _race(claimers, execution_id, time.monotonic())
                for claimer in claimers:
                    claimer.close()
                errors = {n: a for n, a in answers.items() if isinstance(a, BaseException)}
                if errors or len(answers) != len(claimers):
                    failures.append(f"trial {trial}: {errors or answers}")
                    continue
                worst = max(worst, *(after for _, after in answers.values()))
                wins = [won for won, _ in answers.values() if won is not None]
                if wins != [recorded]:
                    failures.append(f"trial {trial}: {len(wins)} winners: {answers}")
    finally:
        proxy.close()
    record(
        f"lost replies, silent connections ({store_spec.backend})",
        claim_trials=SILENT_TRIALS,
        claimers_per_trial=len(names),
        worst_answer_after_silence_ms=round(worst * 1000),
        trials_without_exactly_one_answered_winner=len(failures),
    )
    assert not failures, failures[:3]
