"""Conversion between the client's dataclasses and the ``checkpointd.v1`` messages, and the
parsing of each response into what a client method returns.

JSON fields travel as UTF-8 JSON text (contract J1): encoded compactly, without ASCII
escaping, and refusing ``NaN``/``Infinity`` (J2) with a ``ValueError`` before anything is
sent. Decoding keeps the server's rule: ``NaN``, ``Infinity`` and a number that overflows a
double (``1e999``) are a ``ValueError`` naming the field, never a float that could not be
written back. Times travel as ``google.protobuf.Timestamp`` with microsecond precision (J4): a naive
datetime is taken as UTC, an unset field is ``None``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from checkpointd_client.models import (
    CHECKPOINT_STATUSES,
    ActionDecision,
    ActionDecisionType,
    Checkpoint,
    CheckpointPage,
    Decision,
    DecisionResponse,
    DecisionStatus,
    DeleteExecutionResult,
    Execution,
    ExecutionDetail,
    ExecutionPage,
    ExecutionStatus,
    Framework,
    GraphRetentionResult,
    IdempotencyResult,
    InterruptEvent,
    InterruptEventType,
    NamespacePage,
    PendingInterrupt,
    PendingInterruptPage,
    PruneResult,
    RecordInterruptResult,
)
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_STATUS_TO_PROTO: dict[str, checkpoint_pb2.CheckpointStatus.ValueType] = {
    "completed": checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
    "interrupted": checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED,
    "failed": checkpoint_pb2.CHECKPOINT_STATUS_FAILED,
}
_STATUS_FROM_PROTO: dict[int, str] = {v: k for k, v in _STATUS_TO_PROTO.items()}

_EVENT_TYPE_FROM_PROTO: dict[int, InterruptEventType] = {
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_ADDED: "added",
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_CLAIMED: "claimed",
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_REMOVED: "removed",
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_DECIDED: "decided",
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_RESUMED: "resumed",
    interrupt_service_pb2.INTERRUPT_EVENT_TYPE_RESUME_FAILED: "resume_failed",
}


# --- JSON -------------------------------------------------------------------------------


#: One encoder and one decoder for every call: ``json.dumps``/``json.loads`` with options
#: build a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dump_json(value: Any, *, field: str = "value") -> str:
    """Encode ``value`` as compact JSON text; ``ValueError`` names ``field`` for NaN/Infinity."""
    if type(value) is dict and not value:
        return "{}"  # the usual value of most fields
    try:
        return _ENCODER.encode(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc} (JSON has no NaN or Infinity)") from exc
    except TypeError as exc:
        raise TypeError(f"{field}: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal[:32]} overflows to infinity")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def load_json(text: str, *, field: str = "value") -> Any:
    """Decode JSON text; ``ValueError`` names ``field`` for NaN, Infinity or ``1e999``."""
    try:
        return _DECODER.decode(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def load_json_object(text: str, *, field: str = "value") -> dict[str, Any]:
    """Decode a JSON object field; the empty string stands for ``{}``."""
    if not text or text == "{}":
        return {}
    value: dict[str, Any] = load_json(text, field=field)
    return value


# --- time -------------------------------------------------------------------------------


def datetime_to_timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """Encode a datetime (naive means UTC) as a Timestamp, to the microsecond."""
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return timestamp_pb2.Timestamp(
        seconds=delta.days * 86_400 + delta.seconds,
        nanos=delta.microseconds * 1_000,
    )


def timestamp_to_datetime(value: timestamp_pb2.Timestamp) -> datetime:
    """Decode a Timestamp as an aware UTC datetime; digits finer than a microsecond are dropped."""
    return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1_000)


def timedelta_to_duration(value: timedelta) -> duration_pb2.Duration:
    """Encode a timedelta as a Duration (seconds and nanos share the sign)."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = -1 if micros < 0 else 1
    seconds, rest = divmod(abs(micros), 1_000_000)
    return duration_pb2.Duration(seconds=sign * seconds, nanos=sign * rest * 1_000)


# --- status -----------------------------------------------------------------------------


def status_to_proto(status: str) -> checkpoint_pb2.CheckpointStatus.ValueType:
    """Map a status string to the enum; an unknown one is a ``ValueError`` naming the choices."""
    try:
        return _STATUS_TO_PROTO[status]
    except (KeyError, TypeError):
        allowed = ", ".join(repr(s) for s in CHECKPOINT_STATUSES)
        raise ValueError(f"status must be one of {allowed}, got {status!r}") from None


def status_from_proto(value: int) -> str:
    """Map the enum to its string; values this client does not know become ``"unknown:<n>"``."""
    return _STATUS_FROM_PROTO.get(value, f"unknown:{value}")


# --- messages ---------------------------------------------------------------------------


def checkpoint_to_proto(cp: Checkpoint) -> checkpoint_pb2.Checkpoint:
    """Build the wire message of a checkpoint (``sequence`` is output only and not sent)."""
    msg = checkpoint_pb2.Checkpoint(
        execution_id=cp.execution_id,
        checkpoint_id=cp.checkpoint_id,
        parent_checkpoint_id=cp.parent_checkpoint_id,
        chain_name=cp.chain_name,
        node_id=cp.node_id,
        node_index=cp.node_index,
        step_type=cp.step_type,
        status=status_to_proto(cp.status),
        state_snapshot_json=dump_json(cp.state_snapshot, field="state_snapshot"),
        node_input_json=dump_json(cp.node_input, field="node_input"),
        node_output_json=dump_json(cp.node_output, field="node_output"),
        iteration=cp.iteration,
        iteration_counters_json=dump_json(cp.iteration_counters, field="iteration_counters"),
        interrupt_reason=cp.interrupt_reason,
        interrupt_context_json=dump_json(cp.interrupt_context, field="interrupt_context"),
        agent_path=cp.agent_path,
    )
    if cp.created_at is not None:
        msg.created_at.CopyFrom(datetime_to_timestamp(cp.created_at))
    return msg


def checkpoint_from_proto(msg: checkpoint_pb2.Checkpoint, *, payloads: bool = True) -> Checkpoint:
    """Build a checkpoint from its wire message; without ``payloads`` (the ``"basic"`` view)
    the JSON fields are left empty and not decoded, whatever the message holds."""
    if not payloads:
        return Checkpoint(
            execution_id=msg.execution_id,
            checkpoint_id=msg.checkpoint_id,
            parent_checkpoint_id=(
                msg.parent_checkpoint_id if msg.HasField("parent_checkpoint_id") else None
            ),
            chain_name=msg.chain_name,
            node_id=msg.node_id,
            node_index=msg.node_index,
            step_type=msg.step_type if msg.HasField("step_type") else None,
            status=status_from_proto(msg.status),
            iteration=msg.iteration,
            interrupt_reason=msg.interrupt_reason if msg.HasField("interrupt_reason") else None,
            agent_path=msg.agent_path if msg.HasField("agent_path") else None,
            created_at=(
                timestamp_to_datetime(msg.created_at) if msg.HasField("created_at") else None
            ),
            sequence=msg.sequence,
        )
    return Checkpoint(
        execution_id=msg.execution_id,
        checkpoint_id=msg.checkpoint_id,
        parent_checkpoint_id=(
            msg.parent_checkpoint_id if msg.HasField("parent_checkpoint_id") else None
        ),
        chain_name=msg.chain_name,
        node_id=msg.node_id,
        node_index=msg.node_index,
        step_type=msg.step_type if msg.HasField("step_type") else None,
        status=status_from_proto(msg.status),
        state_snapshot=load_json_object(msg.state_snapshot_json, field="state_snapshot"),
        node_input=load_json_object(msg.node_input_json, field="node_input"),
        node_output=load_json_object(msg.node_output_json, field="node_output"),
        iteration=msg.iteration,
        iteration_counters=load_json_object(
            msg.iteration_counters_json, field="iteration_counters"
        ),
        interrupt_reason=msg.interrupt_reason if msg.HasField("interrupt_reason") else None,
        interrupt_context=load_json_object(msg.interrupt_context_json, field="interrupt_context"),
        agent_path=msg.agent_path if msg.HasField("agent_path") else None,
        created_at=timestamp_to_datetime(msg.created_at) if msg.HasField("created_at") else None,
        sequence=msg.sequence,
    )


def pending_to_proto(pending: PendingInterrupt) -> checkpoint_pb2.PendingInterrupt:
    """Build the wire message of a pending interrupt (``checkpoint_id`` is output only)."""
    msg = checkpoint_pb2.PendingInterrupt(
        execution_id=pending.execution_id,
        chain_name=pending.chain_name,
        node_id=pending.node_id,
        reason=pending.reason,
        context_json=dump_json(pending.context, field="context"),
        agent_path=pending.agent_path,
    )
    if pending.created_at is not None:
        msg.created_at.CopyFrom(datetime_to_timestamp(pending.created_at))
    return msg


def pending_from_proto(msg: checkpoint_pb2.PendingInterrupt) -> PendingInterrupt:
    """Build a pending interrupt from its wire message."""
    return PendingInterrupt(
        execution_id=msg.execution_id,
        chain_name=msg.chain_name,
        node_id=msg.node_id,
        reason=msg.reason,
        context=load_json_object(msg.context_json, field="context"),
        agent_path=msg.agent_path if msg.HasField("agent_path") else None,
        created_at=timestamp_to_datetime(msg.created_at) if msg.HasField("created_at") else None,
        checkpoint_id=msg.checkpoint_id,
        decision=decision_from_proto(msg.decision) if msg.HasField("decision") else None,
        interrupt_id=msg.interrupt_id,
        checkpoint_ns=msg.checkpoint_ns,
    )


_DECISION_STATUS_FROM_PROTO: dict[int, DecisionStatus] = {
    checkpoint_pb2.DECISION_STATUS_DECIDED: "decided",
    checkpoint_pb2.DECISION_STATUS_RESUMING: "resuming",
    checkpoint_pb2.DECISION_STATUS_RESUMED: "resumed",
    checkpoint_pb2.DECISION_STATUS_RESUME_FAILED: "resume_failed",
}


def decision_from_proto(msg: checkpoint_pb2.Decision) -> Decision:
    """Build a decision from its wire message."""
    return Decision(
        approved=msg.approved,
        metadata=load_json_object(msg.metadata_json, field="decision.metadata"),
        decided_by=msg.decided_by,
        reason=msg.reason if msg.HasField("reason") else None,
        decided_at=timestamp_to_datetime(msg.decided_at) if msg.HasField("decided_at") else None,
        status=_DECISION_STATUS_FROM_PROTO.get(msg.status, "decided"),
        attempts=msg.attempts,
        lease_expires_at=(
            timestamp_to_datetime(msg.lease_expires_at)
            if msg.HasField("lease_expires_at")
            else None
        ),
        error=msg.error,
        reported_at=(
            timestamp_to_datetime(msg.reported_at) if msg.HasField("reported_at") else None
        ),
        response=response_from_proto(msg.response) if msg.HasField("response") else None,
    )


_ACTION_TYPE_TO_PROTO: dict[ActionDecisionType, int] = {
    "approve": checkpoint_pb2.ACTION_DECISION_TYPE_APPROVE,
    "edit": checkpoint_pb2.ACTION_DECISION_TYPE_EDIT,
    "reject": checkpoint_pb2.ACTION_DECISION_TYPE_REJECT,
    "respond": checkpoint_pb2.ACTION_DECISION_TYPE_RESPOND,
}
_ACTION_TYPE_FROM_PROTO = {number: name for name, number in _ACTION_TYPE_TO_PROTO.items()}


def response_from_proto(msg: checkpoint_pb2.DecisionResponse) -> DecisionResponse:
    """Build a decision's typed response from its wire message."""
    return DecisionResponse(
        actions=tuple(
            ActionDecision(
                type=_ACTION_TYPE_FROM_PROTO.get(action.type, "approve"),
                args=(
                    load_json_object(action.edited_args_json, field="edited_args")
                    if action.edited_args_json
                    else None
                ),
                message=action.message or None,
            )
            for action in msg.actions
        ),
        resume_json=msg.resume_json,
    )


def response_to_proto(response: DecisionResponse) -> checkpoint_pb2.DecisionResponse:
    """The wire message of a decision's typed response."""
    return checkpoint_pb2.DecisionResponse(
        actions=[
            checkpoint_pb2.ActionDecision(
                type=_ACTION_TYPE_TO_PROTO[action.type],  # type: ignore[arg-type]
                edited_args_json=(
                    dump_json(action.args, field="edited_args") if action.args is not None else ""
                ),
                message=action.message or "",
            )
            for action in response.actions
        ],
        resume_json=response.resume_json,
    )


def interrupt_event_from_proto(msg: interrupt_service_pb2.InterruptEvent) -> InterruptEvent | None:
    """Build an interrupt event from its wire message; ``None`` for a type this client does
    not know (a newer server), which the watch then passes over as progress."""
    kind = _EVENT_TYPE_FROM_PROTO.get(msg.type)
    if kind is None:
        return None
    return InterruptEvent(
        cursor=msg.cursor,
        type=kind,
        pending=pending_from_proto(msg.pending),
        event_time=timestamp_to_datetime(msg.event_time),
    )


# --- responses --------------------------------------------------------------------------


def checkpoint_page(
    response: (
        checkpoint_service_pb2.ListCheckpointsResponse
        | replication_service_pb2.ListUnsyncedCheckpointsResponse
    ),
) -> CheckpointPage:
    """Parse a ListCheckpoints or ListUnsyncedCheckpoints response."""
    return CheckpointPage(
        checkpoints=[checkpoint_from_proto(c) for c in response.checkpoints],
        next_page_token=response.next_page_token,
    )


def decision_page(
    response: interrupt_service_pb2.ListDecisionsResponse,
) -> PendingInterruptPage:
    """The page of a ListDecisions response."""
    return PendingInterruptPage(
        pending_interrupts=[pending_from_proto(p) for p in response.decided],
        next_page_token=response.next_page_token,
    )


def pending_page(
    response: interrupt_service_pb2.ListPendingInterruptsResponse,
) -> PendingInterruptPage:
    """Parse a ListPendingInterrupts response."""
    return PendingInterruptPage(
        pending_interrupts=[pending_from_proto(p) for p in response.pending_interrupts],
        next_page_token=response.next_page_token,
    )


def delete_result(
    response: checkpoint_service_pb2.DeleteExecutionResponse,
) -> DeleteExecutionResult:
    """Parse a DeleteExecution response."""
    return DeleteExecutionResult(
        checkpoints_deleted=response.checkpoints_deleted,
        pending_interrupt_deleted=response.pending_interrupt_deleted,
        idempotency_results_deleted=response.idempotency_results_deleted,
    )


def prune_result(response: checkpoint_service_pb2.PruneCheckpointsResponse) -> PruneResult:
    """Parse a PruneCheckpoints response."""
    return PruneResult(
        checkpoints_deleted=response.checkpoints_deleted,
        idempotency_results_deleted=response.idempotency_results_deleted,
    )


def graph_retention_result(
    response: graph_service_pb2.ApplyGraphRetentionResponse,
) -> GraphRetentionResult:
    """Parse an ApplyGraphRetention response."""
    return GraphRetentionResult(
        threads_deleted=response.threads_deleted,
        checkpoints_deleted=response.checkpoints_deleted,
        writes_deleted=response.writes_deleted,
        channel_values_deleted=response.channel_values_deleted,
        paused_threads_kept=response.paused_threads_kept,
        delta_threads_kept=response.delta_threads_kept,
    )


def record_result(
    response: interrupt_service_pb2.RecordInterruptResponse,
) -> RecordInterruptResult:
    """Parse a RecordInterrupt response."""
    return RecordInterruptResult(
        checkpoint=checkpoint_from_proto(response.checkpoint),
        pending=pending_from_proto(response.pending),
        pending_created=response.pending_created,
    )


def idempotency_result(
    response: idempotency_service_pb2.GetIdempotencyResultResponse,
) -> IdempotencyResult:
    """Parse a GetIdempotencyResult response."""
    if not response.found:
        return IdempotencyResult(found=False, value=None)
    return IdempotencyResult(found=True, value=load_json(response.result_json, field="value"))


_EXECUTION_STATUS_TO_PROTO: dict[ExecutionStatus, checkpoint_pb2.ExecutionStatus.ValueType] = {
    "running": checkpoint_pb2.EXECUTION_STATUS_RUNNING,
    "paused": checkpoint_pb2.EXECUTION_STATUS_PAUSED,
    "ended": checkpoint_pb2.EXECUTION_STATUS_ENDED,
    "failed": checkpoint_pb2.EXECUTION_STATUS_FAILED,
}
_EXECUTION_STATUS_FROM_PROTO: dict[int, ExecutionStatus] = {
    number: name for name, number in _EXECUTION_STATUS_TO_PROTO.items()
}


def execution_status_to_proto(status: str | None) -> checkpoint_pb2.ExecutionStatus.ValueType:
    """The wire value of an execution status filter (None: any)."""
    if status is None:
        return checkpoint_pb2.EXECUTION_STATUS_UNSPECIFIED
    for name, number in _EXECUTION_STATUS_TO_PROTO.items():
        if name == status:
            return number
    raise ValueError(
        f"status must be one of {', '.join(_EXECUTION_STATUS_TO_PROTO)}, not {status!r}"
    )


_FRAMEWORK_TO_PROTO: dict[Framework, checkpoint_pb2.Framework.ValueType] = {
    "fastaiagent": checkpoint_pb2.FRAMEWORK_FASTAIAGENT,
    "langgraph": checkpoint_pb2.FRAMEWORK_LANGGRAPH,
}
_FRAMEWORK_FROM_PROTO: dict[int, Framework] = {
    number: name for name, number in _FRAMEWORK_TO_PROTO.items()
}


def framework_to_proto(framework: str | None) -> checkpoint_pb2.Framework.ValueType:
    """The wire value of a framework (None: unspecified)."""
    if framework is None:
        return checkpoint_pb2.FRAMEWORK_UNSPECIFIED
    for name, number in _FRAMEWORK_TO_PROTO.items():
        if name == framework:
            return number
    raise ValueError(
        f"framework must be one of {', '.join(_FRAMEWORK_TO_PROTO)}, not {framework!r}"
    )


def execution_from_proto(msg: checkpoint_pb2.Execution) -> Execution:
    """Build an execution summary from its wire message."""
    return Execution(
        execution_id=msg.execution_id,
        chain_name=msg.chain_name,
        status=_EXECUTION_STATUS_FROM_PROTO.get(msg.status, "running"),
        checkpoint_count=msg.checkpoint_count,
        last_activity_at=(
            timestamp_to_datetime(msg.last_activity_at)
            if msg.HasField("last_activity_at")
            else None
        ),
        last_checkpoint_id=msg.last_checkpoint_id,
        last_node_id=msg.last_node_id,
        last_sequence=msg.last_sequence,
        # A server older than the field lists only fastaiagent runs, unspecified.
        framework=_FRAMEWORK_FROM_PROTO.get(msg.framework, "fastaiagent"),
    )


def execution_page(response: checkpoint_service_pb2.ListExecutionsResponse) -> ExecutionPage:
    """Parse a ListExecutions response."""
    return ExecutionPage(
        executions=[execution_from_proto(e) for e in response.executions],
        next_page_token=response.next_page_token,
    )


def namespace_page(response: checkpoint_service_pb2.ListNamespacesResponse) -> NamespacePage:
    """Parse a ListNamespaces response."""
    return NamespacePage(
        namespaces=list(response.namespaces), next_page_token=response.next_page_token
    )


def execution_detail(response: checkpoint_service_pb2.GetExecutionResponse) -> ExecutionDetail:
    """Parse a GetExecution response."""
    return ExecutionDetail(
        execution=execution_from_proto(response.execution),
        pending=(
            pending_from_proto(response.pending_interrupt)
            if response.HasField("pending_interrupt")
            else None
        ),
        last_decided=(
            pending_from_proto(response.last_decided) if response.HasField("last_decided") else None
        ),
        idempotency_keys=list(response.idempotency_keys),
        idempotency_key_count=response.idempotency_key_count,
        pauses=(
            [pending_from_proto(p) for p in response.pending_interrupts]
            if response.pending_interrupts or not response.HasField("pending_interrupt")
            # A server older than the field sends the one pending interrupt only.
            else [pending_from_proto(response.pending_interrupt)]
        ),
    )
