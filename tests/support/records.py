"""Record builders shared by the store tests: a checkpoint, a pending interrupt, and an
interrupt recorded through a store."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

from checkpointd.domain import (
    CheckpointRecord,
    CheckpointStatus,
    PendingRecord,
    RecordInterruptResult,
)
from checkpointd.store.interface import Store

__all__ = ["NS", "T0", "checkpoint", "interrupt", "pending"]

NS = "default"
T0 = datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=UTC)


def checkpoint(
    execution_id: str = "exec-1",
    checkpoint_id: str | None = None,
    *,
    status: CheckpointStatus = CheckpointStatus.COMPLETED,
    step_type: str | None = "node",
    created_at: datetime = T0,
    **overrides: Any,
) -> CheckpointRecord:
    """A checkpoint of ``execution_id`` (a fresh id unless given); an interrupted one carries
    an interrupt reason."""
    interrupted = status is CheckpointStatus.INTERRUPTED
    record = CheckpointRecord(
        execution_id=execution_id,
        checkpoint_id=checkpoint_id or uuid.uuid4().hex,
        parent_checkpoint_id=None,
        chain_name="chain",
        node_id="node",
        node_index=0,
        step_type=step_type,
        status=status,
        state_snapshot_json="{}",
        node_input_json="{}",
        node_output_json="{}",
        iteration=0,
        iteration_counters_json="{}",
        interrupt_reason="needs approval" if interrupted else None,
        interrupt_context_json="{}",
        agent_path=None,
        created_at=created_at,
    )
    return dataclasses.replace(record, **overrides)


def pending(execution_id: str = "exec-1", **overrides: Any) -> PendingRecord:
    """A pending interrupt of ``execution_id``, before the store gives it its checkpoint."""
    record = PendingRecord(
        execution_id=execution_id,
        chain_name="chain",
        node_id="approve",
        reason="needs approval",
        context_json='{"amount": 5}',
        agent_path="root/agent",
        created_at=T0,
        checkpoint_id="",
    )
    return dataclasses.replace(record, **overrides)


async def interrupt(
    store: Store,
    execution_id: str = "exec-1",
    *,
    namespace: str = NS,
    request_id: str | None = None,
    checkpoint_id: str | None = None,
    created_at: datetime = T0,
    **pending_overrides: Any,
) -> RecordInterruptResult:
    """Record an interrupt of ``execution_id`` (a fresh request id unless given)."""
    interrupted = checkpoint(
        execution_id,
        checkpoint_id,
        status=CheckpointStatus.INTERRUPTED,
        created_at=created_at,
    )
    return await store.record_interrupt(
        namespace,
        uuid.uuid4().hex if request_id is None else request_id,
        interrupted,
        pending(execution_id, created_at=created_at, **pending_overrides),
    )
