"""What every call of a client shares: its settings, request building and the retry decision.
Response parsing lives in :mod:`checkpointd_client._convert`, the watch's state in
:mod:`checkpointd_client.watch`.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from checkpointd_client import _convert
from checkpointd_client.config import DEFAULT_RETRY_POLICY, RetryPolicy, resolve_target
from checkpointd_client.credentials import TlsConfig, auth_metadata, resolve_tls
from checkpointd_client.fencing import fenced
from checkpointd_client.models import (
    Checkpoint,
    CheckpointView,
    DecisionResponse,
    PendingInterrupt,
)
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
)

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
    # Leave a connection that has gone silent (a dead server, or a path that still takes our
    # bytes but brings back nothing: a half-open TCP path, a wedged middlebox) within 15 s: a
    # ping every 10 s, and any ping unanswered for 5 s closes the connection, so the next
    # call opens a new one. gRPC C-core times its pings out by ping_timeout_ms (60 s by
    # default), not keepalive_timeout_ms, and a flow-control ping already in flight holds back
    # the keepalive ping: both must be short. The server permits pings at any rate
    # (max_ping_strikes 0; docs/protocol.md, Keepalive).
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
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
    """Return a fresh UUID4 string, used for checkpoint ids, request ids and claim tokens.

    The text ``str(uuid.uuid4())`` gives, written from the random bytes directly: building the
    UUID object costs more than the rest of an id, and a put takes two."""
    h = os.urandom(16).hex()
    # Version 4 in the 13th digit, the RFC 4122 variant (8, 9, a or b) in the 17th.
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


_VARIANT: Final = "89ab"


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
        return fenced(
            checkpoint_service_pb2.PutCheckpointRequest(
                namespace=self.namespace,
                request_id=request_id or new_id(),
                checkpoint=_convert.checkpoint_to_proto(self.with_checkpoint_id(checkpoint)),
                view=_VIEWS[view],
            )
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

    def list_executions(
        self,
        page_size: int,
        page_token: str,
        chain_name: str | None,
        status: str | None,
        active_since: datetime | None,
        framework: str | None = None,
    ) -> checkpoint_service_pb2.ListExecutionsRequest:
        """Build a ListExecutions request; ``None`` filters are left unset."""
        request = checkpoint_service_pb2.ListExecutionsRequest(
            namespace=self.namespace,
            page_size=_check_page_size(page_size),
            page_token=page_token,
            chain_name=chain_name,
            status=_convert.execution_status_to_proto(status),
            framework=_convert.framework_to_proto(framework),
        )
        if active_since is not None:
            request.active_since.CopyFrom(_convert.datetime_to_timestamp(active_since))
        return request

    def list_namespaces(
        self, page_size: int, page_token: str
    ) -> checkpoint_service_pb2.ListNamespacesRequest:
        """Build a ListNamespaces request (it names no namespace: it lists them)."""
        return checkpoint_service_pb2.ListNamespacesRequest(
            page_size=_check_page_size(page_size), page_token=page_token
        )

    def get_execution(
        self, execution_id: str, framework: str | None = None
    ) -> checkpoint_service_pb2.GetExecutionRequest:
        """Build a GetExecution request."""
        return checkpoint_service_pb2.GetExecutionRequest(
            namespace=self.namespace,
            execution_id=execution_id,
            framework=_convert.framework_to_proto(framework),
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

    def apply_graph_retention(
        self,
        idle_for: timedelta | None,
        keep_newest: int | None,
        dry_run: bool,
        request_id: str | None,
    ) -> graph_service_pb2.ApplyGraphRetentionRequest:
        """Build an ApplyGraphRetention request (the server checks the rules: at least one,
        ``idle_for`` positive, ``keep_newest`` not negative)."""
        request = graph_service_pb2.ApplyGraphRetentionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            keep_newest=keep_newest or 0,
            dry_run=dry_run,
        )
        if idle_for is not None:
            request.idle_for.CopyFrom(_convert.timedelta_to_duration(idle_for))
        return request

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
        return fenced(
            interrupt_service_pb2.RecordInterruptRequest(
                namespace=self.namespace,
                request_id=request_id or new_id(),
                checkpoint=_convert.checkpoint_to_proto(self.with_checkpoint_id(checkpoint)),
                pending=_convert.pending_to_proto(pending),
            )
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
        approved: bool | None,
        metadata: dict[str, Any] | None,
        decided_by: str,
        reason: str | None,
        request_id: str | None,
        interrupt_id: str = "",
        response: DecisionResponse | None = None,
    ) -> interrupt_service_pb2.SubmitDecisionRequest:
        """Build a SubmitDecision request (request id filled in). Without ``approved``, the
        verdict is the response's: not approved exactly when an action is rejected."""
        if approved is None:
            if response is None:
                raise TypeError("submit_decision needs approved=True or False, or a response")
            approved = not response.rejects
        return interrupt_service_pb2.SubmitDecisionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            approved=approved,
            metadata_json=_convert.dump_json(metadata or {}, field="metadata"),
            decided_by=decided_by,
            reason=reason,
            interrupt_id=interrupt_id,
            response=None if response is None else _convert.response_to_proto(response),
        )

    def lease_decision(
        self,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        lease_seconds: int,
        request_id: str | None,
        interrupt_id: str = "",
    ) -> interrupt_service_pb2.LeaseDecisionRequest:
        """Build a LeaseDecision request."""
        return interrupt_service_pb2.LeaseDecisionRequest(
            namespace=self.namespace,
            request_id=request_id or new_id(),
            execution_id=execution_id,
            checkpoint_id=checkpoint_id,
            lease_token=lease_token,
            lease_seconds=lease_seconds,
            interrupt_id=interrupt_id,
        )

    def report_resume(
        self,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        error: str | None,
        request_id: str | None,
        interrupt_id: str = "",
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
            interrupt_id=interrupt_id,
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
        return fenced(
            idempotency_service_pb2.PutIdempotencyResultRequest(
                namespace=self.namespace,
                request_id=request_id or new_id(),
                execution_id=execution_id,
                key=key,
                result_json=_convert.dump_json(value, field="value"),
            )
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
