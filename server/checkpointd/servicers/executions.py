"""ListExecutions, GetExecution and ListNamespaces (contracts C11, C12, N2): what
CheckpointService answers about whole runs of both frameworks (fastaiagent runs and LangGraph
threads) and the namespaces that hold them, read through the store's
:class:`~checkpointd.store.executions.ExecutionReader`."""

from __future__ import annotations

from checkpointd import validation as v
from checkpointd.auth import CALL_GRANT
from checkpointd.convert import pending_to_proto, timestamp_to_proto
from checkpointd.errors import InvalidField, NoCheckpoints
from checkpointd.execution_paging import (
    decode_execution_token,
    decode_namespace_token,
    encode_execution_token,
    encode_namespace_token,
)
from checkpointd.servicers.common import shielded
from checkpointd.store.executions import (
    ExecutionQuery,
    ExecutionReader,
    ExecutionStatus,
    ExecutionSummary,
    Framework,
)
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import checkpoint_service_pb2 as svc

__all__ = ["ExecutionRpcs", "execution_to_proto"]

_STATUS_FROM_PROTO: dict[int, ExecutionStatus | None] = {
    pb.EXECUTION_STATUS_UNSPECIFIED: None,
    pb.EXECUTION_STATUS_RUNNING: ExecutionStatus.RUNNING,
    pb.EXECUTION_STATUS_PAUSED: ExecutionStatus.PAUSED,
    pb.EXECUTION_STATUS_ENDED: ExecutionStatus.ENDED,
    pb.EXECUTION_STATUS_FAILED: ExecutionStatus.FAILED,
}
_STATUS_TO_PROTO: dict[ExecutionStatus, pb.ExecutionStatus.ValueType] = {
    ExecutionStatus.RUNNING: pb.EXECUTION_STATUS_RUNNING,
    ExecutionStatus.PAUSED: pb.EXECUTION_STATUS_PAUSED,
    ExecutionStatus.ENDED: pb.EXECUTION_STATUS_ENDED,
    ExecutionStatus.FAILED: pb.EXECUTION_STATUS_FAILED,
}
_FRAMEWORK_FROM_PROTO: dict[int, Framework | None] = {
    pb.FRAMEWORK_UNSPECIFIED: None,
    pb.FRAMEWORK_FASTAIAGENT: Framework.FASTAIAGENT,
    pb.FRAMEWORK_LANGGRAPH: Framework.LANGGRAPH,
}
_FRAMEWORK_TO_PROTO: dict[Framework, pb.Framework.ValueType] = {
    Framework.FASTAIAGENT: pb.FRAMEWORK_FASTAIAGENT,
    Framework.LANGGRAPH: pb.FRAMEWORK_LANGGRAPH,
}


def _framework(value: int) -> Framework | None:
    if value not in _FRAMEWORK_FROM_PROTO:
        raise InvalidField("framework", "must be a Framework value or unspecified")
    return _FRAMEWORK_FROM_PROTO[value]


def execution_to_proto(summary: ExecutionSummary) -> pb.Execution:
    """Copy an execution summary into its message."""
    return pb.Execution(
        execution_id=summary.execution_id,
        chain_name=summary.chain_name,
        status=_STATUS_TO_PROTO[summary.status],
        checkpoint_count=summary.checkpoint_count,
        last_activity_at=timestamp_to_proto(summary.last_activity_at),
        last_checkpoint_id=summary.last_checkpoint_id,
        last_node_id=summary.last_node_id,
        last_sequence=summary.last_sequence,
        framework=_FRAMEWORK_TO_PROTO[summary.framework],
    )


def _query(request: svc.ListExecutionsRequest) -> ExecutionQuery:
    if request.status not in _STATUS_FROM_PROTO:
        raise InvalidField("status", "must be an ExecutionStatus value or unspecified")
    chain_name = (
        v.text("chain_name", request.chain_name, v.CHAIN_NAME_MAX)
        if request.HasField("chain_name")
        else None
    )
    active_since = (
        v.timestamp_to_datetime("active_since", request.active_since)
        if request.HasField("active_since")
        else None
    )
    return ExecutionQuery(
        chain_name=chain_name,
        status=_STATUS_FROM_PROTO[request.status],
        active_since=active_since,
        framework=_framework(request.framework),
    )


class ExecutionRpcs:
    """The two execution RPCs, for :class:`~checkpointd.servicers.CheckpointServicer`."""

    def __init__(self, reader: ExecutionReader) -> None:
        self._reader = reader

    async def list_executions(
        self, request: svc.ListExecutionsRequest
    ) -> svc.ListExecutionsResponse:
        """One page of the namespace's executions (fastaiagent runs and LangGraph threads),
        newest activity first."""
        namespace = v.namespace(request.namespace)
        limit = v.page_size("page_size", request.page_size)
        query = _query(request)
        scope = (
            "executions",
            namespace,
            query.chain_name,
            query.status,
            None if query.active_since is None else query.active_since.isoformat(),
            query.framework,
        )
        after = decode_execution_token(request.page_token, scope)
        page = await shielded(
            self._reader.list_executions(namespace, query, after=after, limit=limit)
        )
        response = svc.ListExecutionsResponse(executions=[execution_to_proto(s) for s in page])
        if page.more and page:
            response.next_page_token = encode_execution_token(after.after(page), scope)
        return response

    async def get_execution(self, request: svc.GetExecutionRequest) -> svc.GetExecutionResponse:
        """The execution's summary, pending interrupts, newest decision and idempotency keys."""
        namespace = v.namespace(request.namespace)
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        framework = _framework(request.framework)
        detail = await shielded(self._reader.get_execution(namespace, execution_id, framework))
        if detail is None:
            raise NoCheckpoints(execution_id)
        response = svc.GetExecutionResponse(
            execution=execution_to_proto(detail.summary),
            idempotency_keys=detail.idempotency_keys,
            idempotency_key_count=detail.idempotency_key_count,
        )
        if detail.pending is not None:
            response.pending_interrupt.CopyFrom(pending_to_proto(detail.pending))
        response.pending_interrupts.extend(pending_to_proto(p) for p in detail.pauses)
        if detail.last_decided is not None:
            response.last_decided.CopyFrom(pending_to_proto(detail.last_decided))
        return response

    async def list_namespaces(
        self, request: svc.ListNamespacesRequest
    ) -> svc.ListNamespacesResponse:
        """One page of the names of the namespaces that hold a run, in name order: those the
        call's token is granted (every one without authentication, or for a "*" token)."""
        limit = v.page_size("page_size", request.page_size)
        grant = CALL_GRANT.get()
        granted = None if grant is None else grant.namespaces
        scope = ("namespaces", None if granted is None else sorted(granted))
        after = decode_namespace_token(request.page_token, scope)
        page = await shielded(
            self._reader.list_namespaces(after=after, limit=limit, granted=granted)
        )
        response = svc.ListNamespacesResponse(namespaces=page)
        if page.more and page:
            response.next_page_token = encode_namespace_token(page[-1], scope)
        return response
