"""The exceptions the client raises, one per gRPC status code that checkpointd uses.

::

    CheckpointdError                 any failed call (also CANCELLED, ABORTED, UNIMPLEMENTED)
    ├── InvalidArgumentError         INVALID_ARGUMENT: a field broke a rule; nothing was written
    ├── NotFoundError                NOT_FOUND: no such checkpoint / no checkpoints / no pending row
    ├── IntegrityError               the DB-API name portable callers catch for a duplicate key
    │   └── AlreadyExistsError       ALREADY_EXISTS: the checkpoint_id is already stored (C2)
    ├── FailedPreconditionError      FAILED_PRECONDITION: the run already finished; a late retry
    │                                of a write whose rows were deleted since
    ├── OutOfRangeError              OUT_OF_RANGE: e.g. a watch cursor older than the retention
    ├── ResourceExhaustedError       RESOURCE_EXHAUSTED: e.g. a request above the size limit
    ├── UnauthenticatedError         UNAUTHENTICATED
    ├── PermissionDeniedError        PERMISSION_DENIED
    ├── UnavailableError             UNAVAILABLE: server or store unreachable (retried for you)
    ├── DeadlineExceededError        DEADLINE_EXCEEDED: the call's deadline passed
    └── InternalError                INTERNAL, UNKNOWN, DATA_LOSS: a server-side fault

Every exception carries the gRPC ``code``, the ``reason`` of the server's
``google.rpc.ErrorInfo`` (``"CHECKPOINT_EXISTS"``; ``""`` when the server sent none) and its
``metadata`` (``{"field": "checkpoint.execution_id", "rule": ...}``), so callers can switch
on the reason rather than parse messages. A reason of checkpointd's own is an
:class:`ErrorReason` member (a ``str``, so ``exc.reason == "CHECKPOINT_EXISTS"`` holds too);
the enum is generated from proto/checkpointd/v1/error_reason.proto, the list of reasons.

:func:`map_rpc_errors` is the one place where ``grpc.RpcError`` (sync or asyncio) becomes one
of these, chained with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc

from checkpointd_client._status import ERROR_DOMAIN, details_from_metadata, parse_status
from checkpointd_client.v1.reasons import ErrorReason

__all__ = [
    "AlreadyExistsError",
    "CheckpointdError",
    "DeadlineExceededError",
    "ErrorReason",
    "FailedPreconditionError",
    "IntegrityError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_rpc_error",
    "error_from_status",
    "map_rpc_errors",
]


class CheckpointdError(Exception):
    """A checkpointd call failed."""

    code: grpc.StatusCode | None
    """The gRPC status code, or ``None`` when the failure carried none."""
    reason: str
    """The ``ErrorInfo.reason`` the server sent, or ``""``: an :class:`ErrorReason` member
    (``ErrorReason.NO_CHECKPOINTS``, equal to ``"NO_CHECKPOINTS"``) when it is one of
    checkpointd's reasons, else the string as sent (another domain, or a newer server)."""
    metadata: dict[str, str]
    """The ``ErrorInfo.metadata`` the server sent (``{"field": ..., "rule": ...}``)."""
    message: str
    """The human-readable status message."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})
        super().__init__(message)

    def __str__(self) -> str:
        tags = [t for t in (self.code.name if self.code is not None else "", self.reason) if t]
        return f"{self.message} ({', '.join(tags)})" if tags else self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, code={self.code}, "
            f"reason={str(self.reason)!r}, metadata={self.metadata!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep code, reason and metadata across pickling (multiprocessing, task queues).
        return (_rebuild, (type(self), self.message, self.code, self.reason, self.metadata))


def _rebuild(
    cls: type[CheckpointdError],
    message: str,
    code: grpc.StatusCode | None,
    reason: str,
    metadata: dict[str, str],
) -> CheckpointdError:
    return cls(message, code=code, reason=reason, metadata=metadata)


class InvalidArgumentError(CheckpointdError):
    """INVALID_ARGUMENT: a field broke a documented rule; nothing was written."""


class NotFoundError(CheckpointdError):
    """NOT_FOUND: the checkpoint, the execution's history or the pending interrupt is missing."""


class IntegrityError(CheckpointdError):
    """A write conflicted with stored data; named like the DB-API exception callers catch."""


class AlreadyExistsError(IntegrityError):
    """ALREADY_EXISTS: a checkpoint with this checkpoint_id is already stored (contract C2)."""


class FailedPreconditionError(CheckpointdError):
    """FAILED_PRECONDITION: the state does not allow the call.

    Reasons: ``RUN_ALREADY_FINISHED`` (a resume of a completed run);
    ``REQUEST_APPLIED_THEN_DELETED`` (a retry of a put or record that was applied and whose
    rows were deleted or pruned since; nothing was written; ``metadata["request_id"]``);
    ``REQUEST_ID_REUSED`` (the request id was already used for another request: another
    method, or other content; nothing was written; ``["request_id"]`` and ``["method"]``,
    the RPC it was first used for: send a new request with a new request id);
    ``ALREADY_DECIDED`` (the pause already has a decision; ``metadata["decided_by"]``,
    ``["approved"]`` (``"true"``/``"false"``) and ``["decided_at"]`` name the winner);
    ``LEASE_HELD`` (another worker holds the decision's lease; ``["lease_expires_at"]``);
    ``LEASE_LOST`` (another worker took the lease over); ``DECISION_CLOSED`` (a worker
    already reported on the decision; ``["status"]``, ``"resumed"`` or ``"resume_failed"``).
    Times in the metadata are RFC 3339 UTC with ``Z`` (``datetime.fromisoformat`` reads them).
    """


class OutOfRangeError(CheckpointdError):
    """OUT_OF_RANGE: e.g. a watch cursor older than the event retention."""


class ResourceExhaustedError(CheckpointdError):
    """RESOURCE_EXHAUSTED: e.g. a request larger than the server's message limit."""


class UnauthenticatedError(CheckpointdError):
    """UNAUTHENTICATED: the call carried no valid credentials."""


class PermissionDeniedError(CheckpointdError):
    """PERMISSION_DENIED: the credentials do not grant this namespace or call."""


class UnavailableError(CheckpointdError):
    """UNAVAILABLE: the server or its store is unreachable; safe to retry (C2, I3)."""


class DeadlineExceededError(CheckpointdError):
    """DEADLINE_EXCEEDED: the call did not finish before its deadline."""


class InternalError(CheckpointdError):
    """INTERNAL, UNKNOWN or DATA_LOSS: a fault on the server side."""


_BY_CODE: dict[Any, type[CheckpointdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.DATA_LOSS: InternalError,
}


def _call_attr(exc: BaseException, name: str) -> Any:
    """Call ``exc.<name>()`` if the error is also a ``grpc.Call``; ``None`` otherwise."""
    method = getattr(exc, name, None)
    if not callable(method):
        return None
    try:
        return method()
    except Exception:  # a half-initialised call object: treat the value as absent
        return None


def _known_reason(reason: str, domain: str) -> str:
    """``reason`` as an :class:`ErrorReason` member when checkpointd defines it in ``domain``;
    otherwise unchanged (a reason is only meaningful within the domain that set it)."""
    if domain == ERROR_DOMAIN and reason in ErrorReason.__members__:
        return ErrorReason(reason)
    return reason


def error_from_rpc_error(exc: grpc.RpcError) -> CheckpointdError:
    """Translate a sync or asyncio ``grpc.RpcError`` into the matching :class:`CheckpointdError`.

    The class comes from the status code; ``reason`` and ``metadata`` from the
    ``google.rpc.ErrorInfo`` in the ``grpc-status-details-bin`` trailer. Malformed details
    are ignored (``reason == ""``), never raised.
    """
    code = _call_attr(exc, "code")
    if not isinstance(code, grpc.StatusCode):
        code = None
    details = details_from_metadata(_call_attr(exc, "trailing_metadata"))
    message = _call_attr(exc, "details")
    if not isinstance(message, str) or not message:
        message = details.message or (code.name if code is not None else str(exc))
    cls = _BY_CODE.get(code, CheckpointdError)
    reason = _known_reason(details.reason, details.domain)
    return cls(message, code=code, reason=reason, metadata=details.metadata)


def error_from_status(code: int, status: bytes) -> CheckpointdError:
    """The :class:`CheckpointdError` of a serialized ``google.rpc.Status`` with status code
    ``code``: how a Write stream reports a failed item (contract S1), as the same call made
    unary would have raised it."""
    details = parse_status(status)
    grpc_code = _CODES.get(code)
    cls = _BY_CODE.get(grpc_code, CheckpointdError)
    message = details.message or (grpc_code.name if grpc_code is not None else str(code))
    reason = _known_reason(details.reason, details.domain)
    return cls(message, code=grpc_code, reason=reason, metadata=details.metadata)


_CODES: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


@contextmanager
def map_rpc_errors() -> Iterator[None]:
    """Re-raise any ``grpc.RpcError`` raised inside as a :class:`CheckpointdError`.

    Works around both blocking and awaited calls (``grpc.aio.AioRpcError`` is a
    ``grpc.RpcError`` too).
    """
    try:
        yield
    except grpc.RpcError as exc:
        raise error_from_rpc_error(exc) from exc
