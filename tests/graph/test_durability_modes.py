"""Contract G21: what is durable when a saver call returns, under each of LangGraph's
``durability`` modes. A node SIGKILLs the server in the middle of a run; after a restart on
the same store the thread holds what the mode promised, every ``put`` that returned is
there, and the run resumes from it to the end."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import uuid
from typing import Annotated, Any, Literal, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from checkpointd_client import CheckpointdError, RetryPolicy
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from tests.conftest import BACKENDS
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server  # kills its server mid-run

Durability = Literal["sync", "async", "exit"]

#: One attempt per call: once the server is dead, a call fails at once (its socket refuses),
#: so the run ends soon; the deadline only bounds a call to the live server on a busy machine.
NO_RETRY = RetryPolicy(max_attempts=1)
DEADLINE = 30.0


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Both stores (what G21 says rests on E1, which PgBouncer passes through unchanged)."""
    return str(request.param)


@pytest.fixture
def server(sidecar_factory: Any) -> Sidecar:
    """A server of the test's own on a fresh store: the test kills it."""
    started: Sidecar = sidecar_factory()
    return started


class State(TypedDict):
    visited: Annotated[list[str], operator.add]


class Crash:
    """Kills the server once, from inside node ``c``, the step after ``a`` and ``b``."""

    def __init__(self, server: Sidecar) -> None:
        self.server = server
        self.fired = False

    def __call__(self, state: State) -> dict[str, Any]:
        if not self.fired:
            self.fired = True
            self.server.kill()
            raise RuntimeError("the server died under this step")
        return {"visited": ["c"]}


def _graph(crash: Crash, saver: Any) -> CompiledStateGraph[Any]:
    builder = StateGraph(State)
    builder.add_node("a", lambda state: {"visited": ["a"]})
    builder.add_node("b", lambda state: {"visited": ["b"]})
    builder.add_node("c", crash)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


class RecordingSaver(CheckpointdSaver):
    """The blocking saver, noting the id of each ``put`` that returned (acknowledged)."""

    returned: list[str]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = super().put(config, checkpoint, metadata, new_versions)
        self.returned.append(stored["configurable"]["checkpoint_id"])
        return stored


class AsyncRecordingSaver(AsyncCheckpointdSaver):
    """The asyncio saver, noting the id of each ``aput`` that returned."""

    returned: list[str]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stored = await super().aput(config, checkpoint, metadata, new_versions)
        self.returned.append(stored["configurable"]["checkpoint_id"])
        return stored


#: What a crashed run raises: the node's own error, or the saver's on the dead server.
CRASHED = (RuntimeError, CheckpointdError)


def _crash_run(
    server: Sidecar, crash: Crash, config: RunnableConfig, durability: Durability, aio: bool
) -> list[str]:
    """Runs the graph until node ``c`` kills the server; returns the ids of the puts that
    returned before the run ended."""
    options: dict[str, Any] = {"timeout": DEADLINE, "retry": NO_RETRY}
    # The TCP address, new at each start: grpc keeps a connection to an address it failed to
    # reach in backoff for a while, shared across channels, so the Unix socket's address could
    # refuse this run's first call although the server is back.
    target = server.tcp_target
    if aio:

        async def run() -> list[str]:
            async with AsyncRecordingSaver(target, **options) as saver:
                saver.returned = []
                with pytest.raises(CRASHED) as raised:
                    await _graph(crash, saver).ainvoke(
                        {"visited": []}, config, durability=durability
                    )
                assert crash.fired, f"the run ended before node c: {raised.value!r}"
                return saver.returned

        return asyncio.run(run())
    with RecordingSaver(target, **options) as saver:
        saver.returned = []
        with pytest.raises(CRASHED) as raised:
            _graph(crash, saver).invoke({"visited": []}, config, durability=durability)
        assert crash.fired, f"the run ended before node c: {raised.value!r}"
        return saver.returned


def _history(saver: CheckpointdSaver, config: RunnableConfig) -> list[tuple[str, int]]:
    """The thread's checkpoints after the restart, oldest first: (id, step)."""
    found = [(t.checkpoint["id"], t.metadata["step"]) for t in saver.list(config)]
    return found[::-1]


def _parents_chain(saver: CheckpointdSaver, config: RunnableConfig) -> None:
    """Every stored checkpoint's parent is stored too: a crash leaves no hole in the chain."""
    ids = {t.checkpoint["id"] for t in saver.list(config)}
    for stored in saver.list(config):
        if stored.parent_config is not None:
            assert stored.parent_config["configurable"]["checkpoint_id"] in ids


#: Each mode, with the blocking saver and the asyncio one (exit's single put is the same).
MODES: list[tuple[Durability, bool]] = [
    ("sync", False),
    ("sync", True),
    ("async", False),
    ("async", True),
    ("exit", False),
]


def test_g21_a_crash_mid_run_keeps_what_the_durability_mode_promised(server: Sidecar) -> None:
    """sync: the step before the crash is stored (next = the crashed node) and the run
    resumes there; async: every put that returned is stored, in an unbroken chain, and the
    run resumes from the newest (or starts again when nothing was acknowledged); exit: the
    thread holds nothing of the crashed run. One server, killed once per mode, each mode on
    a thread of its own."""
    for durability, asyncio_saver in MODES:
        _crash_and_resume(server, durability, asyncio_saver)


def _crash_and_resume(server: Sidecar, durability: Durability, asyncio_saver: bool) -> None:
    mode = f"durability={durability}, {'asyncio' if asyncio_saver else 'blocking'} saver"
    config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
    crash = Crash(server)
    returned = _crash_run(server, crash, config, durability, asyncio_saver)
    assert crash.fired, mode
    assert server.process is not None
    assert server.process.poll() is not None, mode  # dead: what follows reads a restart
    server.start()
    with CheckpointdSaver(server.target) as saver:
        history = _history(saver, config)
        stored_ids = [checkpoint_id for checkpoint_id, _ in history]
        assert set(returned) <= set(stored_ids), (mode, returned, history)
        _parents_chain(saver, config)
        graph = _graph(crash, saver)
        if durability == "exit":
            assert history == [], mode
            assert returned == [], mode
            assert graph.invoke({"visited": []}, config) == {"visited": ["a", "b", "c"]}, mode
            return
        if durability == "sync":
            # Steps -1 (input), 0 (after __start__), 1 (after a) and 2 (after b), each put
            # returned before the next step ran; c's step wrote nothing.
            assert [step for _, step in history] == [-1, 0, 1, 2], mode
            assert returned == stored_ids, mode
            assert graph.get_state(config).next == ("c",), mode
        # async: the newest stored checkpoint may be any of them, or none when even the
        # input's put was not acknowledged before the crash (the run then starts again).
        again: State | None = None if history else {"visited": []}
        assert graph.invoke(again, config)["visited"] == ["a", "b", "c"], mode
        assert graph.get_state(config).next == (), mode


@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
def test_g22_a_crash_mid_run_leaves_a_pipelining_saver_an_unbroken_chain(
    server: Sidecar, aio: bool
) -> None:
    """A saver with ``pipeline`` (its puts return before their answers, G22), the blocking
    one and the asyncio one, under the default durability: the server dies in node c; after
    a restart what is stored is a prefix of the puts sent, in order (each applied only after
    the one before, S5), an unbroken chain, and the run resumes from it to the end. Waiting
    for what was sent ahead raises the loss of what the dead server never stored."""
    config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
    crash = Crash(server)
    options: dict[str, Any] = {"timeout": DEADLINE, "retry": NO_RETRY, "pipeline": True}
    if aio:

        async def run() -> list[str]:
            saver = AsyncRecordingSaver(server.tcp_target, **options)
            saver.returned = []
            try:
                with pytest.raises(CRASHED) as raised:
                    await _graph(crash, saver).ainvoke({"visited": []}, config)
                assert crash.fired, f"the run ended before node c: {raised.value!r}"
            finally:
                with contextlib.suppress(CheckpointdError):  # not answered by the dead server
                    await saver.aclose()
            return saver.returned

        sent = asyncio.run(run())
    else:
        saver = RecordingSaver(server.tcp_target, **options)
        saver.returned = []
        try:
            with pytest.raises(CRASHED) as raised:
                _graph(crash, saver).invoke({"visited": []}, config)
            assert crash.fired, f"the run ended before node c: {raised.value!r}"
        finally:
            with contextlib.suppress(CheckpointdError):  # not answered by the dead server
                saver.close()
        sent = saver.returned
    assert sent, "no put returned before the crash"
    server.start()
    with CheckpointdSaver(server.target) as reader:
        stored_ids = [checkpoint_id for checkpoint_id, _ in _history(reader, config)]
        # What is stored is the run's first puts, in order, with none missing between (the
        # server applied each only after the one before, S5, or the saver sent it only then).
        assert stored_ids == sent[: len(stored_ids)], (sent, stored_ids)
        _parents_chain(reader, config)
        graph = _graph(crash, reader)
        again: State | None = None if stored_ids else {"visited": []}
        assert graph.invoke(again, config)["visited"] == ["a", "b", "c"]
