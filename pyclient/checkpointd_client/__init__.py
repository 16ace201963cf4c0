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

import importlib
from typing import TYPE_CHECKING, Any

from checkpointd_client._version import __version__ as __version__

if TYPE_CHECKING:
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
        ActionDecision,
        Checkpoint,
        CheckpointPage,
        Decision,
        DecisionResponse,
        DeleteExecutionResult,
        Execution,
        ExecutionDetail,
        ExecutionPage,
        GraphRetentionResult,
        IdempotencyResult,
        InterruptEvent,
        NamespacePage,
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

# Each public name and the module that defines it. They are imported on first use (PEP 562),
# so `import checkpointd_client.v1` (the protocol, as the server imports it) does not load
# the clients, and a process pays for what it touches.
_MODULE_OF: dict[str, str] = {
    "AsyncCheckpointdClient": "checkpointd_client.client",
    "CheckpointdClient": "checkpointd_client.client",
    "DEFAULT_TARGET": "checkpointd_client.config",
    "RetryPolicy": "checkpointd_client.config",
    "TlsConfig": "checkpointd_client.credentials",
    "AlreadyExistsError": "checkpointd_client.errors",
    "CheckpointdError": "checkpointd_client.errors",
    "DeadlineExceededError": "checkpointd_client.errors",
    "ErrorReason": "checkpointd_client.errors",
    "FailedPreconditionError": "checkpointd_client.errors",
    "IntegrityError": "checkpointd_client.errors",
    "InternalError": "checkpointd_client.errors",
    "InvalidArgumentError": "checkpointd_client.errors",
    "NotFoundError": "checkpointd_client.errors",
    "OutOfRangeError": "checkpointd_client.errors",
    "PermissionDeniedError": "checkpointd_client.errors",
    "ResourceExhaustedError": "checkpointd_client.errors",
    "UnauthenticatedError": "checkpointd_client.errors",
    "UnavailableError": "checkpointd_client.errors",
    "Checkpoint": "checkpointd_client.models",
    "CheckpointPage": "checkpointd_client.models",
    "Decision": "checkpointd_client.models",
    "DecisionResponse": "checkpointd_client.models",
    "ActionDecision": "checkpointd_client.models",
    "DeleteExecutionResult": "checkpointd_client.models",
    "Execution": "checkpointd_client.models",
    "ExecutionDetail": "checkpointd_client.models",
    "ExecutionPage": "checkpointd_client.models",
    "GraphRetentionResult": "checkpointd_client.models",
    "IdempotencyResult": "checkpointd_client.models",
    "InterruptEvent": "checkpointd_client.models",
    "NamespacePage": "checkpointd_client.models",
    "PendingInterrupt": "checkpointd_client.models",
    "PendingInterruptPage": "checkpointd_client.models",
    "PruneResult": "checkpointd_client.models",
    "RecordInterruptResult": "checkpointd_client.models",
    "SnapshotComplete": "checkpointd_client.models",
    "SnapshotItem": "checkpointd_client.models",
    "WatchItem": "checkpointd_client.models",
    "WatchProgress": "checkpointd_client.models",
    "AsyncInterruptWatch": "checkpointd_client.watch",
    "InterruptWatch": "checkpointd_client.watch",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


__all__ = [
    "DEFAULT_TARGET",
    "ActionDecision",
    "AlreadyExistsError",
    "AsyncCheckpointdClient",
    "AsyncInterruptWatch",
    "Checkpoint",
    "CheckpointPage",
    "CheckpointdClient",
    "CheckpointdError",
    "DeadlineExceededError",
    "Decision",
    "DecisionResponse",
    "DeleteExecutionResult",
    "ErrorReason",
    "Execution",
    "ExecutionDetail",
    "ExecutionPage",
    "FailedPreconditionError",
    "GraphRetentionResult",
    "IdempotencyResult",
    "IntegrityError",
    "InternalError",
    "InterruptEvent",
    "InterruptWatch",
    "InvalidArgumentError",
    "NamespacePage",
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
