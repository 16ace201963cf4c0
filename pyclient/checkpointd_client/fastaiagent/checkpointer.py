"""The fastaiagent ``Checkpointer`` on checkpointd: :class:`SidecarCheckpointer` (what it
keeps and where it differs from the reference: the package's docstring)."""

from __future__ import annotations

import builtins
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from checkpointd_client._base import new_id
from checkpointd_client._convert import timestamp_to_datetime
from checkpointd_client._resume_context import CLAIM_TOKEN
from checkpointd_client.client import CheckpointdClient
from checkpointd_client.config import RetryPolicy
from checkpointd_client.credentials import TlsConfig
from checkpointd_client.errors import NotFoundError
from checkpointd_client.fastaiagent._models import (
    fastaiagent_models,
    format_time,
    from_checkpoint,
    from_pending,
    to_checkpoint,
    to_pending,
)
from checkpointd_client.models import Checkpoint, PendingInterrupt

if TYPE_CHECKING:
    from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
    from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt

__all__ = ["SidecarCheckpointer"]

_log = logging.getLogger(__name__)

#: The largest page the server returns; ``list`` asks for no more than it needs.
_MAX_PAGE = 1000


def _check_limit(limit: int) -> int:
    limit = int(limit)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return limit


class SidecarCheckpointer:
    """fastaiagent's ``Checkpointer`` protocol over a checkpointd server.

    The arguments are those of :class:`~checkpointd_client.CheckpointdClient`: ``target``
    defaults to ``$CHECKPOINTD_TARGET`` or ``127.0.0.1:7470``, every row lives in
    ``namespace``, every call has a deadline of ``timeout`` seconds and is retried on
    ``UNAVAILABLE`` by ``retry``; ``token`` (default ``$CHECKPOINTD_TOKEN``) and ``tls``
    authenticate it to a server that requires them. Server errors other than "not found"
    surface as :class:`~checkpointd_client.CheckpointdError` subclasses.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
    ) -> None:
        fastaiagent_models()  # fail here, not mid-run, when fastaiagent is missing

        def connect() -> CheckpointdClient:
            return CheckpointdClient(
                target,
                namespace=namespace,
                timeout=timeout,
                retry=retry,
                metadata=metadata,
                channel_options=channel_options,
                token=token,
                tls=tls,
            )

        self._connect = connect
        self._lock = threading.Lock()
        first = connect()
        self._client: CheckpointdClient | None = first
        self._target = first.target
        self._namespace = first.namespace

    def _open_client(self) -> CheckpointdClient:
        """The open client, reopened after :meth:`close` (as the reference reopens its
        connection), so a store closed by one component keeps serving the others."""
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    @property
    def client(self) -> CheckpointdClient:
        """The underlying blocking client, for calls the protocol does not cover.

        After :meth:`close` this is a new client; one taken before stays closed.
        """
        return self._open_client()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self._target!r}, namespace={self._namespace!r})"

    # --- lifecycle ----------------------------------------------------------------------

    def setup(self) -> None:
        """Register for fastaiagent's platform replication, as the reference's ``setup`` does;
        the server owns its schema. Idempotent, and never raises over replication."""
        try:
            from fastaiagent.checkpointers import platform_replica

            platform_replica.register_checkpointer(self)
        except Exception:  # replication is best-effort; checkpointing must not fail over it
            _log.debug("platform replication registration failed", exc_info=True)

    def _maybe_replicate(self) -> None:
        """Kick fastaiagent's background drain after a write, as the reference does; a no-op
        when fastaiagent is not connected to its platform, and never raises."""
        try:
            from fastaiagent.checkpointers import platform_replica

            platform_replica.kick(self)
        except Exception:
            _log.debug("platform replication kick failed", exc_info=True)

    def close(self) -> None:
        """Close the channel to the server and release its threads.

        Like the reference's ``close``, this does not end the checkpointer: the next call
        opens a new channel.
        """
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- writes -------------------------------------------------------------------------

    def put(self, checkpoint: FastCheckpoint) -> None:
        """Store a checkpoint; fill ``checkpoint_id`` and ``created_at`` on the given object.

        The id is set on the object before sending, so it is known even if the call fails.
        A stored ``checkpoint_id`` raises :class:`~checkpointd_client.AlreadyExistsError`.
        """
        if not checkpoint.checkpoint_id:
            checkpoint.checkpoint_id = new_id()
        # Only the id and created_at are read back: the reply need not carry the state, and
        # is read as its message rather than converted whole.
        stored = self._open_client()._put_checkpoint_message(
            to_checkpoint(checkpoint), None, "basic", None, ()
        )
        checkpoint.checkpoint_id = stored.checkpoint_id
        checkpoint.created_at = (
            format_time(timestamp_to_datetime(stored.created_at))
            if stored.HasField("created_at")
            else ""
        )
        self._maybe_replicate()

    def put_writes(self, execution_id: str, checkpoint_id: str, writes: builtins.list[Any]) -> None:
        """Do nothing, like the reference (reserved by fastaiagent for a later phase)."""
        return None

    def record_interrupt(self, checkpoint: FastCheckpoint, pending: FastPendingInterrupt) -> None:
        """Store the interrupted checkpoint and the pending row atomically (I1).

        Fills ``checkpoint_id`` and ``created_at`` on ``checkpoint`` and ``created_at`` on
        ``pending`` (by default the checkpoint's), like the reference. When the execution
        already has a pending interrupt, that row stays and the checkpoint is still stored.
        """
        if not checkpoint.checkpoint_id:
            checkpoint.checkpoint_id = new_id()
        if not pending.created_at and checkpoint.created_at:
            pending.created_at = checkpoint.created_at
        result = self._open_client().record_interrupt(
            to_checkpoint(checkpoint), to_pending(pending)
        )
        checkpoint.checkpoint_id = result.checkpoint.checkpoint_id
        checkpoint.created_at = format_time(result.checkpoint.created_at)
        if result.pending_created:
            pending.created_at = format_time(result.pending.created_at)
        elif not pending.created_at:
            pending.created_at = checkpoint.created_at
        self._maybe_replicate()

    def delete_pending_interrupt_atomic(self, execution_id: str) -> FastPendingInterrupt | None:
        """Claim the execution's pending interrupt; ``None`` if there is none (or it was lost).

        Exactly one caller among concurrent ones gets the row (I3); a retry after a lost
        reply gets the same row again. Inside a :class:`ResumeWorker` resume the claim token
        is the pause's own, so a worker that re-drives a run whose worker died after this
        claim wins it again.
        """
        try:
            claimed = self._open_client().claim_interrupt(
                execution_id, claim_token=CLAIM_TOKEN.get()
            )
        except NotFoundError:
            return None
        return from_pending(claimed)

    def delete_execution(self, execution_id: str) -> None:
        """Delete every checkpoint, the pending interrupt and the idempotency rows of a run."""
        self._open_client().delete_execution(execution_id)

    def put_idempotent(self, execution_id: str, function_key: str, result: Any) -> None:
        """Cache the JSON-serializable result of an ``@idempotent`` function."""
        self._open_client().put_idempotent(execution_id, function_key, result)

    def prune(self, older_than: timedelta) -> int:
        """Delete old completed/failed checkpoints and idempotency rows; return the total count."""
        return self._open_client().prune(older_than).total

    # --- reads --------------------------------------------------------------------------

    def get_last(self, execution_id: str) -> FastCheckpoint | None:
        """Return the checkpoint written last, or ``None`` when the run has none."""
        try:
            return from_checkpoint(self._open_client().get_latest_checkpoint(execution_id))
        except NotFoundError:
            return None

    def get_by_id(self, execution_id: str, checkpoint_id: str) -> FastCheckpoint | None:
        """Return one checkpoint by id, or ``None``."""
        try:
            return from_checkpoint(self._open_client().get_checkpoint(execution_id, checkpoint_id))
        except NotFoundError:
            return None

    def list(self, execution_id: str, *, limit: int = 100) -> builtins.list[FastCheckpoint]:
        """Return the newest ``limit`` checkpoints of a run, oldest first, in write order.

        Unlike the reference's first-N cut by ``node_index`` this keeps the newest rows,
        which is what callers scanning ``reversed(list(...))`` need (contract C4). ``limit``
        0 gives ``[]``; a negative one is a ``ValueError``.
        """
        limit = _check_limit(limit)
        newest_first: builtins.list[Checkpoint] = []
        token = ""
        while len(newest_first) < limit:
            page = self._open_client().list_checkpoints(
                execution_id,
                page_size=min(limit - len(newest_first), _MAX_PAGE),
                page_token=token,
                descending=True,
            )
            newest_first.extend(page.checkpoints)
            token = page.next_page_token
            if not token:
                break
        return [from_checkpoint(cp) for cp in reversed(newest_first[:limit])]

    def list_pending_interrupts(self, *, limit: int = 100) -> builtins.list[FastPendingInterrupt]:
        """Return up to ``limit`` pending interrupts, newest first."""
        limit = _check_limit(limit)
        rows: builtins.list[PendingInterrupt] = []
        token = ""
        while len(rows) < limit:
            page = self._open_client().list_pending_interrupts(
                page_size=min(limit - len(rows), _MAX_PAGE), page_token=token
            )
            rows.extend(page.pending_interrupts)
            token = page.next_page_token
            if not token:
                break
        return [from_pending(p) for p in rows[:limit]]

    def get_idempotent(self, execution_id: str, function_key: str) -> Any | None:
        """Return the cached result, or ``None`` when there is none (as the reference does)."""
        cached = self._open_client().get_idempotent(execution_id, function_key)
        return cached.value if cached.found else None

    # --- replication outbox (fastaiagent's ReplicatedCheckpointer and
    # QuarantinableCheckpointer) ---------------------------------------------------------

    def fetch_unsynced(
        self, limit: int, project_id: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Return up to ``limit`` unsettled checkpoints of the namespace, oldest first (R1).

        Each row has the reference ``SQLiteCheckpointer``'s column keys (JSON columns as
        text, ``created_at`` an ISO string, ``_seq`` the store's sequence), which is what
        fastaiagent's replicator maps onto its ingest wire shape. ``project_id`` is accepted
        and ignored, as the reference ``PostgresCheckpointer`` does: the namespace is the
        scope here, and every row carries ``project_id`` as given. Listing changes nothing.
        """
        limit = _check_limit(limit)
        rows: builtins.list[Checkpoint] = []
        token = ""
        client = self._open_client()
        while len(rows) < limit:
            page = client.list_unsynced_checkpoints(
                page_size=min(limit - len(rows), _MAX_PAGE), page_token=token
            )
            rows.extend(page.checkpoints)
            token = page.next_page_token
            if not token:
                break
        return [_outbox_row(cp, project_id) for cp in rows[:limit]]

    def mark_synced(self, checkpoint_ids: builtins.list[str]) -> None:
        """Settle checkpoints as synced after the replica acknowledged them (R2).

        Idempotent: unknown ids and ids already settled (by this or another replicator) are
        left alone.
        """
        client = self._open_client()
        ids = builtins.list(checkpoint_ids)
        for start in range(0, len(ids), _MAX_SETTLE):
            client.mark_checkpoints_synced(ids[start : start + _MAX_SETTLE])

    def mark_quarantined(self, reasons: dict[str, str]) -> None:
        """Settle checkpoints the replica can never ingest, keyed id → reason (R3).

        They leave the outbox like synced rows and keep their reason, so the two stay
        distinguishable. Idempotent; a synced row stays synced, a quarantined one takes the
        new reason. A reason longer than the server keeps is cut, and an empty one is recorded
        as "no reason given".
        """
        client = self._open_client()
        items = builtins.list(_quarantine_reasons(reasons).items())
        for start in range(0, len(items), _MAX_SETTLE):
            client.quarantine_checkpoints(dict(items[start : start + _MAX_SETTLE]))


#: The most ids one Mark/Quarantine call carries (the server's limit).
_MAX_SETTLE = 1000
#: The longest quarantine reason the server keeps.
_REASON_MAX = 1024


def _quarantine_reasons(reasons: Mapping[str, str]) -> dict[str, str]:
    return {
        cid: (str(reason) or "no reason given")[:_REASON_MAX] for cid, reason in reasons.items()
    }


def _outbox_row(cp: Checkpoint, project_id: str | None) -> dict[str, Any]:
    """A checkpoint as the reference ``SQLiteCheckpointer.fetch_unsynced`` returns it."""
    return {
        "_seq": cp.sequence,
        "id": cp.checkpoint_id,
        "checkpoint_id": cp.checkpoint_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
        "chain_name": cp.chain_name,
        "execution_id": cp.execution_id,
        "node_id": cp.node_id,
        "node_index": cp.node_index,
        "step_type": cp.step_type,
        "status": cp.status,
        "state_snapshot": json.dumps(cp.state_snapshot),
        "node_input": json.dumps(cp.node_input),
        "node_output": json.dumps(cp.node_output),
        "iteration": cp.iteration,
        "iteration_counters": json.dumps(cp.iteration_counters),
        "interrupt_reason": cp.interrupt_reason,
        "interrupt_context": json.dumps(cp.interrupt_context),
        "agent_path": cp.agent_path,
        "created_at": format_time(cp.created_at),
        "project_id": project_id,
        "synced": 0,
        "sync_error": None,
    }
