"""The asyncio checkpointd client, and the source of the blocking one.

``tools/unasync.py`` writes :mod:`checkpointd_client._sync_client` from this module by plain
token substitutions (``async def`` -> ``def``, ``await`` dropped, ``grpc.aio`` -> ``grpc``,
``AsyncCheckpointdClient`` -> ``CheckpointdClient``, ...): edit here, then run it.
``make lint`` and a test fail when the generated module is stale.
"""

# ASYNC109: ``timeout`` here is the gRPC deadline sent to the server (and the bound of the
# retries), not a local wait that asyncio.timeout() could replace; the sync and async
# clients keep the same signatures.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
from grpc import aio

from checkpointd_client import _base, _convert
from checkpointd_client._base import Metadata
from checkpointd_client._write_stream import AsyncWriteStream
from checkpointd_client.config import RetryPolicy
from checkpointd_client.credentials import TlsConfig, open_aio_channel
from checkpointd_client.errors import UnavailableError, error_from_rpc_error
from checkpointd_client.models import (
    Checkpoint,
    CheckpointPage,
    CheckpointView,
    DecisionResponse,
    DeleteExecutionResult,
    ExecutionDetail,
    ExecutionPage,
    GraphRetentionResult,
    IdempotencyResult,
    NamespacePage,
    PendingInterrupt,
    PendingInterruptPage,
    PruneResult,
    RecordInterruptResult,
)
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2_grpc,
    graph_service_pb2_grpc,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2_grpc,
    replication_service_pb2_grpc,
)
from checkpointd_client.watch import DEFAULT_PROGRESS_INTERVAL, AsyncInterruptWatch, WatchState

__all__ = ["AsyncCheckpointdClient"]

_CLOSED = "the checkpointd client has been closed"

#: The GraphService writes that go on the Write stream (contract S4), where it takes them.
_STREAMED_GRAPH_METHODS = frozenset({"PutGraphCheckpoint", "PutGraphWrites"})

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


@dataclass(frozen=True, slots=True)
class _AsyncStubs:
    """The service stubs of one channel."""

    checkpoints: checkpoint_service_pb2_grpc.CheckpointServiceAsyncStub
    interrupts: interrupt_service_pb2_grpc.InterruptServiceAsyncStub
    idempotency: idempotency_service_pb2_grpc.IdempotencyServiceAsyncStub
    replication: replication_service_pb2_grpc.ReplicationServiceAsyncStub
    graph: graph_service_pb2_grpc.GraphServiceAsyncStub

    @classmethod
    def open(cls, channel: aio.Channel) -> _AsyncStubs:
        return cls(
            checkpoint_service_pb2_grpc.CheckpointServiceStub(channel),
            interrupt_service_pb2_grpc.InterruptServiceStub(channel),
            idempotency_service_pb2_grpc.IdempotencyServiceStub(channel),
            replication_service_pb2_grpc.ReplicationServiceStub(channel),
            graph_service_pb2_grpc.GraphServiceStub(channel),
        )


class AsyncCheckpointdClient:
    """An asyncio checkpointd client over one ``grpc.aio`` channel.

    ``target`` is handed to gRPC as-is (``"unix:///run/checkpointd.sock"``,
    ``"127.0.0.1:7470"``, ``"dns:///host:port"``); when ``None`` it comes from
    ``$CHECKPOINTD_TARGET`` or :data:`~checkpointd_client.DEFAULT_TARGET`. Every request
    is sent in ``namespace``. ``timeout`` is the default deadline of a call in seconds,
    retries included. ``metadata`` is sent with every call, before the call's own.
    ``channel_options`` replace the defaults of the same key.

    ``token`` (default: ``$CHECKPOINTD_TOKEN``) is sent as ``authorization: Bearer`` on every
    call, watches included, for servers that require one. ``tls`` connects over TLS to a TCP
    target: a :class:`~checkpointd_client.TlsConfig` (the server's CA, and a client
    certificate for mutual TLS) or ``True`` for the system's roots.

    The channel opens on the first call, in the running event loop; use the client from
    that one loop. ``iter_checkpoints`` and ``iter_pending_interrupts`` are async iterators.

    With ``write_stream`` (the default) the writes of every caller (``put_checkpoint``,
    ``put_idempotent``, ``record_interrupt``, ``claim_interrupt``, and the graph writes
    ``PutGraphCheckpoint`` and ``PutGraphWrites`` of :meth:`call_graph`) share one
    ``WriteService.Write`` stream, so concurrent writes reach the server, and its group
    commit, together (contracts S1, S4); against a server without it, or one whose stream
    does not take the graph writes, they go unary. ``False`` sends each write as its own
    unary call.

    Use it as an async context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        metadata: Metadata = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
        write_stream: bool = True,
    ) -> None:
        self._core = _base.ClientCore(
            target,
            namespace=namespace,
            timeout=timeout,
            retry=retry,
            metadata=metadata,
            channel_options=channel_options,
            token=token,
            tls=tls,
        )
        # The channel is opened on first use: a grpc.aio channel binds to the event loop it
        # is created in, which must be the loop that awaits the calls.
        self._lock = threading.Lock()  # one channel, whichever thread or task calls first
        self._channel: aio.Channel | None = None
        self._stubs: _AsyncStubs | None = None
        self._writes = AsyncWriteStream(
            self._open_channel, self._core.metadata, enabled=write_stream
        )
        self._closed = False

    def _connect(self) -> _AsyncStubs:
        """Return the service stubs, opening the channel on first use."""
        stubs = self._stubs
        if stubs is not None and not self._closed:
            return stubs  # every call passes here: no lock for threads to queue on once open
        with self._lock:
            if self._closed:
                raise RuntimeError(_CLOSED)
            if self._stubs is None:
                # In an empty context: what the channel starts keeps the context it was
                # opened in, and with it the caller's contextvars, as long as it lives.
                self._channel = contextvars.Context().run(
                    open_aio_channel, self._core.target, self._core.channel_options, self._core.tls
                )
                self._stubs = _AsyncStubs.open(self._channel)
            return self._stubs

    def _open_channel(self) -> aio.Channel:
        """The channel, opened on first use (the Write stream runs on it)."""
        self._connect()
        channel = self._channel
        if channel is None:
            raise RuntimeError(_CLOSED)
        return channel

    @property
    def _checkpoints(self) -> checkpoint_service_pb2_grpc.CheckpointServiceAsyncStub:
        return self._connect().checkpoints

    @property
    def _interrupts(self) -> interrupt_service_pb2_grpc.InterruptServiceAsyncStub:
        return self._connect().interrupts

    @property
    def _idempotency(self) -> idempotency_service_pb2_grpc.IdempotencyServiceAsyncStub:
        return self._connect().idempotency

    @property
    def _replication(self) -> replication_service_pb2_grpc.ReplicationServiceAsyncStub:
        return self._connect().replication

    @property
    def target(self) -> str:
        """The gRPC target this client connects to."""
        return self._core.target

    @property
    def namespace(self) -> str:
        """The namespace every request is sent in."""
        return self._core.namespace

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self.target!r}, namespace={self.namespace!r})"

    # --- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the channel. Calls in flight are cancelled; later calls raise RuntimeError."""
        with self._lock:
            channel, self._channel = self._channel, None
            self._closed = True
        await self._writes.close()
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- transport ----------------------------------------------------------------------

    async def _invoke(
        self,
        rpc: aio.UnaryUnaryMultiCallable[_Request, _Response],
        request: _Request,
        timeout: float | None,
        metadata: Metadata,
    ) -> _Response:
        """Send ``request``, retrying UNAVAILABLE within one deadline; map errors."""
        if self._closed:
            raise RuntimeError(_CLOSED)
        deadline = self._core.deadline(timeout)
        call_metadata = self._core.call_metadata(metadata)
        attempt = 1
        while True:
            try:
                try:  # map_rpc_errors() inline: its context manager costs more on every call
                    return await rpc(
                        request,
                        timeout=self._core.remaining(deadline),
                        metadata=call_metadata,
                    )
                except grpc.RpcError as exc:
                    raise error_from_rpc_error(exc) from exc
            except UnavailableError:
                delay = self._core.retry_delay(attempt, deadline)
                if delay is None or self._closed:
                    raise
            await asyncio.sleep(delay)
            attempt += 1

    # --- checkpoints --------------------------------------------------------------------

    async def put_checkpoint(
        self,
        checkpoint: Checkpoint,
        *,
        request_id: str | None = None,
        view: CheckpointView = "full",
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Checkpoint:
        """Store a checkpoint and return the stored row (C1, C2).

        An empty ``checkpoint_id`` is filled with a UUID before sending. A checkpoint_id that
        is already stored raises :class:`~checkpointd_client.AlreadyExistsError`. With
        ``view="basic"`` the reply leaves out the JSON payloads (the caller has them): the
        returned row's ``state_snapshot``, ``node_input``, ``node_output``,
        ``iteration_counters`` and ``interrupt_context`` are empty.
        """
        stored = await self._put_checkpoint_message(checkpoint, request_id, view, timeout, metadata)
        return _convert.checkpoint_from_proto(stored, payloads=view == "full")

    async def _put_checkpoint_message(
        self,
        checkpoint: Checkpoint,
        request_id: str | None,
        view: CheckpointView,
        timeout: float | None,
        metadata: Metadata,
    ) -> checkpoint_pb2.Checkpoint:
        """:meth:`put_checkpoint`'s call, returning the stored row as its message, for a caller
        that reads a field or two of it (the fastaiagent adapter: the id and created_at)."""
        request = self._core.put_checkpoint(checkpoint, request_id, view)
        response = await self._invoke(
            self._writes.route(self._checkpoints.PutCheckpoint), request, timeout, metadata
        )
        return response.checkpoint

    async def get_checkpoint(
        self,
        execution_id: str,
        checkpoint_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Checkpoint:
        """Return one checkpoint by id; :class:`~checkpointd_client.NotFoundError` if missing."""
        request = self._core.get_checkpoint(execution_id, checkpoint_id)
        response = await self._invoke(self._checkpoints.GetCheckpoint, request, timeout, metadata)
        return _convert.checkpoint_from_proto(response.checkpoint)

    async def get_latest_checkpoint(
        self,
        execution_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Checkpoint:
        """Return the checkpoint written last (C3); NotFoundError when there is none."""
        request = self._core.get_latest_checkpoint(execution_id)
        response = await self._invoke(
            self._checkpoints.GetLatestCheckpoint, request, timeout, metadata
        )
        return _convert.checkpoint_from_proto(response.checkpoint)

    async def list_checkpoints(
        self,
        execution_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        descending: bool = False,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> CheckpointPage:
        """Return one page of an execution's history in write order (C4).

        ``page_size`` 0 means the server's default (100); the server caps it at 1000.
        """
        request = self._core.list_checkpoints(execution_id, page_size, page_token, descending)
        response = await self._invoke(self._checkpoints.ListCheckpoints, request, timeout, metadata)
        return _convert.checkpoint_page(response)

    async def iter_checkpoints(
        self,
        execution_id: str,
        *,
        descending: bool = False,
        page_size: int = 0,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> AsyncIterator[Checkpoint]:
        """Yield an execution's whole history, page by page; ``timeout`` applies per page."""
        token = ""
        while True:
            page = await self.list_checkpoints(
                execution_id,
                page_size=page_size,
                page_token=token,
                descending=descending,
                timeout=timeout,
                metadata=metadata,
            )
            for checkpoint in page.checkpoints:
                yield checkpoint
            token = page.next_page_token
            if not token:
                return

    async def delete_execution(
        self,
        execution_id: str,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> DeleteExecutionResult:
        """Delete an execution's checkpoints, pending interrupt and idempotency rows (C6)."""
        request = self._core.delete_execution(execution_id, request_id)
        response = await self._invoke(self._checkpoints.DeleteExecution, request, timeout, metadata)
        return _convert.delete_result(response)

    async def list_executions(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        chain_name: str | None = None,
        status: str | None = None,
        active_since: datetime | None = None,
        framework: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> ExecutionPage:
        """Return one page of the namespace's executions (fastaiagent runs and LangGraph
        threads), newest activity first, optionally filtered by chain name (a thread's graph
        name), status (``"running"``, ``"paused"``, ``"ended"``, ``"failed"``), last
        activity at or after ``active_since`` and ``framework`` (``"fastaiagent"``,
        ``"langgraph"``) (C11, C12)."""
        request = self._core.list_executions(
            page_size, page_token, chain_name, status, active_since, framework
        )
        response = await self._invoke(self._checkpoints.ListExecutions, request, timeout, metadata)
        return _convert.execution_page(response)

    async def list_namespaces(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> NamespacePage:
        """Return one page of the names of the namespaces that hold a run (a fastaiagent run,
        a pending interrupt or a LangGraph thread), in name order: with authentication on,
        only those the client's token is granted (N2). The client's own namespace plays no
        part."""
        request = self._core.list_namespaces(page_size, page_token)
        response = await self._invoke(self._checkpoints.ListNamespaces, request, timeout, metadata)
        return _convert.namespace_page(response)

    async def get_execution(
        self,
        execution_id: str,
        *,
        framework: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> ExecutionDetail:
        """Return an execution's summary, pending interrupts, newest decision and idempotency
        keys (C11, C12): the fastaiagent run of that id, else the LangGraph thread, unless
        ``framework`` names one. NotFoundError when it has no checkpoint."""
        request = self._core.get_execution(execution_id, framework)
        response = await self._invoke(self._checkpoints.GetExecution, request, timeout, metadata)
        return _convert.execution_detail(response)

    async def prune(
        self,
        older_than: timedelta,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PruneResult:
        """Delete completed/failed checkpoints and idempotency rows older than the cutoff (C7)."""
        request = self._core.prune(older_than, request_id)
        response = await self._invoke(
            self._checkpoints.PruneCheckpoints, request, timeout, metadata
        )
        return _convert.prune_result(response)

    async def get_resume_point(
        self,
        execution_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Checkpoint:
        """Return the checkpoint a resume re-enters at (C8).

        FailedPreconditionError when the run already finished; NotFoundError when empty.
        """
        request = self._core.get_resume_point(execution_id)
        response = await self._invoke(self._checkpoints.GetResumePoint, request, timeout, metadata)
        return _convert.checkpoint_from_proto(response.checkpoint)

    async def get_fork_point(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Checkpoint:
        """Return the checkpoint a fork branches from (C8): the named one, else the newest."""
        request = self._core.get_fork_point(execution_id, checkpoint_id)
        response = await self._invoke(self._checkpoints.GetForkPoint, request, timeout, metadata)
        return _convert.checkpoint_from_proto(response.checkpoint)

    # --- interrupts ---------------------------------------------------------------------

    async def record_interrupt(
        self,
        checkpoint: Checkpoint,
        pending: PendingInterrupt,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> RecordInterruptResult:
        """Write an interrupted checkpoint and its pending row in one transaction (I1, I2).

        An empty ``checkpoint_id`` is filled with a UUID before sending.
        """
        request = self._core.record_interrupt(checkpoint, pending, request_id)
        response = await self._invoke(
            self._writes.route(self._interrupts.RecordInterrupt), request, timeout, metadata
        )
        return _convert.record_result(response)

    async def claim_interrupt(
        self,
        execution_id: str,
        *,
        claim_token: str | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterrupt:
        """Claim an execution's pending interrupt, for exactly one caller (I3).

        ``claim_token`` defaults to a fresh UUID, reused on retries. The losers get
        :class:`~checkpointd_client.NotFoundError`.
        """
        request = self._core.claim_interrupt(execution_id, claim_token, request_id)
        response = await self._invoke(
            self._writes.route(self._interrupts.ClaimInterrupt), request, timeout, metadata
        )
        return _convert.pending_from_proto(response.pending)

    async def submit_decision(
        self,
        execution_id: str,
        *,
        approved: bool | None = None,
        decided_by: str,
        resume_metadata: dict[str, Any] | None = None,
        reason: str | None = None,
        interrupt_id: str = "",
        response: DecisionResponse | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterrupt:
        """Decide an execution's pending interrupt: approve or reject it (K1).

        ``interrupt_id`` names one pause of a graph thread (``PendingInterrupt.interrupt_id``,
        G8); empty decides the one pause of a fastaiagent run.

        ``resume_metadata`` reaches the run as fastaiagent's ``Resume.metadata``. A pause
        takes one decision: a later one raises
        :class:`~checkpointd_client.FailedPreconditionError` with reason ``ALREADY_DECIDED``,
        naming the winner in its metadata; the request id is reused on retries, so a lost
        reply is answered with the first answer. Returns the pending interrupt with its
        ``decision``.

        ``response`` carries the typed answer a graph pause asks for (K3): an
        :class:`~checkpointd_client.ActionDecision` per action of a LangChain
        ``HumanInTheLoopMiddleware`` pause (approve, edit, reject, respond), or
        :meth:`DecisionResponse.resume(value) <checkpointd_client.DecisionResponse.resume>` for
        any other. Without ``approved`` the verdict follows the response (not approved exactly
        when an action is rejected). One the pause does not take raises
        :class:`~checkpointd_client.InvalidArgumentError` and changes nothing. A decision whose
        resume failed is replaced by the next one.
        """
        request = self._core.submit_decision(
            execution_id,
            approved,
            resume_metadata,
            decided_by,
            reason,
            request_id,
            interrupt_id,
            response,
        )
        answer = await self._invoke(self._interrupts.SubmitDecision, request, timeout, metadata)
        return _convert.pending_from_proto(answer.pending)

    async def lease_decision(
        self,
        execution_id: str,
        checkpoint_id: str,
        *,
        lease_token: str,
        lease_seconds: int = 0,
        interrupt_id: str = "",
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterrupt:
        """Take or renew the lease on the decision of a pause, to carry it out (K2).

        The same ``lease_token`` renews; a lease that ran out can be taken by another token.
        Raises :class:`~checkpointd_client.FailedPreconditionError` (``LEASE_HELD``,
        ``DECISION_CLOSED``) or :class:`~checkpointd_client.NotFoundError` (``NO_DECISION``).
        """
        request = self._core.lease_decision(
            execution_id, checkpoint_id, lease_token, lease_seconds, request_id, interrupt_id
        )
        response = await self._invoke(self._interrupts.LeaseDecision, request, timeout, metadata)
        return _convert.pending_from_proto(response.pending)

    async def report_resume(
        self,
        execution_id: str,
        checkpoint_id: str,
        *,
        lease_token: str,
        error: str | None = None,
        interrupt_id: str = "",
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterrupt:
        """Report a leased decision carried out (``error`` None) or failed (K2)."""
        request = self._core.report_resume(
            execution_id, checkpoint_id, lease_token, error, request_id, interrupt_id
        )
        response = await self._invoke(self._interrupts.ReportResume, request, timeout, metadata)
        return _convert.pending_from_proto(response.pending)

    async def list_decisions(
        self,
        *,
        open_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterruptPage:
        """Return one page of decided pauses, oldest first, each with its ``decision``; with
        ``open_only`` only those no worker has reported on yet (K2)."""
        request = self._core.list_decisions(page_size, page_token, open_only)
        response = await self._invoke(self._interrupts.ListDecisions, request, timeout, metadata)
        return _convert.decision_page(response)

    async def list_pending_interrupts(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        chain_name: str | None = None,
        reason: str | None = None,
        agent_path_prefix: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> PendingInterruptPage:
        """Return one page of pending interrupts, newest first, optionally filtered (I4)."""
        request = self._core.list_pending_interrupts(
            page_size, page_token, chain_name, reason, agent_path_prefix
        )
        response = await self._invoke(
            self._interrupts.ListPendingInterrupts, request, timeout, metadata
        )
        return _convert.pending_page(response)

    async def iter_pending_interrupts(
        self,
        *,
        page_size: int = 0,
        chain_name: str | None = None,
        reason: str | None = None,
        agent_path_prefix: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> AsyncIterator[PendingInterrupt]:
        """Yield every pending interrupt, newest first, page by page; ``timeout`` is per page."""
        token = ""
        while True:
            page = await self.list_pending_interrupts(
                page_size=page_size,
                page_token=token,
                chain_name=chain_name,
                reason=reason,
                agent_path_prefix=agent_path_prefix,
                timeout=timeout,
                metadata=metadata,
            )
            for pending in page.pending_interrupts:
                yield pending
            token = page.next_page_token
            if not token:
                return

    def watch_interrupts(
        self,
        *,
        after_cursor: int = 0,
        chain_name: str | None = None,
        reason: str | None = None,
        agent_path_prefix: str | None = None,
        reconnect: bool = True,
        timeout: float | None = None,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        metadata: Metadata = (),
    ) -> AsyncInterruptWatch:
        """Watch the namespace's pending interrupts: a snapshot, then every change (I5, P4).

        Returns a closeable async iterator of :data:`~checkpointd_client.WatchItem`. With
        ``after_cursor`` 0 it starts with a snapshot (:class:`~checkpointd_client.SnapshotItem`
        per pending interrupt, then :class:`~checkpointd_client.SnapshotComplete`); with the
        cursor of the last event processed it continues after it, without a snapshot. The
        filters match as in :meth:`list_pending_interrupts`.

        With ``reconnect`` (the default) a broken stream is resumed from the last cursor
        delivered, after the client's retry backoff, for as long as the watch is open; an
        expired cursor (OUT_OF_RANGE) leads to a new snapshot whose items are flagged
        ``resnapshot``. Without it the first error is raised. ``timeout`` bounds the whole
        watch, reconnects included (``None``, the default: no bound; the client's default
        timeout does not apply to a watch).

        The server sends progress whenever ``progress_interval`` seconds (1 to 300) pass
        without a message (I6); a stream silent for three times that is taken for dead and
        reconnected from the last cursor (P6).
        """
        state = WatchState(
            self._core,
            after_cursor=after_cursor,
            chain_name=chain_name,
            reason=reason,
            agent_path_prefix=agent_path_prefix,
            reconnect=reconnect,
            timeout=timeout,
            progress_interval=progress_interval,
        )
        return AsyncInterruptWatch(
            lambda: self._interrupts.WatchInterrupts,
            state,
            self._core.call_metadata(metadata),
            lambda: self._closed,
        )

    # --- idempotency --------------------------------------------------------------------

    async def put_idempotent(
        self,
        execution_id: str,
        key: str,
        value: Any,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> None:
        """Cache ``value`` (any JSON value, ``None`` included) for (execution_id, key) (D1)."""
        request = self._core.put_idempotent(execution_id, key, value, request_id)
        await self._invoke(
            self._writes.route(self._idempotency.PutIdempotencyResult), request, timeout, metadata
        )

    async def get_idempotent(
        self,
        execution_id: str,
        key: str,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> IdempotencyResult:
        """Look up the cached result for (execution_id, key) (D1)."""
        request = self._core.get_idempotent(execution_id, key)
        response = await self._invoke(
            self._idempotency.GetIdempotencyResult, request, timeout, metadata
        )
        return _convert.idempotency_result(response)

    # --- replication outbox -------------------------------------------------------------

    async def list_unsynced_checkpoints(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> CheckpointPage:
        """Return one page of the namespace's unsettled checkpoints, oldest first (R1).

        Listing changes nothing: a row stays listed until it is marked synced or quarantined.
        ``page_size`` 0 means the server's default (100); the server caps it at 1000.
        """
        request = self._core.list_unsynced_checkpoints(page_size, page_token)
        response = await self._invoke(
            self._replication.ListUnsyncedCheckpoints, request, timeout, metadata
        )
        return _convert.checkpoint_page(response)

    async def mark_checkpoints_synced(
        self,
        checkpoint_ids: Sequence[str],
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> list[str]:
        """Settle checkpoints as synced; return the ids this call settled (R2).

        Unknown and already-settled ids are left alone, so a retry is harmless.
        """
        request = self._core.mark_checkpoints_synced(checkpoint_ids)
        response = await self._invoke(
            self._replication.MarkCheckpointsSynced, request, timeout, metadata
        )
        return list(response.settled_checkpoint_ids)

    async def quarantine_checkpoints(
        self,
        reasons: Mapping[str, str],
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> list[str]:
        """Settle checkpoints as quarantined, ``{checkpoint_id: reason}``; return the ids this
        call settled (R3). A synced row stays synced; a quarantined one takes the new reason.
        """
        request = self._core.quarantine_checkpoints(reasons)
        response = await self._invoke(
            self._replication.QuarantineCheckpoints, request, timeout, metadata
        )
        return list(response.settled_checkpoint_ids)

    # --- graphs ------------------------------------------------------------------------

    async def call_graph(
        self,
        method: str,
        request: Any,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> Any:
        """Send one GraphService request (``method`` names the RPC, ``request`` is its
        request message) with this client's deadline, retries and error mapping, and return
        the response message. The LangGraph savers (:mod:`checkpointd_client.langgraph`)
        speak through it; every mutating request carries a request id, so a retry is safe.
        ``PutGraphCheckpoint`` and ``PutGraphWrites`` go on the Write stream where the
        server takes them there (S4), each answered as its unary call.
        """
        rpc = getattr(self._connect().graph, method)
        if method in _STREAMED_GRAPH_METHODS:
            rpc = self._writes.route(rpc)
        return await self._invoke(rpc, request, timeout, metadata)

    async def apply_graph_retention(
        self,
        *,
        idle_for: timedelta | None = None,
        keep_newest: int | None = None,
        dry_run: bool = False,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Metadata = (),
    ) -> GraphRetentionResult:
        """Apply graph retention rules once in this namespace (G12, G13): delete the graph threads
        idle (by the server's clock) longer than ``idle_for``, and keep only the
        ``keep_newest`` newest checkpoints of each namespace of each thread; a thread paused
        on an interrupt is kept whole. At least one rule is required (InvalidArgumentError
        otherwise). With ``dry_run`` nothing changes and the counts say what would go.
        """
        request = self._core.apply_graph_retention(idle_for, keep_newest, dry_run, request_id)
        response = await self._invoke(
            self._connect().graph.ApplyGraphRetention, request, timeout, metadata
        )
        return _convert.graph_retention_result(response)
