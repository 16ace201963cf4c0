"""GraphService: graph checkpoints (LangGraph's saver surface), proto in, graph store out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, astuple, replace
from datetime import timedelta
from typing import Final

from checkpointd import validation as v
from checkpointd.errors import InvalidField
from checkpointd.graph import delta
from checkpointd.graph.interrupts import GraphInterrupt
from checkpointd.graph.paging import decode_position, encode_position
from checkpointd.graph.records import (
    ChannelValue,
    GraphCheckpoint,
    GraphListQuery,
    GraphPosition,
    GraphTuple,
    GraphWrite,
    PruneStrategy,
    TypedValue,
)
from checkpointd.graph.retention import RetentionRule
from checkpointd.graph.store import GraphStore
from checkpointd.servicers.common import ServiceDeps, StoreServicer, fill_within, shielded
from checkpointd.servicers.scope import WriteKey, namespaced, retriable
from checkpointd_client.v1 import graph_service_pb2 as svc
from checkpointd_client.v1 import graph_service_pb2_grpc as svc_grpc

__all__ = ["GraphServicer"]

THREAD_ID_MAX: Final = v.EXECUTION_ID_MAX
CHECKPOINT_NS_MAX: Final = 1024
NAME_MAX: Final = 1024
TYPE_MAX: Final = 64
#: The most run ids or thread ids one call names.
MAX_IDS: Final = 1000
#: The most interrupts one PutGraphWrites describes.
MAX_INTERRUPTS: Final = 100
#: The most Send targets a PutGraphCheckpoint names.
MAX_SEND_NODES: Final = 10_000
#: The most channels one GetGraphDeltaHistory walks.
MAX_DELTA_CHANNELS: Final = 100

_STRATEGIES: Final = {
    svc.GRAPH_PRUNE_STRATEGY_KEEP_LATEST: PruneStrategy.KEEP_LATEST,
    svc.GRAPH_PRUNE_STRATEGY_DELETE: PruneStrategy.DELETE,
}


# --- proto -> domain ---------------------------------------------------------------------
# Field names are literals at each check, so tests/unit/test_invalid_field_values.py reads
# them all (docs/protocol.md lists them).


def _typed(value: svc.TypedValue, *, field: str) -> TypedValue:
    """A typed value; an unset one has no type and is refused as such."""
    return TypedValue(v.identifier(f"{field}.type", value.type, TYPE_MAX), value.data)


def _storable(text: str, *, field: str) -> dict[str, object]:
    """The JSON object ``text`` holds, refused when Postgres's jsonb could not store it: a NUL
    character (LangGraph strips them from metadata too) or an unpaired surrogate."""
    if "\\u0000" in text:
        raise InvalidField(field, "must not contain the NUL character (\\u0000)")
    parsed: dict[str, object] = json.loads(text)
    try:
        json.dumps(parsed, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidField(
            field, "must not contain unpaired surrogates (\\ud800-\\udfff)"
        ) from None
    return parsed


def _send_nodes(names: Sequence[str]) -> tuple[str, ...]:
    """The node each pending Send of a put checkpoint targets, for naming its tasks' pauses."""
    v.at_most("send_nodes", len(names), MAX_SEND_NODES, "nodes")
    return tuple(v.text("send_nodes", name, v.NODE_ID_MAX) for name in names)


def _checkpoint(message: svc.GraphCheckpoint) -> GraphCheckpoint:
    metadata_json = v.json_object("checkpoint.metadata_json", message.metadata_json)
    run_id = _storable(metadata_json, field="checkpoint.metadata_json").get("run_id")
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
        body=_typed(message.checkpoint, field="checkpoint.checkpoint"),
        metadata_json=metadata_json,
        channel_versions=versions,
        run_id=run_id if isinstance(run_id, str) else "",
    )


def _new_values(
    checkpoint: GraphCheckpoint, messages: Sequence[svc.GraphChannelValue]
) -> list[ChannelValue]:
    values = []
    for message in messages:
        channel = v.identifier("new_values.channel", message.channel, NAME_MAX)
        version = v.identifier("new_values.version", message.version, NAME_MAX)
        if checkpoint.channel_versions.get(channel) != version:
            raise InvalidField(
                "new_values.version",
                "must be the version the checkpoint's channel_versions names for the channel",
                got=version,
            )
        values.append(
            ChannelValue(channel, version, _typed(message.value, field="new_values.value"))
        )
    return values


def _writes(request: svc.PutGraphWritesRequest) -> list[GraphWrite]:
    task_id = v.identifier("task_id", request.task_id, NAME_MAX)
    task_path = v.text("task_path", request.task_path, NAME_MAX)
    writes = []
    seen: set[int] = set()
    for write in request.writes:
        if write.idx in seen:
            raise InvalidField(
                "writes.idx", "must be unique within the request", got=str(write.idx)
            )
        seen.add(write.idx)
        channel = v.identifier("writes.channel", write.channel, NAME_MAX)
        value = _typed(write.value, field="writes.value")
        writes.append(GraphWrite(task_id, task_path, write.idx, channel, value))
    return writes


def _interrupts(request: svc.PutGraphWritesRequest, thread_id: str) -> list[GraphInterrupt]:
    """The request's interrupt descriptors (G8): ids required and unique; a context that is
    not a JSON object is kept as {"value": ...}; no graph name means the thread id."""
    v.at_most("interrupts", len(request.interrupts), MAX_INTERRUPTS, "interrupts")
    described: list[GraphInterrupt] = []
    seen: set[str] = set()
    for message in request.interrupts:
        interrupt_id = v.identifier(
            "interrupts.interrupt_id", message.interrupt_id, v.INTERRUPT_ID_MAX
        )
        if interrupt_id in seen:
            raise InvalidField("interrupts.interrupt_id", "must be unique within the request")
        seen.add(interrupt_id)
        context = v.json_value("interrupts.context_json", message.context_json or "{}")
        if not context.lstrip().startswith("{"):
            context = f'{{"value":{context}}}'
        described.append(
            GraphInterrupt(
                interrupt_id=interrupt_id,
                chain_name=v.text("interrupts.graph_name", message.graph_name, v.CHAIN_NAME_MAX)
                or thread_id,
                node_id=v.text("interrupts.node", message.node, v.NODE_ID_MAX),
                reason=v.text("interrupts.reason", message.reason, v.REASON_MAX),
                context_json=context,
            )
        )
    return described


def _read_at(
    request: svc.GetGraphCheckpointRequest | svc.GetGraphDeltaHistoryRequest,
) -> tuple[str, str, str]:
    """The checkpoint a read names: its thread, its namespace in the thread, and its id
    (empty: the newest there)."""
    thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
    checkpoint_ns = v.text("checkpoint_ns", request.checkpoint_ns, CHECKPOINT_NS_MAX)
    checkpoint_id = v.optional_identifier(
        "checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX
    )
    return thread_id, checkpoint_ns, checkpoint_id


# --- domain -> proto ---------------------------------------------------------------------


def _typed_out(value: TypedValue) -> svc.TypedValue:
    return svc.TypedValue(type=value.type, data=value.data)


def _channel_value_out(value: ChannelValue) -> svc.GraphChannelValue:
    return svc.GraphChannelValue(
        channel=value.channel, version=value.version, value=_typed_out(value.value)
    )


def _write_out(write: GraphWrite) -> svc.GraphWrite:
    return svc.GraphWrite(
        task_id=write.task_id,
        task_path=write.task_path,
        idx=write.idx,
        channel=write.channel,
        value=_typed_out(write.value),
    )


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
        channel_values=[_channel_value_out(value) for value in found.channel_values],
        pending_writes=[_write_out(w) for w in found.pending_writes],
    )


def _delta_channels(names: Sequence[str]) -> list[str]:
    """The channels a GetGraphDeltaHistory walks: at least one, unique, within the bound."""
    if not names:
        raise InvalidField("channels", "must name at least one channel")
    channels = v.identifiers("channels", names, NAME_MAX, MAX_DELTA_CHANNELS, "channels")
    if len(set(channels)) != len(channels):
        raise InvalidField("channels", "must be unique within the request")
    return channels


def _ancestor_out(ancestor: delta.DeltaAncestor) -> svc.GraphDeltaAncestor:
    return svc.GraphDeltaAncestor(
        checkpoint_id=ancestor.checkpoint_id,
        writes=[_write_out(w) for w in ancestor.writes],
        seeds=[_channel_value_out(seed) for seed in ancestor.seeds],
    )


def _retention_rule(request: svc.ApplyGraphRetentionRequest) -> RetentionRule:
    """The rules of an ApplyGraphRetention request: at least one, each within its range."""
    idle: timedelta | None = None
    if request.HasField("idle_for"):
        idle = v.duration_to_timedelta("idle_for", request.idle_for)
        if idle <= timedelta(0):
            raise InvalidField("idle_for", "must be positive (leave it unset for no idle rule)")
    if request.keep_newest < 0:
        raise InvalidField(
            "keep_newest",
            "must not be negative (0: no keep rule)",
        )
    if idle is None and request.keep_newest == 0:
        raise InvalidField("idle_for", "or keep_newest is required: give at least one rule")
    return RetentionRule(idle_for=idle, keep_newest=request.keep_newest)


def _filter(raw: str) -> str:
    """The metadata filter to apply; empty (or ``{}``) filters nothing."""
    text = v.json_object("metadata_filter_json", raw)
    _storable(text, field="metadata_filter_json")
    return "" if text == "{}" else text


class GraphServicer(StoreServicer, svc_grpc.GraphServiceServicer):
    """Serves checkpointd.v1.GraphService over a GraphStore."""

    def __init__(self, deps: ServiceDeps, graph: GraphStore) -> None:
        super().__init__(deps)
        self._graph = graph

    @property
    def _reply_budget(self) -> int:
        """The bytes a paged reply's rows may fill: the message size, less room for the page
        token and framing."""
        return self._deps.max_message_bytes - 16 * 1024

    @retriable
    async def PutGraphCheckpoint(
        self, request: svc.PutGraphCheckpointRequest, write: WriteKey
    ) -> svc.PutGraphCheckpointResponse:
        v.required("checkpoint", request)
        checkpoint = replace(
            _checkpoint(request.checkpoint), send_nodes=_send_nodes(request.send_nodes)
        )
        values = _new_values(checkpoint, request.new_values)
        await self._fenced(
            request,
            write,
            lambda: self._graph.put_checkpoint(
                checkpoint=checkpoint, new_values=values, now=self._deps.clock(), **write.args
            ),
        )
        return svc.PutGraphCheckpointResponse()

    @retriable
    async def PutGraphWrites(
        self, request: svc.PutGraphWritesRequest, write: WriteKey
    ) -> svc.PutGraphWritesResponse:
        thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
        checkpoint_ns = v.text("checkpoint_ns", request.checkpoint_ns, CHECKPOINT_NS_MAX)
        checkpoint_id = v.identifier("checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX)
        writes = _writes(request)
        interrupts = _interrupts(request, thread_id)
        await self._fenced(
            request,
            write,
            lambda: self._graph.put_writes(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                writes=writes,
                now=self._deps.clock(),
                task_id=request.task_id,
                interrupts=interrupts,
                **write.args,
            ),
        )
        return svc.PutGraphWritesResponse()

    @namespaced
    async def GetGraphCheckpoint(
        self, request: svc.GetGraphCheckpointRequest, namespace: str
    ) -> svc.GetGraphCheckpointResponse:
        thread_id, checkpoint_ns, checkpoint_id = _read_at(request)
        found = await shielded(
            self._graph.get_tuple(namespace, thread_id, checkpoint_ns, checkpoint_id)
        )
        if found is None:
            return svc.GetGraphCheckpointResponse()
        return svc.GetGraphCheckpointResponse(checkpoint_tuple=_tuple_out(found))

    @namespaced
    async def ListGraphCheckpoints(
        self, request: svc.ListGraphCheckpointsRequest, namespace: str
    ) -> svc.ListGraphCheckpointsResponse:
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
            metadata_filter_json=_filter(request.metadata_filter_json),
            before_checkpoint_id=v.optional_identifier(
                "before_checkpoint_id", request.before_checkpoint_id, v.CHECKPOINT_ID_MAX
            ),
        )
        limit = v.page_size("page_size", request.page_size)
        # The token is bound to the whole query, so a page is never resumed under another.
        scope = ("graph", namespace, *astuple(query))
        after = decode_position(request.page_token, scope)
        budget = self._reply_budget
        # The store completes only the rows that fit the reply (B1); the reply is measured
        # again as it is built, the encoding being a little larger than the stored bytes.
        page = await shielded(
            self._graph.list_tuples(namespace, query, after=after, limit=limit, max_bytes=budget)
        )
        found = page.tuples
        response = svc.ListGraphCheckpointsResponse()
        count = fill_within(response.checkpoint_tuples, found, _tuple_out, budget)
        if count and (page.more or count < len(found)):
            last = response.checkpoint_tuples[-1].checkpoint
            position = GraphPosition(last.checkpoint_id, last.thread_id, last.checkpoint_ns)
            response.next_page_token = encode_position(position, scope)
        return response

    @namespaced
    async def GetGraphDeltaHistory(
        self, request: svc.GetGraphDeltaHistoryRequest, namespace: str
    ) -> svc.GetGraphDeltaHistoryResponse:
        thread_id, checkpoint_ns, checkpoint_id = _read_at(request)
        channels = _delta_channels(request.channels)
        limit = v.page_size("page_size", request.page_size)
        # The token is bound to the whole request, so a walk is never resumed under another.
        scope = ("graph-delta", namespace, thread_id, checkpoint_ns, checkpoint_id, *channels)
        cursor = delta.decode_cursor(request.page_token, channels, scope)
        budget = self._reply_budget
        page = await shielded(
            self._graph.delta_history(
                namespace,
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                channels,
                cursor=cursor,
                limit=limit,
                max_bytes=budget,
            )
        )
        response = svc.GetGraphDeltaHistoryResponse()
        count = fill_within(response.ancestors, page.ancestors, _ancestor_out, budget)
        resume = page.resume_at(count) if count < len(page.ancestors) else page.next
        if resume is not None:
            response.next_page_token = delta.encode_cursor(resume, channels, scope)
        return response

    @retriable
    async def DeleteGraphThread(
        self, request: svc.DeleteGraphThreadRequest, write: WriteKey
    ) -> svc.DeleteGraphThreadResponse:
        thread_id = v.identifier("thread_id", request.thread_id, THREAD_ID_MAX)
        deleted = await shielded(
            self._graph.delete_thread(thread_id=thread_id, now=self._deps.clock(), **write.args)
        )
        return svc.DeleteGraphThreadResponse(checkpoints_deleted=deleted)

    @retriable
    async def DeleteGraphRuns(
        self, request: svc.DeleteGraphRunsRequest, write: WriteKey
    ) -> svc.DeleteGraphRunsResponse:
        run_ids = v.identifiers("run_ids", request.run_ids, NAME_MAX, MAX_IDS, "runs")
        deleted = await shielded(
            self._graph.delete_runs(run_ids=run_ids, now=self._deps.clock(), **write.args)
        )
        return svc.DeleteGraphRunsResponse(checkpoints_deleted=deleted)

    @retriable
    async def CopyGraphThread(
        self, request: svc.CopyGraphThreadRequest, write: WriteKey
    ) -> svc.CopyGraphThreadResponse:
        source = v.identifier("source_thread_id", request.source_thread_id, THREAD_ID_MAX)
        target = v.identifier("target_thread_id", request.target_thread_id, THREAD_ID_MAX)
        if source == target:
            raise InvalidField("target_thread_id", "must differ from source_thread_id")
        copied = await shielded(
            self._graph.copy_thread(
                source=source, target=target, now=self._deps.clock(), **write.args
            )
        )
        return svc.CopyGraphThreadResponse(checkpoints_copied=copied)

    @retriable
    async def PruneGraphThreads(
        self, request: svc.PruneGraphThreadsRequest, write: WriteKey
    ) -> svc.PruneGraphThreadsResponse:
        thread_ids = v.identifiers(
            "thread_ids", request.thread_ids, THREAD_ID_MAX, MAX_IDS, "threads"
        )
        strategy = _STRATEGIES.get(request.strategy)
        if strategy is None:
            raise InvalidField(
                "strategy",
                "must be GRAPH_PRUNE_STRATEGY_KEEP_LATEST or GRAPH_PRUNE_STRATEGY_DELETE",
            )
        deleted = await shielded(
            self._graph.prune(
                thread_ids=thread_ids, strategy=strategy, now=self._deps.clock(), **write.args
            )
        )
        return svc.PruneGraphThreadsResponse(checkpoints_deleted=deleted)

    @retriable
    async def ApplyGraphRetention(
        self, request: svc.ApplyGraphRetentionRequest, write: WriteKey
    ) -> svc.ApplyGraphRetentionResponse:
        rule = _retention_rule(request)
        counts = await shielded(
            self._graph.apply_retention(
                rule=rule,
                now=self._deps.clock(),
                batch_size=self._deps.prune_batch_size,
                dry_run=request.dry_run,
                **write.args,
            )
        )
        return svc.ApplyGraphRetentionResponse(**asdict(counts))
