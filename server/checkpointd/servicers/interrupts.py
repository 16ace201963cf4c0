"""InterruptService: record a pause, claim it exactly once, list what is pending, watch it."""

from __future__ import annotations

import asyncio
from dataclasses import astuple

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

# What grpc.aio raises from a write the transport refused: the call is gone.
from grpc._cython.cygrpc import ExecuteBatchError  # type: ignore[import-not-found]

from checkpointd import validation as v
from checkpointd.config import (
    WATCH_PROGRESS_INTERVAL_MAX_SECONDS,
    WATCH_PROGRESS_INTERVAL_MIN_SECONDS,
)
from checkpointd.convert import (
    checkpoint_from_proto,
    checkpoint_to_proto,
    pending_from_proto,
    pending_to_proto,
    timestamp_to_proto,
)
from checkpointd.domain import CheckpointStatus, EventKind, InterruptEventRecord, PendingFilter
from checkpointd.edge import abort_with_error
from checkpointd.errors import InvalidField, NoPendingInterrupt
from checkpointd.paging import decode_token
from checkpointd.servicers.common import shielded
from checkpointd.servicers.decisions import DecisionMethods
from checkpointd.servicers.scope import WriteKey, namespaced, retriable
from checkpointd.watch import EventItem, SnapshotDone, SnapshotRow, WatchItem
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc

__all__ = ["InterruptServicer"]

_WATCH_METHOD = "/checkpointd.v1.InterruptService/WatchInterrupts"
_EVENT_TYPES = {
    EventKind.ADDED: svc.INTERRUPT_EVENT_TYPE_ADDED,
    EventKind.CLAIMED: svc.INTERRUPT_EVENT_TYPE_CLAIMED,
    EventKind.REMOVED: svc.INTERRUPT_EVENT_TYPE_REMOVED,
    EventKind.DECIDED: svc.INTERRUPT_EVENT_TYPE_DECIDED,
    EventKind.RESUMED: svc.INTERRUPT_EVENT_TYPE_RESUMED,
    EventKind.RESUME_FAILED: svc.INTERRUPT_EVENT_TYPE_RESUME_FAILED,
}


def _pending_filter(
    request: svc.ListPendingInterruptsRequest | svc.WatchInterruptsRequest,
) -> PendingFilter:
    """The validated filters of a listing or a watch."""
    return PendingFilter(
        chain_name=v.optional_text(
            "chain_name",
            request.chain_name if request.HasField("chain_name") else None,
            v.CHAIN_NAME_MAX,
        ),
        reason=v.optional_text(
            "reason", request.reason if request.HasField("reason") else None, v.REASON_MAX
        ),
        agent_path_prefix=v.optional_text(
            "agent_path_prefix",
            request.agent_path_prefix if request.HasField("agent_path_prefix") else None,
            v.AGENT_PATH_MAX,
        ),
    )


def _event_to_proto(event: InterruptEventRecord) -> svc.WatchInterruptsResponse:
    event_time = Timestamp()
    event_time.FromDatetime(event.event_at)
    return svc.WatchInterruptsResponse(
        event=svc.InterruptEvent(
            cursor=event.cursor,
            type=_EVENT_TYPES[event.kind],
            pending=pending_to_proto(event.pending),
            event_time=event_time,
        )
    )


def _progress_interval(request: svc.WatchInterruptsRequest) -> float | None:
    """The stream's progress interval in seconds (I6): None for the server's, capped at the
    most; shorter than the least or negative is refused."""
    if not request.HasField("progress_interval"):
        return None
    interval = request.progress_interval
    if interval.seconds < 0 or interval.nanos < 0:
        raise InvalidField("progress_interval", "must not be negative")
    seconds = interval.seconds + interval.nanos / 1e9
    if seconds == 0:
        return None
    if seconds < WATCH_PROGRESS_INTERVAL_MIN_SECONDS:
        raise InvalidField(
            "progress_interval",
            f"must be at least {WATCH_PROGRESS_INTERVAL_MIN_SECONDS:g} s (or 0 for the server's)",
        )
    return min(seconds, WATCH_PROGRESS_INTERVAL_MAX_SECONDS)


def _watch_response(item: WatchItem) -> svc.WatchInterruptsResponse:
    if isinstance(item, EventItem):
        # Built once per event, whatever the number of streams it goes to.
        if not isinstance(item.rendered, svc.WatchInterruptsResponse):
            item.rendered = _event_to_proto(item.event)
        return item.rendered
    if isinstance(item, SnapshotRow):
        return svc.WatchInterruptsResponse(snapshot=pending_to_proto(item.pending))
    at = None if item.event_time is None else timestamp_to_proto(item.event_time)
    if isinstance(item, SnapshotDone):
        return svc.WatchInterruptsResponse(
            snapshot_complete=svc.SnapshotComplete(cursor=item.cursor, event_time=at)
        )
    return svc.WatchInterruptsResponse(
        progress=svc.WatchProgress(cursor=item.cursor, event_time=at)
    )


async def _send(
    context: grpc.aio.ServicerContext[svc.WatchInterruptsRequest, svc.WatchInterruptsResponse],
    message: svc.WatchInterruptsResponse,
) -> None:
    """Write one message; a call that has ended (cancelled by its client, or its connection
    closed) raises :class:`asyncio.CancelledError`, as nothing more, not even a status, can be
    sent on it."""
    try:
        await context.write(message)
    except ExecuteBatchError:
        raise asyncio.CancelledError() from None


class InterruptServicer(DecisionMethods, svc_grpc.InterruptServiceServicer):
    """Serves checkpointd.v1.InterruptService over a Store (the decision RPCs are in
    :mod:`checkpointd.servicers.decisions`)."""

    @retriable
    async def RecordInterrupt(
        self, request: svc.RecordInterruptRequest, write: WriteKey
    ) -> svc.RecordInterruptResponse:
        v.required("checkpoint", request)
        v.required("pending", request)
        checkpoint = checkpoint_from_proto(
            request.checkpoint, field="checkpoint", now=self._deps.clock()
        )
        if checkpoint.status is not CheckpointStatus.INTERRUPTED:
            raise InvalidField("checkpoint.status", "must be CHECKPOINT_STATUS_INTERRUPTED")
        pending = pending_from_proto(request.pending, field="pending", checkpoint=checkpoint)
        result = await self._fenced(
            request,
            write,
            lambda: self._store.record_interrupt(
                checkpoint=checkpoint, pending=pending, **write.args
            ),
        )
        return svc.RecordInterruptResponse(
            checkpoint=checkpoint_to_proto(result.checkpoint),
            pending=pending_to_proto(result.pending),
            pending_created=result.pending_created,
        )

    @namespaced
    async def ClaimInterrupt(
        self, request: svc.ClaimInterruptRequest, namespace: str
    ) -> svc.ClaimInterruptResponse:
        v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        claim_token = v.optional_identifier("claim_token", request.claim_token, v.REQUEST_ID_MAX)
        claimed = await shielded(
            self._store.claim_interrupt(namespace, execution_id, claim_token, self._deps.clock())
        )
        if claimed is None:
            raise NoPendingInterrupt(execution_id)
        return svc.ClaimInterruptResponse(pending=pending_to_proto(claimed))

    @namespaced
    async def ListPendingInterrupts(
        self, request: svc.ListPendingInterruptsRequest, namespace: str
    ) -> svc.ListPendingInterruptsResponse:
        limit = v.page_size("page_size", request.page_size)
        filters = _pending_filter(request)
        # The token is bound to every filter, so a page is never resumed under others.
        scope = ("pending", namespace, *astuple(filters))
        before = decode_token(request.page_token, scope)
        # Read within the reply's size, as ListCheckpoints does (B1).
        page = await shielded(
            self._store.list_pending(
                namespace,
                before_sequence=before,
                limit=limit,
                filters=filters,
                max_bytes=self._deps.max_message_bytes,
            )
        )
        response = svc.ListPendingInterruptsResponse()
        response.next_page_token = self._fill_page(
            response.pending_interrupts, page, pending_to_proto, scope, more=page.more
        )
        return response

    # Written with context.write rather than as a generator, so that a write to a client that
    # stopped reading can be abandoned when the stream must end (see Watch.guard); the stubs
    # only know the generator form.
    async def WatchInterrupts(  # type: ignore[override]
        self,
        request: svc.WatchInterruptsRequest,
        context: grpc.aio.ServicerContext[svc.WatchInterruptsRequest, svc.WatchInterruptsResponse],
    ) -> None:
        hub = self._deps.watch_hub
        try:
            namespace = v.namespace(request.namespace)
            if request.after_cursor < 0:
                raise InvalidField("after_cursor", "must not be negative")
            filters = _pending_filter(request)
            progress_interval = _progress_interval(request)
            cursor_time = (
                v.timestamp_to_datetime("after_cursor_event_time", request.after_cursor_event_time)
                if request.HasField("after_cursor_event_time")
                else None
            )
            if hub is None:
                await context.abort(
                    grpc.StatusCode.UNIMPLEMENTED, "this server does not serve watches"
                )
            async with hub.watch(
                namespace,
                request.after_cursor,
                filters,
                peer=context.peer(),
                progress_interval=progress_interval,
                after_cursor_event_time=cursor_time,
            ) as watch:
                async for item in watch:
                    await watch.guard(_send(context, _watch_response(item)))
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            # Mapped here as the edge's error layer would map it (same status and ErrorInfo),
            # so the watch's own refusals never depend on the layers around it.
            await abort_with_error(context, exc, method=_WATCH_METHOD)
