"""fastaiagent's ``Checkpoint`` and ``PendingInterrupt`` models to and from the client's, and
the time format fastaiagent keeps (ISO-8601 strings); fastaiagent is imported on first use."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from checkpointd_client.models import Checkpoint, PendingInterrupt

if TYPE_CHECKING:
    from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
    from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt


@functools.cache
def fastaiagent_models() -> tuple[type[FastCheckpoint], type[FastPendingInterrupt]]:
    """Import fastaiagent's models on first use, with an install hint when it is missing."""
    try:
        from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
        from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt
    except ImportError as exc:
        raise ImportError(
            "checkpointd_client.fastaiagent needs fastaiagent: "
            "pip install 'checkpointd-client[fastaiagent]'"
        ) from exc
    return FastCheckpoint, FastPendingInterrupt


def parse_time(value: str) -> datetime | None:
    """Parse fastaiagent's ISO-8601 ``created_at`` ("" means unset; naive means UTC)."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def format_time(value: datetime | None) -> str:
    """Format a time the way the reference does: ``datetime.isoformat()`` of an aware UTC time."""
    return value.astimezone(UTC).isoformat() if value is not None else ""


# The fields both models carry under the same name and type; created_at differs (an ISO
# string in fastaiagent, a datetime here) and is converted on its own.
CHECKPOINT_FIELDS = (
    "execution_id",
    "checkpoint_id",
    "parent_checkpoint_id",
    "chain_name",
    "node_id",
    "node_index",
    "step_type",
    "status",
    "state_snapshot",
    "node_input",
    "node_output",
    "iteration",
    "iteration_counters",
    "interrupt_reason",
    "interrupt_context",
    "agent_path",
)
PENDING_FIELDS = ("execution_id", "chain_name", "node_id", "reason", "context", "agent_path")


def to_checkpoint(cp: FastCheckpoint) -> Checkpoint:
    fields = {name: getattr(cp, name) for name in CHECKPOINT_FIELDS}
    return Checkpoint(**fields, created_at=parse_time(cp.created_at))


def from_checkpoint(cp: Checkpoint) -> FastCheckpoint:
    fast_checkpoint, _ = fastaiagent_models()
    fields = {name: getattr(cp, name) for name in CHECKPOINT_FIELDS}
    return fast_checkpoint(**fields, created_at=format_time(cp.created_at))


def to_pending(pending: FastPendingInterrupt) -> PendingInterrupt:
    fields = {name: getattr(pending, name) for name in PENDING_FIELDS}
    return PendingInterrupt(**fields, created_at=parse_time(pending.created_at))


def from_pending(pending: PendingInterrupt) -> FastPendingInterrupt:
    _, fast_pending = fastaiagent_models()
    fields = {name: getattr(pending, name) for name in PENDING_FIELDS}
    return fast_pending(**fields, created_at=format_time(pending.created_at))
