"""C9: request ids outlive deletes. A late retry of a put or a record whose rows were since
deleted (DeleteExecution, PruneCheckpoints) writes nothing; a retry whose checkpoint_id the
server filled returns the row first written; a retried DeleteExecution or PruneCheckpoints is
answered with the first call's counts. Both backends, through a real server.

The Python client fills an empty checkpoint_id before sending, so the empty-id cases use the
raw gRPC stubs, as a client in another language (or grpcurl) would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient, FailedPreconditionError, NotFoundError
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
)
from tests.contract.conftest import WRITE_PATHS
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar


@pytest.fixture(params=WRITE_PATHS)
def write_path(request: pytest.FixtureRequest) -> str:
    """Every rule here holds on both write paths: the Write stream and unary calls (S1)."""
    return str(request.param)


APPLIED_THEN_DELETED = "REQUEST_APPLIED_THEN_DELETED"


@pytest.fixture
def channel(sidecar: Sidecar | SharedSidecar) -> Iterator[grpc.Channel]:
    """A plain channel to the server, for requests the Python client would complete."""
    with grpc.insecure_channel(sidecar.target) as ch:
        yield ch


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(error)
    assert status is not None, error
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info


def _assert_applied_then_deleted(error: FailedPreconditionError, request_id: str) -> None:
    assert error.reason == APPLIED_THEN_DELETED, error
    assert error.metadata.get("request_id") == request_id, error.metadata
    assert request_id in error.message


def test_c9_put_retry_after_delete_writes_nothing(client: CheckpointdClient, execution_id: str):
    """PutCheckpoint, DeleteExecution, then the put's late retry (same request id): refused
    with FAILED_PRECONDITION (REQUEST_APPLIED_THEN_DELETED); the run stays deleted."""
    cp = checkpoint(execution_id)
    client.put_checkpoint(cp, request_id="put-P")
    assert client.delete_execution(execution_id).checkpoints_deleted == 1

    with pytest.raises(FailedPreconditionError) as err:
        client.put_checkpoint(cp, request_id="put-P")
    _assert_applied_then_deleted(err.value, "put-P")

    assert client.list_checkpoints(execution_id).checkpoints == []
    with pytest.raises(NotFoundError):
        client.get_latest_checkpoint(execution_id)
    # A new request (a new request id) for the same run is an ordinary write.
    assert client.put_checkpoint(checkpoint(execution_id), request_id="put-new").sequence > 0


def test_c9_record_retry_after_delete_writes_nothing(client: CheckpointdClient, execution_id: str):
    """RecordInterrupt, DeleteExecution, then the record's late retry: refused, and no pending
    interrupt comes back: nothing listed, nothing claimable, no checkpoint."""
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending, request_id="record-Q")
    result = client.delete_execution(execution_id)
    assert (result.checkpoints_deleted, result.pending_interrupt_deleted) == (1, True)

    with pytest.raises(FailedPreconditionError) as err:
        client.record_interrupt(cp, pending, request_id="record-Q")
    _assert_applied_then_deleted(err.value, "record-Q")

    assert client.list_pending_interrupts().pending_interrupts == []
    with pytest.raises(NotFoundError):
        client.claim_interrupt(execution_id)
    assert client.list_checkpoints(execution_id).checkpoints == []


def test_c9_delete_retry_returns_the_first_counts(client: CheckpointdClient, execution_id: str):
    """A retried DeleteExecution is answered with the first call's counts, and is not a
    second delete: a checkpoint written after the first call stays."""
    for i in range(3):
        client.put_checkpoint(checkpoint(execution_id, node_id=f"step-{i}"))
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending)
    client.put_idempotent(execution_id, "charge", {"ok": True})
    client.put_idempotent(execution_id, "mail", {"sent": True})

    first = client.delete_execution(execution_id, request_id="delete-D")
    assert (first.checkpoints_deleted, first.pending_interrupt_deleted) == (4, True)
    assert first.idempotency_results_deleted == 2

    later = client.put_checkpoint(checkpoint(execution_id, node_id="after"))
    retry = client.delete_execution(execution_id, request_id="delete-D")
    assert retry == first
    assert client.get_latest_checkpoint(execution_id) == later
    # Another request id is another call: it deletes what is there now.
    other = client.delete_execution(execution_id, request_id="delete-E")
    assert (other.checkpoints_deleted, other.pending_interrupt_deleted) == (1, False)


def _raw_checkpoint(execution_id: str, **fields: object) -> checkpoint_pb2.Checkpoint:
    """A checkpoint message with an empty checkpoint_id (the server fills one)."""
    message = checkpoint_pb2.Checkpoint(
        execution_id=execution_id,
        chain_name="flow",
        node_id="node",
        status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
    )
    for name, value in fields.items():
        setattr(message, name, value)
    return message


def test_c9_empty_checkpoint_id_retry_returns_the_first_row(
    channel: grpc.Channel, client: CheckpointdClient, execution_id: str
):
    """A PutCheckpoint without checkpoint_id, sent twice with one request id: the retry gets
    the row first written (same id, same sequence) and one row is stored."""
    stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
    request = checkpoint_service_pb2.PutCheckpointRequest(
        namespace=client.namespace,
        request_id=f"req-{uuid.uuid4().hex}",
        checkpoint=_raw_checkpoint(execution_id),
    )
    first = stub.PutCheckpoint(request, timeout=10).checkpoint
    retry = stub.PutCheckpoint(request, timeout=10).checkpoint
    assert first.checkpoint_id
    assert (retry.checkpoint_id, retry.sequence) == (first.checkpoint_id, first.sequence)
    assert [c.checkpoint_id for c in client.list_checkpoints(execution_id).checkpoints] == [
        first.checkpoint_id
    ]


def test_c9_empty_checkpoint_id_record_retry_returns_the_first_rows(
    channel: grpc.Channel, client: CheckpointdClient, execution_id: str
):
    """The same for RecordInterrupt: the retry returns the first checkpoint and its pending
    row; one checkpoint and one pending interrupt are stored."""
    stub = interrupt_service_pb2_grpc.InterruptServiceStub(channel)
    request = interrupt_service_pb2.RecordInterruptRequest(
        namespace=client.namespace,
        request_id=f"req-{uuid.uuid4().hex}",
        checkpoint=_raw_checkpoint(
            execution_id,
            status=checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED,
            interrupt_reason="approval",
        ),
        pending=checkpoint_pb2.PendingInterrupt(
            execution_id=execution_id, chain_name="flow", node_id="node", reason="approval"
        ),
    )
    first = stub.RecordInterrupt(request, timeout=10)
    retry = stub.RecordInterrupt(request, timeout=10)
    assert first.pending_created
    assert retry.checkpoint == first.checkpoint
    assert retry.pending == first.pending
    assert retry.pending_created
    assert len(client.list_checkpoints(execution_id).checkpoints) == 1
    assert len(client.list_pending_interrupts().pending_interrupts) == 1


def test_c9_empty_checkpoint_id_retry_after_delete_writes_nothing(
    channel: grpc.Channel, client: CheckpointdClient, execution_id: str
):
    """A retry of a put whose id the server filled, after the run was deleted: refused."""
    stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
    request = checkpoint_service_pb2.PutCheckpointRequest(
        namespace=client.namespace,
        request_id="put-empty-id",
        checkpoint=_raw_checkpoint(execution_id),
    )
    stub.PutCheckpoint(request, timeout=10)
    client.delete_execution(execution_id)
    with pytest.raises(grpc.RpcError) as err:
        stub.PutCheckpoint(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = _error_info(err.value)
    assert (info.reason, dict(info.metadata)) == (
        APPLIED_THEN_DELETED,
        {"request_id": "put-empty-id"},
    )
    assert client.list_checkpoints(execution_id).checkpoints == []


def _old() -> datetime:
    return datetime.now(tz=UTC) - timedelta(days=30)


def test_c9_prune_retry_returns_the_first_counts(client: CheckpointdClient, execution_id: str):
    """A retried PruneCheckpoints is answered with the first call's counts and prunes nothing
    more: rows that became prunable since stay until a new request prunes them."""
    for i in range(3):
        client.put_checkpoint(checkpoint(execution_id, node_id=f"old-{i}", created_at=_old()))
    first = client.prune(timedelta(days=1), request_id="prune-X")
    assert (first.checkpoints_deleted, first.idempotency_results_deleted) == (3, 0)

    client.put_checkpoint(checkpoint(execution_id, node_id="old-late", created_at=_old()))
    retry = client.prune(timedelta(days=1), request_id="prune-X")
    assert retry == first
    assert [c.node_id for c in client.list_checkpoints(execution_id).checkpoints] == ["old-late"]
    assert client.prune(timedelta(days=1), request_id="prune-Y").checkpoints_deleted == 1


def test_c9_put_retry_after_prune_writes_nothing(client: CheckpointdClient, execution_id: str):
    """A put whose row was pruned, retried late with its request id: refused, not re-stored."""
    cp = checkpoint(execution_id, created_at=_old())
    client.put_checkpoint(cp, request_id="put-pruned")
    assert client.prune(timedelta(days=1)).checkpoints_deleted == 1

    with pytest.raises(FailedPreconditionError) as err:
        client.put_checkpoint(cp, request_id="put-pruned")
    _assert_applied_then_deleted(err.value, "put-pruned")
    assert client.list_checkpoints(execution_id).checkpoints == []
