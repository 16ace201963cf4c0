"""What ``applied_requests`` remembers besides idempotency puts (contract C9), the same in both
backends: the kinds of its rows, and the replies of DeleteExecution and PruneCheckpoints as
JSON text, so a retry is answered with the first call's counts."""

from __future__ import annotations

import dataclasses
import json
from typing import Final

from checkpointd.domain import DeleteExecutionResult, PruneResult

__all__ = [
    "DELETED_WRITE",
    "DELETE_EXECUTION",
    "PRUNE",
    "decode_delete",
    "decode_prune",
    "encode",
]

#: A PutCheckpoint or RecordInterrupt whose checkpoint was deleted or pruned (a tombstone).
DELETED_WRITE: Final = "deleted_write"
#: The reply of a DeleteExecution.
DELETE_EXECUTION: Final = "delete_execution"
#: The reply of a PruneCheckpoints.
PRUNE: Final = "prune"


def encode(result: DeleteExecutionResult | PruneResult) -> str:
    """The reply as JSON text (its fields by name)."""
    return json.dumps(dataclasses.asdict(result), sort_keys=True)


def decode_delete(text: str) -> DeleteExecutionResult:
    """A DeleteExecution reply from :func:`encode`'s text."""
    fields = json.loads(text)
    return DeleteExecutionResult(
        checkpoints_deleted=int(fields["checkpoints_deleted"]),
        pending_interrupt_deleted=bool(fields["pending_interrupt_deleted"]),
        idempotency_results_deleted=int(fields["idempotency_results_deleted"]),
    )


def decode_prune(text: str) -> PruneResult:
    """A PruneCheckpoints reply from :func:`encode`'s text."""
    fields = json.loads(text)
    return PruneResult(
        checkpoints_deleted=int(fields["checkpoints_deleted"]),
        idempotency_results_deleted=int(fields["idempotency_results_deleted"]),
    )
