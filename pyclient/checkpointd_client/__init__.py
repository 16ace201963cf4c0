"""Python client for checkpointd, the durability sidecar for AI agent frameworks.

::

    from checkpointd_client import Checkpoint, CheckpointdClient

    with CheckpointdClient("127.0.0.1:7470", namespace="default") as client:
        stored = client.put_checkpoint(Checkpoint(execution_id="run-1", node_id="start"))
        latest = client.get_latest_checkpoint("run-1")

:class:`AsyncCheckpointdClient` has the same methods for asyncio. ``watch_interrupts`` streams
the pending interrupts and every change to them, reconnecting by itself. The fastaiagent adapter
lives in :mod:`checkpointd_client.fastaiagent` (install the ``fastaiagent`` extra); it is not
imported here, so this package needs only grpcio and protobuf.
"""

from __future__ import annotations

from checkpointd_client.client import AsyncCheckpointdClient, CheckpointdClient
from checkpointd_client.config import DEFAULT_TARGET, RetryPolicy
from checkpointd_client.credentials import TlsConfig
from checkpointd_client.errors import (
    AlreadyExistsError,
    CheckpointdError,
    DeadlineExceededError,
    ErrorReason,
    FailedPreconditionError,
    IntegrityError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from checkpointd_client.models import (
    Checkpoint,
    CheckpointPage,
    Decision,
    DeleteExecutionResult,
    IdempotencyResult,
    InterruptEvent,
    PendingInterrupt,
    PendingInterruptPage,
    PruneResult,
    RecordInterruptResult,
    SnapshotComplete,
    SnapshotItem,
    WatchItem,
    WatchProgress,
)
from checkpointd_client.watch import AsyncInterruptWatch, InterruptWatch

__all__ = [
    "DEFAULT_TARGET",
    "AlreadyExistsError",
    "AsyncCheckpointdClient",
    "AsyncInterruptWatch",
    "Checkpoint",
    "CheckpointPage",
    "CheckpointdClient",
    "CheckpointdError",
    "DeadlineExceededError",
    "Decision",
    "DeleteExecutionResult",
    "ErrorReason",
    "FailedPreconditionError",
    "IdempotencyResult",
    "IntegrityError",
    "InternalError",
    "InterruptEvent",
    "InterruptWatch",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PendingInterrupt",
    "PendingInterruptPage",
    "PermissionDeniedError",
    "PruneResult",
    "RecordInterruptResult",
    "ResourceExhaustedError",
    "RetryPolicy",
    "SnapshotComplete",
    "SnapshotItem",
    "TlsConfig",
    "UnauthenticatedError",
    "UnavailableError",
    "WatchItem",
    "WatchProgress",
]
