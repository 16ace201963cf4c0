"""What docs/protocol.md promises a client written from the protocol alone, on both backends:
every documented `field` of INVALID_FIELD (E2), the order of pending interrupts (I4), and
what watch cursor 0 means (I5).

Requests go through the raw generated stubs, as a client in any language would send them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from checkpointd.servicers.write import MAX_ITEMS_PER_MESSAGE
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import checkpoint_service_pb2 as csvc
from checkpointd_client.v1 import checkpoint_service_pb2_grpc as csvc_grpc
from checkpointd_client.v1 import graph_service_pb2_grpc as gsvc_grpc
from checkpointd_client.v1 import idempotency_service_pb2 as isvc
from checkpointd_client.v1 import idempotency_service_pb2_grpc as isvc_grpc
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc
from checkpointd_client.v1 import replication_service_pb2 as rsvc
from checkpointd_client.v1 import replication_service_pb2_grpc as rsvc_grpc
from checkpointd_client.v1 import write_service_pb2 as wsvc
from checkpointd_client.v1 import write_service_pb2_grpc as wsvc_grpc
from tests.contract.graph_breakers import GRAPH_BREAKERS
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar
from tests.unit.test_invalid_field_values import documented_fields

TIMEOUT = 10.0
#: The longest wait for one expected watch message; reached only when a test is failing.
PATIENCE = 30.0


class Stubs:
    """The services on one channel."""

    def __init__(self, channel: grpc.Channel, namespace: str) -> None:
        #: The namespace the test writes in: its own on a shared server, "default" on its own.
        self.namespace = namespace
        self.checkpoints = csvc_grpc.CheckpointServiceStub(channel)
        self.interrupts = svc_grpc.InterruptServiceStub(channel)
        self.idempotency = isvc_grpc.IdempotencyServiceStub(channel)
        self.replication = rsvc_grpc.ReplicationServiceStub(channel)
        self.write = wsvc_grpc.WriteServiceStub(channel)
        self.graph = gsvc_grpc.GraphServiceStub(channel)


@pytest.fixture
def stubs(sidecar: Sidecar | SharedSidecar) -> Iterator[Stubs]:
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Stubs(channel, sidecar.namespace)


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(error)
    assert status is not None, f"no status details: {error}"
    return _status_info(status)


def _status_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info


def _timestamp(seconds: int = 0, nanos: int = 0) -> Timestamp:
    return Timestamp(seconds=seconds, nanos=nanos)


def _checkpoint(**fields: Any) -> pb.Checkpoint:
    """A valid completed checkpoint, with ``fields`` replacing its defaults."""
    values: dict[str, Any] = {
        "execution_id": f"exec-{uuid.uuid4().hex[:12]}",
        "checkpoint_id": uuid.uuid4().hex,
        "chain_name": "flow",
        "node_id": "node",
        "status": pb.CHECKPOINT_STATUS_COMPLETED,
    }
    values.update(fields)
    return pb.Checkpoint(**values)


def _interrupted(**fields: Any) -> pb.Checkpoint:
    fields.setdefault("status", pb.CHECKPOINT_STATUS_INTERRUPTED)
    fields.setdefault("interrupt_reason", "approval")
    return _checkpoint(**fields)


def _pending(**fields: Any) -> pb.PendingInterrupt:
    values: dict[str, Any] = {"chain_name": "flow", "node_id": "node", "reason": "approval"}
    values.update(fields)
    return pb.PendingInterrupt(**values)


def _put(**checkpoint_fields: Any) -> Callable[[Stubs], object]:
    return lambda s: s.checkpoints.PutCheckpoint(
        csvc.PutCheckpointRequest(checkpoint=_checkpoint(**checkpoint_fields)), timeout=TIMEOUT
    )


def _record(**pending_fields: Any) -> Callable[[Stubs], object]:
    return lambda s: s.interrupts.RecordInterrupt(
        svc.RecordInterruptRequest(checkpoint=_interrupted(), pending=_pending(**pending_fields)),
        timeout=TIMEOUT,
    )


def _fenced(**fence_fields: Any) -> Callable[[Stubs], object]:
    """A valid PutCheckpoint whose fence (K4) breaks a rule."""
    fence: dict[str, Any] = {
        "execution_id": "e",
        "checkpoint_id": "c",
        "lease_token": "t",
        "attempt": 1,
        **fence_fields,
    }
    return lambda s: s.checkpoints.PutCheckpoint(
        csvc.PutCheckpointRequest(checkpoint=_checkpoint(), fence=pb.LeaseFence(**fence)),
        timeout=TIMEOUT,
    )


def _list_pending(**request: Any) -> Callable[[Stubs], object]:
    return lambda s: s.interrupts.ListPendingInterrupts(
        svc.ListPendingInterruptsRequest(**request), timeout=TIMEOUT
    )


def _watch(**request: Any) -> Callable[[Stubs], object]:
    return lambda s: next(
        iter(s.interrupts.WatchInterrupts(svc.WatchInterruptsRequest(**request), timeout=TIMEOUT))
    )


def _decide(approved: bool = False, **response: Any) -> Callable[[Stubs], object]:
    """A SubmitDecision whose typed response (K3) breaks a rule; nothing else is wrong."""
    return lambda s: s.interrupts.SubmitDecision(
        svc.SubmitDecisionRequest(
            execution_id="e",
            decided_by="b",
            approved=approved,
            response=pb.DecisionResponse(**response),
        ),
        timeout=TIMEOUT,
    )


def _first_messages(stubs: Stubs, count: int, **request: Any) -> list[svc.WatchInterruptsResponse]:
    """The first ``count`` messages of a new watch stream (progress skipped)."""
    watch = stubs.interrupts.WatchInterrupts(
        svc.WatchInterruptsRequest(**request), timeout=PATIENCE
    )
    messages: list[svc.WatchInterruptsResponse] = []
    try:
        for message in watch:
            if not message.HasField("progress"):
                messages.append(message)
            if len(messages) == count:
                return messages
    finally:
        watch.cancel()
    raise AssertionError(f"the stream ended after {messages}")


#: Non-object JSON of every other kind, one per object field: each is "must be a JSON object".
NOT_AN_OBJECT = ["[1, 2]", '"text"', "42", "true", "null", "[]"]


def _write_item_error(stubs: Stubs, item: wsvc.WriteRequest) -> status_pb2.Status:
    """The status the Write stream answers one item with (it answers, the stream goes on)."""
    (answer,) = list(stubs.write.Write(iter([item]), timeout=TIMEOUT))
    assert answer.WhichOneof("result") == "error", answer
    return status_pb2.Status.FromString(answer.error.SerializeToString())


def _oversize_batch_error(stubs: Stubs) -> status_pb2.Status:
    """The status of each item of a Write message one item over the batch limit (S3): every
    item is refused alike, none is written."""
    items = [
        wsvc.WriteItem(
            correlation_id=n,
            put_idempotency_result=isvc.PutIdempotencyResultRequest(
                execution_id="e", key=f"k{n}", result_json="{}"
            ),
        )
        for n in range(1, MAX_ITEMS_PER_MESSAGE + 2)
    ]
    (answer,) = list(stubs.write.Write(iter([wsvc.WriteRequest(items=items)]), timeout=TIMEOUT))
    statuses = {r.error.SerializeToString() for r in answer.results}
    assert len(answer.results) == len(items), answer
    assert len(statuses) == 1, answer
    return status_pb2.Status.FromString(statuses.pop())


#: One request per documented `field` value that breaks a rule of exactly that field.
BREAKERS: dict[str, Callable[[Stubs], object]] = {
    "request": lambda s: _write_item_error(s, wsvc.WriteRequest(correlation_id=1)),
    "items": _oversize_batch_error,
    "namespace": lambda s: s.checkpoints.GetLatestCheckpoint(
        csvc.GetLatestCheckpointRequest(namespace="-bad", execution_id="e"), timeout=TIMEOUT
    ),
    "request_id": lambda s: s.checkpoints.DeleteExecution(
        csvc.DeleteExecutionRequest(request_id="r" * 129, execution_id="e"), timeout=TIMEOUT
    ),
    "execution_id": lambda s: s.checkpoints.GetLatestCheckpoint(
        csvc.GetLatestCheckpointRequest(execution_id=""), timeout=TIMEOUT
    ),
    "checkpoint_id": lambda s: s.checkpoints.GetCheckpoint(
        csvc.GetCheckpointRequest(execution_id="e", checkpoint_id=""), timeout=TIMEOUT
    ),
    "page_size": lambda s: s.checkpoints.ListCheckpoints(
        csvc.ListCheckpointsRequest(execution_id="e", page_size=-1), timeout=TIMEOUT
    ),
    "checkpoint_ids": lambda s: s.replication.MarkCheckpointsSynced(
        rsvc.MarkCheckpointsSyncedRequest(checkpoint_ids=["ok", ""]), timeout=TIMEOUT
    ),
    "quarantines": lambda s: s.replication.QuarantineCheckpoints(
        rsvc.QuarantineCheckpointsRequest(
            quarantines=[rsvc.CheckpointQuarantine(checkpoint_id="c", reason="r")] * 1001
        ),
        timeout=TIMEOUT,
    ),
    "quarantines.checkpoint_id": lambda s: s.replication.QuarantineCheckpoints(
        rsvc.QuarantineCheckpointsRequest(
            quarantines=[rsvc.CheckpointQuarantine(checkpoint_id="", reason="r")]
        ),
        timeout=TIMEOUT,
    ),
    "quarantines.reason": lambda s: s.replication.QuarantineCheckpoints(
        rsvc.QuarantineCheckpointsRequest(
            quarantines=[rsvc.CheckpointQuarantine(checkpoint_id="c", reason="")]
        ),
        timeout=TIMEOUT,
    ),
    "status": lambda s: s.checkpoints.ListExecutions(
        csvc.ListExecutionsRequest(status=7),  # type: ignore[arg-type]
        timeout=TIMEOUT,
    ),
    "active_since": lambda s: s.checkpoints.ListExecutions(
        csvc.ListExecutionsRequest(active_since=Timestamp(seconds=-(10**12))), timeout=TIMEOUT
    ),
    "framework": lambda s: s.checkpoints.ListExecutions(
        csvc.ListExecutionsRequest(framework=7),  # type: ignore[arg-type]
        timeout=TIMEOUT,
    ),
    "older_than": lambda s: s.checkpoints.PruneCheckpoints(
        csvc.PruneCheckpointsRequest(), timeout=TIMEOUT
    ),
    "claim_token": lambda s: s.interrupts.ClaimInterrupt(
        svc.ClaimInterruptRequest(execution_id="e", claim_token="a\nb"), timeout=TIMEOUT
    ),
    "key": lambda s: s.idempotency.GetIdempotencyResult(
        isvc.GetIdempotencyResultRequest(execution_id="e", key=""), timeout=TIMEOUT
    ),
    "result_json": lambda s: s.idempotency.PutIdempotencyResult(
        isvc.PutIdempotencyResultRequest(execution_id="e", key="k", result_json="{"),
        timeout=TIMEOUT,
    ),
    "chain_name": _list_pending(chain_name="a\x00b"),
    "reason": _list_pending(reason="r" * 257),
    "agent_path_prefix": _list_pending(agent_path_prefix="p" * 1025),
    "after_cursor": _watch(after_cursor=-1),
    "progress_interval": _watch(progress_interval=Duration(nanos=100_000_000)),
    "after_cursor_event_time": _watch(
        after_cursor=1, after_cursor_event_time=_timestamp(nanos=1_000_000_000)
    ),
    "interrupt_id": lambda s: s.interrupts.SubmitDecision(
        svc.SubmitDecisionRequest(execution_id="e", interrupt_id="i" * 129, decided_by="b"),
        timeout=TIMEOUT,
    ),
    "decided_by": lambda s: s.interrupts.SubmitDecision(
        svc.SubmitDecisionRequest(execution_id="e", approved=True), timeout=TIMEOUT
    ),
    "metadata_json": lambda s: s.interrupts.SubmitDecision(
        svc.SubmitDecisionRequest(execution_id="e", decided_by="b", metadata_json="[]"),
        timeout=TIMEOUT,
    ),
    "approved": _decide(
        approved=True, actions=[pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_REJECT)]
    ),
    "response": _decide(
        resume_json="1", actions=[pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_APPROVE)]
    ),
    "response.actions": _decide(
        approved=True,
        actions=[pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_APPROVE)] * 1001,
    ),
    "response.actions.type": _decide(actions=[pb.ActionDecision()]),
    "response.actions.edited_args_json": _decide(
        approved=True,
        actions=[pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_EDIT, edited_args_json="[]")],
    ),
    "response.actions.message": _decide(
        approved=True, actions=[pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_RESPOND)]
    ),
    "response.resume_json": _decide(resume_json="{"),
    "fence.execution_id": _fenced(execution_id=""),
    "fence.checkpoint_id": _fenced(checkpoint_id="c" * 129),
    "fence.interrupt_id": _fenced(interrupt_id="i\x00"),
    "fence.lease_token": _fenced(lease_token=""),
    "fence.attempt": _fenced(attempt=0),
    "lease_token": lambda s: s.interrupts.LeaseDecision(
        svc.LeaseDecisionRequest(execution_id="e", checkpoint_id="c"), timeout=TIMEOUT
    ),
    "lease_seconds": lambda s: s.interrupts.LeaseDecision(
        svc.LeaseDecisionRequest(
            execution_id="e", checkpoint_id="c", lease_token="t", lease_seconds=-1
        ),
        timeout=TIMEOUT,
    ),
    "outcome": lambda s: s.interrupts.ReportResume(
        svc.ReportResumeRequest(execution_id="e", checkpoint_id="c", lease_token="t"),
        timeout=TIMEOUT,
    ),
    "checkpoint": lambda s: s.checkpoints.PutCheckpoint(
        csvc.PutCheckpointRequest(), timeout=TIMEOUT
    ),
    "view": lambda s: s.checkpoints.PutCheckpoint(
        csvc.PutCheckpointRequest(
            view=9,  # type: ignore[arg-type]
            checkpoint=pb.Checkpoint(
                execution_id="e", node_id="n", status=pb.CHECKPOINT_STATUS_COMPLETED
            ),
        ),
        timeout=TIMEOUT,
    ),
    "pending": lambda s: s.interrupts.RecordInterrupt(
        svc.RecordInterruptRequest(checkpoint=_interrupted()), timeout=TIMEOUT
    ),
    "checkpoint.execution_id": _put(execution_id=""),
    "checkpoint.checkpoint_id": _put(checkpoint_id="c" * 129),
    "checkpoint.parent_checkpoint_id": _put(parent_checkpoint_id="a\tb"),
    "checkpoint.chain_name": _put(chain_name="c" * 257),
    "checkpoint.node_id": _put(node_id="n" * 513),
    "checkpoint.step_type": _put(step_type="s" * 65),
    "checkpoint.status": _put(status=pb.CHECKPOINT_STATUS_UNSPECIFIED),
    "checkpoint.state_snapshot_json": _put(state_snapshot_json=NOT_AN_OBJECT[0]),
    "checkpoint.node_input_json": _put(node_input_json=NOT_AN_OBJECT[1]),
    "checkpoint.node_output_json": _put(node_output_json=NOT_AN_OBJECT[2]),
    "checkpoint.iteration_counters_json": _put(iteration_counters_json=NOT_AN_OBJECT[3]),
    "checkpoint.interrupt_reason": _put(interrupt_reason="r" * 257),
    "checkpoint.interrupt_context_json": _put(interrupt_context_json=NOT_AN_OBJECT[4]),
    "checkpoint.agent_path": _put(agent_path="a\x00b"),
    "checkpoint.created_at": _put(created_at=_timestamp(seconds=-62_135_596_801)),
    "pending.execution_id": _record(execution_id="someone-else"),
    "pending.chain_name": _record(chain_name="c" * 257),
    "pending.node_id": _record(node_id="a\x00b"),
    "pending.reason": _record(reason="r" * 257),
    "pending.context_json": _record(context_json=NOT_AN_OBJECT[5]),
    "pending.agent_path": _record(agent_path="p" * 1025),
    "pending.created_at": _record(created_at=_timestamp(nanos=-1)),
    **GRAPH_BREAKERS,
}
OBJECT_FIELDS = {
    "checkpoint.state_snapshot_json",
    "checkpoint.node_input_json",
    "checkpoint.node_output_json",
    "checkpoint.iteration_counters_json",
    "checkpoint.interrupt_context_json",
    "pending.context_json",
}


def test_e2_every_request_here_covers_exactly_the_documented_fields():
    """The requests below are one per `field` value listed in docs/protocol.md."""
    assert set(BREAKERS) == documented_fields()


@pytest.mark.own_server  # no refused write may leave an event: the store's cursor stays at 0
def test_e2_every_documented_invalid_field_value_is_what_the_server_sends(
    stubs: Stubs,
) -> None:
    """For every documented `field`, a request that breaks a rule of it is INVALID_ARGUMENT,
    reason INVALID_FIELD, with exactly that `field` (bare for request fields, dotted inside a
    message); valid JSON that is not an object, in a field that holds an object, is "must be
    a JSON object". None of the refused writes leaves anything behind."""
    wrong: dict[str, str] = {}
    for field, send in sorted(BREAKERS.items()):
        info: error_details_pb2.ErrorInfo | None = None
        try:
            answer = send(stubs)
        except grpc.RpcError as error:
            code: object = error.code()
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                info = _error_info(error)
        else:
            if not isinstance(answer, status_pb2.Status):
                wrong[field] = "accepted"
                continue
            # A Write stream item's own status carries what the failed unary call would.
            code = answer.code
            if answer.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]:
                info = _status_info(answer)
        if info is None or (info.domain, info.reason) != ("checkpointd.v1", "INVALID_FIELD"):
            wrong[field] = f"{code} {info}"
        elif info.metadata["field"] != field:
            wrong[field] = f"field {info.metadata['field']!r}"
        elif field in OBJECT_FIELDS and info.metadata["rule"] != "must be a JSON object":
            wrong[field] = f"rule {info.metadata['rule']!r}"
    assert wrong == {}

    listed = stubs.interrupts.ListPendingInterrupts(
        svc.ListPendingInterruptsRequest(page_size=1000), timeout=TIMEOUT
    )
    assert list(listed.pending_interrupts) == []
    (complete,) = _first_messages(stubs, 1)
    assert complete.snapshot_complete.cursor == 0, "a refused write wrote an event"


#: Every RPC that names a graph pause by `interrupt_id`, each breaking only that field.
INTERRUPT_ID_BREAKERS: dict[str, Callable[[Stubs], object]] = {
    "SubmitDecision": BREAKERS["interrupt_id"],
    "LeaseDecision": lambda s: s.interrupts.LeaseDecision(
        svc.LeaseDecisionRequest(
            execution_id="e", checkpoint_id="c", interrupt_id="a\nb", lease_token="t"
        ),
        timeout=TIMEOUT,
    ),
    "ReportResume": lambda s: s.interrupts.ReportResume(
        svc.ReportResumeRequest(
            execution_id="e",
            checkpoint_id="c",
            interrupt_id="i" * 129,
            lease_token="t",
            outcome=svc.RESUME_OUTCOME_RESUMED,
        ),
        timeout=TIMEOUT,
    ),
}


@pytest.mark.parametrize("rpc", sorted(INTERRUPT_ID_BREAKERS))
def test_e2_each_rpc_naming_a_graph_pause_refuses_a_bad_interrupt_id(
    stubs: Stubs, rpc: str
) -> None:
    """SubmitDecision, LeaseDecision and ReportResume all refuse an interrupt_id over 128
    characters or with a control character, naming `interrupt_id`, as the guide lists."""
    with pytest.raises(grpc.RpcError) as caught:
        INTERRUPT_ID_BREAKERS[rpc](stubs)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = _error_info(caught.value)
    assert (info.reason, info.metadata["field"]) == ("INVALID_FIELD", "interrupt_id")


# --- I4: newest first means most recently recorded ------------------------------------------


def test_i4_pending_interrupts_are_newest_recorded_first_not_by_created_at(
    stubs: Stubs,
) -> None:
    """ListPendingInterrupts, and the watch snapshot, order rows by the write order of the
    RecordInterrupt that created them: created_at (here backdated the other way round) plays
    no part, and recording an already pending execution again does not move its row."""
    now = datetime.now(tz=UTC)
    recorded: list[str] = []
    for i in range(4):
        # Each later write claims an older time.
        when = now - timedelta(days=i + 1)
        created_at = Timestamp()
        created_at.FromDatetime(when)
        execution_id = f"exec-{i}"
        stubs.interrupts.RecordInterrupt(
            svc.RecordInterruptRequest(
                namespace=stubs.namespace,
                checkpoint=_interrupted(execution_id=execution_id, created_at=created_at),
                pending=_pending(created_at=created_at),
            ),
            timeout=TIMEOUT,
        )
        recorded.append(execution_id)
    again = stubs.interrupts.RecordInterrupt(
        svc.RecordInterruptRequest(
            namespace=stubs.namespace,
            checkpoint=_interrupted(execution_id="exec-0"),
            pending=_pending(),
        ),
        timeout=TIMEOUT,
    )
    assert again.pending_created is False

    newest_first = list(reversed(recorded))
    page = stubs.interrupts.ListPendingInterrupts(
        svc.ListPendingInterruptsRequest(namespace=stubs.namespace), timeout=TIMEOUT
    )
    assert [p.execution_id for p in page.pending_interrupts] == newest_first
    created = [p.created_at.ToDatetime(tzinfo=UTC) for p in page.pending_interrupts]
    assert created == sorted(created), "created_at runs the other way: it is not the order"
    # The order is that of the interrupted checkpoints' sequences, which GetCheckpoint shows.
    sequences = [
        stubs.checkpoints.GetCheckpoint(
            csvc.GetCheckpointRequest(
                namespace=stubs.namespace,
                execution_id=p.execution_id,
                checkpoint_id=p.checkpoint_id,
            ),
            timeout=TIMEOUT,
        ).checkpoint.sequence
        for p in page.pending_interrupts
    ]
    assert sequences == sorted(sequences, reverse=True)

    watch = stubs.interrupts.WatchInterrupts(
        svc.WatchInterruptsRequest(namespace=stubs.namespace), timeout=PATIENCE
    )
    snapshot = []
    for message in watch:
        if message.HasField("snapshot_complete"):
            break
        snapshot.append(message.snapshot.execution_id)
    watch.cancel()
    assert snapshot == newest_first


# --- I5: what watch cursor 0 means -------------------------------------------------------------


@pytest.mark.own_server  # cursor 0 is that of a store that never wrote an event
def test_i5_cursor_zero_is_no_cursor_a_new_snapshot_not_a_replay(stubs: Stubs) -> None:
    """On a store that never wrote an event the snapshot is empty and taken at cursor 0;
    reconnecting with that 0 brings a new snapshot holding what changed since (no `event`
    replay), taken at the store's cursor, which counts every namespace's events from 1."""
    (complete,) = _first_messages(stubs, 1)
    assert complete.WhichOneof("item") == "snapshot_complete"
    assert complete.snapshot_complete.cursor == 0
    assert not complete.snapshot_complete.HasField("event_time")  # no event at cursor 0

    stubs.interrupts.RecordInterrupt(
        svc.RecordInterruptRequest(
            checkpoint=_interrupted(execution_id="paused"), pending=_pending()
        ),
        timeout=TIMEOUT,
    )
    row, complete = _first_messages(stubs, 2, after_cursor=0)
    assert row.WhichOneof("item") == "snapshot"
    assert row.snapshot.execution_id == "paused"
    assert complete.WhichOneof("item") == "snapshot_complete"
    first_event_cursor = complete.snapshot_complete.cursor
    first_event_time = complete.snapshot_complete.event_time
    assert first_event_cursor >= 1

    # With a cursor above 0 the same change comes as a replayed event, not a snapshot.
    stubs.interrupts.RecordInterrupt(
        svc.RecordInterruptRequest(
            checkpoint=_interrupted(execution_id="paused-too"), pending=_pending()
        ),
        timeout=TIMEOUT,
    )
    (replayed,) = _first_messages(stubs, 1, after_cursor=first_event_cursor)
    assert replayed.WhichOneof("item") == "event"
    assert replayed.event.pending.execution_id == "paused-too"
    assert replayed.event.cursor > first_event_cursor

    # Another namespace, with no event of its own, is at the store's cursor, not at 0.
    (elsewhere,) = _first_messages(stubs, 1, namespace="quiet")
    assert elsewhere.snapshot_complete.cursor == replayed.event.cursor

    # A cursor above the store's newest event (a store that went back in time under the
    # client) is answered as an expired one: the client starts again from a snapshot.
    beyond = replayed.event.cursor + 1000
    with pytest.raises(grpc.RpcError) as caught:
        _first_messages(stubs, 1, after_cursor=beyond)
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    info = _error_info(caught.value)
    assert info.reason == "CURSOR_EXPIRED"
    assert dict(info.metadata) == {
        "after_cursor": str(beyond),
        "newest_cursor": str(replayed.event.cursor),
    }

    # A cursor the store holds another event under (it went back in time and wrote past the
    # cursor again) is answered the same way: the event_time sent with it tells them apart.
    (same,) = _first_messages(
        stubs,
        1,
        after_cursor=first_event_cursor,
        after_cursor_event_time=first_event_time,
    )
    assert same.event.cursor == replayed.event.cursor
    other = _timestamp(first_event_time.seconds - 1, first_event_time.nanos)
    with pytest.raises(grpc.RpcError) as caught:
        _first_messages(stubs, 1, after_cursor=first_event_cursor, after_cursor_event_time=other)
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    info = _error_info(caught.value)
    assert info.reason == "CURSOR_EXPIRED"
    assert dict(info.metadata) == {"after_cursor": str(first_event_cursor)}
