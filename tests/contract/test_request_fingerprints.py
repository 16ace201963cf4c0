"""C10: a request id reused on another request is refused, never answered with the other
request's result. A retry is the same request sent again and is answered as before; a request
that comes with a request id the server remembers for another request (another method, or the
same method with other content) is FAILED_PRECONDITION REQUEST_ID_REUSED, with metadata
naming the id and the method it was first used for, and writes nothing. Every mutating RPC
that remembers request ids, on both backends and through PgBouncer; the Write stream's items
fingerprint as their unary calls do.

The requests are sent with the raw stubs, so each test controls every field of them (as a
client in another language would); the store's rows of the test's namespace are read
directly, before and after the refused request, to show it changed nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
    write_service_pb2,
    write_service_pb2_grpc,
)
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar
from tests.support.store_dump import StoreReader

REUSED = "REQUEST_ID_REUSED"
_TABLES = (
    "checkpoints",
    "pending_interrupts",
    "interrupt_claims",
    "idempotency_results",
    "applied_requests",
    "interrupt_events",
    "interrupt_decisions",
)
#: The unary RPCs a Write stream item may carry, by the item's field.
_STREAM_FIELDS = {
    "PutCheckpoint": "put_checkpoint",
    "PutIdempotencyResult": "put_idempotency_result",
    "RecordInterrupt": "record_interrupt",
}


@dataclass(frozen=True)
class Answer:
    """What a call answered: its response, or its status code, reason and metadata."""

    response: Message | None = None
    code: grpc.StatusCode | None = None
    reason: str = ""
    metadata: dict[str, str] | None = None


class Caller:
    """Sends requests of any mutating RPC, unary or as a Write stream item."""

    def __init__(self, channel: grpc.Channel) -> None:
        cps = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        ints = interrupt_service_pb2_grpc.InterruptServiceStub(channel)
        idem = idempotency_service_pb2_grpc.IdempotencyServiceStub(channel)
        self._write = write_service_pb2_grpc.WriteServiceStub(channel)
        self._unary: dict[str, Callable[..., Message]] = {
            "PutCheckpoint": cps.PutCheckpoint,
            "DeleteExecution": cps.DeleteExecution,
            "PruneCheckpoints": cps.PruneCheckpoints,
            "RecordInterrupt": ints.RecordInterrupt,
            "SubmitDecision": ints.SubmitDecision,
            "PutIdempotencyResult": idem.PutIdempotencyResult,
        }

    def call(self, method: str, request: Message, *, stream: bool = False) -> Answer:
        """Send ``request`` to ``method``; on the Write stream when ``stream`` is set."""
        if stream:
            return self._item(method, request)
        try:
            return Answer(response=self._unary[method](request, timeout=10))
        except grpc.RpcError as error:
            failed = error
        status = rpc_status.from_call(failed)
        assert status is not None, failed
        return _answer_of(failed.code(), status)

    def _item(self, method: str, request: Message) -> Answer:
        field = _STREAM_FIELDS[method]
        item = write_service_pb2.WriteRequest(correlation_id=1)
        getattr(item, field).CopyFrom(request)
        answers = list(self._write.Write(iter([item]), timeout=10))
        assert len(answers) == 1, answers
        answer = answers[0]
        if answer.WhichOneof("result") == "error":
            code = next(c for c in grpc.StatusCode if c.value[0] == answer.error.code)
            return _answer_of(code, answer.error)
        return Answer(response=getattr(answer, field))


def _answer_of(code: grpc.StatusCode, status: status_pb2.Status) -> Answer:
    info = error_details_pb2.ErrorInfo()
    assert status.details, status
    assert status.details[0].Unpack(info), status
    return Answer(code=code, reason=info.reason, metadata=dict(info.metadata))


@pytest.fixture
def caller(sidecar: Sidecar | SharedSidecar) -> Iterator[Caller]:
    """Raw stubs on the server."""
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Caller(channel)


@pytest.fixture
def rows_of(sidecar: Sidecar | SharedSidecar) -> Iterator[Callable[[], dict[str, list[Any]]]]:
    """Every stored row of the test's namespace, read from the store itself."""
    reader = StoreReader(sidecar.store)
    namespace = sidecar.namespace

    def rows() -> dict[str, list[Any]]:
        return {
            table: sorted(
                reader.query(
                    f"SELECT * FROM {reader.table(table)} WHERE namespace = '{namespace}'"
                ),
                key=repr,
            )
            for table in _TABLES
        }

    try:
        yield rows
    finally:
        reader.close()


def _rid() -> str:
    return f"req-{uuid.uuid4().hex[:12]}"


def _checkpoint(execution_id: str, **fields: Any) -> checkpoint_pb2.Checkpoint:
    fields.setdefault("checkpoint_id", uuid.uuid4().hex)
    fields.setdefault("status", checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED)
    return checkpoint_pb2.Checkpoint(
        execution_id=execution_id, chain_name="flow", node_id="node", **fields
    )


def _old() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.now(tz=UTC) - timedelta(days=30))
    return stamp


class Requests:
    """Builds the requests of one test's namespace, request id and two executions A and B."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.rid = _rid()
        self.a = f"exec-a-{uuid.uuid4().hex[:8]}"
        self.b = f"exec-b-{uuid.uuid4().hex[:8]}"

    def put(self, execution_id: str, **fields: Any) -> Message:
        return checkpoint_service_pb2.PutCheckpointRequest(
            namespace=self.namespace,
            request_id=self.rid,
            checkpoint=_checkpoint(execution_id, **fields),
        )

    def record(self, execution_id: str, **fields: Any) -> Message:
        fields.setdefault("interrupt_reason", "approval")
        return interrupt_service_pb2.RecordInterruptRequest(
            namespace=self.namespace,
            request_id=self.rid,
            checkpoint=_checkpoint(
                execution_id, status=checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED, **fields
            ),
            pending=checkpoint_pb2.PendingInterrupt(
                execution_id=execution_id, chain_name="flow", node_id="node", reason="approval"
            ),
        )

    def idem(self, execution_id: str, value: str) -> Message:
        return idempotency_service_pb2.PutIdempotencyResultRequest(
            namespace=self.namespace,
            request_id=self.rid,
            execution_id=execution_id,
            key="charge",
            result_json=value,
        )

    def delete(self, execution_id: str) -> Message:
        return checkpoint_service_pb2.DeleteExecutionRequest(
            namespace=self.namespace, request_id=self.rid, execution_id=execution_id
        )

    def prune(self, days: int) -> Message:
        return checkpoint_service_pb2.PruneCheckpointsRequest(
            namespace=self.namespace,
            request_id=self.rid,
            older_than=duration_pb2.Duration(seconds=days * 86400),
        )

    def decide(self, execution_id: str, approved: bool, metadata_json: str = "{}") -> Message:
        return interrupt_service_pb2.SubmitDecisionRequest(
            namespace=self.namespace,
            request_id=self.rid,
            execution_id=execution_id,
            approved=approved,
            metadata_json=metadata_json,
            decided_by="bot",
        )

    def other_id(self, request: Message) -> Message:
        """The same request under a fresh request id (an ordinary write, not a reuse)."""
        copy = type(request)()
        copy.CopyFrom(request)
        copy.request_id = _rid()  # type: ignore[attr-defined]
        return copy


@dataclass(frozen=True)
class Case:
    """A first request, and a reuse of its request id on another request."""

    first: tuple[str, Callable[[Requests], Message]]
    reuse: tuple[str, Callable[[Requests], Message]]
    #: Writes made with other request ids before the first request (the rows it acts on).
    setup: tuple[tuple[str, Callable[[Requests], Message]], ...] = ()
    #: Writes made with other request ids between the first request and the reuse.
    between: tuple[tuple[str, Callable[[Requests], Message]], ...] = ()


#: Rows of A and B, to delete.
_RUNS = (
    ("PutCheckpoint", lambda q: q.other_id(q.put(q.a))),
    ("PutCheckpoint", lambda q: q.other_id(q.put(q.b))),
    ("PutIdempotencyResult", lambda q: q.other_id(q.idem(q.b, "10"))),
)
#: A pending interrupt on each of A and B, to decide.
_PAUSES = (
    ("RecordInterrupt", lambda q: q.other_id(q.record(q.a))),
    ("RecordInterrupt", lambda q: q.other_id(q.record(q.b))),
)

CASES = {
    # The first report: another execution, another checkpoint.
    "put-on-another-execution": Case(
        ("PutCheckpoint", lambda q: q.put(q.a)), ("PutCheckpoint", lambda q: q.put(q.b))
    ),
    "put-with-other-content": Case(
        ("PutCheckpoint", lambda q: q.put(q.a, checkpoint_id="cp-1", node_output_json="{}")),
        (
            "PutCheckpoint",
            lambda q: q.put(q.a, checkpoint_id="cp-1", node_output_json='{"x": 1}'),
        ),
    ),
    "record-on-another-execution": Case(
        ("RecordInterrupt", lambda q: q.record(q.a)), ("RecordInterrupt", lambda q: q.record(q.b))
    ),
    "record-after-a-put": Case(
        ("PutCheckpoint", lambda q: q.put(q.a)), ("RecordInterrupt", lambda q: q.record(q.a))
    ),
    "idempotency-result-with-other-value": Case(
        ("PutIdempotencyResult", lambda q: q.idem(q.a, "1")),
        ("PutIdempotencyResult", lambda q: q.idem(q.a, "2")),
    ),
    "delete-of-another-execution": Case(
        ("DeleteExecution", lambda q: q.delete(q.a)),
        ("DeleteExecution", lambda q: q.delete(q.b)),
        setup=_RUNS,
    ),
    "delete-after-an-idempotency-result": Case(
        ("PutIdempotencyResult", lambda q: q.idem(q.a, "1")),
        ("DeleteExecution", lambda q: q.delete(q.b)),
        setup=_RUNS,
    ),
    "prune-with-another-age": Case(
        ("PruneCheckpoints", lambda q: q.prune(1)),
        ("PruneCheckpoints", lambda q: q.prune(2)),
        between=(("PutCheckpoint", lambda q: q.other_id(q.put(q.b, created_at=_old()))),),
    ),
    # The second and third reports.
    "decision-on-another-execution": Case(
        ("SubmitDecision", lambda q: q.decide(q.a, True)),
        ("SubmitDecision", lambda q: q.decide(q.b, False)),
        setup=_PAUSES,
    ),
    "decision-with-the-opposite-verdict": Case(
        ("SubmitDecision", lambda q: q.decide(q.a, True)),
        ("SubmitDecision", lambda q: q.decide(q.a, False)),
        setup=_PAUSES,
    ),
    "decision-with-other-metadata": Case(
        ("SubmitDecision", lambda q: q.decide(q.a, True, '{"limit": 10}')),
        ("SubmitDecision", lambda q: q.decide(q.a, True, '{"limit": 99}')),
        setup=_PAUSES,
    ),
    # A deleted put's id (its tombstone) reused on another put: not a late retry.
    "put-after-its-row-was-deleted": Case(
        ("PutCheckpoint", lambda q: q.put(q.a)),
        ("PutCheckpoint", lambda q: q.put(q.b)),
        between=(("DeleteExecution", lambda q: q.other_id(q.delete(q.a))),),
    ),
}


def _send_all(
    caller: Caller,
    requests: Requests,
    writes: tuple[tuple[str, Callable[[Requests], Message]], ...],
) -> None:
    for method, build in writes:
        answer = caller.call(method, build(requests))
        assert answer.response is not None, (method, answer)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_c10_a_reused_request_id_is_refused_and_a_retry_is_answered_as_before(
    case: Case,
    caller: Caller,
    sidecar: Sidecar | SharedSidecar,
    rows_of: Callable[[], dict[str, list[Any]]],
):
    """First call OK; the identical request again gets the same answer (a retry); the id on
    another request is FAILED_PRECONDITION REQUEST_ID_REUSED naming the id and the first
    method, and no row of the namespace changes."""
    q = Requests(sidecar.namespace)
    _send_all(caller, q, case.setup)
    method, build = case.first
    request = build(q)
    first = caller.call(method, request)
    assert first.response is not None, first
    _send_all(caller, q, case.between)
    if not case.between:
        assert caller.call(method, request) == first  # a retry: the identical request

    before = rows_of()
    reuse_method, build_reuse = case.reuse
    refused = caller.call(reuse_method, build_reuse(q))
    assert (refused.code, refused.reason) == (grpc.StatusCode.FAILED_PRECONDITION, REUSED)
    assert refused.metadata == {"request_id": q.rid, "method": method}
    assert rows_of() == before


@pytest.mark.parametrize("first_path", ["unary", "stream"])
@pytest.mark.parametrize("method", list(_STREAM_FIELDS))
def test_c10_stream_items_fingerprint_as_their_unary_calls(
    method: str,
    first_path: str,
    caller: Caller,
    sidecar: Sidecar | SharedSidecar,
    rows_of: Callable[[], dict[str, list[Any]]],
):
    """A request sent one way and retried the other (unary, then as a Write stream item, or
    the reverse) is a retry; the id reused on another request on the other path is refused
    with the same status as a unary call gets, and writes nothing."""
    q = Requests(sidecar.namespace)
    builders: dict[str, tuple[Callable[[], Message], Callable[[], Message]]] = {
        "PutCheckpoint": (lambda: q.put(q.a), lambda: q.put(q.b)),
        "PutIdempotencyResult": (lambda: q.idem(q.a, "1"), lambda: q.idem(q.a, "2")),
        "RecordInterrupt": (lambda: q.record(q.a), lambda: q.record(q.b)),
    }
    build_first, build_reuse = builders[method]
    request = build_first()
    first = caller.call(method, request, stream=first_path == "stream")
    assert first.response is not None, first
    other_path = first_path != "stream"
    assert caller.call(method, request, stream=other_path) == first

    before = rows_of()
    refused = caller.call(method, build_reuse(), stream=other_path)
    assert (refused.code, refused.reason) == (grpc.StatusCode.FAILED_PRECONDITION, REUSED)
    assert refused.metadata == {"request_id": q.rid, "method": method}
    assert rows_of() == before
