"""Contract S2: a Write stream that stops answering while its connection stays up does not
take the client's writes down with it. Through a real gRPC proxy that forwards the stream
(tests/support/grpc_fault_stream.py) and black-holes or wedges it, the default path answers
as many calls as the unary path, each within its deadline, losing nothing and writing
nothing twice; a stream that keeps failing is not reopened in a tight loop.

Both clients: the blocking one runs in a worker thread, the asyncio one in the test's loop.
The black-hole run is 8 puts per path in ``make test``, 40 (the issue's figure) at full size.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from checkpointd_client import (
    AsyncCheckpointdClient,
    Checkpoint,
    CheckpointdClient,
    DeadlineExceededError,
    RetryPolicy,
)
from checkpointd_client._write_stream import accepted
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    write_service_pb2,
    write_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY
from tests.reliability.figures import size
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.shared_server import SharedSidecar

PUTS = size(8, 40)
TIMEOUT = 1.5
RETRY = RetryPolicy(max_attempts=6)
#: What a call may take beyond its timeout on a busy machine: bounded, not a speed claim.
SLACK = 1.5
KINDS = ["sync", "async"]


class _Writer:
    """The blocking or the asyncio client behind one awaitable ``put``."""

    def __init__(self, kind: str, client: CheckpointdClient | AsyncCheckpointdClient) -> None:
        self.kind = kind
        self.client = client

    async def put(self, checkpoint: Checkpoint, **options: Any) -> Checkpoint:
        if isinstance(self.client, AsyncCheckpointdClient):
            return await self.client.put_checkpoint(checkpoint, **options)
        return await asyncio.to_thread(self.client.put_checkpoint, checkpoint, **options)

    @property
    def writes(self) -> Any:
        return self.client._writes


@asynccontextmanager
async def _writer(kind: str, target: str, namespace: str, **options: Any) -> AsyncIterator[_Writer]:
    if kind == "async":
        async with AsyncCheckpointdClient(target, namespace=namespace, **options) as aclient:
            yield _Writer(kind, aclient)
    else:
        with CheckpointdClient(target, namespace=namespace, **options) as client:
            yield _Writer(kind, client)


@dataclass
class _Outcome:
    checkpoint: Checkpoint
    seconds: float
    stored: Checkpoint | None
    error: BaseException | None


async def _sequential_puts(writer: _Writer, run: str) -> list[_Outcome]:
    outcomes = []
    for n in range(PUTS):
        sent = Checkpoint(execution_id=f"{run}-{n}", checkpoint_id=uuid.uuid4().hex, node_id="a")
        started = time.monotonic()
        try:
            stored, error = await writer.put(sent), None
        except Exception as exc:  # every failure is counted, and must be a deadline
            stored, error = None, exc
        outcomes.append(_Outcome(sent, time.monotonic() - started, stored, error))
    return outcomes


async def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _request_ids_by_checkpoint(proxy: GrpcFaultProxy) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = {}
    for request in proxy.requests(
        "PutCheckpoint", checkpoint_service_pb2.PutCheckpointRequest.FromString
    ):
        ids.setdefault(request.checkpoint.checkpoint_id, set()).add(request.request_id)
    return ids


@pytest.mark.parametrize("kind", KINDS)
async def test_s2_a_black_holed_stream_answers_as_many_calls_as_unary(
    sidecar: SharedSidecar, kind: str
):
    """Sequential puts through a proxy that forwards the first Write stream's items to the
    server and none of its replies: the default path answers as many calls as
    write_stream=False does with its first reply withheld (all but the first), every call
    ends within its deadline, every acknowledged put is stored as sent, nothing is stored
    twice, each checkpoint was sent under one request id, and the dead stream is cancelled."""
    runs: dict[str, list[_Outcome]] = {}
    for path in ("stream", "unary"):
        run = f"bh-{path}-{uuid.uuid4().hex[:8]}"
        with GrpcFaultProxy(sidecar.target, write_stream=True) as proxy:
            if path == "stream":
                proxy.black_hole_next_stream()
            else:
                proxy.withhold_replies_next("PutCheckpoint")
            async with _writer(
                kind,
                proxy.target,
                sidecar.namespace,
                timeout=TIMEOUT,
                retry=RETRY,
                write_stream=path == "stream",
            ) as writer:
                runs[path] = await _sequential_puts(writer, run)
                if path == "stream":
                    # The dead stream was given up: one stream is left open, the fresh one.
                    assert await _wait_for(lambda: proxy.open_streams() == 1)
                    assert proxy.streams_opened() == 2
                    assert all(c.stream is not None for c in proxy.calls("PutCheckpoint"))
                else:
                    assert all(c.stream is None for c in proxy.calls("PutCheckpoint"))
            ids = _request_ids_by_checkpoint(proxy)
        assert all(len(request_ids) == 1 for request_ids in ids.values()), ids
        outcomes = runs[path]
        for outcome in outcomes:
            assert outcome.seconds <= TIMEOUT + SLACK, (path, outcome)
            assert outcome.error is None or isinstance(outcome.error, DeadlineExceededError)
        with CheckpointdClient(
            sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
        ) as check:
            for outcome in outcomes:
                stored = list(check.iter_checkpoints(outcome.checkpoint.execution_id))
                # The black-holed put reached the server: stored once, like every other.
                assert [c.checkpoint_id for c in stored] == [outcome.checkpoint.checkpoint_id]
                if outcome.stored is not None:
                    assert stored == [outcome.stored]
    answered = {path: sum(o.error is None for o in outcomes) for path, outcomes in runs.items()}
    assert answered["unary"] == PUTS - 1, runs["unary"]
    assert answered["stream"] >= answered["unary"], runs["stream"]


@pytest.mark.parametrize("kind", KINDS)
async def test_s2_the_other_items_of_a_stream_that_stopped_answering_are_retried_on_a_fresh_one(
    sidecar: SharedSidecar, kind: str
):
    """The stream wedges (the proxy holds every reply from the first put's on): the first
    put, with a 1 s timeout, ends DEADLINE_EXCEEDED in time; the second put, sent on the same
    stream with a long timeout, is sent again on a fresh stream with the same request id and
    answered long before its deadline; each checkpoint is stored once; the wedged stream is
    cancelled."""
    run = f"wedge-{uuid.uuid4().hex[:8]}"
    short = Checkpoint(execution_id=f"{run}-short", checkpoint_id=uuid.uuid4().hex)
    patient = Checkpoint(execution_id=f"{run}-patient", checkpoint_id=uuid.uuid4().hex)
    with GrpcFaultProxy(sidecar.target, write_stream=True) as proxy:
        async with _writer(kind, proxy.target, sidecar.namespace, timeout=30) as writer:
            await writer.put(Checkpoint(execution_id=f"{run}-warm"))  # the stream is open
            proxy.withhold_replies_next("PutCheckpoint", times=2)
            started = time.monotonic()
            first = asyncio.ensure_future(writer.put(short, timeout=1.0))
            assert await _wait_for(lambda: proxy.received("PutCheckpoint") == 2)
            second = asyncio.ensure_future(writer.put(patient))
            with pytest.raises(DeadlineExceededError):
                await first
            assert time.monotonic() - started <= 1.0 + SLACK
            stored = await second
            assert time.monotonic() - started <= 1.0 + 2 * SLACK  # not its 30 s timeout
            assert await _wait_for(lambda: proxy.open_streams() == 1)
        streams = {c.stream for c in proxy.calls("PutCheckpoint")}
        ids = _request_ids_by_checkpoint(proxy)
    assert len(streams) == 2
    assert len(ids[patient.checkpoint_id]) == 1
    assert proxy.received("PutCheckpoint") == 4  # warm-up, short, patient twice
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        assert list(check.iter_checkpoints(patient.execution_id)) == [stored]
        assert [c.checkpoint_id for c in check.iter_checkpoints(short.execution_id)] == [
            short.checkpoint_id
        ]


@pytest.mark.parametrize("kind", KINDS)
async def test_s2_streams_that_keep_stopping_back_off_then_go_unary(
    sidecar: SharedSidecar, kind: str
):
    """Every stream the proxy takes is black-holed, headers included (the asyncio client
    then never writes to it): the first dead stream is replaced at
    once, the second is followed by a pause in which writes go unary, and after the third in
    a row the client stays unary (here 60 s) instead of opening stream after stream, then
    tries one again; every write sent unary meanwhile is answered."""
    from checkpointd_client._stream_health import StreamHealth

    now = [0.0]  # the health's clock: the pauses pass only when the test says so
    with GrpcFaultProxy(sidecar.target, write_stream=True) as proxy:
        proxy.black_hole_next_stream(times=100, headers=False)  # not even the headers pass
        async with _writer(kind, proxy.target, sidecar.namespace, retry=NO_RETRY) as writer:
            writer.writes.health = StreamHealth(
                pause_initial=0.3, unary_after=3, unary_hold=60, clock=lambda: now[0]
            )
            run = f"backoff-{uuid.uuid4().hex[:8]}"

            async def put(n: int, *, silent: bool) -> bool:
                try:  # a short deadline where the stream is silent, a safe one where not
                    await writer.put(
                        Checkpoint(execution_id=f"{run}-{n}"), timeout=0.5 if silent else 10
                    )
                except DeadlineExceededError:
                    return False
                return True

            assert not await put(1, silent=True)  # stream 1 black-holed
            assert not await put(2, silent=True)  # stream 2, opened at once, black-holed
            assert await put(3, silent=False)  # within the pause: unary
            now[0] += 0.3
            assert not await put(4, silent=True)  # stream 3 after the pause: the third
            now[0] += 59.9
            assert all([await put(n, silent=False) for n in range(5, 9)])  # unary meanwhile
            assert proxy.streams_opened() == 3
            assert writer.writes.health.failures == 3
            assert await _wait_for(lambda: proxy.open_streams() == 0)
            now[0] += 0.1
            assert not await put(9, silent=True)  # the hold is over: a stream again
            assert proxy.streams_opened() == 4
    unary = [c for c in proxy.calls("PutCheckpoint") if c.stream is None]
    assert len(unary) == 5


def test_s2_the_fault_proxy_passes_the_stream_through_unchanged(sidecar: SharedSidecar):
    """What the S2 tests stand on: through the proxy, the Write stream's headers carry the
    accepted entry, each item's answer (an error Status included) is the server's byte for
    byte, the end status comes back, and each item is recorded as a call of its unary
    method on a numbered stream."""
    namespace = sidecar.namespace
    items = [
        write_service_pb2.WriteRequest(
            correlation_id=1,
            claim_interrupt=interrupt_service_pb2.ClaimInterruptRequest(
                namespace=namespace, request_id="r1", execution_id="none", claim_token="t"
            ),
        ),
        write_service_pb2.WriteRequest(
            correlation_id=2,
            put_idempotency_result=idempotency_service_pb2.PutIdempotencyResultRequest(
                namespace=namespace, request_id="r2", execution_id="e", key="k", result_json="1"
            ),
        ),
    ]

    def answers(target: str) -> tuple[bool, dict[int, bytes], grpc.StatusCode]:
        with grpc.insecure_channel(target) as channel:
            call = write_service_pb2_grpc.WriteServiceStub(channel).Write(iter(items), timeout=30)
            headers = accepted(call.initial_metadata())
            got = {a.correlation_id: a.SerializeToString() for a in call}
            return headers, got, call.code()

    with GrpcFaultProxy(sidecar.target, write_stream=True) as proxy:
        proxied = answers(proxy.target)
        calls = proxy.calls()
    direct = answers(sidecar.target)  # the same items again: answered from memory alike
    assert proxied == direct
    assert proxied[0]
    assert proxied[2] == grpc.StatusCode.OK
    assert [(c.method.rsplit("/", 1)[1], c.stream is not None, c.forwarded) for c in calls] == [
        ("ClaimInterrupt", True, True),
        ("PutIdempotencyResult", True, True),
    ]
