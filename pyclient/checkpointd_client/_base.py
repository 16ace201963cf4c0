"""What the sync and asyncio clients share: settings, request building, response parsing and
the retry decision. The two clients only add the transport (blocking or awaited calls).
"""

from __future__ import annotations

import logging
import math
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import grpc

from checkpointd_client import _convert
from checkpointd_client.config import DEFAULT_RETRY_POLICY, RetryPolicy, resolve_target
from checkpointd_client.credentials import TlsConfig, auth_metadata, resolve_tls
from checkpointd_client.errors import (
    CheckpointdError,
    DeadlineExceededError,
    ErrorReason,
    OutOfRangeError,
    ResourceExhaustedError,
    UnavailableError,
)
from checkpointd_client.models import (
    Checkpoint,
    CheckpointPage,
    CheckpointView,
    DeleteExecutionResult,
    IdempotencyResult,
    PendingInterrupt,
    PendingInterruptPage,
    PruneResult,
    RecordInterruptResult,
    SnapshotComplete,
    SnapshotItem,
    WatchItem,
    WatchProgress,
)
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
)

_log = logging.getLogger("checkpointd_client.watch")

_VIEWS: dict[CheckpointView, checkpoint_service_pb2.CheckpointView.ValueType] = {
    "full": checkpoint_service_pb2.CHECKPOINT_VIEW_FULL,
    "basic": checkpoint_service_pb2.CHECKPOINT_VIEW_BASIC,
}

#: Call metadata: ``(key, value)`` pairs; keys ending in ``-bin`` carry bytes.
Metadata = Sequence[tuple[str, str | bytes]]

#: The channel options every client starts from; ``channel_options`` entries replace them by key.
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # The server enforces its own size limit and answers RESOURCE_EXHAUSTED naming it (J3);
    # a second, different limit in the client would only hide that answer.
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # Detect a dead server on an idle connection. The server must permit pings this often
    # (grpc.http2.min_recv_ping_interval_without_data_ms <= 30 s, permit_without_calls 1).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect to a restarted server within about two seconds, not gRPC's default of up to
    # two minutes: retried calls and watches (P4) resume as soon as the server is back.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # The client retries UNAVAILABLE itself, reusing request ids (P3); gRPC's own retries
    # would multiply attempts and ignore our policy.
    ("grpc.enable_retries", 0),
)


def new_id() -> str:
    """Return a fresh UUID4 string, used for checkpoint ids, request ids and claim tokens."""
    return str(uuid.uuid4())


def merge_channel_options(extra: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Return the default channel options with ``extra`` applied (same key: ``extra`` wins)."""
    merged = dict(DEFAULT_CHANNEL_OPTIONS)
    merged.update(dict(extra))
    return list(merged.items())


def _check_timeout(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _check_page_size(page_size: int) -> int:
    if page_size < 0:
        raise ValueError(f"page_size must be >= 0 (0 means the server default), got {page_size}")
    return page_size


class ClientCore:
    """The settings of one client and everything about a call that is not transport."""

    __slots__ = (
        "_rng",
        "channel_options",
        "metadata",
        "namespace",
        "retry",
        "target",
        "timeout",
        "tls",
    )

    def __init__(
        self,
        target: str | None,
        *,
        namespace: str,
        timeout: float,
        retry: RetryPolicy | None,
        metadata: Metadata,
        channel_options: Sequence[tuple[str, Any]],
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
    ) -> None:
        self.target = resolve_target(target)
        self.namespace = namespace
        self.timeout = _check_timeout("timeout", timeout)
        self.retry = retry if retry is not None else DEFAULT_RETRY_POLICY
        # The token (argument, else $CHECKPOINTD_TOKEN) rides on every call, watches included.
        self.metadata: tuple[tuple[str, str | bytes], ...] = auth_metadata(token) + tuple(metadata)
        self.tls = resolve_tls(tls, self.target)
        self.channel_options = merge_channel_options(channel_options)
        self._rng = random.Random()

    # --- deadlines, metadata, retries ---------------------------------------------------

    def deadline(self, timeout: float | None) -> float:
        """Return the ``time.monotonic()`` instant by which the whole call must finish."""
        seconds = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        return time.monotonic() + seconds

    @staticmethod
    def remaining(deadline: float) -> float:
        """Return the seconds left before ``deadline`` (never negative)."""
        return max(deadline - time.monotonic(), 0.0)

    def call_metadata(self, metadata: Metadata) -> tuple[tuple[str, str | bytes], ...]:
        """Return the client's metadata followed by the call's."""
        return self.metadata + tuple(metadata)

    def retry_delay(self, attempt: int, deadline: float) -> float | None:
        """Decide whether to retry after attempt number ``attempt`` failed with UNAVAILABLE.

        Returns the seconds to wait before the next attempt, or ``None`` to give up: the
        policy's attempts are used up, or the wait would reach the call's deadline.
        """
        if attempt >= self.retry.max_attempts:
            return None
        delay = self.retry.backoff(attempt, rng=self._rng)
        if time.monotonic() + delay >= deadline:
            return None
        return delay

    # --- requests -----------------------------------------------------------------------

    @staticmethod
    def with_checkpoint_id(checkpoint: Checkpoint) -> Checkpoint:
        """Return the checkpoint with a fresh id if it has none, so retries carry the same id."""
        if checkpoint.checkpoint_id:
            return checkpoint
        return replace(checkpoint, checkpoint_id=new_id())

    def put_checkpoint(
        self, checkpoint: Checkpoint, request_id: str | None, view: CheckpointView = "full"
    ) -> checkpoint_service_pb2.PutCheckpointRequest:
        """Build a PutCheckpoint request (checkpoint id and request id filled in)."""
        return checkpoint_service_pb2.PutCheckpointRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            checkpoint=_convert.checkpoint_to_proto(self.with_checkpoint_id(checkpoint)),
            view=_VIEWS[view],
        )

    def get_checkpoint(
        self, execution_id: str, checkpoint_id: str
    ) -> checkpoint_service_pb2.GetCheckpointRequest:
        """Build a GetCheckpoint request."""
        return checkpoint_service_pb2.GetCheckpointRequest(
            namespace=self.namespace, execution_id=execution_id, checkpoint_id=checkpoint_id
        )

    def get_latest_checkpoint(
        self, execution_id: str
    ) -> checkpoint_service_pb2.GetLatestCheckpointRequest:
        """Build a GetLatestCheckpoint request."""
        return checkpoint_service_pb2.GetLatestCheckpointRequest(
            namespace=self.namespace, execution_id=execution_id
        )

    def list_checkpoints(
        self, execution_id: str, page_size: int, page_token: str, descending: bool
    ) -> checkpoint_service_pb2.ListCheckpointsRequest:
        """Build a ListCheckpoints request."""
        return checkpoint_service_pb2.ListCheckpointsRequest(
            namespace=self.namespace,
            execution_id=execution_id,
            page_size=_check_page_size(page_size),
            page_token=page_token,
            descending=descending,
        )

    def delete_execution(
        self, execution_id: str, request_id: str | None
    ) -> checkpoint_service_pb2.DeleteExecutionRequest:
        """Build a DeleteExecution request."""
        return checkpoint_service_pb2.DeleteExecutionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
        )

    def prune(
        self, older_than: timedelta, request_id: str | None
    ) -> checkpoint_service_pb2.PruneCheckpointsRequest:
        """Build a PruneCheckpoints request."""
        return checkpoint_service_pb2.PruneCheckpointsRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            older_than=_convert.timedelta_to_duration(older_than),
        )

    def get_resume_point(self, execution_id: str) -> checkpoint_service_pb2.GetResumePointRequest:
        """Build a GetResumePoint request."""
        return checkpoint_service_pb2.GetResumePointRequest(
            namespace=self.namespace, execution_id=execution_id
        )

    def get_fork_point(
        self, execution_id: str, checkpoint_id: str | None
    ) -> checkpoint_service_pb2.GetForkPointRequest:
        """Build a GetForkPoint request."""
        return checkpoint_service_pb2.GetForkPointRequest(
            namespace=self.namespace,
            execution_id=execution_id,
            checkpoint_id=checkpoint_id or "",
        )

    def record_interrupt(
        self, checkpoint: Checkpoint, pending: PendingInterrupt, request_id: str | None
    ) -> interrupt_service_pb2.RecordInterruptRequest:
        """Build a RecordInterrupt request (checkpoint id and request id filled in)."""
        return interrupt_service_pb2.RecordInterruptRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            checkpoint=_convert.checkpoint_to_proto(self.with_checkpoint_id(checkpoint)),
            pending=_convert.pending_to_proto(pending),
        )

    def claim_interrupt(
        self, execution_id: str, claim_token: str | None, request_id: str | None
    ) -> interrupt_service_pb2.ClaimInterruptRequest:
        """Build a ClaimInterrupt request (claim token and request id filled in)."""
        return interrupt_service_pb2.ClaimInterruptRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            claim_token=claim_token or new_id(),
        )

    def submit_decision(
        self,
        execution_id: str,
        approved: bool,
        metadata: dict[str, Any] | None,
        decided_by: str,
        reason: str | None,
        request_id: str | None,
    ) -> interrupt_service_pb2.SubmitDecisionRequest:
        """Build a SubmitDecision request (request id filled in)."""
        return interrupt_service_pb2.SubmitDecisionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            approved=approved,
            metadata_json=_convert.dump_json(metadata or {}, field="metadata"),
            decided_by=decided_by,
            reason=reason,
        )

    def lease_decision(
        self,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        lease_seconds: int,
        request_id: str | None,
    ) -> interrupt_service_pb2.LeaseDecisionRequest:
        """Build a LeaseDecision request."""
        return interrupt_service_pb2.LeaseDecisionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            checkpoint_id=checkpoint_id,
            lease_token=lease_token,
            lease_seconds=lease_seconds,
        )

    def report_resume(
        self,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        error: str | None,
        request_id: str | None,
    ) -> interrupt_service_pb2.ReportResumeRequest:
        """Build a ReportResume request: RESUMED when ``error`` is None, else RESUME_FAILED."""
        return interrupt_service_pb2.ReportResumeRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            checkpoint_id=checkpoint_id,
            lease_token=lease_token,
            outcome=(
                interrupt_service_pb2.RESUME_OUTCOME_RESUMED
                if error is None
                else interrupt_service_pb2.RESUME_OUTCOME_RESUME_FAILED
            ),
            error=error or "",
        )

    def list_decisions(
        self, page_size: int, page_token: str, open_only: bool
    ) -> interrupt_service_pb2.ListDecisionsRequest:
        """Build a ListDecisions request."""
        return interrupt_service_pb2.ListDecisionsRequest(
            namespace=self.namespace,
            page_size=_check_page_size(page_size),
            page_token=page_token,
            open_only=open_only,
        )

    def list_pending_interrupts(
        self,
        page_size: int,
        page_token: str,
        chain_name: str | None,
        reason: str | None,
        agent_path_prefix: str | None,
    ) -> interrupt_service_pb2.ListPendingInterruptsRequest:
        """Build a ListPendingInterrupts request; ``None`` filters are left unset."""
        return interrupt_service_pb2.ListPendingInterruptsRequest(
            namespace=self.namespace,
            page_size=_check_page_size(page_size),
            page_token=page_token,
            chain_name=chain_name,
            reason=reason,
            agent_path_prefix=agent_path_prefix,
        )

    def put_idempotent(
        self, execution_id: str, key: str, value: Any, request_id: str | None
    ) -> idempotency_service_pb2.PutIdempotencyResultRequest:
        """Build a PutIdempotencyResult request."""
        return idempotency_service_pb2.PutIdempotencyResultRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            key=key,
            result_json=_convert.dump_json(value, field="value"),
        )

    def get_idempotent(
        self, execution_id: str, key: str
    ) -> idempotency_service_pb2.GetIdempotencyResultRequest:
        """Build a GetIdempotencyResult request."""
        return idempotency_service_pb2.GetIdempotencyResultRequest(
            namespace=self.namespace, execution_id=execution_id, key=key
        )

    # --- replication outbox (R1-R4) ------------------------------------------------------

    def list_unsynced_checkpoints(
        self, page_size: int, page_token: str
    ) -> replication_service_pb2.ListUnsyncedCheckpointsRequest:
        """Build a ListUnsyncedCheckpoints request."""
        return replication_service_pb2.ListUnsyncedCheckpointsRequest(
            namespace=self.namespace, page_size=page_size, page_token=page_token
        )

    def mark_checkpoints_synced(
        self, checkpoint_ids: Sequence[str]
    ) -> replication_service_pb2.MarkCheckpointsSyncedRequest:
        """Build a MarkCheckpointsSynced request."""
        if isinstance(checkpoint_ids, str):
            raise TypeError("checkpoint_ids must be a sequence of ids, not one string")
        return replication_service_pb2.MarkCheckpointsSyncedRequest(
            namespace=self.namespace, checkpoint_ids=list(checkpoint_ids)
        )

    def quarantine_checkpoints(
        self, reasons: Mapping[str, str]
    ) -> replication_service_pb2.QuarantineCheckpointsRequest:
        """Build a QuarantineCheckpoints request from ``{checkpoint_id: reason}``."""
        return replication_service_pb2.QuarantineCheckpointsRequest(
            namespace=self.namespace,
            quarantines=[
                replication_service_pb2.CheckpointQuarantine(checkpoint_id=cid, reason=reason)
                for cid, reason in reasons.items()
            ],
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
        checkpoints=[_convert.checkpoint_from_proto(c) for c in response.checkpoints],
        next_page_token=response.next_page_token,
    )


def decision_page(
    response: interrupt_service_pb2.ListDecisionsResponse,
) -> PendingInterruptPage:
    """The page of a ListDecisions response."""
    return PendingInterruptPage(
        pending_interrupts=[_convert.pending_from_proto(p) for p in response.decided],
        next_page_token=response.next_page_token,
    )


def pending_page(
    response: interrupt_service_pb2.ListPendingInterruptsResponse,
) -> PendingInterruptPage:
    """Parse a ListPendingInterrupts response."""
    return PendingInterruptPage(
        pending_interrupts=[_convert.pending_from_proto(p) for p in response.pending_interrupts],
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


def record_result(
    response: interrupt_service_pb2.RecordInterruptResponse,
) -> RecordInterruptResult:
    """Parse a RecordInterrupt response."""
    return RecordInterruptResult(
        checkpoint=_convert.checkpoint_from_proto(response.checkpoint),
        pending=_convert.pending_from_proto(response.pending),
        pending_created=response.pending_created,
    )


def idempotency_result(
    response: idempotency_service_pb2.GetIdempotencyResultResponse,
) -> IdempotencyResult:
    """Parse a GetIdempotencyResult response."""
    if not response.found:
        return IdempotencyResult(found=False, value=None)
    return IdempotencyResult(
        found=True, value=_convert.load_json(response.result_json, field="value")
    )


# --- the interrupt watch ----------------------------------------------------------------

#: The reason of the OUT_OF_RANGE that says a watch cursor is older than the event retention.
CURSOR_EXPIRED = ErrorReason.CURSOR_EXPIRED
#: The reason of the RESOURCE_EXHAUSTED that ends the stream of a watcher that fell behind.
WATCHER_TOO_SLOW = ErrorReason.WATCHER_TOO_SLOW


class WatchState:
    """Everything about an interrupt watch that is not transport (contract I5, P4).

    It builds the request of each connection from the last cursor delivered, turns responses
    into :data:`~checkpointd_client.WatchItem`\\ s, and decides what a broken stream means:
    reconnect from the cursor after a backoff (UNAVAILABLE, WATCHER_TOO_SLOW, a dropped or
    ended stream), re-snapshot (CURSOR_EXPIRED), or raise.
    """

    __slots__ = (
        "_core",
        "_delivered",
        "_failures",
        "_resnapshot",
        "agent_path_prefix",
        "chain_name",
        "cursor",
        "deadline",
        "reason",
        "reconnect",
    )

    def __init__(
        self,
        core: ClientCore,
        *,
        after_cursor: int,
        chain_name: str | None,
        reason: str | None,
        agent_path_prefix: str | None,
        reconnect: bool,
        timeout: float | None,
    ) -> None:
        if isinstance(after_cursor, bool) or not isinstance(after_cursor, int):
            raise TypeError(f"after_cursor must be an int, got {type(after_cursor).__name__}")
        if after_cursor < 0:
            raise ValueError(
                f"after_cursor must be >= 0 (0 starts with a snapshot), got {after_cursor}"
            )
        self._core = core
        self.cursor = after_cursor  # the last cursor delivered: where a reconnect resumes
        self.chain_name = chain_name
        self.reason = reason
        self.agent_path_prefix = agent_path_prefix
        self.reconnect = reconnect
        self.deadline = None if timeout is None else core.deadline(timeout)
        self._delivered = False  # whether any item has been handed to the caller
        self._resnapshot = False  # whether the snapshot being sent replaces an earlier one
        self._failures = 0  # connection failures since the last item received

    def request(self) -> interrupt_service_pb2.WatchInterruptsRequest:
        """Build the request of the next connection, resuming after the last cursor."""
        if self.cursor == 0 and self._delivered:
            # A snapshot again: what the caller built from earlier items must be replaced.
            self._resnapshot = True
        return interrupt_service_pb2.WatchInterruptsRequest(
            namespace=self._core.namespace,
            after_cursor=self.cursor,
            chain_name=self.chain_name,
            reason=self.reason,
            agent_path_prefix=self.agent_path_prefix,
        )

    def call_timeout(self) -> float | None:
        """The gRPC deadline of the next connection: what is left of the watch's timeout."""
        if self.deadline is None:
            return None
        return max(ClientCore.remaining(self.deadline), 0.001)

    def accept(self, response: interrupt_service_pb2.WatchInterruptsResponse) -> WatchItem | None:
        """Turn one response into the item to deliver (``None``: nothing to deliver)."""
        self._failures = 0
        item: WatchItem
        kind = response.WhichOneof("item")
        if kind == "snapshot":
            item = SnapshotItem(
                pending=_convert.pending_from_proto(response.snapshot),
                resnapshot=self._resnapshot,
            )
        elif kind == "snapshot_complete":
            item = SnapshotComplete(
                cursor=response.snapshot_complete.cursor, resnapshot=self._resnapshot
            )
            self.cursor = item.cursor
            self._resnapshot = False
        elif kind == "event":
            event = _convert.interrupt_event_from_proto(response.event)
            item = event if event is not None else WatchProgress(cursor=response.event.cursor)
            self.cursor = item.cursor
        elif kind == "progress":
            item = WatchProgress(cursor=response.progress.cursor)
            self.cursor = max(self.cursor, item.cursor)
        else:  # an item kind added by a newer server: nothing this client can deliver
            return None
        self._delivered = True
        return item

    def after_stream_end(self, error: CheckpointdError | None) -> float | None:
        """Decide what to do when a stream ended, with ``error`` or cleanly (``None``).

        Returns the seconds to wait before reconnecting, or ``None`` when the watch is over
        (a clean end with reconnecting off). Raises ``error`` when it cannot be recovered
        from, or when the wait would pass the watch's deadline.
        """
        if not self.reconnect:
            if error is not None:
                raise error
            return None
        if isinstance(error, OutOfRangeError) and error.reason == CURSOR_EXPIRED:
            _log.info("watch cursor %d expired; taking a new snapshot", self.cursor)
            self.cursor = 0
            self._delivered = True  # the snapshot that follows replaces the caller's view
            return 0.0
        if not self.retriable(error):
            assert error is not None
            raise error
        self._failures += 1
        delay = self._core.retry.backoff(self._failures, rng=self._core._rng)
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            if error is not None:
                raise error
            raise DeadlineExceededError(
                "the watch's timeout passed", code=grpc.StatusCode.DEADLINE_EXCEEDED
            )
        _log.info(
            "watch stream ended (%s); reconnecting after cursor %d in %.2f s",
            "it ended" if error is None else error,
            self.cursor,
            delay,
        )
        return delay

    @staticmethod
    def retriable(error: CheckpointdError | None) -> bool:
        """Whether a watch that ended with ``error`` resumes from its cursor."""
        if error is None or isinstance(error, UnavailableError):
            return True  # a stream that ended, a dropped connection, a server going away
        if isinstance(error, ResourceExhaustedError):
            return error.reason == WATCHER_TOO_SLOW
        # Cancelled by the server or a proxy (not by us: a closed watch never gets here).
        return bool(error.code == grpc.StatusCode.CANCELLED)
