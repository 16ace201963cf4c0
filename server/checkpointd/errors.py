"""Domain errors and the one table that maps every error to a gRPC status.

Servicers and validation raise these; the edge's error layer turns them into a status with a
``google.rpc.ErrorInfo`` (domain ``checkpointd.v1``) whose reason a client in any language can
switch on. The reasons are the values of the ``ErrorReason`` enum of
proto/checkpointd/v1/error_reason.proto; :func:`wire_reason` turns one into the string sent.
Anything not in the table is a bug: it is logged with its traceback and answered
``INTERNAL`` with a message that leaks nothing.

Input echoed back (an id, a namespace, a JSON key) goes through :func:`echo`, which cuts it
to :data:`ECHO_MAX` characters: a status travels in gRPC metadata, and an unbounded echo of a
20,000-character field made the caller see a transport error about metadata size instead of
the refusal. :func:`status_for` bounds every message and metadata value once more, so no
error can carry unbounded input whatever raised it.

    CheckpointdError
    ├── InvalidField          INVALID_ARGUMENT     INVALID_FIELD (metadata: field, rule)
    ├── InvalidPageToken      INVALID_ARGUMENT     INVALID_PAGE_TOKEN
    ├── RunEndNotForkable     INVALID_ARGUMENT     RUN_END_NOT_FORKABLE
    ├── MalformedRequest      INVALID_ARGUMENT     MALFORMED_REQUEST
    ├── MessageTooLarge       RESOURCE_EXHAUSTED   MESSAGE_TOO_LARGE (metadata: limit_bytes)
    ├── WatcherTooSlow        RESOURCE_EXHAUSTED   WATCHER_TOO_SLOW (metadata: buffer_events)
    ├── TooManyWatchStreams   RESOURCE_EXHAUSTED   TOO_MANY_WATCH_STREAMS (metadata: limit, scope)
    ├── CursorExpired         OUT_OF_RANGE         CURSOR_EXPIRED (metadata: after_cursor,
    │   │                                                          purged_through)
    │   ├── CursorBeyondStore OUT_OF_RANGE         CURSOR_EXPIRED (metadata: after_cursor,
    │   │                                                          newest_cursor)
    │   └── CursorOfAnotherHistory OUT_OF_RANGE    CURSOR_EXPIRED (metadata: after_cursor)
    ├── ShuttingDown          UNAVAILABLE          SHUTTING_DOWN
    ├── WatchExpired          UNAVAILABLE          WATCH_EXPIRED (metadata: max_lifetime_s)
    ├── MissingToken          UNAUTHENTICATED      MISSING_TOKEN
    ├── InvalidToken          UNAUTHENTICATED      INVALID_TOKEN
    ├── NamespaceNotAllowed   PERMISSION_DENIED    NAMESPACE_NOT_ALLOWED (metadata: namespace,
    │                                                                     token_name)
    ├── ReadOnlyToken         PERMISSION_DENIED    READ_ONLY_TOKEN (metadata: method, token_name)
    ├── CheckpointNotFound    NOT_FOUND            CHECKPOINT_NOT_FOUND
    ├── NoCheckpoints         NOT_FOUND            NO_CHECKPOINTS
    ├── NoPendingInterrupt    NOT_FOUND            NO_PENDING_INTERRUPT
    ├── NoDecision            NOT_FOUND            NO_DECISION
    ├── AlreadyDecided        FAILED_PRECONDITION  ALREADY_DECIDED (metadata: decided_by,
    │                                                               approved, decided_at)
    ├── LeaseHeld             FAILED_PRECONDITION  LEASE_HELD (metadata: lease_expires_at)
    ├── LeaseLost             FAILED_PRECONDITION  LEASE_LOST
    ├── WriteFenced           FAILED_PRECONDITION  WRITE_FENCED (metadata: checkpoint_id,
    │                                                            interrupt_id)
    ├── DecisionClosed        FAILED_PRECONDITION  DECISION_CLOSED (metadata: status)
    └── RunAlreadyFinished    FAILED_PRECONDITION  RUN_ALREADY_FINISHED
    store.CheckpointExists    ALREADY_EXISTS       CHECKPOINT_EXISTS
    store.RequestAppliedThenDeleted
                              FAILED_PRECONDITION  REQUEST_APPLIED_THEN_DELETED (metadata:
                                                   request_id)
    store.RequestIdReused     FAILED_PRECONDITION  REQUEST_ID_REUSED (metadata: request_id,
                                                   method)
    store.StoreUnavailable    UNAVAILABLE          STORE_UNAVAILABLE
    TimeoutError              DEADLINE_EXCEEDED    STORE_TIMEOUT
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from checkpointd.store.base import (
    CheckpointExists,
    RequestAppliedThenDeleted,
    RequestIdReused,
    StoreUnavailable,
)
from checkpointd_client.v1.error_reason_pb2 import ErrorReason

__all__ = [
    "ECHO_MAX",
    "ERROR_DOMAIN",
    "REASON_PREFIX",
    "AlreadyDecided",
    "CheckpointNotFound",
    "CheckpointdError",
    "CursorBeyondStore",
    "CursorExpired",
    "CursorOfAnotherHistory",
    "DecisionClosed",
    "InvalidField",
    "InvalidPageToken",
    "InvalidToken",
    "LeaseHeld",
    "LeaseLost",
    "MalformedRequest",
    "MessageTooLarge",
    "MissingToken",
    "NamespaceNotAllowed",
    "NoCheckpoints",
    "NoDecision",
    "NoPendingInterrupt",
    "PreviousPutNotStored",
    "ReadOnlyToken",
    "RunAlreadyFinished",
    "RunEndNotForkable",
    "ShuttingDown",
    "StatusInfo",
    "TooManyWatchStreams",
    "WatchExpired",
    "WatcherTooSlow",
    "WriteFenced",
    "echo",
    "internal_status",
    "metadata_time",
    "sent_reasons",
    "status_for",
    "wire_reason",
]

ERROR_DOMAIN = "checkpointd.v1"
#: buf lint's prefix on every ErrorReason value; the wire string is the name without it.
REASON_PREFIX = "ERROR_REASON_"

#: The most characters of a request's value an error echoes back (an ellipsis included).
ECHO_MAX = 128
#: The most characters of any error message and of any metadata value: a backstop, far
#: above what any error writes (a rule text is under 200 characters).
MESSAGE_MAX = 1024
METADATA_MAX = 256


def echo(value: str, limit: int = ECHO_MAX) -> str:
    """``value`` as an error may show it: whole when short, else cut with an ellipsis."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def metadata_time(value: datetime) -> str:
    """A time as ErrorInfo metadata carries it: RFC 3339 in UTC with ``Z``, the very text the
    protobuf JSON mapping writes for the same instant as a ``Timestamp`` (0, 3 or 6 fraction
    digits), so a client parses it as it parses a JSON timestamp and can compare the two."""
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp.ToJsonString()


class CheckpointdError(Exception):
    """A failure the caller can act on. ``metadata`` goes into ErrorInfo as it is."""

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = metadata


class InvalidField(CheckpointdError):
    """A request field breaks a rule; the message names the field and the rule."""

    def __init__(self, field: str, rule: str, *, got: str | None = None) -> None:
        # ``got`` (the offending input) goes into the message only, cut short; ``rule`` stays
        # the same text for every input, for callers that switch on it.
        shown = "" if got is None else f" (got {echo(got, 64)!r}, {len(got)} characters)"
        super().__init__(f"{field}: {rule}{shown}", field=field, rule=rule)


class InvalidPageToken(CheckpointdError):
    """The page_token was not produced by this request."""

    def __init__(self) -> None:
        super().__init__(
            "page_token: not a token returned by this request (send the same filters and "
            "order as the call that returned it, or an empty token to start over)",
            field="page_token",
        )


class RunEndNotForkable(CheckpointdError):
    """A fork named a run_end row, which addresses no step."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(
            f"checkpoint_id: {echo(checkpoint_id)!r} is the run-end marker, not a step of the run; "
            "pick a step from ListCheckpoints or leave checkpoint_id empty",
            field="checkpoint_id",
        )


class MalformedRequest(CheckpointdError):
    """The request bytes are not a valid protobuf encoding of the method's request message."""

    def __init__(self, message_type: str) -> None:
        super().__init__(
            f"the request is not a valid {message_type} message (malformed protobuf encoding, "
            "or a string field that is not UTF-8); send a message built from the "
            "checkpointd.v1 protocol",
            message_type=message_type,
        )


class MessageTooLarge(CheckpointdError):
    """The request is larger than the server accepts."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"request is {size} bytes, over the server's limit of {limit} bytes; raise it "
            "with --max-message-bytes (CHECKPOINTD_MAX_MESSAGE_BYTES) or send less",
            limit_bytes=str(limit),
        )


class CheckpointNotFound(CheckpointdError):
    """The execution has no checkpoint with this id."""

    def __init__(self, execution_id: str, checkpoint_id: str) -> None:
        super().__init__(
            f"execution {echo(execution_id)!r} has no checkpoint {echo(checkpoint_id)!r}",
            execution_id=echo(execution_id),
            checkpoint_id=echo(checkpoint_id),
        )


class NoCheckpoints(CheckpointdError):
    """The execution has no (usable) checkpoint."""

    def __init__(self, execution_id: str, detail: str = "has no checkpoints") -> None:
        super().__init__(
            f"execution {echo(execution_id)!r} {detail}", execution_id=echo(execution_id)
        )


class NoPendingInterrupt(CheckpointdError):
    """Nothing to claim: never paused, already claimed, or deleted."""

    def __init__(self, execution_id: str, interrupt_id: str = "") -> None:
        if interrupt_id:
            # G8: a graph thread's pause is named by its interrupt id.
            super().__init__(
                f"execution {echo(execution_id)!r} has no pending interrupt with id "
                f"{echo(interrupt_id)!r} (it was never recorded, was resumed, or was deleted)",
                execution_id=echo(execution_id),
                interrupt_id=echo(interrupt_id),
            )
            return
        super().__init__(
            f"execution {echo(execution_id)!r} has no pending interrupt (it was never paused, "
            "was already claimed, or was deleted)",
            execution_id=echo(execution_id),
        )


class NoDecision(CheckpointdError):
    """A lease or a report names a pause that has no decision (K2)."""

    def __init__(self, execution_id: str, checkpoint_id: str, interrupt_id: str = "") -> None:
        named = f" (interrupt {echo(interrupt_id)!r})" if interrupt_id else ""
        super().__init__(
            f"execution {echo(execution_id)!r} has no decision on its pause at checkpoint "
            f"{echo(checkpoint_id)!r}{named}",
            execution_id=echo(execution_id),
            checkpoint_id=echo(checkpoint_id),
        )


class AlreadyDecided(CheckpointdError):
    """A second decision on a pause that already has one (K1); names the winner."""

    def __init__(
        self, execution_id: str, decided_by: str, approved: bool, decided_at: datetime
    ) -> None:
        verdict = "approved" if approved else "rejected"
        when = metadata_time(decided_at)
        super().__init__(
            f"execution {echo(execution_id)!r} was already decided: {verdict} by "
            f"{echo(decided_by)!r} at {when}; a pause takes one decision",
            execution_id=echo(execution_id),
            decided_by=echo(decided_by),
            approved="true" if approved else "false",
            decided_at=when,
        )


class LeaseHeld(CheckpointdError):
    """Another worker holds an unexpired lease on the decision (K2)."""

    def __init__(self, execution_id: str, lease_expires_at: datetime) -> None:
        until = metadata_time(lease_expires_at)
        super().__init__(
            f"another worker holds the lease on the decision of execution {echo(execution_id)!r} "
            f"until {until}",
            execution_id=echo(execution_id),
            lease_expires_at=until,
        )


class LeaseLost(CheckpointdError):
    """A report from a worker whose lease another worker has taken since (K2)."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(
            f"this lease on the decision of execution {echo(execution_id)!r} is no longer "
            "held: another worker took it over after it ran out",
            execution_id=echo(execution_id),
        )


class WriteFenced(CheckpointdError):
    """A write made under a lease that no longer holds the pause's decision (K4)."""

    def __init__(self, execution_id: str, checkpoint_id: str, interrupt_id: str) -> None:
        named = f" (interrupt {echo(interrupt_id)!r})" if interrupt_id else ""
        super().__init__(
            f"this write was made under a lease on the decision of execution "
            f"{echo(execution_id)!r} at checkpoint {echo(checkpoint_id)!r}{named} that no "
            "longer holds it (another worker took it over, or the decision was carried out or "
            "replaced); nothing was written",
            execution_id=echo(execution_id),
            checkpoint_id=echo(checkpoint_id),
            interrupt_id=echo(interrupt_id),
        )


class PreviousPutNotStored(CheckpointdError):
    """A graph checkpoint sent on a stream after one of its thread that failed (S5)."""

    def __init__(self, thread_id: str, checkpoint_id: str) -> None:
        super().__init__(
            f"the checkpoint {echo(checkpoint_id)!r} of thread {echo(thread_id)!r} sent before "
            "this one on this stream was not stored, so this one was not either (it would lack "
            "its parent and the channel values they share); nothing was written",
            thread_id=echo(thread_id),
            checkpoint_id=echo(checkpoint_id),
        )


class DecisionClosed(CheckpointdError):
    """A lease on a decision that a worker has already reported on (K2)."""

    def __init__(self, execution_id: str, status: str) -> None:
        super().__init__(
            f"the decision of execution {echo(execution_id)!r} was already carried out "
            f"({status}); there is nothing left to resume",
            execution_id=echo(execution_id),
            status=status,
        )


class RunAlreadyFinished(CheckpointdError):
    """A resume of a run whose newest row is a completed run_end marker."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(
            f"execution {echo(execution_id)!r} already finished (completed); there is nothing "
            "to resume. Fork it from one of its steps, or start a new execution",
            execution_id=echo(execution_id),
        )


class CursorExpired(CheckpointdError):
    """A watch resumed from a cursor whose following events were purged (I5)."""

    def __init__(self, after_cursor: int, purged_through: int) -> None:
        super().__init__(
            f"after_cursor: {after_cursor} is older than the event retention (events up to "
            f"cursor {purged_through} were purged; --event-retention); watch again without "
            "after_cursor to get a fresh snapshot",
            after_cursor=str(after_cursor),
            purged_through=str(purged_through),
        )


class CursorBeyondStore(CursorExpired):
    """A watch resumed from a cursor above the store's newest event: the store's history is
    not the one the cursor came from (a failover that lost commits, a restored backup, another
    store). Like an expired cursor, the client starts again from a fresh snapshot (I5)."""

    def __init__(self, after_cursor: int, newest_cursor: int) -> None:
        CheckpointdError.__init__(
            self,
            f"after_cursor: {after_cursor} is beyond the newest event of this store "
            f"({newest_cursor}): the store is not the history the cursor came from (a "
            "failover that lost commits, a restored backup, another store); watch again "
            "without after_cursor to get a fresh snapshot",
            after_cursor=str(after_cursor),
            newest_cursor=str(newest_cursor),
        )


class CursorOfAnotherHistory(CursorExpired):
    """A watch cursor whose event is not the one the client saw there: the store went back
    in time and has written past the cursor again (a failover that lost commits, a restored
    backup), so resuming there would skip changes. A fresh snapshot is what the client needs
    (I5); live streams get it too when the hub finds its own cursor rewritten."""

    def __init__(self, after_cursor: int) -> None:
        CheckpointdError.__init__(
            self,
            f"after_cursor: the store's event {after_cursor} is not the one the cursor came "
            "from: the store's history changed under it (a failover that lost commits, a "
            "restored backup, another store); watch again without after_cursor to get a fresh "
            "snapshot",
            after_cursor=str(after_cursor),
        )


class WatcherTooSlow(CheckpointdError):
    """A watcher fell further behind than its buffer holds (I5)."""

    def __init__(self, buffer_events: int) -> None:
        super().__init__(
            f"the watcher fell more than {buffer_events} events behind (--watch-buffer); "
            "watch again from the cursor of the last event processed: nothing is lost",
            buffer_events=str(buffer_events),
        )


class ShuttingDown(CheckpointdError):
    """The server is stopping; streams end so their clients reconnect elsewhere (I5)."""

    def __init__(
        self,
        message: str = (
            "the server is shutting down; watch again from the cursor of the last event "
            "processed, on this server once it is back or on another one"
        ),
    ) -> None:
        super().__init__(message)


class TooManyWatchStreams(CheckpointdError):
    """A new watch would pass the server's or the peer's stream limit."""

    def __init__(self, limit: int, scope: str) -> None:
        flag, who, kind = {
            "server": ("--max-watch-streams", "this server", "watch streams"),
            "peer": ("--max-watch-streams-per-peer", "this connection", "watch streams"),
            "health": ("--max-health-watch-streams", "this server", "health Watch streams"),
        }[scope]
        super().__init__(
            f"{who} already has {limit} open {kind} ({flag}); close one, share one "
            "watch between consumers, or raise the limit",
            limit=str(limit),
            scope=scope,
        )


class WatchExpired(CheckpointdError):
    """A watch reached its maximum lifetime; the client reconnects from its cursor."""

    def __init__(self, max_lifetime: float) -> None:
        super().__init__(
            f"the watch stream reached its maximum lifetime of {max_lifetime:g}s "
            "(--watch-max-lifetime); watch again from the cursor of the last event processed: "
            "nothing is lost",
            max_lifetime_s=f"{max_lifetime:g}",
        )


class MissingToken(CheckpointdError):
    """The call carries no bearer token and the server requires one."""

    def __init__(self) -> None:
        super().__init__(
            "this server requires a token: send the metadata 'authorization: Bearer <token>' "
            "(the Python client: token= or CHECKPOINTD_TOKEN)"
        )


class InvalidToken(CheckpointdError):
    """The call carries a token that the server does not know (never echoed back)."""

    def __init__(self, detail: str = "the token is not valid on this server") -> None:
        super().__init__(detail)


class NamespaceNotAllowed(CheckpointdError):
    """The token is valid but not granted the request's namespace."""

    def __init__(self, namespace: str, token_name: str) -> None:
        super().__init__(
            f"token {token_name!r} is not granted namespace {echo(namespace)!r}",
            namespace=echo(namespace),
            token_name=token_name,
        )


class ReadOnlyToken(CheckpointdError):
    """A read-only token was used for a call that writes."""

    def __init__(self, method: str, token_name: str) -> None:
        super().__init__(
            f"token {token_name!r} is read-only and {method} writes",
            method=method,
            token_name=token_name,
        )


@dataclass(frozen=True, slots=True)
class StatusInfo:
    """What an error becomes on the wire."""

    code: grpc.StatusCode
    reason: str
    message: str
    metadata: dict[str, str]


# The one table: error class -> (status code, ErrorInfo reason).
_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode, ErrorReason.ValueType], ...] = (
    (InvalidField, grpc.StatusCode.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_FIELD),
    (
        InvalidPageToken,
        grpc.StatusCode.INVALID_ARGUMENT,
        ErrorReason.ERROR_REASON_INVALID_PAGE_TOKEN,
    ),
    (
        RunEndNotForkable,
        grpc.StatusCode.INVALID_ARGUMENT,
        ErrorReason.ERROR_REASON_RUN_END_NOT_FORKABLE,
    ),
    (
        MalformedRequest,
        grpc.StatusCode.INVALID_ARGUMENT,
        ErrorReason.ERROR_REASON_MALFORMED_REQUEST,
    ),
    (
        MessageTooLarge,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE,
    ),
    (WatcherTooSlow, grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_WATCHER_TOO_SLOW),
    (
        TooManyWatchStreams,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        ErrorReason.ERROR_REASON_TOO_MANY_WATCH_STREAMS,
    ),
    (CursorExpired, grpc.StatusCode.OUT_OF_RANGE, ErrorReason.ERROR_REASON_CURSOR_EXPIRED),
    (ShuttingDown, grpc.StatusCode.UNAVAILABLE, ErrorReason.ERROR_REASON_SHUTTING_DOWN),
    (WatchExpired, grpc.StatusCode.UNAVAILABLE, ErrorReason.ERROR_REASON_WATCH_EXPIRED),
    (MissingToken, grpc.StatusCode.UNAUTHENTICATED, ErrorReason.ERROR_REASON_MISSING_TOKEN),
    (InvalidToken, grpc.StatusCode.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_TOKEN),
    (
        NamespaceNotAllowed,
        grpc.StatusCode.PERMISSION_DENIED,
        ErrorReason.ERROR_REASON_NAMESPACE_NOT_ALLOWED,
    ),
    (ReadOnlyToken, grpc.StatusCode.PERMISSION_DENIED, ErrorReason.ERROR_REASON_READ_ONLY_TOKEN),
    (CheckpointNotFound, grpc.StatusCode.NOT_FOUND, ErrorReason.ERROR_REASON_CHECKPOINT_NOT_FOUND),
    (NoCheckpoints, grpc.StatusCode.NOT_FOUND, ErrorReason.ERROR_REASON_NO_CHECKPOINTS),
    (NoPendingInterrupt, grpc.StatusCode.NOT_FOUND, ErrorReason.ERROR_REASON_NO_PENDING_INTERRUPT),
    (NoDecision, grpc.StatusCode.NOT_FOUND, ErrorReason.ERROR_REASON_NO_DECISION),
    (AlreadyDecided, grpc.StatusCode.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ALREADY_DECIDED),
    (LeaseHeld, grpc.StatusCode.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_LEASE_HELD),
    (LeaseLost, grpc.StatusCode.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_LEASE_LOST),
    (WriteFenced, grpc.StatusCode.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_WRITE_FENCED),
    (
        PreviousPutNotStored,
        grpc.StatusCode.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_PREVIOUS_PUT_NOT_STORED,
    ),
    (DecisionClosed, grpc.StatusCode.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_DECISION_CLOSED),
    (
        RunAlreadyFinished,
        grpc.StatusCode.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_RUN_ALREADY_FINISHED,
    ),
    (CheckpointExists, grpc.StatusCode.ALREADY_EXISTS, ErrorReason.ERROR_REASON_CHECKPOINT_EXISTS),
    (
        RequestAppliedThenDeleted,
        grpc.StatusCode.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_REQUEST_APPLIED_THEN_DELETED,
    ),
    (
        RequestIdReused,
        grpc.StatusCode.FAILED_PRECONDITION,
        ErrorReason.ERROR_REASON_REQUEST_ID_REUSED,
    ),
    (StoreUnavailable, grpc.StatusCode.UNAVAILABLE, ErrorReason.ERROR_REASON_STORE_UNAVAILABLE),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_STORE_TIMEOUT),
)


def wire_reason(reason: ErrorReason.ValueType) -> str:
    """The ``ErrorInfo.reason`` string of ``reason``: its enum name without the prefix
    (ERROR_REASON_NO_PENDING_INTERRUPT is sent as "NO_PENDING_INTERRUPT")."""
    return ErrorReason.Name(reason).removeprefix(REASON_PREFIX)


def sent_reasons() -> dict[ErrorReason.ValueType, grpc.StatusCode]:
    """Every reason the server can send, with the status code that carries it: the table's,
    and INTERNAL for a bug."""
    codes = {reason: code for _, code, reason in _TABLE}
    codes[ErrorReason.ERROR_REASON_INTERNAL] = grpc.StatusCode.INTERNAL
    return codes


def internal_status(incident: str) -> StatusInfo:
    """The status of a bug: INTERNAL, with an incident id to find the traceback in the log."""
    return StatusInfo(
        grpc.StatusCode.INTERNAL,
        wire_reason(ErrorReason.ERROR_REASON_INTERNAL),
        f"internal error (incident {incident}); see the server log",
        {"incident": incident},
    )


def status_for(exc: BaseException) -> StatusInfo | None:
    """Return the wire status of a known error, or None for a bug (answered INTERNAL)."""
    for error_type, code, reason_value in _TABLE:
        if isinstance(exc, error_type):
            reason = wire_reason(reason_value)
            metadata = exc.metadata if isinstance(exc, CheckpointdError) else {}
            message = str(exc) or reason.lower().replace("_", " ")
            if isinstance(exc, RequestAppliedThenDeleted):
                message = (
                    f"{message} (DeleteExecution or PruneCheckpoints); nothing was written. "
                    "This is a late retry: to write again, send a new request_id"
                )
                metadata = {"request_id": exc.request_id}
            elif isinstance(exc, RequestIdReused):
                message = (
                    f"{message}; nothing was written. A retry must send the same request "
                    "again: for another request, send a new request_id"
                )
                metadata = {"request_id": exc.request_id, "method": exc.method}
            elif isinstance(exc, StoreUnavailable):
                message = f"store unavailable: {message}; retry with the same request_id"
            elif isinstance(exc, TimeoutError):
                message = "the store did not answer in time; retry with the same request_id"
            # The backstop: whatever an error was built from, its status stays small.
            bounded = {key: echo(str(value), METADATA_MAX) for key, value in metadata.items()}
            return StatusInfo(code, reason, echo(message, MESSAGE_MAX), bounded)
    return None
