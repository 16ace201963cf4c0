"""Contract G17: what LangGraph writes in one put_writes call is stored as its replay needs,
on both savers and both backends, with the answers LangGraph's in-memory saver gives.

A node that calls ``interrupt()`` twice sends two ``__resume__`` writes (each list of answers
longer than the one before) that map to one index; a nested ``@entrypoint`` that pauses
bubbles one ``Interrupt`` up twice in one ``__interrupt__`` write. The server takes one write
per index and one description per interrupt id (G7), so the savers send the last write of an
index and describe an interrupt once; the graphs then finish as on ``InMemorySaver``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from checkpointd_client import CheckpointdClient
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from checkpointd_client.langgraph._shape import put_writes_request
from tests.support.shared_server import SharedSidecar


class Answers(TypedDict):
    answers: list[str]


def _two_questions(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def ask(state: Answers) -> dict[str, list[str]]:
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [*state["answers"], first, second]}

    builder = StateGraph(Answers)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=checkpointer)


def _config() -> RunnableConfig:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def _run_two_questions(checkpointer: BaseCheckpointSaver[Any]) -> list[Any]:
    graph = _two_questions(checkpointer)
    config = _config()
    seen = [graph.invoke({"answers": []}, config)["__interrupt__"][0].value]
    seen.append(graph.invoke(Command(resume="one"), config)["__interrupt__"][0].value)
    seen.append(graph.invoke(Command(resume="two"), config))
    return seen


def test_g17_a_node_that_asks_twice_finishes_as_on_the_in_memory_saver(
    sidecar: SharedSidecar,
) -> None:
    """Two interrupts in one node, answered one after the other: the second resume sends two
    __resume__ writes of one index; the node ends with both answers, as on InMemorySaver."""
    expected = _run_two_questions(InMemorySaver())
    assert expected == ["first?", "second?", {"answers": ["one", "two"]}]
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        assert _run_two_questions(saver) == expected


async def test_g17_the_asyncio_saver_keeps_the_longest_answers_too(sidecar: SharedSidecar) -> None:
    """The same graph on the asyncio saver (the Write stream's path)."""
    async with AsyncCheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        graph = _two_questions(saver)
        config = _config()
        await graph.ainvoke({"answers": []}, config)
        await graph.ainvoke(Command(resume="one"), config)
        assert await graph.ainvoke(Command(resume="two"), config) == {"answers": ["one", "two"]}


def _nested(checkpointer: BaseCheckpointSaver[Any], calls: Counter[str]) -> Any:
    @task
    def step_1(query: str) -> str:
        calls["step_1"] += 1
        return f"{query} bar"

    @task
    def human_feedback(query: str) -> str:
        calls["human_feedback"] += 1
        return f"{query} {interrupt('feedback?')}"

    @entrypoint()
    def child(query: str) -> str:
        return str(human_feedback(step_1(query).result()).result())

    @entrypoint(checkpointer=checkpointer)
    def parent(query: str) -> str:
        return str(child.invoke(query))

    return parent


def test_g17_a_nested_entrypoints_pause_is_one_pause_and_resumes_once(
    sidecar: SharedSidecar,
) -> None:
    """A nested @entrypoint that pauses writes its Interrupt twice in one __interrupt__
    write: it is one pause in the inbox, and the resume runs the tasks as on InMemorySaver
    (LangGraph's test_nested_entrypoint_finished_task_is_not_rerun; LangGraph 1.0.6, the
    floor, re-runs the finished task on any saver)."""
    reference: Counter[str] = Counter()
    in_memory = _nested(InMemorySaver(), reference)
    config = _config()
    in_memory.invoke("foo", config)
    assert in_memory.invoke(Command(resume="baz"), config) == "foo bar baz"
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        calls: Counter[str] = Counter()
        parent = _nested(saver, calls)
        config = _config()
        parent.invoke("foo", config)
        thread = config["configurable"]["thread_id"]
        with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
            pending = [p for p in client.iter_pending_interrupts() if p.execution_id == thread]
        assert len(pending) == 1
        assert parent.invoke(Command(resume="baz"), config) == "foo bar baz"
        assert calls == reference


def test_g17_the_request_has_one_write_per_index_and_one_description_per_interrupt() -> None:
    """The rule itself: the last write of an index is sent, at the first one's place; an
    Interrupt written twice is described once."""
    from langgraph.types import Interrupt

    saver = CheckpointdSaver("unix:///nonexistent/checkpointd.sock")
    try:
        again = Interrupt(value="feedback?", id="i-1")
        request = put_writes_request(
            saver.serde,
            "default",
            {"configurable": {"thread_id": "t", "checkpoint_id": "c"}},
            [
                ("__resume__", ["1"]),
                ("log", "x"),
                ("__resume__", ["1", "2"]),
                ("__interrupt__", (again, again)),
            ],
            "task",
            "path",
        )
    finally:
        saver.close()
    assert [(w.idx, w.channel) for w in request.writes] == [
        (-4, "__resume__"),
        (1, "log"),
        (-3, "__interrupt__"),
    ]
    assert saver.serde.loads_typed(
        (request.writes[0].value.type, request.writes[0].value.data)
    ) == [
        "1",
        "2",
    ]
    assert [i.interrupt_id for i in request.interrupts] == ["i-1"]


@pytest.mark.parametrize(
    ("saver_name", "configurable", "expected"),
    [
        (None, {"graph_id": "agent"}, "agent"),
        ("mine", {"graph_id": "agent"}, "mine"),
        ("mine", {"graph_id": "agent", "graph_name": "run"}, "run"),
        (None, {}, ""),
    ],
)
def test_g8_a_pause_is_named_by_graph_name_the_savers_name_then_graph_id(
    saver_name: str | None, configurable: dict[str, str], expected: str
) -> None:
    """The chain name of a pause: the run's graph_name, the saver's graph_name, then the
    graph_id LangGraph's Agent Server puts in every run's configurable (empty: the server
    names it by the thread id)."""
    from langgraph.types import Interrupt

    saver = CheckpointdSaver("unix:///nonexistent/checkpointd.sock", graph_name=saver_name)
    try:
        request = put_writes_request(
            saver.serde,
            "default",
            {"configurable": {"thread_id": "t", "checkpoint_id": "c", **configurable}},
            [("__interrupt__", (Interrupt(value="ok?", id="i"),))],
            "task",
            "path",
            saver.graph_name,
        )
    finally:
        saver.close()
    assert [i.graph_name for i in request.interrupts] == [expected]
