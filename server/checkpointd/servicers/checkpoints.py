"""CheckpointService: put, get, latest, list, delete, prune, resume and fork points."""

from __future__ import annotations

from typing import Any

import grpc

from checkpointd import validation as v
from checkpointd.convert import checkpoint_from_proto, checkpoint_to_proto
from checkpointd.domain import CheckpointRecord, CheckpointStatus
from checkpointd.errors import (
    CheckpointNotFound,
    InvalidField,
    NoCheckpoints,
    RunAlreadyFinished,
    RunEndNotForkable,
)
from checkpointd.paging import decode_token
from checkpointd.servicers.common import ServiceDeps, StoreServicer, shielded
from checkpointd.servicers.executions import ExecutionRpcs
from checkpointd.servicers.scope import WriteKey, namespaced, retriable
from checkpointd_client.v1 import checkpoint_service_pb2 as svc
from checkpointd_client.v1 import checkpoint_service_pb2_grpc as svc_grpc

__all__ = ["CheckpointServicer"]

#: Whether a PutCheckpoint reply leaves out the JSON payloads, by the request's view.
_BASIC_VIEWS: dict[int, bool] = {
    svc.CHECKPOINT_VIEW_UNSPECIFIED: False,
    svc.CHECKPOINT_VIEW_FULL: False,
    svc.CHECKPOINT_VIEW_BASIC: True,
}


def _basic_view(view: int) -> bool:
    """Whether a response leaves out the JSON payloads; an unknown view is INVALID_ARGUMENT."""
    basic = _BASIC_VIEWS.get(view)
    if basic is None:
        raise InvalidField(
            "view", "must be CHECKPOINT_VIEW_BASIC, CHECKPOINT_VIEW_FULL or unspecified"
        )
    return basic


class CheckpointServicer(StoreServicer, svc_grpc.CheckpointServiceServicer):
    """Serves checkpointd.v1.CheckpointService over a Store."""

    def __init__(self, deps: ServiceDeps) -> None:
        super().__init__(deps)
        self._executions = None if deps.executions is None else ExecutionRpcs(deps.executions)

    @retriable
    async def PutCheckpoint(
        self, request: svc.PutCheckpointRequest, write: WriteKey
    ) -> svc.PutCheckpointResponse:
        v.required("checkpoint", request)
        basic = _basic_view(request.view)
        record = checkpoint_from_proto(
            request.checkpoint, field="checkpoint", now=self._deps.clock()
        )
        stored = await self._fenced(
            request, write, lambda: self._store.put_checkpoint(checkpoint=record, **write.args)
        )
        return svc.PutCheckpointResponse(checkpoint=checkpoint_to_proto(stored, basic=basic))

    @namespaced
    async def GetCheckpoint(
        self, request: svc.GetCheckpointRequest, namespace: str
    ) -> svc.GetCheckpointResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        checkpoint_id = v.identifier("checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX)
        found = await self._checkpoint(namespace, execution_id, checkpoint_id)
        return svc.GetCheckpointResponse(checkpoint=checkpoint_to_proto(found))

    @namespaced
    async def GetLatestCheckpoint(
        self, request: svc.GetLatestCheckpointRequest, namespace: str
    ) -> svc.GetLatestCheckpointResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        latest = await self._latest(namespace, execution_id)
        return svc.GetLatestCheckpointResponse(checkpoint=checkpoint_to_proto(latest))

    @namespaced
    async def ListCheckpoints(
        self, request: svc.ListCheckpointsRequest, namespace: str
    ) -> svc.ListCheckpointsResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        limit = v.page_size("page_size", request.page_size)
        scope = ("checkpoints", namespace, execution_id, request.descending)
        after = decode_token(request.page_token, scope)
        # The store reads only the rows whose stored sizes fit the reply (B1), so a page of
        # large rows never loads more than the message limit; the reply is measured again
        # as it is built, in case a row encodes larger than its stored size says.
        page = await shielded(
            self._store.list_checkpoints(
                namespace,
                execution_id,
                after_sequence=after,
                descending=request.descending,
                limit=limit,
                max_bytes=self._deps.max_message_bytes,
            )
        )
        response = svc.ListCheckpointsResponse()
        response.next_page_token = self._fill_page(
            response.checkpoints, page, checkpoint_to_proto, scope, more=page.more
        )
        return response

    @retriable
    async def DeleteExecution(
        self, request: svc.DeleteExecutionRequest, write: WriteKey
    ) -> svc.DeleteExecutionResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        result = await shielded(
            self._store.delete_execution(
                execution_id=execution_id, now=self._deps.clock(), **write.args
            )
        )
        return svc.DeleteExecutionResponse(
            checkpoints_deleted=result.checkpoints_deleted,
            pending_interrupt_deleted=result.pending_interrupt_deleted,
            idempotency_results_deleted=result.idempotency_results_deleted,
        )

    @retriable
    async def PruneCheckpoints(
        self, request: svc.PruneCheckpointsRequest, write: WriteKey
    ) -> svc.PruneCheckpointsResponse:
        v.required("older_than", request)
        older_than = v.duration_to_timedelta("older_than", request.older_than)
        now = self._deps.clock()
        try:
            cutoff = now - older_than
        except OverflowError:
            cutoff = now.replace(year=1, month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        result = await shielded(
            self._store.prune(
                cutoff=cutoff, batch_size=self._deps.prune_batch_size, now=now, **write.args
            )
        )
        return svc.PruneCheckpointsResponse(
            checkpoints_deleted=result.checkpoints_deleted,
            idempotency_results_deleted=result.idempotency_results_deleted,
        )

    @namespaced
    async def GetResumePoint(
        self, request: svc.GetResumePointRequest, namespace: str
    ) -> svc.GetResumePointResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        latest = await self._latest(namespace, execution_id)
        if latest.is_run_end:
            if latest.status is not CheckpointStatus.FAILED:
                raise RunAlreadyFinished(execution_id)
            latest = await self._latest(namespace, execution_id, step=True)
        return svc.GetResumePointResponse(checkpoint=checkpoint_to_proto(latest))

    @namespaced
    async def GetForkPoint(
        self, request: svc.GetForkPointRequest, namespace: str
    ) -> svc.GetForkPointResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        checkpoint_id = v.optional_identifier(
            "checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX
        )
        if checkpoint_id:
            picked = await self._checkpoint(namespace, execution_id, checkpoint_id)
            if picked.is_run_end:
                raise RunEndNotForkable(checkpoint_id)
        else:
            picked = await self._latest(namespace, execution_id, step=True)
        return svc.GetForkPointResponse(checkpoint=checkpoint_to_proto(picked))

    async def ListExecutions(
        self,
        request: svc.ListExecutionsRequest,
        context: grpc.aio.ServicerContext[svc.ListExecutionsRequest, svc.ListExecutionsResponse],
    ) -> svc.ListExecutionsResponse:
        rpcs = await self._execution_rpcs(context)
        return await rpcs.list_executions(request)

    async def GetExecution(
        self,
        request: svc.GetExecutionRequest,
        context: grpc.aio.ServicerContext[svc.GetExecutionRequest, svc.GetExecutionResponse],
    ) -> svc.GetExecutionResponse:
        rpcs = await self._execution_rpcs(context)
        return await rpcs.get_execution(request)

    async def ListNamespaces(
        self,
        request: svc.ListNamespacesRequest,
        context: grpc.aio.ServicerContext[svc.ListNamespacesRequest, svc.ListNamespacesResponse],
    ) -> svc.ListNamespacesResponse:
        rpcs = await self._execution_rpcs(context)
        return await rpcs.list_namespaces(request)

    async def _execution_rpcs(self, context: grpc.aio.ServicerContext[Any, Any]) -> ExecutionRpcs:
        """The execution RPCs; a server built without an executions reader ends the call
        UNIMPLEMENTED (abort raises)."""
        if self._executions is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no executions reader")
        assert self._executions is not None
        return self._executions

    async def _checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord:
        """The run's checkpoint of that id, CHECKPOINT_NOT_FOUND when it has none."""
        found = await shielded(self._store.get_checkpoint(namespace, execution_id, checkpoint_id))
        if found is None:
            raise CheckpointNotFound(execution_id, checkpoint_id)
        return found

    async def _latest(
        self, namespace: str, execution_id: str, *, step: bool = False
    ) -> CheckpointRecord:
        """The run's newest checkpoint, NO_CHECKPOINTS when it has none; with ``step``, its
        newest checkpoint of a step, passing over its run_end marker (C8)."""
        latest = await shielded(
            self._store.get_latest_checkpoint(namespace, execution_id, skip_run_end=step)
        )
        if latest is None:
            if step:
                raise NoCheckpoints(
                    execution_id, "has no checkpoint of a step (only a run-end marker, or nothing)"
                )
            raise NoCheckpoints(execution_id)
        return latest
