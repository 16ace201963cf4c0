"""Contract G22: a saver made with ``pipeline=True`` (the blocking one and the asyncio one)
sends a run's writes ahead of their answers unless the run's durability is ``"sync"``; they
are durable, and read by other processes, once the saver's next call on their thread (or
``flush``/``aflush``, ``close``/``aclose``) returns, and that call raises the first that
failed. (The unbroken chain under a crash is in
test_durability_modes.py; LangGraph's conformance suite runs on a pipelining saver in
test_conformance.py.)"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict, TypeVar

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from checkpointd_client import InvalidArgumentError, _graph_write_ahead
from checkpointd_client._graph_write_ahead import AsyncGraphWrite, GraphWrite
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from tests.support.shared_server import SharedSidecar

Behind = TypeVar("Behind", GraphWrite, AsyncGraphWrite)


class State(TypedDict):
    visited: Annotated[list[str], operator.add]


@pytest.fixture
def sent_ahead(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods of the writes the savers send ahead of their answers, in order (each
    still sent, by the real functions): on their own, or a checkpoint behind the one before
    it (S5, "PutGraphCheckpoint after")."""
    sent: list[str] = []
    module = _graph_write_ahead
    begin, abegin = module.begin_graph_write, module.abegin_graph_write
    after = module.begin_graph_write_after

    def counted(client: Any, method: str, request: Any) -> GraphWrite:
        sent.append(method)
        return begin(client, method, request)

    async def acounted(client: Any, method: str, request: Any) -> AsyncGraphWrite:
        sent.append(method)
        return await abegin(client, method, request)

    def counted_after(previous: Behind, request: Any) -> Behind | None:
        behind = after(previous, request)
        if behind is not None:
            sent.append("PutGraphCheckpoint after")
        return behind

    for name, replacement in (
        ("begin_graph_write", counted),
        ("abegin_graph_write", acounted),
        ("begin_graph_write_after", counted_after),
    ):
        monkeypatch.setattr(f"checkpointd_client.langgraph.{name}", replacement)
    return sent


class Pipelining:
    """A pipelining saver of one kind, driven from blocking test code: the asyncio saver's
    calls each run in one event loop the test keeps (the saver's channel is bound to it)."""

    def __init__(self, kind: str, target: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop() if kind == "asyncio" else None
        self._closed = False
        maker = AsyncCheckpointdSaver if kind == "asyncio" else CheckpointdSaver
        self.saver: Any = maker(target, **options)

    def run(self, work: Callable[[Any], Any]) -> Any:
        """``work(saver)``: called, or awaited in the loop when it returns an awaitable."""
        result = work(self.saver)
        if self._loop is not None and asyncio.iscoroutine(result):
            return self._loop.run_until_complete(result)
        return result

    def invoke(self, graph: Any, state: Any, config: RunnableConfig, **kw: Any) -> Any:
        if self._loop is None:
            return graph.invoke(state, config, **kw)
        return self._loop.run_until_complete(graph.ainvoke(state, config, **kw))

    def state(self, graph: Any, config: RunnableConfig) -> Any:
        if self._loop is None:
            return graph.get_state(config).values
        return self._loop.run_until_complete(graph.aget_state(config)).values

    def get_tuple(self, config: RunnableConfig) -> Any:
        return self.run(lambda s: s.aget_tuple(config) if self._loop else s.get_tuple(config))

    def put_writes(self, config: RunnableConfig, writes: Any, task_id: str) -> None:
        self.run(
            lambda s: (
                s.aput_writes(config, writes, task_id)
                if self._loop
                else s.put_writes(config, writes, task_id)
            )
        )

    def flush(self, thread_id: str | None = None) -> None:
        self.run(lambda s: s.aflush(thread_id) if self._loop else s.flush(thread_id))

    def close(self) -> None:
        """Close the saver (waiting for what it sent ahead); again: nothing."""
        if self._closed:
            return
        self._closed = True
        if self._loop is None:
            self.saver.close()
            return
        try:
            self._loop.run_until_complete(self.saver.aclose())
        finally:
            self._loop.close()


@pytest.fixture(params=["blocking", "asyncio"])
def pipelining(
    request: pytest.FixtureRequest, sidecar: SharedSidecar
) -> Iterator[Callable[..., Pipelining]]:
    """Makes pipelining savers of the kind under test, on the shared sidecar; closes them."""
    made: list[Pipelining] = []

    def make(**options: Any) -> Pipelining:
        made.append(
            Pipelining(request.param, sidecar.target, namespace=sidecar.namespace, **options)
        )
        return made[-1]

    yield make
    for each in made:
        each.close()


def _graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
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
    sidecar: SharedSidecar, sent_ahead: list[str], pipelining: Callable[..., Pipelining]
) -> None:
    """Under LangGraph's default durability the run's 5 puts and 4 put_writes (one a task,
    __start__ among them) go ahead; another client reads the run's end once
    ``flush(thread)`` returned, as the saver's own next read does; a second run on the
    thread starts from the first's end."""
    saver = pipelining(pipeline=True)
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as reader:
        config = _thread()
        graph = _graph(saver.saver)
        assert saver.invoke(graph, {"visited": []}, config) == {"visited": ["a", "b", "c"]}
        puts = [method for method in sent_ahead if method.startswith("PutGraphCheckpoint")]
        assert len(puts) == 5
        assert sent_ahead.count("PutGraphWrites") == 4
        saver.flush(str(config["configurable"]["thread_id"]))
        assert _stored_steps(reader, config) == [-1, 0, 1, 2, 3]
        assert saver.state(graph, config) == {"visited": ["a", "b", "c"]}
        second = saver.invoke(graph, {"visited": ["again"]}, config)
        assert second == {"visited": ["a", "b", "c", "again", "a", "b", "c"]}
        assert len(sent_ahead) == 18
        saver.close()  # waits for the second run's writes
        assert len(_stored_steps(reader, config)) == 10


def test_g22_a_sync_run_waits_for_every_put_as_without_pipeline(
    sidecar: SharedSidecar, sent_ahead: list[str], pipelining: Callable[..., Pipelining]
) -> None:
    """durability="sync": nothing goes ahead, and another client reads the run's end as
    soon as invoke returned, without a flush (G21)."""
    saver = pipelining(pipeline=True)
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as reader:
        config = _thread()
        ended = saver.invoke(_graph(saver.saver), {"visited": []}, config, durability="sync")
        assert ended == {"visited": ["a", "b", "c"]}
        assert sent_ahead == []
        assert _stored_steps(reader, config) == [-1, 0, 1, 2, 3]


def test_g22_a_refused_write_sent_ahead_is_raised_once_by_the_next_call_on_its_thread(
    sent_ahead: list[str], pipelining: Callable[..., Pipelining]
) -> None:
    """A put_writes the server refuses (a task id longer than it takes) returns at once; the
    next read of its thread raises the refusal, once, and reads again after that; another
    thread's read does not raise it, and nothing of it was stored."""
    saver = pipelining(pipeline=True)
    config = _thread()
    stored = saver.invoke(_graph(saver.saver), {"visited": []}, config)
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


def test_g22_flush_without_pipeline_and_with_nothing_ahead_returns(
    pipelining: Callable[..., Pipelining],
) -> None:
    """flush() and close() on a saver without pipeline, or with nothing sent, just return."""
    plain = pipelining()
    plain.flush()
    plain.flush("no-such-thread")
    plain.close()
    pipelining(pipeline=True).close()


@pytest.mark.parametrize("maker", [CheckpointdSaver, AsyncCheckpointdSaver])
def test_g22_pipeline_without_the_write_stream_is_refused(maker: Any) -> None:
    """pipeline=True with write_stream=False: a ValueError naming both, before connecting."""
    with pytest.raises(ValueError, match="write_stream"):
        maker("unix:///nonexistent/checkpointd.sock", pipeline=True, write_stream=False)


def test_g22_the_asyncio_savers_blocking_methods_wait_for_what_it_sent_ahead(
    sidecar: SharedSidecar,
) -> None:
    """The asyncio saver's blocking methods, called from another thread (as LangGraph's sync
    ``get_state`` on an asyncio saver is), first wait in the saver's loop for what ``aput`` and
    ``aput_writes`` sent ahead to their thread: a refused write is raised there, once, and the
    run's end is read. Called in the saver's own loop while the thread has writes ahead, one
    raises RuntimeError instead of waiting on itself."""

    async def run() -> None:
        async with AsyncCheckpointdSaver(
            sidecar.target, namespace=sidecar.namespace, pipeline=True
        ) as saver:
            config = _thread()
            graph = _graph(saver)
            assert await graph.ainvoke({"visited": []}, config) == {"visited": ["a", "b", "c"]}
            assert (await asyncio.to_thread(graph.get_state, config)).values == {
                "visited": ["a", "b", "c"]
            }
            latest = await saver.aget_tuple(config)
            assert latest is not None
            await saver.aput_writes(latest.config, [("visited", ["x"])], "t" * 5000)
            with pytest.raises(RuntimeError, match="aflush"):
                saver.get_tuple(config)
            assert await asyncio.to_thread(saver.get_tuple, _thread()) is None  # not its thread
            with pytest.raises(InvalidArgumentError):
                await asyncio.to_thread(saver.get_tuple, config)
            again = await asyncio.to_thread(saver.get_tuple, config)
            assert again is not None
            assert again.pending_writes == []
            saver.get_tuple(config)  # nothing ahead now: no RuntimeError in the loop either

    asyncio.run(run())
