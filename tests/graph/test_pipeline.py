"""Contract G22: a blocking saver made with ``pipeline=True`` sends a run's writes ahead of
their answers unless the run's durability is ``"sync"``; they are durable, and read by other
processes, once the saver's next call on their thread (or ``flush``, ``close``) returns, and
that call raises the first that failed. (The unbroken chain under a crash is in
test_durability_modes.py; LangGraph's conformance suite runs on a pipelining saver in
test_conformance.py.)"""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from checkpointd_client import InvalidArgumentError, _graph_write_ahead
from checkpointd_client._graph_write_ahead import GraphWrite
from checkpointd_client.langgraph import CheckpointdSaver
from tests.support.shared_server import SharedSidecar


class State(TypedDict):
    visited: Annotated[list[str], operator.add]


@pytest.fixture
def sent_ahead(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods of the writes the savers send ahead of their answers, in order (each
    still sent, by the real functions): on their own, or a checkpoint behind the one before
    it (S5, "PutGraphCheckpoint after")."""
    sent: list[str] = []
    begin, after = _graph_write_ahead.begin_graph_write, _graph_write_ahead.begin_graph_write_after

    def counted(client: Any, method: str, request: Any) -> GraphWrite:
        sent.append(method)
        return begin(client, method, request)

    def counted_after(client: Any, previous: GraphWrite, request: Any) -> GraphWrite | None:
        behind = after(client, previous, request)
        if behind is not None:
            sent.append("PutGraphCheckpoint after")
        return behind

    monkeypatch.setattr("checkpointd_client.langgraph.begin_graph_write", counted)
    monkeypatch.setattr("checkpointd_client.langgraph.begin_graph_write_after", counted_after)
    return sent


def _graph(saver: CheckpointdSaver) -> CompiledStateGraph[Any]:
    builder = StateGraph(State)
    for node in ("a", "b", "c"):
        builder.add_node(node, lambda state, node=node: {"visited": [node]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


def _thread() -> RunnableConfig:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def _stored_steps(reader: CheckpointdSaver, config: RunnableConfig) -> list[int]:
    return [t.metadata["step"] for t in reader.list(config)][::-1]


def test_g22_writes_sent_ahead_are_durable_once_the_next_call_on_their_thread_returns(
    sidecar: SharedSidecar, sent_ahead: list[str]
) -> None:
    """Under LangGraph's default durability the run's 5 puts and 4 put_writes (one a task,
    __start__ among them) go ahead; another client reads the run's end once
    ``flush(thread)`` returned, as the saver's own next read does; a second run on the
    thread starts from the first's end."""
    options: dict[str, Any] = {"namespace": sidecar.namespace}
    with (
        CheckpointdSaver(sidecar.target, pipeline=True, **options) as saver,
        CheckpointdSaver(sidecar.target, **options) as reader,
    ):
        config = _thread()
        graph = _graph(saver)
        assert graph.invoke({"visited": []}, config) == {"visited": ["a", "b", "c"]}
        puts = [method for method in sent_ahead if method.startswith("PutGraphCheckpoint")]
        assert len(puts) == 5
        assert sent_ahead.count("PutGraphWrites") == 4
        saver.flush(str(config["configurable"]["thread_id"]))
        assert _stored_steps(reader, config) == [-1, 0, 1, 2, 3]
        assert graph.get_state(config).values == {"visited": ["a", "b", "c"]}
        second = graph.invoke({"visited": ["again"]}, config)
        assert second == {"visited": ["a", "b", "c", "again", "a", "b", "c"]}
        assert len(sent_ahead) == 18
        saver.close()  # waits for the second run's writes
        assert len(_stored_steps(reader, config)) == 10


def test_g22_a_sync_run_waits_for_every_put_as_without_pipeline(
    sidecar: SharedSidecar, sent_ahead: list[str]
) -> None:
    """durability="sync": nothing goes ahead, and another client reads the run's end as
    soon as invoke returned, without a flush (G21)."""
    options: dict[str, Any] = {"namespace": sidecar.namespace}
    with (
        CheckpointdSaver(sidecar.target, pipeline=True, **options) as saver,
        CheckpointdSaver(sidecar.target, **options) as reader,
    ):
        config = _thread()
        assert _graph(saver).invoke({"visited": []}, config, durability="sync") == {
            "visited": ["a", "b", "c"]
        }
        assert sent_ahead == []
        assert _stored_steps(reader, config) == [-1, 0, 1, 2, 3]


def test_g22_a_refused_write_sent_ahead_is_raised_once_by_the_next_call_on_its_thread(
    sidecar: SharedSidecar, sent_ahead: list[str]
) -> None:
    """A put_writes the server refuses (a task id longer than it takes) returns at once; the
    next read of its thread raises the refusal, once, and reads again after that; another
    thread's read does not raise it, and nothing of it was stored."""
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, pipeline=True) as saver:
        config = _thread()
        stored = _graph(saver).invoke({"visited": []}, config)
        assert stored == {"visited": ["a", "b", "c"]}
        latest = saver.get_tuple(config)
        assert latest is not None
        saver.put_writes(latest.config, [("visited", ["x"])], "t" * 5000)
        assert sent_ahead[-1] == "PutGraphWrites"
        assert saver.get_tuple(_thread()) is None  # another thread: not its error
        with pytest.raises(InvalidArgumentError) as refused:
            saver.get_tuple(config)
        assert refused.value.metadata["field"] == "task_id"
        again = saver.get_tuple(config)
        assert again is not None
        assert again.pending_writes == []
        saver.flush()  # nothing left to raise


def test_g22_flush_without_pipeline_and_with_nothing_ahead_returns(sidecar: SharedSidecar) -> None:
    """flush() and close() on a saver without pipeline, or with nothing sent, just return."""
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as plain:
        plain.flush()
        plain.flush("no-such-thread")
    CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, pipeline=True).close()


def test_g22_pipeline_without_the_write_stream_is_refused() -> None:
    """pipeline=True with write_stream=False: a ValueError naming both, before connecting."""
    with pytest.raises(ValueError, match="write_stream"):
        CheckpointdSaver("unix:///nonexistent/checkpointd.sock", pipeline=True, write_stream=False)
