"""GraphService: graph checkpoints (LangGraph's saver surface), proto in, graph store out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

import grpc

from checkpointd import validation as v
from checkpointd.errors import InvalidField
from checkpointd.graph_paging import decode_position, encode_position
from checkpointd.servicers.common import ServiceDeps, shielded
from checkpointd.store.graph import (
    ChannelValue,
    GraphCheckpoint,
    GraphListQuery,
    GraphPosition,
    GraphStore,
    GraphTuple,
    GraphWrite,
    PruneStrategy,
    TypedValue,
)
from checkpointd_client.v1 import graph_service_pb2 as svc
from checkpointd_client.v1 import graph_service_pb2_grpc as svc_grpc

__all__ = ["GraphServicer"]

THREAD_ID_MAX: Final = v.EXECUTION_ID_MAX
CHECKPOINT_NS_MAX: Final = 1024
NAME_MAX: Final = 1024
TYPE_MAX: Final = 64
#: The most run ids or thread ids one call names.
MAX_IDS: Final = 1000

_STRATEGIES: Final = {
    svc.GRAPH_PRUNE_STRATEGY_KEEP_LATEST: PruneStrategy.KEEP_LATEST,
    svc.GRAPH_PRUNE_STRATEGY_DELETE: PruneStrategy.DELETE,
}


# --- proto -> domain ---------------------------------------------------------------------


def _typed(field: str, value: svc.TypedValue) -> TypedValue:
    if not value.type:
        raise InvalidField(f"{field}.type", "is required")
    return TypedValue(v.identifier(f"{field}.type", value.type, TYPE_MAX), value.data)


def _metadata(field: str, raw: str) -> tuple[str, str]:
    """The metadata JSON object to store, and its ``run_id`` when that is a string."""
    text = v.json_object(field, raw)
    # Postgres's jsonb holds no NUL character (LangGraph strips them from metadata too).
    if "\\u0000" in text:
        raise InvalidField(field, "must not contain the NUL character (\\u0000)")
    run_id = json.loads(text).get("run_id")
    return text, run_id if isinstance(run_id, str) else ""


def _filter(field: str, raw: str) -> str:
    if not raw:
        return ""
    text = v.json_object(field, raw)
    return "" if text == "{}" else text


def _ids(field: str, values: Sequence[str], max_len: int) -> list[str]:
    if len(values) > MAX_IDS:
        raise InvalidField(field, f"must name at most {MAX_IDS} ids (got {len(values)})")
    return [v.identifier(field, value, max_len) for value in values]


def _checkpoint(message: svc.GraphCheckpoint) -> GraphCheckpoint:
    metadata_json, run_id = _metadata("checkpoint.metadata_json", message.metadata_json)
    if not message.HasField("checkpoint"):
        raise InvalidField("checkpoint.checkpoint", "is required")
    versions = {
        v.text("checkpoint.channel_versions", channel, NAME_MAX): v.identifier(
            "checkpoint.channel_versions", version, NAME_MAX
        )
        for channel, version in message.channel_versions.items()
    }
    return GraphCheckpoint(
        thread_id=v.identifier("checkpoint.thread_id", message.thread_id, THREAD_ID_MAX),
        checkpoint_ns=v.text("checkpoint.checkpoint_ns", message.checkpoint_ns, CHECKPOINT_NS_MAX),
        checkpoint_id=v.identifier(
            "checkpoint.checkpoint_id", message.checkpoint_id, v.CHECKPOINT_ID_MAX
        ),
        parent_checkpoint_id=v.optional_identifier(
            "checkpoint.parent_checkpoint_id", message.parent_checkpoint_id, v.CHECKPOINT_ID_MAX
        ),
        body=_typed("checkpoint.checkpoint", message.checkpoint),
        metadata_json=metadata_json,
        channel_versions=versions,
        run_id=run_id,
    )


def _channel_value(field: str, message: svc.GraphChannelValue) -> ChannelValue:
    if not message.HasField("value"):
        raise InvalidField(f"{field}.value", "is required")
    return ChannelValue(
        channel=v.identifier(f"{field}.channel", message.channel, NAME_MAX),
        version=v.identifier(f"{field}.version", message.version, NAME_MAX),
        value=_typed(f"{field}.value", message.value),
    )


# --- domain -> proto ---------------------------------------------------------------------


def _typed_out(value: TypedValue) -> svc.TypedValue:
    return svc.TypedValue(type=value.type, data=value.data)


def _tuple_out(found: GraphTuple) -> svc.GraphCheckpointTuple:
    cp = found.checkpoint
    return svc.GraphCheckpointTuple(
        checkpoint=svc.GraphCheckpoint(
            thread_id=cp.thread_id,
            checkpoint_ns=cp.checkpoint_ns,
            checkpoint_id=cp.checkpoint_id,
            parent_checkpoint_id=cp.parent_checkpoint_id,
            checkpoint=_typed_out(cp.body),
            metadata_json=cp.metadata_json,
            channel_versions=cp.channel_versions,
        ),
        channel_values=[
            svc.GraphChannelValue(
                channel=value.channel, version=value.version, value=_typed_out(value.value)
            )
            for value in found.channel_values
        ],
        pending_writes=[
            svc.GraphWrite(
                task_id=w.task_id,
                task_path=w.task_path,
                idx=w.idx,
                channel=w.channel,
                value=_typed_out(w.value),
            )
            for w in found.pending_writes
        ],
    )


class GraphServicer(svc_grpc.GraphServiceServicer):
    """Serves checkpointd.v1.GraphService over a GraphStore."""

    def __init__(self, deps: ServiceDeps, graph: GraphStore) -> None:
        self._deps = deps
        self._graph = graph

    async def PutGraphCheckpoint(
        self,
        request: svc.PutGraphCheckpointRequest,
        context: grpc.aio.ServicerContext[
            svc.PutGraphCheckpointRequest, svc.PutGraphCheckpointResponse
        ],
    ) -> svc.PutGraphCheckpointResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        if not request.HasField("checkpoint"):
            raise InvalidField("checkpoint", "is required")
        checkpoint = _checkpoint(request.checkpoint)
        values = [
            _channel_value(f"new_values[{i}]", value) for i, value in enumerate(request.new_values)
        ]
        for value in values:
            if checkpoint.channel_versions.get(value.channel) != value.version:
                raise InvalidField(
                    "new_values",
                    "must hold only channels at the version the checkpoint's channel_versions "
                    "names",
                    got=value.channel,
                )
        await shielded(
            self._graph.put_checkpoint(
                namespace, request_id, checkpoint, values, self._deps.clock()
            )
        )
        return svc.PutGraphCheckpointResponse()

    async def PutGraphWrites(
        self,
        request: svc.PutGraphWritesRequest,
        context: grpc.aio.ServicerContext[svc.PutGraphWritesRequest, svc.PutGraphWritesResponse],
    ) -> svc.PutGraphWritesResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
        checkpoint_ns = v.text("checkpoint_ns", request.checkpoint_ns, CHECKPOINT_NS_MAX)
        checkpoint_id = v.identifier("checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX)
        task_id = v.identifier("task_id", request.task_id, NAME_MAX)
        task_path = v.text("task_path", request.task_path, NAME_MAX)
        writes = []
        seen: set[int] = set()
        for i, write in enumerate(request.writes):
            if write.idx in seen:
                raise InvalidField(f"writes[{i}].idx", "must be unique within the request")
            seen.add(write.idx)
            if not write.HasField("value"):
                raise InvalidField(f"writes[{i}].value", "is required")
            writes.append(
                GraphWrite(
                    task_id=task_id,
                    task_path=task_path,
                    idx=write.idx,
                    channel=v.identifier(f"writes[{i}].channel", write.channel, NAME_MAX),
                    value=_typed(f"writes[{i}].value", write.value),
                )
            )
        await shielded(
            self._graph.put_writes(
                namespace,
                request_id,
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                writes,
                self._deps.clock(),
            )
        )
        return svc.PutGraphWritesResponse()

    async def GetGraphCheckpoint(
        self,
        request: svc.GetGraphCheckpointRequest,
        context: grpc.aio.ServicerContext[
            svc.GetGraphCheckpointRequest, svc.GetGraphCheckpointResponse
        ],
    ) -> svc.GetGraphCheckpointResponse:
        namespace = v.namespace(request.namespace)
        thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
        checkpoint_ns = v.text("checkpoint_ns", request.checkpoint_ns, CHECKPOINT_NS_MAX)
        checkpoint_id = v.optional_identifier(
            "checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX
        )
        found = await shielded(
            self._graph.get_tuple(namespace, thread_id, checkpoint_ns, checkpoint_id)
        )
        if found is None:
            return svc.GetGraphCheckpointResponse()
        return svc.GetGraphCheckpointResponse(checkpoint_tuple=_tuple_out(found))

    async def ListGraphCheckpoints(
        self,
        request: svc.ListGraphCheckpointsRequest,
        context: grpc.aio.ServicerContext[
            svc.ListGraphCheckpointsRequest, svc.ListGraphCheckpointsResponse
        ],
    ) -> svc.ListGraphCheckpointsResponse:
        namespace = v.namespace(request.namespace)
        query = GraphListQuery(
            thread_id=v.optional_identifier("thread_id", request.thread_id, THREAD_ID_MAX),
            checkpoint_ns=(
                v.text("checkpoint_ns", request.checkpoint_ns, CHECKPOINT_NS_MAX)
                if request.HasField("checkpoint_ns")
                else None
            ),
            checkpoint_id=v.optional_identifier(
                "checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX
            ),
            metadata_filter_json=_filter("metadata_filter_json", request.metadata_filter_json),
            before_checkpoint_id=v.optional_identifier(
                "before_checkpoint_id", request.before_checkpoint_id, v.CHECKPOINT_ID_MAX
            ),
        )
        limit = v.page_size("page_size", request.page_size)
        scope = (
            "graph",
            namespace,
            query.thread_id,
            query.checkpoint_ns,
            query.checkpoint_id,
            query.metadata_filter_json,
            query.before_checkpoint_id,
        )
        after = decode_position(request.page_token, scope)
        found = await shielded(self._graph.list_tuples(namespace, query, after=after, limit=limit))
        response = svc.ListGraphCheckpointsResponse()
        budget = self._deps.max_message_bytes - 16 * 1024  # room for the token and framing
        for row in found:
            message = _tuple_out(row)
            budget -= message.ByteSize() + 8  # field tag and length prefix
            if budget < 0 and response.checkpoint_tuples:
                break  # the page is full by size; the next one starts at this row
            response.checkpoint_tuples.append(message)
        if response.checkpoint_tuples and (
            len(found) == limit or len(response.checkpoint_tuples) < len(found)
        ):
            last = response.checkpoint_tuples[-1].checkpoint
            position = GraphPosition(last.checkpoint_id, last.thread_id, last.checkpoint_ns)
            response.next_page_token = encode_position(position, scope)
        return response

    async def DeleteGraphThread(
        self,
        request: svc.DeleteGraphThreadRequest,
        context: grpc.aio.ServicerContext[
            svc.DeleteGraphThreadRequest, svc.DeleteGraphThreadResponse
        ],
    ) -> svc.DeleteGraphThreadResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
        deleted = await shielded(
            self._graph.delete_thread(namespace, request_id, thread_id, self._deps.clock())
        )
        return svc.DeleteGraphThreadResponse(checkpoints_deleted=deleted)

    async def DeleteGraphRuns(
        self,
        request: svc.DeleteGraphRunsRequest,
        context: grpc.aio.ServicerContext[svc.DeleteGraphRunsRequest, svc.DeleteGraphRunsResponse],
    ) -> svc.DeleteGraphRunsResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        run_ids = _ids("run_ids", request.run_ids, NAME_MAX)
        deleted = await shielded(
            self._graph.delete_runs(namespace, request_id, run_ids, self._deps.clock())
        )
        return svc.DeleteGraphRunsResponse(checkpoints_deleted=deleted)

    async def CopyGraphThread(
        self,
        request: svc.CopyGraphThreadRequest,
        context: grpc.aio.ServicerContext[svc.CopyGraphThreadRequest, svc.CopyGraphThreadResponse],
    ) -> svc.CopyGraphThreadResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        source = v.identifier("source_thread_id", request.source_thread_id, THREAD_ID_MAX)
        target = v.identifier("target_thread_id", request.target_thread_id, THREAD_ID_MAX)
        if source == target:
            raise InvalidField("target_thread_id", "must differ from source_thread_id")
        copied = await shielded(
            self._graph.copy_thread(namespace, request_id, source, target, self._deps.clock())
        )
        return svc.CopyGraphThreadResponse(checkpoints_copied=copied)

    async def PruneGraphThreads(
        self,
        request: svc.PruneGraphThreadsRequest,
        context: grpc.aio.ServicerContext[
            svc.PruneGraphThreadsRequest, svc.PruneGraphThreadsResponse
        ],
    ) -> svc.PruneGraphThreadsResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        thread_ids = _ids("thread_ids", request.thread_ids, THREAD_ID_MAX)
        strategy = _STRATEGIES.get(request.strategy)
        if strategy is None:
            raise InvalidField(
                "strategy",
                "must be GRAPH_PRUNE_STRATEGY_KEEP_LATEST or GRAPH_PRUNE_STRATEGY_DELETE",
            )
        deleted = await shielded(
            self._graph.prune(namespace, request_id, thread_ids, strategy, self._deps.clock())
        )
        return svc.PruneGraphThreadsResponse(checkpoints_deleted=deleted)
