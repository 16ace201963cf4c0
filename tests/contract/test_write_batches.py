"""Contract S3: a Write stream message may carry a batch of items and an answer a batch of
results. Each batched item is answered exactly as its unary call and as a message of its
own would be; a message of one item (a client that predates batches) is answered by a
message of its own; a batch over the item limit is refused item by item and writes nothing;
the Python clients send the writes queued together in one message, one item per message to a
server that does not say it takes batches, and a batch whose answer is lost is sent again on
a new stream without writing anything twice.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from checkpointd_client import AsyncCheckpointdClient, Checkpoint, CheckpointdClient, RetryPolicy
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
    write_service_pb2,
    write_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.grpc_fault_rules import Kind
from tests.support.shared_server import SharedSidecar

KINDS = ["sync", "async"]
WRITERS = 32


def _unary_status(call: grpc.RpcError) -> status_pb2.Status:
    status: status_pb2.Status | None = rpc_status.from_call(call)
    assert status is not None, f"no status details: {call}"
    return status


def _field(status: status_pb2.Status) -> str:
    """The ``field`` of an INVALID_FIELD status's ErrorInfo."""
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info.metadata["field"]


def _idempotent(namespace: str, execution_id: str, key: str, value: str = "1") -> Any:
    return idempotency_service_pb2.PutIdempotencyResultRequest(
        namespace=namespace,
        request_id=f"r-{key}",
        execution_id=execution_id,
        key=key,
        result_json=value,
    )


def _stream(target: str, messages: list[write_service_pb2.WriteRequest]) -> list[Any]:
    """Send ``messages`` on one Write stream, half-close, and return every answer message."""
    with grpc.insecure_channel(target) as channel:
        stub = write_service_pb2_grpc.WriteServiceStub(channel)
        return list(stub.Write(iter(messages), timeout=60))


def test_s3_batched_items_are_answered_each_as_its_unary_call_in_batched_results(
    sidecar: SharedSidecar, execution_id: str
):
    """One stream carries an item alone (as a client that predates batches sends it) and a
    batch in which some items fail and others succeed. The lone item is answered by a
    message of its own; the batch's items are answered once each, in ``results`` only; the
    failures carry exactly the Status of the unary call, and the successes are stored."""
    namespace = sidecar.namespace
    claim = interrupt_service_pb2.ClaimInterruptRequest(
        namespace=namespace, request_id="r-claim", execution_id=execution_id, claim_token="t"
    )
    bad_json = _idempotent(namespace, execution_id, "bad", "{nope")
    put = checkpoint_service_pb2.PutCheckpointRequest(
        namespace=namespace,
        request_id="r-put",
        checkpoint=checkpoint_pb2.Checkpoint(
            execution_id=execution_id,
            node_id="n",
            status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
        ),
    )
    alone = write_service_pb2.WriteRequest(
        correlation_id=1, put_idempotency_result=_idempotent(namespace, execution_id, "alone")
    )
    batch = write_service_pb2.WriteRequest(
        items=[
            write_service_pb2.WriteItem(correlation_id=2, claim_interrupt=claim),
            write_service_pb2.WriteItem(
                correlation_id=3, put_idempotency_result=_idempotent(namespace, execution_id, "a")
            ),
            write_service_pb2.WriteItem(correlation_id=4, put_idempotency_result=bad_json),
            write_service_pb2.WriteItem(correlation_id=5),
            write_service_pb2.WriteItem(correlation_id=6, put_checkpoint=put),
        ]
    )
    answers = _stream(sidecar.target, [alone, batch])
    singles = [a for a in answers if not a.results]
    assert [a.correlation_id for a in singles] == [1]
    assert singles[0].WhichOneof("result") == "put_idempotency_result"
    assert all(
        a.correlation_id == 0 and a.WhichOneof("result") is None for a in answers if a.results
    )
    results = [r for a in answers for r in a.results]
    assert sorted(r.correlation_id for r in results) == [2, 3, 4, 5, 6]
    by_id = {r.correlation_id: r for r in results}

    with grpc.insecure_channel(sidecar.target) as channel:
        with pytest.raises(grpc.RpcError) as unary_claim:
            interrupt_service_pb2_grpc.InterruptServiceStub(channel).ClaimInterrupt(
                claim, timeout=10
            )
        with pytest.raises(grpc.RpcError) as unary_put:
            idempotency_service_pb2_grpc.IdempotencyServiceStub(channel).PutIdempotencyResult(
                bad_json, timeout=10
            )
    assert by_id[2].error == _unary_status(unary_claim.value)
    assert by_id[4].error == _unary_status(unary_put.value)
    assert by_id[5].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert _field(by_id[5].error) == "request"
    assert by_id[3].WhichOneof("result") == "put_idempotency_result"
    assert by_id[6].put_checkpoint.checkpoint.checkpoint_id
    with CheckpointdClient(sidecar.target, namespace=namespace, retry=NO_RETRY) as client:
        assert client.get_idempotent(execution_id, "alone").value == 1
        assert client.get_idempotent(execution_id, "a").value == 1
        assert not client.get_idempotent(execution_id, "bad").found
        assert len(list(client.iter_checkpoints(execution_id))) == 1


def test_s3_a_batch_over_the_item_limit_is_refused_item_by_item_and_writes_nothing(
    sidecar: SharedSidecar, execution_id: str
):
    """A message of 257 items gets INVALID_ARGUMENT (field ``items``) for each and writes
    none; a message with a request of its own beside items gets INVALID_ARGUMENT (field
    ``request``) for that correlation id, and its items are handled; a batch of exactly 256
    on the same stream is written. The clients batch no more than the server takes."""
    from checkpointd.servicers.write import MAX_ITEMS_PER_MESSAGE
    from checkpointd_client._write_stream import BATCH_MAX_ITEMS

    assert BATCH_MAX_ITEMS == MAX_ITEMS_PER_MESSAGE == 256
    namespace = sidecar.namespace

    def batch(prefix: str, count: int, first: int) -> write_service_pb2.WriteRequest:
        return write_service_pb2.WriteRequest(
            items=[
                write_service_pb2.WriteItem(
                    correlation_id=first + n,
                    put_idempotency_result=_idempotent(namespace, execution_id, f"{prefix}{n}"),
                )
                for n in range(count)
            ]
        )

    over = batch("over", MAX_ITEMS_PER_MESSAGE + 1, 1)
    mixed = batch("mixed", 2, 1000)
    mixed.correlation_id = 999
    mixed.put_idempotency_result.CopyFrom(_idempotent(namespace, execution_id, "own"))
    full = batch("full", MAX_ITEMS_PER_MESSAGE, 2000)
    answers = _stream(sidecar.target, [over, mixed, full])

    singles = {a.correlation_id: a for a in answers if not a.results}
    results = {r.correlation_id: r for a in answers for r in a.results}
    assert len(results) == MAX_ITEMS_PER_MESSAGE + 1 + 2 + MAX_ITEMS_PER_MESSAGE
    refused = [results[1 + n] for n in range(MAX_ITEMS_PER_MESSAGE + 1)]
    assert {r.error.code for r in refused} == {grpc.StatusCode.INVALID_ARGUMENT.value[0]}
    assert {_field(r.error) for r in refused} == {"items"}
    assert "at most 256 items" in refused[0].error.message
    assert list(singles) == [999]
    assert singles[999].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert _field(singles[999].error) == "request"
    written = [results[n] for n in (1000, 1001, *range(2000, 2000 + MAX_ITEMS_PER_MESSAGE))]
    assert {r.WhichOneof("result") for r in written} == {"put_idempotency_result"}
    with CheckpointdClient(sidecar.target, namespace=namespace, retry=NO_RETRY) as client:
        assert not client.get_idempotent(execution_id, "over0").found
        assert not client.get_idempotent(execution_id, f"over{MAX_ITEMS_PER_MESSAGE}").found
        assert not client.get_idempotent(execution_id, "own").found
        assert client.get_idempotent(execution_id, "mixed1").found
        assert client.get_idempotent(execution_id, f"full{MAX_ITEMS_PER_MESSAGE - 1}").found


async def _put_all(kind: str, target: str, namespace: str, run: str, **options: Any) -> list[str]:
    """``WRITERS`` callers of one client put a checkpoint each at once, twice over; the ids
    acknowledged."""
    checkpoints = [
        Checkpoint(execution_id=f"{run}-{n % WRITERS}", node_id=f"n{n // WRITERS}")
        for n in range(2 * WRITERS)
    ]
    if kind == "async":
        async with AsyncCheckpointdClient(target, namespace=namespace, **options) as aclient:
            ids = []
            for half in (checkpoints[:WRITERS], checkpoints[WRITERS:]):
                stored = await asyncio.gather(*(aclient.put_checkpoint(c) for c in half))
                ids += [c.checkpoint_id for c in stored]
            return ids

    def put_sync() -> list[str]:
        with (
            CheckpointdClient(target, namespace=namespace, **options) as client,
            ThreadPoolExecutor(WRITERS) as pool,
        ):
            ids = []
            for half in (checkpoints[:WRITERS], checkpoints[WRITERS:]):
                ids += [c.checkpoint_id for c in pool.map(client.put_checkpoint, half)]
            return ids

    return await asyncio.to_thread(put_sync)


@pytest.mark.parametrize("kind", KINDS)
async def test_s3_the_writes_of_concurrent_callers_travel_in_batches(
    sidecar: SharedSidecar, kind: str
):
    """32 callers of one client put at once: the items reach the server on one stream in
    fewer messages than items (every write queued while the previous message was written
    leaves in the next), and every write is acknowledged and stored."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    with GrpcFaultProxy(sidecar.target, write_stream=True, max_workers=8) as proxy:
        ids = await _put_all(kind, proxy.target, sidecar.namespace, run, retry=NO_RETRY)
        calls = proxy.calls("PutCheckpoint")
        assert proxy.streams_opened() == 1
    assert len(calls) == 2 * WRITERS
    assert len({call.message for call in calls}) < len(calls)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        stored = [
            c.checkpoint_id for n in range(WRITERS) for c in check.iter_checkpoints(f"{run}-{n}")
        ]
    assert sorted(stored) == sorted(ids)


@pytest.mark.parametrize("kind", KINDS)
async def test_s3_a_server_that_does_not_say_it_takes_batches_gets_one_item_per_message(
    sidecar: SharedSidecar, kind: str
):
    """Through a proxy that strips the header entry by which the server says it takes
    batches (as a server that predates them sends no such entry, and would ignore
    ``items``), 32 concurrent callers still share one stream, but each message carries one
    item, and every write is acknowledged and stored."""
    from checkpointd_client._write_stream import BATCH_HEADER, batch_limit

    assert batch_limit(None) == batch_limit([("checkpointd-write-stream", "open")]) == 0
    assert batch_limit([(BATCH_HEADER, "64")]) == 64
    assert batch_limit([(BATCH_HEADER, b"100000")]) == 256
    assert batch_limit([(BATCH_HEADER, "many")]) == 0
    run = f"run-{uuid.uuid4().hex[:8]}"
    with GrpcFaultProxy(
        sidecar.target, write_stream=True, write_batches=False, max_workers=8
    ) as proxy:
        ids = await _put_all(kind, proxy.target, sidecar.namespace, run, retry=NO_RETRY)
        calls = proxy.calls("PutCheckpoint")
        assert proxy.streams_opened() == 1
    assert len(calls) == len({call.message for call in calls}) == 2 * WRITERS
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        stored = [
            c.checkpoint_id for n in range(WRITERS) for c in check.iter_checkpoints(f"{run}-{n}")
        ]
    assert sorted(stored) == sorted(ids)


def _request_id(request: bytes) -> str:
    return checkpoint_service_pb2.PutCheckpointRequest.FromString(request).request_id


@pytest.mark.parametrize("kind", KINDS)
async def test_s3_a_batch_whose_answer_is_lost_is_sent_again_and_written_once(
    sidecar: SharedSidecar, kind: str
):
    """The answer to a batch of puts is lost and its stream ends ``UNAVAILABLE`` after the
    server wrote them: the client sends the batch's items again on a new stream with the same
    request ids, each is answered as the first time (no CHECKPOINT_EXISTS) and every
    checkpoint is stored once."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    patient = RetryPolicy(max_attempts=5, initial_backoff=0.05, max_backoff=0.2)
    with GrpcFaultProxy(sidecar.target, write_stream=True, max_workers=8) as proxy:
        # The reply of the first item lost ends the stream; with three marked, one is in a
        # batch however the first messages were cut (the sync client's first item may leave
        # alone), and every item of the stream not answered by then is sent again.
        proxy.lose_reply_next("PutCheckpoint", times=3)
        ids = await _put_all(kind, proxy.target, sidecar.namespace, run, retry=patient, timeout=30)
        calls = proxy.calls("PutCheckpoint")
        assert proxy.streams_opened() >= 2
    lost = [call for call in calls if call.fault == Kind.LOSE_REPLY.value]
    assert any(sum(c.message == call.message for c in calls) > 1 for call in lost)  # batched
    again = [_request_id(call.request) for call in calls if call.stream != lost[0].stream]
    assert _request_id(lost[0].request) in again  # sent again, with its request id
    assert len(ids) == len(set(ids)) == 2 * WRITERS
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as check:
        stored = [
            c.checkpoint_id for n in range(WRITERS) for c in check.iter_checkpoints(f"{run}-{n}")
        ]
    assert sorted(stored) == sorted(ids)
