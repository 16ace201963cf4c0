"""C10: what a request's fingerprint keeps and leaves out, so that a retry (the same request
again) matches and any other request does not."""

from __future__ import annotations

from checkpointd.fingerprint import fingerprint, method_of
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    interrupt_service_pb2,
)


def _put(**fields: object) -> checkpoint_service_pb2.PutCheckpointRequest:
    request = checkpoint_service_pb2.PutCheckpointRequest(
        namespace="ns",
        request_id="r1",
        checkpoint=checkpoint_pb2.Checkpoint(execution_id="a", checkpoint_id="c", node_id="n"),
    )
    for name, value in fields.items():
        target = request.checkpoint if hasattr(request.checkpoint, name) else request
        setattr(target, name, value)
    return request


def test_c10_a_retry_matches_whatever_the_request_id_namespace_view_or_output_fields():
    """The key (namespace, request id), the reply's view and output-only fields a client may
    echo back are left out; the method leads the fingerprint."""
    first = fingerprint("PutCheckpoint", _put())
    assert method_of(first) == "PutCheckpoint"
    assert fingerprint("PutCheckpoint", _put()) == first
    assert fingerprint("PutCheckpoint", _put(namespace="other", request_id="r2")) == first
    basic = _put(view=checkpoint_service_pb2.CHECKPOINT_VIEW_BASIC)
    assert fingerprint("PutCheckpoint", basic) == first
    assert fingerprint("PutCheckpoint", _put(sequence=42)) == first
    pending = checkpoint_pb2.PendingInterrupt(execution_id="a", reason="r")
    record = interrupt_service_pb2.RecordInterruptRequest(request_id="r", pending=pending)
    echoed = interrupt_service_pb2.RecordInterruptRequest()
    echoed.CopyFrom(record)
    echoed.pending.checkpoint_id = "filled-by-the-server"
    echoed.pending.decision.decided_by = "someone"
    assert fingerprint("RecordInterrupt", echoed) == fingerprint("RecordInterrupt", record)


def test_c10_other_content_or_another_method_does_not_match():
    """Another execution, checkpoint or payload, or the same bytes under another method, is
    another request."""
    first = fingerprint("PutCheckpoint", _put())
    for other in (
        _put(execution_id="b"),
        _put(checkpoint_id="d"),
        _put(node_output_json='{"x": 1}'),
    ):
        assert fingerprint("PutCheckpoint", other) != first
    assert fingerprint("RecordInterrupt", _put()) != first
    approve = interrupt_service_pb2.SubmitDecisionRequest(request_id="r", execution_id="a")
    reject = interrupt_service_pb2.SubmitDecisionRequest()
    reject.CopyFrom(approve)
    approve.approved = True
    assert fingerprint("SubmitDecision", approve) != fingerprint("SubmitDecision", reject)


def test_c10_a_request_without_a_request_id_has_no_fingerprint():
    """Nothing remembers a request without an id, so none is computed."""
    assert fingerprint("PutCheckpoint", _put(request_id="")) == ""
