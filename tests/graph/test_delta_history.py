"""LangGraph's DeltaChannel on the savers: ``get_delta_channel_history`` answered by the
server's walk (G19) gives what ``BaseCheckpointSaver``'s walk and ``InMemorySaver`` give, on
the same graph; a delete of runs and a copy keep every chain back to its seed (G20)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from concurrent import futures
from typing import Annotated, Any, TypedDict

import grpc
import pytest
from langchain_core.runnables import RunnableConfig

# DeltaChannel came with langgraph 1.2; the savers answer its history at every supported
# version, but below 1.2 (the "floor" compatibility environment) no graph can use one.
pytest.importorskip("langgraph.channels.delta", reason="DeltaChannel needs langgraph >= 1.2")
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from checkpointd_client.v1 import graph_service_pb2 as g
from tests.support.shared_server import SharedSidecar

CHANNELS = ("messages", "notes", "turn", "absent")


def _append(state: Sequence[Any], writes: Sequence[Sequence[Any]]) -> list[Any]:
    out = list(state)
    for write in writes:
        out.extend(write)
    return out


class _State(TypedDict):
    messages: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=3)]
    notes: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=5)]
    turn: int


def _graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Two parallel nodes append to ``messages`` in one step (so the order of a step's writes
    matters), then a third appends to both channels."""

    def left(state: _State) -> dict[str, Any]:
        return {"messages": [f"left{state['turn']}"]}

    def right(state: _State) -> dict[str, Any]:
        return {"messages": [f"right{state['turn']}"]}

    def join(state: _State) -> dict[str, Any]:
        turn = state["turn"]
        return {"messages": [f"join{turn}"], "notes": [f"n{turn}"], "turn": turn + 1}

    builder = StateGraph(_State)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("join", join)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge("left", "join")
    builder.add_edge("right", "join")
    builder.add_edge("join", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _run(saver: BaseCheckpointSaver[Any], thread: str, turns: int) -> list[str]:
    """Run ``turns`` turns, then fork from the middle (time travel) and run one more on the
    branch; the thread's checkpoint ids, oldest first."""
    graph = _graph(saver)
    for turn in range(turns):
        graph.invoke({"messages": [f"user{turn}"], "turn": turn}, _config(thread))
    history = list(graph.get_state_history(_config(thread)))
    middle = history[len(history) // 2].config
    graph.invoke({"messages": ["forked"], "turn": 100}, middle)
    return [t.checkpoint["id"] for t in reversed(list(saver.list(_config(thread))))]


def _without_tasks(found: Mapping[str, DeltaChannelHistory]) -> dict[str, Any]:
    """A history without its task ids (they name each run's own checkpoints)."""
    return {
        channel: {
            "writes": [(ch, value) for _, ch, value in entry["writes"]],
            "seed": entry.get("seed", "<none>"),
        }
        for channel, entry in found.items()
    }


def test_g19_delta_history_is_the_walk_of_the_base_class_and_of_inmemorysaver(
    sidecar: SharedSidecar,
) -> None:
    """For every checkpoint of a DeltaChannel thread with a fork, the saver's history (one
    call) equals BaseCheckpointSaver's walk over the same saver exactly (task ids too) and
    InMemorySaver's on the same graph run; the graph reads the same state through both."""
    thread = uuid.uuid4().hex
    memory = InMemorySaver()
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        ours = _run(saver, thread, 7)
        theirs = _run(memory, thread, 7)
        assert len(ours) == len(theirs) > 20
        seeded = 0
        for mine, reference in zip(ours, theirs, strict=True):
            found = saver.get_delta_channel_history(
                config=_config(thread, mine), channels=list(CHANNELS)
            )
            walked = BaseCheckpointSaver.get_delta_channel_history(
                saver, config=_config(thread, mine), channels=list(CHANNELS)
            )
            assert found == walked
            expected = memory.get_delta_channel_history(
                config=_config(thread, reference), channels=list(CHANNELS)
            )
            assert _without_tasks(found) == _without_tasks(expected)
            seeded += "seed" in found["messages"]
        assert seeded > 5  # the walks end at snapshots, not only at the root
        newest = saver.get_delta_channel_history(config=_config(thread), channels=["messages"])
        assert newest == saver.get_delta_channel_history(
            config=_config(thread, ours[-1]), channels=["messages"]
        )
        assert _graph(saver).get_state(_config(thread)).values == (
            _graph(memory).get_state(_config(thread)).values
        )
        assert saver.get_delta_channel_history(config=_config(thread), channels=[]) == {}
        nowhere = saver.get_delta_channel_history(
            config=_config(uuid.uuid4().hex), channels=["messages"]
        )
        assert nowhere == {"messages": {"writes": []}}


async def test_g19_the_asyncio_saver_reads_the_same_history(sidecar: SharedSidecar) -> None:
    """aget_delta_channel_history answers what the blocking saver's walk answers, and a
    graph run through the asyncio saver rebuilds the same state."""
    thread = uuid.uuid4().hex
    async with AsyncCheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        graph = _graph(saver)
        for turn in range(5):
            await graph.ainvoke({"messages": [f"user{turn}"], "turn": turn}, _config(thread))
        ids = [t.checkpoint["id"] async for t in saver.alist(_config(thread))]
        for checkpoint_id in ids:
            config = _config(thread, checkpoint_id)
            found = await saver.aget_delta_channel_history(config=config, channels=["messages"])
            walked = await BaseCheckpointSaver.aget_delta_channel_history(
                saver, config=config, channels=["messages"]
            )
            assert found == walked
        state = await graph.aget_state(_config(thread))
        assert state.values["messages"][-4:] == ["user4", "left4", "right4", "join4"]


class _OlderServer:
    """A GraphService without GetGraphDeltaHistory (UNIMPLEMENTED, as a server from before
    it): c1 (m = ["a"], a write "x" to m) <- c2."""

    def GetGraphCheckpoint(self, request: Any, context: Any) -> Any:
        checkpoint_id = request.checkpoint_id or "c2"
        parent = "c1" if checkpoint_id == "c2" else ""
        body = {"v": 4, "id": checkpoint_id, "ts": "", "channel_versions": {"m": checkpoint_id}}
        found = g.GraphCheckpointTuple(
            checkpoint=g.GraphCheckpoint(
                thread_id=request.thread_id,
                checkpoint_id=checkpoint_id,
                parent_checkpoint_id=parent,
                checkpoint=g.TypedValue(type="json", data=json.dumps(body).encode()),
                metadata_json="{}",
                channel_versions={"m": checkpoint_id},
            )
        )
        if checkpoint_id == "c1":
            json_value = g.TypedValue(type="json", data=b'["a"]')
            found.channel_values.append(
                g.GraphChannelValue(channel="m", version="c1", value=json_value)
            )
            write = g.TypedValue(type="json", data=b'"x"')
            found.pending_writes.append(g.GraphWrite(task_id="t", channel="m", value=write))
        return g.GetGraphCheckpointResponse(checkpoint_tuple=found)


async def test_g19_a_server_without_the_call_is_walked_as_the_base_class_does() -> None:
    """Against a server that answers GetGraphDeltaHistory UNIMPLEMENTED, both savers return
    the base class's walk (one GetGraphCheckpoint per ancestor) instead of failing."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(
        _OlderServer().GetGraphCheckpoint,
        request_deserializer=g.GetGraphCheckpointRequest.FromString,
        response_serializer=g.GetGraphCheckpointResponse.SerializeToString,
    )
    service = grpc.method_handlers_generic_handler(
        "checkpointd.v1.GraphService", {"GetGraphCheckpoint": handler}
    )
    server.add_generic_rpc_handlers((service,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    expected = {"m": {"writes": [("t", "m", "x")], "seed": ["a"]}}
    try:
        target = f"127.0.0.1:{port}"
        with CheckpointdSaver(target) as saver:
            for _ in range(2):  # the second read goes straight to the walk
                found = saver.get_delta_channel_history(config=_config("t"), channels=["m"])
                assert found == expected
        async with AsyncCheckpointdSaver(target) as asaver:
            found = await asaver.aget_delta_channel_history(config=_config("t"), channels=["m"])
            assert found == expected
    finally:
        server.stop(None)
