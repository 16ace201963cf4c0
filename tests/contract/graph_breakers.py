"""One GraphService request per documented `field` of INVALID_FIELD that breaks a rule of
exactly that field (E2), for tests/contract/test_protocol_guide.py's table of breakers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from google.protobuf.duration_pb2 import Duration

from checkpointd_client.v1 import graph_service_pb2 as gsvc
from checkpointd_client.v1 import graph_service_pb2_grpc as gsvc_grpc

__all__ = ["GRAPH_BREAKERS", "HasGraph", "graph_checkpoint"]

TIMEOUT = 10.0


class HasGraph(Protocol):
    """Stubs with the GraphService stub."""

    graph: gsvc_grpc.GraphServiceStub


def graph_checkpoint(**fields: Any) -> gsvc.GraphCheckpoint:
    """A valid graph checkpoint, with ``fields`` replacing its defaults."""
    values: dict[str, Any] = {
        "thread_id": "t",
        "checkpoint_id": "c1",
        "checkpoint": gsvc.TypedValue(type="json", data=b"{}"),
        "metadata_json": "{}",
        "channel_versions": {"a": "1"},
    }
    values.update(fields)
    return gsvc.GraphCheckpoint(**values)


def _put(**fields: Any) -> Callable[[HasGraph], object]:
    return lambda s: s.graph.PutGraphCheckpoint(
        gsvc.PutGraphCheckpointRequest(checkpoint=graph_checkpoint(**fields)), timeout=TIMEOUT
    )


def _put_value(**fields: Any) -> Callable[[HasGraph], object]:
    value: dict[str, Any] = {
        "channel": "a",
        "version": "1",
        "value": gsvc.TypedValue(type="json", data=b"1"),
    }
    value.update(fields)
    request = gsvc.PutGraphCheckpointRequest(
        checkpoint=graph_checkpoint(), new_values=[gsvc.GraphChannelValue(**value)]
    )
    return lambda s: s.graph.PutGraphCheckpoint(request, timeout=TIMEOUT)


def _writes(*writes: gsvc.GraphWrite, **fields: Any) -> Callable[[HasGraph], object]:
    values: dict[str, Any] = {"thread_id": "t", "checkpoint_id": "c1", "task_id": "task"}
    values.update(fields)
    request = gsvc.PutGraphWritesRequest(writes=writes, **values)
    return lambda s: s.graph.PutGraphWrites(request, timeout=TIMEOUT)


def _interrupt(**fields: Any) -> Callable[[HasGraph], object]:
    """A PutGraphWrites of one interrupt write whose descriptor has ``fields``."""
    values: dict[str, Any] = {"interrupt_id": "i1", "node": "review", "reason": "approval"}
    values.update(fields)
    return _writes(_INTERRUPT_WRITE, interrupts=[gsvc.GraphInterrupt(**values)])


def _list(**fields: Any) -> Callable[[HasGraph], object]:
    return lambda s: s.graph.ListGraphCheckpoints(
        gsvc.ListGraphCheckpointsRequest(**fields), timeout=TIMEOUT
    )


_VALUE = gsvc.TypedValue(type="json", data=b"1")
_INTERRUPT_WRITE = gsvc.GraphWrite(idx=0, channel="__interrupt__", value=_VALUE)

GRAPH_BREAKERS: dict[str, Callable[[Any], object]] = {
    "thread_id": lambda s: s.graph.GetGraphCheckpoint(
        gsvc.GetGraphCheckpointRequest(thread_id=""), timeout=TIMEOUT
    ),
    "checkpoint_ns": lambda s: s.graph.GetGraphCheckpoint(
        gsvc.GetGraphCheckpointRequest(thread_id="t", checkpoint_ns="a\x00b"), timeout=TIMEOUT
    ),
    "task_id": _writes(task_id=""),
    "task_path": _writes(task_path="p" * 1025),
    "writes.idx": _writes(
        gsvc.GraphWrite(idx=0, channel="a", value=_VALUE),
        gsvc.GraphWrite(idx=0, channel="b", value=_VALUE),
    ),
    "writes.channel": _writes(gsvc.GraphWrite(idx=0, channel="", value=_VALUE)),
    "writes.value.type": _writes(gsvc.GraphWrite(idx=0, channel="a")),
    "interrupts": _writes(
        _INTERRUPT_WRITE,
        interrupts=[gsvc.GraphInterrupt(interrupt_id=f"i{n}") for n in range(101)],
    ),
    "interrupts.interrupt_id": _interrupt(interrupt_id=""),
    "interrupts.graph_name": _interrupt(graph_name="g" * 257),
    "interrupts.node": _interrupt(node="a\x00b"),
    "interrupts.reason": _interrupt(reason="r" * 257),
    "interrupts.context_json": _interrupt(context_json="{"),
    "checkpoint.thread_id": _put(thread_id=""),
    "checkpoint.checkpoint_ns": _put(checkpoint_ns="n" * 1025),
    "checkpoint.checkpoint.type": _put(checkpoint=gsvc.TypedValue(data=b"{}")),
    "checkpoint.metadata_json": _put(metadata_json='{"source": "a\\u0000b"}'),
    "checkpoint.channel_versions": _put(channel_versions={"a": ""}),
    "send_nodes": lambda s: s.graph.PutGraphCheckpoint(
        gsvc.PutGraphCheckpointRequest(checkpoint=graph_checkpoint(), send_nodes=["n" * 513]),
        timeout=TIMEOUT,
    ),
    "new_values.channel": _put_value(channel=""),
    "new_values.version": _put_value(version="2"),
    "new_values.value.type": _put_value(value=gsvc.TypedValue(data=b"1")),
    "metadata_filter_json": _list(metadata_filter_json="[1]"),
    "before_checkpoint_id": _list(before_checkpoint_id="c" * 129),
    "channels": lambda s: s.graph.GetGraphDeltaHistory(
        gsvc.GetGraphDeltaHistoryRequest(thread_id="t", channels=["a", "a"]), timeout=TIMEOUT
    ),
    "run_ids": lambda s: s.graph.DeleteGraphRuns(
        gsvc.DeleteGraphRunsRequest(run_ids=["r", ""]), timeout=TIMEOUT
    ),
    "source_thread_id": lambda s: s.graph.CopyGraphThread(
        gsvc.CopyGraphThreadRequest(target_thread_id="t"), timeout=TIMEOUT
    ),
    "target_thread_id": lambda s: s.graph.CopyGraphThread(
        gsvc.CopyGraphThreadRequest(source_thread_id="t", target_thread_id="t"), timeout=TIMEOUT
    ),
    "thread_ids": lambda s: s.graph.PruneGraphThreads(
        gsvc.PruneGraphThreadsRequest(
            thread_ids=["t"] * 1001, strategy=gsvc.GRAPH_PRUNE_STRATEGY_DELETE
        ),
        timeout=TIMEOUT,
    ),
    "strategy": lambda s: s.graph.PruneGraphThreads(
        gsvc.PruneGraphThreadsRequest(thread_ids=["t"]), timeout=TIMEOUT
    ),
    "idle_for": lambda s: s.graph.ApplyGraphRetention(
        gsvc.ApplyGraphRetentionRequest(idle_for=Duration(seconds=0)), timeout=TIMEOUT
    ),
    "keep_newest": lambda s: s.graph.ApplyGraphRetention(
        gsvc.ApplyGraphRetentionRequest(keep_newest=-1), timeout=TIMEOUT
    ),
}
