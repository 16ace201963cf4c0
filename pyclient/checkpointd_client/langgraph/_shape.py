"""The row shaping both LangGraph savers share: LangGraph's arguments to GraphService
requests, and its responses back to ``CheckpointTuple`` (as ``langgraph-checkpoint-postgres``
keeps its SQL text and row shaping in ``base.py`` for its sync and async savers).

Values go as the serializer's ``dumps_typed`` type tag and bytes, never re-encoded. The
checkpoint body (the checkpoint without its channel values) goes as JSON when it is plain
JSON, so savers in other languages can read it, and through the serializer otherwise.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from checkpointd_client._base import new_id
from checkpointd_client.fencing import fenced
from checkpointd_client.v1 import graph_service_pb2 as pb

__all__: list[str] = []

#: The type of a channel named in new_versions that has no value (as the Postgres saver's).
EMPTY: Final = "empty"
#: The channel LangGraph writes a task's interrupts to (private in LangGraph; a key of
#: ``WRITES_IDX_MAP``).
INTERRUPT: Final = "__interrupt__"
#: The largest page the server returns.
MAX_PAGE: Final = 1000
#: The most channels one GetGraphDeltaHistory walks.
MAX_DELTA_CHANNELS: Final = 100
#: The channel of a checkpoint's pending Send packets (LangGraph's TASKS).
SENDS: Final = "__pregel_tasks"
PRUNE_STRATEGIES: Final = {
    "keep_latest": pb.GRAPH_PRUNE_STRATEGY_KEEP_LATEST,
    "delete": pb.GRAPH_PRUNE_STRATEGY_DELETE,
}


def next_version(current: str | int | float | None) -> str:
    """A channel version after ``current``: an increasing counter and a random tail, as
    ``langgraph-checkpoint-postgres`` writes them (they sort as text)."""
    if current is None:
        number = 0
    elif isinstance(current, (int, float)):
        number = int(current)
    else:
        number = int(current.split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


def _typed(serde: SerializerProtocol, value: Any) -> pb.TypedValue:
    kind, data = serde.dumps_typed(value)
    return pb.TypedValue(type=kind, data=data)


def _body(serde: SerializerProtocol, body: dict[str, Any]) -> pb.TypedValue:
    try:
        text = json.dumps(body, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return _typed(serde, body)
    if json.loads(text) != body:  # a tuple, a non-string key: JSON would change it
        return _typed(serde, body)
    return pb.TypedValue(type="json", data=text.encode())


def put_request(
    serde: SerializerProtocol,
    namespace: str,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[pb.PutGraphCheckpointRequest, RunnableConfig]:
    """The PutGraphCheckpoint request of ``aput``/``put``, and the config it returns."""
    configurable = config["configurable"]
    thread_id = str(configurable["thread_id"])
    checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
    body: dict[str, Any] = dict(checkpoint)
    values: dict[str, Any] = body.pop("channel_values", None) or {}
    versions = {
        channel: str(version) for channel, version in checkpoint["channel_versions"].items()
    }
    new_values = []
    for channel, version in new_versions.items():
        if versions.get(channel) != str(version):
            continue  # the checkpoint does not read this version: nothing would find it
        value = (
            _typed(serde, values[channel])
            if channel in values
            else pb.TypedValue(type=EMPTY, data=b"")
        )
        new_values.append(pb.GraphChannelValue(channel=channel, version=str(version), value=value))
    request = pb.PutGraphCheckpointRequest(
        send_nodes=send_nodes(checkpoint),
        namespace=namespace,
        request_id=new_id(),
        checkpoint=pb.GraphCheckpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id") or "",
            checkpoint=_body(serde, body),
            metadata_json=json.dumps(get_serializable_checkpoint_metadata(config, metadata)),
            channel_versions=versions,
        ),
        new_values=new_values,
    )
    fenced(request)
    next_config: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint["id"],
        }
    }
    return request, next_config


def send_nodes(checkpoint: Checkpoint) -> list[str]:
    """The node each Send pending in ``checkpoint`` targets, in order (empty for a packet that
    is not a Send: LangGraph skips it, and the indexes stay aligned). A task a Send starts has
    only the Send's index in its task path: the server names its pauses by these (G8)."""
    sends = checkpoint.get("channel_values", {}).get(SENDS) or ()
    return [str(getattr(packet, "node", "")) for packet in sends]


def put_writes_request(
    serde: SerializerProtocol,
    namespace: str,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    graph_name: str | None = None,
) -> pb.PutGraphWritesRequest:
    """The PutGraphWrites request of ``aput_writes``/``put_writes``: special channels take
    their negative index (``WRITES_IDX_MAP``), the others their position; each interrupt of
    an ``__interrupt__`` write is described for the inbox (G8).

    The server takes one write per index and one description per interrupt id (G7), while
    LangGraph may send more in one call (G17): a node that called ``interrupt()`` twice
    writes ``__resume__`` twice, each list of answers longer than the one before, and both
    map to one index, so the last one is sent (it holds every answer; LangGraph's in-memory
    saver keeps it too, and a replay needs it); a nested ``@entrypoint`` bubbles one
    ``Interrupt`` up twice in one ``__interrupt__`` write, so it is described once."""
    configurable = config["configurable"]
    # The chain name of the pauses: the run's graph_name, the saver's, then the graph_id an
    # Agent Server (langgraph dev / langgraph-api) puts in every run's configurable.
    name = str(configurable.get("graph_name") or graph_name or configurable.get("graph_id") or "")
    by_idx: dict[int, pb.GraphWrite] = {}
    for idx, (channel, value) in enumerate(writes):
        index = WRITES_IDX_MAP.get(channel, idx)
        by_idx[index] = pb.GraphWrite(idx=index, channel=channel, value=_typed(serde, value))
    described: dict[str, pb.GraphInterrupt] = {}
    for channel, value in writes:
        if channel != INTERRUPT:
            continue
        for interrupt in value if isinstance(value, (list, tuple)) else (value,):
            # Only LangGraph's Interrupt objects are pauses: another value written to the
            # channel (a saver test's) has no id to resume it by.
            if getattr(interrupt, "id", None) and str(interrupt.id) not in described:
                described[str(interrupt.id)] = describe(interrupt, name, task_path)
    return fenced(
        pb.PutGraphWritesRequest(
            namespace=namespace,
            request_id=new_id(),
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=str(configurable.get("checkpoint_ns", "")),
            checkpoint_id=str(configurable["checkpoint_id"]),
            task_id=task_id,
            task_path=task_path,
            writes=list(by_idx.values()),
            interrupts=list(described.values()),
        )
    )


def describe(interrupt: Any, graph_name: str, task_path: str) -> pb.GraphInterrupt:
    """The inbox's description of a LangGraph ``Interrupt``: its id, its value as JSON (its
    repr when it is not JSON, kept as {"value": ...}), its reason (the value's "reason" when
    it is a dict that has one as text, else "interrupt") and the node (the task path's last
    part; the server names a Send task's node by the checkpoint's ``send_nodes``)."""
    value = getattr(interrupt, "value", None)
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        value = {**review(getattr(interrupt, "response_schema", None)), **value}
    try:
        context = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        context = json.dumps({"value": repr(value)}, ensure_ascii=False)
    reason = value.get("reason") if isinstance(value, dict) else None
    return pb.GraphInterrupt(
        interrupt_id=str(getattr(interrupt, "id", "")),
        graph_name=graph_name,
        node=task_path.rsplit(", ", 1)[-1][:512],
        reason=reason[:256] if isinstance(reason, str) else "interrupt",
        context_json=context,
    )


def review(schema: Any) -> dict[str, Any]:
    """What a per-call tool approval allows, read from its ``response_schema`` (LangChain's
    ``HumanInTheLoopMiddleware`` lists the allowed decisions only there): the decision types,
    and the JSON schema of an edit's arguments, for the inbox to show and check (K3)."""
    if isinstance(schema, dict):  # as LangGraph writes it: the type's JSON schema
        found = schema
    elif schema is None or isinstance(schema, str):
        return {}
    else:
        try:
            from pydantic import TypeAdapter

            found = TypeAdapter(schema).json_schema()
        except Exception:  # a schema pydantic cannot describe: nothing to show
            return {}
    defs = found.get("$defs", {})
    mapping = found.get("discriminator", {}).get("mapping")
    kind = found.get("properties", {}).get("type", {}).get("const")
    allowed = list(mapping) if isinstance(mapping, dict) else [kind] if kind else []
    review: dict[str, Any] = {"allowed_decisions": allowed} if allowed else {}
    edited = defs.get("EditedAction", {}).get("properties", {}).get("args")
    if isinstance(edited, dict):
        review["args_schema"] = _resolve(edited, defs)
    return review


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a top-level ``$ref`` into ``defs`` replaced by what it names."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        named = defs.get(ref.removeprefix("#/$defs/"))
        if isinstance(named, dict):
            return named
    return schema


def get_request(namespace: str, config: RunnableConfig) -> pb.GetGraphCheckpointRequest:
    """The GetGraphCheckpoint request of ``aget_tuple``/``get_tuple``."""
    configurable = config["configurable"]
    return pb.GetGraphCheckpointRequest(
        namespace=namespace,
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=str(configurable.get("checkpoint_ns", "")),
        checkpoint_id=get_checkpoint_id(config) or "",
    )


def list_request(
    namespace: str,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> pb.ListGraphCheckpointsRequest:
    """The first ListGraphCheckpoints request of ``alist``/``list`` (the saver pages on)."""
    request = pb.ListGraphCheckpointsRequest(namespace=namespace)
    if config is not None:
        configurable = config["configurable"]
        if configurable.get("thread_id"):
            request.thread_id = str(configurable["thread_id"])
        if configurable.get("checkpoint_ns") is not None:
            request.checkpoint_ns = str(configurable["checkpoint_ns"])
        request.checkpoint_id = get_checkpoint_id(config) or ""
    if filter:
        request.metadata_filter_json = json.dumps(filter)
    if before is not None:
        request.before_checkpoint_id = get_checkpoint_id(before) or ""
    return request


def page_size(limit: int | None, returned: int) -> int:
    """The page to ask for: what the limit still allows, at most a full page."""
    return MAX_PAGE if limit is None else max(1, min(MAX_PAGE, limit - returned))


def tuples(
    serde: SerializerProtocol, messages: Sequence[pb.GraphCheckpointTuple]
) -> Iterator[CheckpointTuple]:
    """The CheckpointTuples of a response's messages."""
    for message in messages:
        yield to_tuple(serde, message)


def to_tuple(serde: SerializerProtocol, message: pb.GraphCheckpointTuple) -> CheckpointTuple:
    """A response's checkpoint tuple as LangGraph's ``CheckpointTuple``."""
    cp = message.checkpoint
    checkpoint: Checkpoint = serde.loads_typed((cp.checkpoint.type, cp.checkpoint.data))
    checkpoint["channel_values"] = {
        value.channel: serde.loads_typed((value.value.type, value.value.data))
        for value in message.channel_values
        if value.value.type != EMPTY
    }
    writes = sorted(
        message.pending_writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx)
    )
    parent: RunnableConfig | None = (
        {
            "configurable": {
                "thread_id": cp.thread_id,
                "checkpoint_ns": cp.checkpoint_ns,
                "checkpoint_id": cp.parent_checkpoint_id,
            }
        }
        if cp.parent_checkpoint_id
        else None
    )
    return CheckpointTuple(
        config={
            "configurable": {
                "thread_id": cp.thread_id,
                "checkpoint_ns": cp.checkpoint_ns,
                "checkpoint_id": cp.checkpoint_id,
            }
        },
        checkpoint=checkpoint,
        metadata=json.loads(cp.metadata_json),
        parent_config=parent,
        pending_writes=[
            (w.task_id, w.channel, serde.loads_typed((w.value.type, w.value.data))) for w in writes
        ],
    )


def delta_requests(
    namespace: str, config: RunnableConfig, channels: Sequence[str]
) -> list[pb.GetGraphDeltaHistoryRequest]:
    """The first GetGraphDeltaHistory request of each group of up to 100 of ``channels``
    (each channel once) for ``get_delta_channel_history``; none for no channel."""
    configurable = config["configurable"]
    unique = list(dict.fromkeys(str(channel) for channel in channels))
    return [
        pb.GetGraphDeltaHistoryRequest(
            namespace=namespace,
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=str(configurable.get("checkpoint_ns", "")),
            checkpoint_id=get_checkpoint_id(config) or "",
            channels=unique[start : start + MAX_DELTA_CHANNELS],
            page_size=MAX_PAGE,
        )
        for start in range(0, len(unique), MAX_DELTA_CHANNELS)
    ]


class DeltaHistory:
    """The pages of GetGraphDeltaHistory replies, folded into LangGraph's
    ``DeltaChannelHistory`` per channel as ``BaseCheckpointSaver``'s walk builds it: each
    ancestor's writes collected newest first, then reversed, so they come oldest first and in
    writes_sort_key order within a checkpoint."""

    def __init__(self, serde: SerializerProtocol, channels: Sequence[str]) -> None:
        self._serde = serde
        self._channels = list(channels)
        self._collected: dict[str, list[PendingWrite]] = {c: [] for c in self._channels}
        self._seeds: dict[str, Any] = {}

    def add(self, response: pb.GetGraphDeltaHistoryResponse) -> None:
        """Take in one page (its ancestors nearest first)."""
        loads = self._serde.loads_typed
        for ancestor in response.ancestors:
            for w in reversed(ancestor.writes):
                if w.channel in self._collected and w.channel not in self._seeds:
                    value = loads((w.value.type, w.value.data))
                    self._collected[w.channel].append((w.task_id, w.channel, value))
            for seed in ancestor.seeds:
                self._seeds[seed.channel] = loads((seed.value.type, seed.value.data))

    def result(self) -> Mapping[str, DeltaChannelHistory]:
        """Each channel's writes, oldest first, and its seed when an ancestor had one."""
        result: dict[str, DeltaChannelHistory] = {}
        for channel in self._channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(self._collected[channel]))}
            if channel in self._seeds:
                entry["seed"] = self._seeds[channel]
            result[channel] = entry
        return result


def delete_thread_request(namespace: str, thread_id: str) -> pb.DeleteGraphThreadRequest:
    return pb.DeleteGraphThreadRequest(
        namespace=namespace, request_id=new_id(), thread_id=str(thread_id)
    )


def delete_runs_request(namespace: str, run_ids: Sequence[str]) -> pb.DeleteGraphRunsRequest:
    return pb.DeleteGraphRunsRequest(
        namespace=namespace, request_id=new_id(), run_ids=[str(r) for r in run_ids]
    )


def copy_thread_request(namespace: str, source: str, target: str) -> pb.CopyGraphThreadRequest:
    return pb.CopyGraphThreadRequest(
        namespace=namespace,
        request_id=new_id(),
        source_thread_id=str(source),
        target_thread_id=str(target),
    )


def prune_request(
    namespace: str, thread_ids: Sequence[str], strategy: str
) -> pb.PruneGraphThreadsRequest:
    """The PruneGraphThreads request; an unknown strategy is a ValueError before sending."""
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(
            f"strategy must be one of {', '.join(sorted(PRUNE_STRATEGIES))}, got {strategy!r}"
        )
    return pb.PruneGraphThreadsRequest(
        namespace=namespace,
        request_id=new_id(),
        thread_ids=[str(t) for t in thread_ids],
        strategy=PRUNE_STRATEGIES[strategy],
    )
