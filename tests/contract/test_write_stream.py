"""Contract S1: the Write stream answers each item exactly as its unary RPC would, carries the
writes of every thread of a client on one stream, survives a server killed mid-stream
without losing or doubling a write, and is replaced by unary calls on servers without it.

The rules of the four calls themselves run over both paths in test_checkpoints.py,
test_interrupts.py, test_request_ids.py and test_data.py (their ``write_path`` fixture).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Iterator, Sized
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.rpc import status_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient, RetryPolicy
from checkpointd_client.v1 import (
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
    write_service_pb2,
    write_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.ops.helpers import EarlySidecar, sample, scrape
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar, StoreSpec


def _holds_at_least(items: Sized, count: int) -> bool:
    return len(items) >= count


def _unary_status(call: grpc.RpcError) -> status_pb2.Status:
    """The google.rpc.Status a unary call failed with (its status-details trailer)."""
    status: status_pb2.Status | None = rpc_status.from_call(call)
    assert status is not None, f"no status details: {call}"
    return status


def test_s1_the_server_marks_the_headers_of_a_stream_it_takes(sidecar: SharedSidecar):
    """The headers of an accepted stream carry the entry the clients wait for before their
    first item, the batch limit (S3) and the kinds of item it takes, the graph writes among
    them (S4), and they arrive before any item is sent; the server's and the asyncio
    client's names of those entries are the same."""
    from checkpointd.servicers.write import BATCH_HEADER, KINDS_HEADER
    from checkpointd_client import _write_stream
    from checkpointd_client._write_stream import ACCEPTED_HEADER, EVERY_KIND, accepted

    assert _write_stream.BATCH_HEADER == BATCH_HEADER
    assert _write_stream.KINDS_HEADER == KINDS_HEADER
    headers_seen = threading.Event()

    def requests() -> Iterator[write_service_pb2.WriteRequest]:
        headers_seen.wait(10)  # nothing is sent before the headers came; then the stream ends
        yield from ()

    with grpc.insecure_channel(sidecar.target) as channel:
        call = write_service_pb2_grpc.WriteServiceStub(channel).Write(requests(), timeout=10)
        headers = call.initial_metadata()
        assert accepted(headers), headers
        headers_seen.set()
        assert list(call) == []
    entries = dict(headers)
    assert ACCEPTED_HEADER in tuple(headers)
    assert entries[BATCH_HEADER] == "256"
    assert entries[KINDS_HEADER] == (
        "put_checkpoint,put_idempotency_result,record_interrupt,claim_interrupt,"
        "put_graph_checkpoint,put_graph_writes"
    )
    assert _write_stream.kinds_taken(headers) == EVERY_KIND
    assert not accepted(())
    assert not accepted(None)


def test_s1_failed_items_carry_the_unary_status_and_the_stream_stays_open(sidecar, execution_id):
    """Items answered one after another on one open stream: a claim with nothing pending
    and a put of bad JSON fail with exactly the Status (code, message, ErrorInfo reason and
    metadata) of the same unary call, an item with no request is INVALID_ARGUMENT, and the
    next item on the same stream still succeeds."""
    namespace = sidecar.namespace
    bad_json = idempotency_service_pb2.PutIdempotencyResultRequest(
        namespace=namespace,
        request_id="r-bad",
        execution_id=execution_id,
        key="k",
        result_json="{nope",
    )
    claim = interrupt_service_pb2.ClaimInterruptRequest(
        namespace=namespace, request_id="r-claim", execution_id=execution_id, claim_token="t"
    )
    good = idempotency_service_pb2.PutIdempotencyResultRequest(
        namespace=namespace,
        request_id="r-good",
        execution_id=execution_id,
        key="k",
        result_json="[1]",
    )
    items = [
        write_service_pb2.WriteRequest(correlation_id=7, claim_interrupt=claim),
        write_service_pb2.WriteRequest(correlation_id=8, put_idempotency_result=bad_json),
        write_service_pb2.WriteRequest(correlation_id=9),
        write_service_pb2.WriteRequest(correlation_id=10, put_idempotency_result=good),
    ]
    with grpc.insecure_channel(sidecar.target) as channel:
        outbox: list[write_service_pb2.WriteRequest] = []
        ready = threading.Condition()

        def requests() -> Iterator[write_service_pb2.WriteRequest]:
            for index in range(len(items)):
                with ready:  # the next item only once the previous one was answered
                    ready.wait_for(functools.partial(_holds_at_least, outbox, index), timeout=10)
                yield items[index]

        answers: dict[int, write_service_pb2.WriteResponse] = {}
        for answer in write_service_pb2_grpc.WriteServiceStub(channel).Write(
            requests(), timeout=30
        ):
            answers[answer.correlation_id] = answer
            with ready:
                outbox.append(items[len(outbox)])
                ready.notify_all()

        with pytest.raises(grpc.RpcError) as unary_claim:
            interrupt_service_pb2_grpc.InterruptServiceStub(channel).ClaimInterrupt(
                claim, timeout=10
            )
        with pytest.raises(grpc.RpcError) as unary_put:
            idempotency_service_pb2_grpc.IdempotencyServiceStub(channel).PutIdempotencyResult(
                bad_json, timeout=10
            )

    assert set(answers) == {7, 8, 9, 10}
    assert answers[7].error == _unary_status(unary_claim.value)
    assert answers[7].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert b"NO_PENDING_INTERRUPT" in answers[7].error.details[0].value
    assert answers[8].error == _unary_status(unary_put.value)
    assert answers[8].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert b"result_json" in answers[8].error.details[0].value
    assert answers[9].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[10].WhichOneof("result") == "put_idempotency_result"
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as client:
        assert client.get_idempotent(execution_id, "k").value == [1]


def test_s1_j3_an_oversize_item_is_refused_alone_and_the_stream_goes_on(
    sidecar_factory, execution_id
):
    """An item over --max-message-bytes gets the status its unary call gets
    (RESOURCE_EXHAUSTED, MESSAGE_TOO_LARGE) and writes nothing; the item after it, on the
    same stream, is stored. One caller's oversize write must not end the stream that carries
    every other caller's."""
    limit = 4096
    server = sidecar_factory("--max-message-bytes", str(limit))
    big = idempotency_service_pb2.PutIdempotencyResultRequest(
        request_id="r-big", execution_id=execution_id, key="big", result_json=f'"{"x" * limit}"'
    )
    small = idempotency_service_pb2.PutIdempotencyResultRequest(
        request_id="r-small", execution_id=execution_id, key="small", result_json="1"
    )
    items = [
        write_service_pb2.WriteRequest(correlation_id=1, put_idempotency_result=big),
        write_service_pb2.WriteRequest(correlation_id=2, put_idempotency_result=small),
    ]
    with grpc.insecure_channel(server.target) as channel:
        answers = {
            answer.correlation_id: answer
            for answer in write_service_pb2_grpc.WriteServiceStub(channel).Write(
                iter(items), timeout=30
            )
        }
        with pytest.raises(grpc.RpcError) as unary:
            idempotency_service_pb2_grpc.IdempotencyServiceStub(channel).PutIdempotencyResult(
                big, timeout=10
            )
    assert answers[1].error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert b"MESSAGE_TOO_LARGE" in answers[1].error.details[0].value
    assert answers[1].error.code == _unary_status(unary.value).code
    assert answers[2].WhichOneof("result") == "put_idempotency_result"
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        assert client.get_idempotent(execution_id, "small").value == 1
        assert not client.get_idempotent(execution_id, "big").found


def test_s1_the_writes_of_32_threads_travel_over_one_stream(store_spec: StoreSpec):
    """32 threads of one client write at once: the server sees one Write stream carrying
    every item and not one unary write call; every write is stored."""
    server = EarlySidecar(store_spec, extra_args=["--metrics-listen", "127.0.0.1:0"]).start()
    try:
        server.wait_for_log("serving on")
        run = f"run-{uuid.uuid4().hex[:8]}"
        with CheckpointdClient(server.target, retry=NO_RETRY, timeout=60) as client:
            start = threading.Barrier(32)

            def write(thread: int) -> None:
                start.wait()
                for step in range(5):
                    client.put_checkpoint(checkpoint(f"{run}-{thread}", node_id=f"n{step}"))
                client.put_idempotent(f"{run}-{thread}", "k", thread)

            with ThreadPoolExecutor(32) as pool:
                list(pool.map(write, range(32)))
            for thread in range(32):
                assert len(list(client.iter_checkpoints(f"{run}-{thread}"))) == 5
        text = scrape(server.metrics_url)
        assert sample(text, "grpc_server_started_total", grpc_method="Write") == 1
        assert sample(text, "grpc_server_started_total", grpc_method="PutCheckpoint") is None
        assert sample(text, "grpc_server_started_total", grpc_method="PutIdempotencyResult") is None
        # The items reached the store: one put per checkpoint, one per cached result.
        puts = sample(text, "checkpointd_store_operation_seconds_count", operation="put_checkpoint")
        assert puts == 32 * 5
    finally:
        server.close()


def test_s1_a_server_killed_mid_stream_loses_no_acknowledged_write_and_writes_nothing_twice(
    sidecar_factory: Callable[..., Sidecar],
):
    """Threads write checkpoints and claim interrupts over the stream while the server is
    killed (SIGKILL) and restarted. Every write is acknowledged once the server is back
    (the unanswered items are sent again on a new stream with the same request ids and claim
    tokens): every acknowledged checkpoint is stored once, no put is refused as a duplicate
    (CHECKPOINT_EXISTS), and every pending interrupt is claimed by its one claimer."""
    sidecar = sidecar_factory()  # a server of its own, to kill
    run = f"run-{uuid.uuid4().hex[:8]}"
    patient = RetryPolicy(max_attempts=100, initial_backoff=0.05, max_backoff=0.25)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as setup:
        for thread in range(8):
            setup.record_interrupt(*interrupted(f"{run}-paused-{thread}"))

    acknowledged: dict[str, list[str]] = {}
    claimed: dict[str, str] = {}
    killed = threading.Event()
    with CheckpointdClient(
        sidecar.target, namespace=sidecar.namespace, retry=patient, timeout=60
    ) as client:

        def work(thread: int) -> None:
            execution = f"{run}-{thread}"
            ids: list[str] = []
            for step in range(30):
                if step == 10 and thread == 0:
                    killed.set()
                ids.append(
                    client.put_checkpoint(checkpoint(execution, node_id=f"n{step}")).checkpoint_id
                )
            acknowledged[execution] = ids
            pending = client.claim_interrupt(f"{run}-paused-{thread}")
            claimed[pending.execution_id] = pending.checkpoint_id

        with ThreadPoolExecutor(8) as pool:
            results = [pool.submit(work, thread) for thread in range(8)]
            assert killed.wait(30)
            sidecar.kill()
            sidecar.start()
            for result in results:
                result.result(timeout=120)

    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        for execution, ids in acknowledged.items():
            stored = [c.checkpoint_id for c in check.iter_checkpoints(execution)]
            assert stored == ids  # each once, in write order
        assert sorted(claimed) == sorted(f"{run}-paused-{thread}" for thread in range(8))
        assert check.list_pending_interrupts().pending_interrupts == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_s1_a_server_without_the_stream_gets_unary_calls_for_good(
    sidecar: SharedSidecar, execution_id: str, kind: str
):
    """Through a proxy that forwards unary calls only (the stream is UNIMPLEMENTED there, as
    on a server that predates it), every write succeeds as a unary call, and after the first
    refusal the client never tries the stream again."""
    from checkpointd_client import AsyncCheckpointdClient

    with GrpcFaultProxy(sidecar.target) as proxy:
        if kind == "sync":
            with CheckpointdClient(
                proxy.target, namespace=sidecar.namespace, retry=NO_RETRY
            ) as client:
                client.put_checkpoint(checkpoint(execution_id))
                assert client._writes.unsupported
                client.put_checkpoint(checkpoint(execution_id))
                client.put_idempotent(execution_id, "k", 1)
        else:
            async with AsyncCheckpointdClient(
                proxy.target, namespace=sidecar.namespace, retry=NO_RETRY
            ) as aclient:
                await aclient.put_checkpoint(checkpoint(execution_id))
                assert aclient._writes.unsupported
                await aclient.put_checkpoint(checkpoint(execution_id))
                await aclient.put_idempotent(execution_id, "k", 1)
        assert proxy.forwarded("PutCheckpoint") == 2
        assert proxy.forwarded("PutIdempotencyResult") == 1
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        assert len(list(check.iter_checkpoints(execution_id))) == 2


def test_s1_write_stream_false_and_large_requests_send_unary_calls(store_spec: StoreSpec):
    """With write_stream=False the client opens no stream: each write is its own call. On the
    stream, a request above 1 MiB goes unary (one item above the server's transport limit
    would end the stream for every caller's items) and the next small one streams again."""
    server = EarlySidecar(store_spec, extra_args=["--metrics-listen", "127.0.0.1:0"]).start()
    try:
        server.wait_for_log("serving on")
        run = f"run-{uuid.uuid4().hex[:8]}"
        with CheckpointdClient(server.target, retry=NO_RETRY, write_stream=False) as client:
            client.put_checkpoint(checkpoint(run))
        text = scrape(server.metrics_url)
        assert sample(text, "grpc_server_started_total", grpc_method="Write") is None
        assert sample(text, "grpc_server_started_total", grpc_method="PutCheckpoint") == 1

        with CheckpointdClient(server.target, retry=NO_RETRY) as client:
            client.put_checkpoint(checkpoint(run, state_snapshot={"blob": "x" * 1_200_000}))
            client.put_checkpoint(checkpoint(run))
            assert len(list(client.iter_checkpoints(run))) == 3
        text = scrape(server.metrics_url)
        assert sample(text, "grpc_server_started_total", grpc_method="PutCheckpoint") == 2
        assert sample(text, "grpc_server_started_total", grpc_method="Write") == 1
    finally:
        server.close()


def test_s1_the_stream_needs_no_googleapis_common_protos(sidecar: SharedSidecar, execution_id: str):
    """The client distribution depends on grpcio and protobuf only: with google.rpc made
    unimportable, writes still go over the stream and a failed item still raises with its
    code and reason."""
    import subprocess
    import sys

    script = f"""
import faulthandler, sys
faulthandler.dump_traceback_later(45, exit=True)  # a hang shows where, before the timeout
sys.modules["google.rpc"] = None  # as if googleapis-common-protos were not installed
from checkpointd_client import CheckpointdClient, NotFoundError, RetryPolicy
with CheckpointdClient(
    {sidecar.target!r}, namespace={sidecar.namespace!r}, retry=RetryPolicy(max_attempts=1)
) as client:
    client.put_idempotent({execution_id!r}, "k", 1)
    try:
        client.claim_interrupt({execution_id!r})
    except NotFoundError as exc:
        assert exc.reason == "NO_PENDING_INTERRUPT", exc
    else:
        raise AssertionError("the claim succeeded")
    assert not client._writes.unsupported
    assert client._writes._stream is not None
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=90, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as client:
        assert client.get_idempotent(execution_id, "k").value == 1
