"""Small builders shared by the contract tests."""

from __future__ import annotations

import uuid
from typing import Any

from checkpointd_client import Checkpoint, PendingInterrupt


def checkpoint(execution_id: str, **fields: Any) -> Checkpoint:
    """A completed checkpoint with a fresh id unless given."""
    fields.setdefault("checkpoint_id", uuid.uuid4().hex)
    fields.setdefault("chain_name", "flow")
    fields.setdefault("node_id", "node")
    return Checkpoint(execution_id=execution_id, **fields)


def interrupted(execution_id: str, **fields: Any) -> tuple[Checkpoint, PendingInterrupt]:
    """An interrupted checkpoint and its pending row."""
    fields.setdefault("status", "interrupted")
    fields.setdefault("interrupt_reason", "manager_approval")
    fields.setdefault("interrupt_context", {"amount": 500})
    cp = checkpoint(execution_id, **fields)
    pending = PendingInterrupt(
        execution_id=execution_id,
        chain_name=cp.chain_name,
        node_id=cp.node_id,
        reason=cp.interrupt_reason or "",
        context=dict(cp.interrupt_context),
        agent_path=cp.agent_path,
    )
    return cp, pending
