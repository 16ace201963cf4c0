"""Conversion between protobuf messages and the store's records.

``*_from_proto`` validates as it converts (every field once, on the way in), so a record
that exists is a valid record. ``*_to_proto`` is plain copying: a field the record holds as
None is passed as None, which a message's constructor leaves unset.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from checkpointd import decision_responses
from checkpointd import validation as v
from checkpointd.domain import (
    CheckpointRecord,
    CheckpointStatus,
    DecisionRecord,
    DecisionStatus,
    PendingRecord,
)
from checkpointd.errors import InvalidField
from checkpointd_client.v1 import checkpoint_pb2 as pb

__all__ = [
    "checkpoint_from_proto",
    "checkpoint_to_proto",
    "decision_to_proto",
    "pending_from_proto",
    "pending_to_proto",
    "timestamp_to_proto",
]

_STATUS_FROM_PROTO = {
    pb.CHECKPOINT_STATUS_COMPLETED: CheckpointStatus.COMPLETED,
    pb.CHECKPOINT_STATUS_INTERRUPTED: CheckpointStatus.INTERRUPTED,
    pb.CHECKPOINT_STATUS_FAILED: CheckpointStatus.FAILED,
}
_STATUS_TO_PROTO = {status: number for number, status in _STATUS_FROM_PROTO.items()}
_DECISION_STATUS_TO_PROTO = {
    DecisionStatus.DECIDED: pb.DECISION_STATUS_DECIDED,
    DecisionStatus.RESUMING: pb.DECISION_STATUS_RESUMING,
    DecisionStatus.RESUMED: pb.DECISION_STATUS_RESUMED,
    DecisionStatus.RESUME_FAILED: pb.DECISION_STATUS_RESUME_FAILED,
}


def _optional(message: pb.Checkpoint | pb.PendingInterrupt, name: str) -> str | None:
    return getattr(message, name) if message.HasField(name) else None  # type: ignore[arg-type]


def checkpoint_from_proto(msg: pb.Checkpoint, *, field: str, now: datetime) -> CheckpointRecord:
    """Validate a checkpoint from a write request and fill what the server fills (C1).

    ``field`` is the path of the message in the request, so errors name e.g.
    ``checkpoint.node_id``; ``now`` is the server clock used when created_at is absent.
    """
    status = _STATUS_FROM_PROTO.get(msg.status)
    if status is None:
        raise InvalidField(
            f"{field}.status", "is required: CHECKPOINT_STATUS_COMPLETED, _INTERRUPTED or _FAILED"
        )
    created_at = (
        v.timestamp_to_datetime(f"{field}.created_at", msg.created_at)
        if msg.HasField("created_at")
        else now
    )
    parent = _optional(msg, "parent_checkpoint_id")
    return CheckpointRecord(
        execution_id=v.identifier(f"{field}.execution_id", msg.execution_id, v.EXECUTION_ID_MAX),
        checkpoint_id=v.optional_identifier(
            f"{field}.checkpoint_id", msg.checkpoint_id, v.CHECKPOINT_ID_MAX
        )
        or str(uuid.uuid4()),
        parent_checkpoint_id=None
        if parent is None
        else v.optional_identifier(f"{field}.parent_checkpoint_id", parent, v.CHECKPOINT_ID_MAX),
        chain_name=v.text(f"{field}.chain_name", msg.chain_name, v.CHAIN_NAME_MAX),
        node_id=v.text(f"{field}.node_id", msg.node_id, v.NODE_ID_MAX),
        node_index=msg.node_index,
        step_type=v.optional_text(
            f"{field}.step_type", _optional(msg, "step_type"), v.STEP_TYPE_MAX
        ),
        status=status,
        state_snapshot_json=v.json_object(f"{field}.state_snapshot_json", msg.state_snapshot_json),
        node_input_json=v.json_object(f"{field}.node_input_json", msg.node_input_json),
        node_output_json=v.json_object(f"{field}.node_output_json", msg.node_output_json),
        iteration=msg.iteration,
        iteration_counters_json=v.json_int_object(
            f"{field}.iteration_counters_json", msg.iteration_counters_json
        ),
        interrupt_reason=v.optional_text(
            f"{field}.interrupt_reason", _optional(msg, "interrupt_reason"), v.REASON_MAX
        ),
        interrupt_context_json=v.json_object(
            f"{field}.interrupt_context_json", msg.interrupt_context_json
        ),
        agent_path=v.optional_text(
            f"{field}.agent_path", _optional(msg, "agent_path"), v.AGENT_PATH_MAX
        ),
        created_at=created_at,
    )


def pending_from_proto(
    msg: pb.PendingInterrupt, *, field: str, checkpoint: CheckpointRecord
) -> PendingRecord:
    """Validate the pending row of a RecordInterrupt against its (validated) checkpoint."""
    if msg.execution_id and msg.execution_id != checkpoint.execution_id:
        raise InvalidField(
            f"{field}.execution_id", "must be empty or equal to checkpoint.execution_id"
        )
    created_at = (
        v.timestamp_to_datetime(f"{field}.created_at", msg.created_at)
        if msg.HasField("created_at")
        else checkpoint.created_at
    )
    return PendingRecord(
        execution_id=checkpoint.execution_id,
        chain_name=v.text(f"{field}.chain_name", msg.chain_name, v.CHAIN_NAME_MAX),
        node_id=v.text(f"{field}.node_id", msg.node_id, v.NODE_ID_MAX),
        reason=v.text(f"{field}.reason", msg.reason, v.REASON_MAX),
        context_json=v.json_object(f"{field}.context_json", msg.context_json),
        agent_path=v.optional_text(
            f"{field}.agent_path", _optional(msg, "agent_path"), v.AGENT_PATH_MAX
        ),
        created_at=created_at,
        checkpoint_id=checkpoint.checkpoint_id,
    )


def timestamp_to_proto(value: datetime) -> Timestamp:
    """A datetime as a Timestamp, to the microsecond."""
    ts = Timestamp()
    delta = value.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    seconds, micros = divmod(delta // _MICROSECOND, 1_000_000)
    ts.seconds, ts.nanos = seconds, micros * 1000
    return ts


_MICROSECOND = datetime.resolution


def checkpoint_to_proto(record: CheckpointRecord, *, basic: bool = False) -> pb.Checkpoint:
    """Copy a stored record into its message; ``basic`` leaves the JSON payloads empty
    (CHECKPOINT_VIEW_BASIC: the writer already has them)."""
    msg = pb.Checkpoint(
        execution_id=record.execution_id,
        checkpoint_id=record.checkpoint_id,
        parent_checkpoint_id=record.parent_checkpoint_id,
        chain_name=record.chain_name,
        node_id=record.node_id,
        node_index=record.node_index,
        step_type=record.step_type,
        status=_STATUS_TO_PROTO[record.status],
        iteration=record.iteration,
        interrupt_reason=record.interrupt_reason,
        agent_path=record.agent_path,
        created_at=timestamp_to_proto(record.created_at),
        sequence=record.sequence,
    )
    if not basic:
        msg.state_snapshot_json = record.state_snapshot_json
        msg.node_input_json = record.node_input_json
        msg.node_output_json = record.node_output_json
        msg.iteration_counters_json = record.iteration_counters_json
        msg.interrupt_context_json = record.interrupt_context_json
    return msg


def pending_to_proto(record: PendingRecord) -> pb.PendingInterrupt:
    """Copy a stored pending row into its message."""
    return pb.PendingInterrupt(
        execution_id=record.execution_id,
        chain_name=record.chain_name,
        node_id=record.node_id,
        reason=record.reason,
        context_json=record.context_json,
        agent_path=record.agent_path,
        created_at=timestamp_to_proto(record.created_at),
        checkpoint_id=record.checkpoint_id,
        interrupt_id=record.interrupt_id,
        checkpoint_ns=record.checkpoint_ns,
        decision=None if record.decision is None else decision_to_proto(record.decision),
    )


def decision_to_proto(record: DecisionRecord) -> pb.Decision:
    """Copy a stored decision into its message."""
    # A lease's expiry is shown only while the decision is being carried out.
    lease = record.lease_expires_at if record.status is DecisionStatus.RESUMING else None
    return pb.Decision(
        approved=record.approved,
        metadata_json=record.metadata_json,
        decided_by=record.decided_by,
        reason=record.reason,
        decided_at=timestamp_to_proto(record.decided_at),
        status=_DECISION_STATUS_TO_PROTO[record.status],
        attempts=record.attempts,
        error=record.error or "",
        lease_expires_at=None if lease is None else timestamp_to_proto(lease),
        reported_at=None if record.reported_at is None else timestamp_to_proto(record.reported_at),
        response=decision_responses.response_to_proto(record.response_json),
    )
