"""LangGraph's own Agent Server (``langgraph dev``, langgraph-api 0.16) on checkpointd: its
``langgraph.json`` names an ``AsyncCheckpointdSaver`` factory as its checkpointer, a run that
pauses is a pending interrupt in checkpointd's inbox (chain name: the server's graph id), and
a ``GraphResumeWorker`` with ``AgentServerGraph`` carries the decision out through the
server's runs API, so the server's own view of the thread (its status, its state, its
interrupted threads) says it went on (G11, K2, K3).

The Agent Server runs in a process of its own, as users run it; it needs langgraph-api, which
only ``make test-compat``'s langgraph-api environment holds (it pins grpcio 1.81 and
protobuf < 7): elsewhere the module skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("langgraph_api")
pytest.importorskip("langgraph_cli")
pytest.importorskip("langchain")

from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from checkpointd_client import (
    ActionDecision,
    AsyncCheckpointdClient,
    Decision,
    DecisionResponse,
    PendingInterrupt,
)
from checkpointd_client.langgraph import AgentServerGraph, GraphResumeWorker
from tests.conftest import BACKENDS
from tests.support.shared_server import SharedSidecar

#: The bound of every wait: the Agent Server's start, a pause reaching the inbox, a resume.
TIMEOUT_S = 60.0

T = TypeVar("T")

# The Agent Server's project: a plain graph that asks once, and a LangChain v1 agent whose
# tool call HumanInTheLoopMiddleware gates, with an offline model that asks for the call and
# then answers "done". Both keep their threads in checkpointd.
LANGGRAPH_JSON = {
    "dependencies": ["."],
    "graphs": {"agent": "./graph.py:graph", "hitl": "./hitl.py:agent"},
    "checkpointer": {"path": "./saver.py:make_saver"},
}

SAVER_PY = """
import os
from contextlib import asynccontextmanager

from checkpointd_client.langgraph import AsyncCheckpointdSaver


@asynccontextmanager
async def make_saver():
    async with AsyncCheckpointdSaver(
        os.environ["CHECKPOINTD_TARGET"], namespace=os.environ["CHECKPOINTD_NAMESPACE"]
    ) as saver:
        yield saver
"""

GRAPH_PY = """
import asyncio
import json
import operator
import os
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

RAN = Path(os.environ["AGENT_SERVER_TEST_DIR"]) / "ran.log"


class State(TypedDict):
    item: str
    gate: str
    log: Annotated[list[str], operator.add]


def _append(line):
    with RAN.open("a") as out:
        out.write(line + "\\n")


async def ask(state):
    answer = interrupt({"question": f"ship {state['item']}?"})
    return {"log": ["answer " + json.dumps(answer, sort_keys=True)]}


async def finish(state):
    await asyncio.to_thread(_append, "finish started")
    if state.get("gate"):
        gate = Path(state["gate"])
        for _ in range(1200):  # a bounded wait: 60 s
            if await asyncio.to_thread(gate.exists):
                break
            await asyncio.sleep(0.05)
    await asyncio.to_thread(_append, "finish")
    return {"log": ["finished"]}


builder = StateGraph(State)
builder.add_node("ask", ask)
builder.add_node("finish", finish)
builder.add_edge(START, "ask")
builder.add_edge("ask", "finish")
graph = builder.compile()
"""

HITL_PY = '''
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class ScriptedModel(BaseChatModel):
    """Offline: asks to send an email, and once a tool answered, says done."""

    @property
    def _llm_type(self):
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if any(isinstance(message, ToolMessage) for message in messages):
            reply = AIMessage(content="done")
        else:
            call = {"name": "send_email", "args": {"to": "alice", "body": "hi"}, "id": "call-1"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools, **kwargs):
        return self


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}: {body}"


agent = create_agent(
    ScriptedModel(),
    tools=[send_email],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
)
'''


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite and Postgres (the saver's own suites cover PgBouncer)."""
    return str(request.param)


@dataclass
class AgentServer:
    """A ``langgraph dev`` process on checkpointd: its URL and its project directory."""

    url: str
    directory: Path
    log: Path

    def ran(self) -> list[str]:
        """What the plain graph's ``finish`` node did, in order."""
        path = self.directory / "ran.log"
        return path.read_text().splitlines() if path.exists() else []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@pytest.fixture
def agent_server(sidecar: SharedSidecar, tmp_path: Path) -> Iterator[AgentServer]:
    """``langgraph dev`` in a process group of its own, its checkpointer a checkpointd saver
    on the test's server and namespace; the group is killed at teardown."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "langgraph.json").write_text(json.dumps(LANGGRAPH_JSON))
    (project / "saver.py").write_text(SAVER_PY)
    (project / "graph.py").write_text(GRAPH_PY)
    (project / "hitl.py").write_text(HITL_PY)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "langgraph-dev.log"
    env = {
        **os.environ,
        "CHECKPOINTD_TARGET": sidecar.target,
        "CHECKPOINTD_NAMESPACE": sidecar.namespace,
        "AGENT_SERVER_TEST_DIR": str(project),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "PYTHONUNBUFFERED": "1",
    }
    langgraph = Path(sys.executable).with_name("langgraph")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(langgraph),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--config",
                str(project / "langgraph.json"),
            ],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not _ok(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start:\n{log.read_text()[-6000:]}")
            time.sleep(0.2)
        yield AgentServer(url, project, log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)


@pytest.fixture
async def sdk(agent_server: AgentServer) -> AsyncIterator[LangGraphClient]:
    async with get_client(url=agent_server.url, api_key=None) as client:
        yield client


@pytest.fixture
async def inbox(sidecar: SharedSidecar) -> AsyncIterator[AsyncCheckpointdClient]:
    async with AsyncCheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        yield client


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """``probe()``'s first answer that is not None, within TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = await probe()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def pause_of(inbox: AsyncCheckpointdClient, thread_id: str) -> PendingInterrupt:
    async def probe() -> PendingInterrupt | None:
        page = await inbox.list_pending_interrupts()
        found = [p for p in page.pending_interrupts if p.execution_id == thread_id]
        return found[0] if found else None

    return await eventually(probe, f"the pause of {thread_id} in the inbox")


async def decision_of(
    inbox: AsyncCheckpointdClient, pause: PendingInterrupt, *statuses: str
) -> Decision:
    async def probe() -> Decision | None:
        page = await inbox.list_decisions()
        for decided in page.pending_interrupts:
            if (decided.execution_id, decided.interrupt_id) == (
                pause.execution_id,
                pause.interrupt_id,
            ):
                assert decided.decision is not None
                if decided.decision.status in statuses:
                    return decided.decision
        return None

    return await eventually(probe, f"the decision on {pause.interrupt_id} to be {statuses}")


async def resumed_by_worker(
    sidecar: SharedSidecar,
    agent_server: AgentServer,
    graph_id: str,
    until: Callable[[], Awaitable[T]],
    client: LangGraphClient | None = None,
) -> T:
    """Run a worker whose runner of ``graph_id`` is the Agent Server (through ``client``, or
    one of its own) until ``until()`` answers."""
    if client is None:
        runner = AgentServerGraph(agent_server.url, graph_id, api_key=None)
    else:
        runner = AgentServerGraph(client, graph_id)
    async with runner:
        worker = GraphResumeWorker(
            sidecar.target, graphs={graph_id: runner}, namespace=sidecar.namespace
        )
        running = asyncio.create_task(worker.arun())
        try:
            return await until()
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT_S)


async def interrupted_ids(sdk: LangGraphClient) -> set[str]:
    return {t["thread_id"] for t in await sdk.threads.search(status="interrupted", limit=100)}


async def test_g11_a_pause_of_the_agent_server_is_resumed_through_its_runs_api(
    sidecar: SharedSidecar,
    agent_server: AgentServer,
    sdk: LangGraphClient,
    inbox: AsyncCheckpointdClient,
) -> None:
    """A run of the Agent Server pauses; the pause is in checkpointd's inbox under the
    server's graph id; decided there, the worker resumes it through the runs API: the server's
    thread is idle, waits on nothing, shows the decision's answer, and is not listed as
    interrupted."""
    thread_id = (await sdk.threads.create())["thread_id"]
    paused = await sdk.runs.wait(thread_id, "agent", input={"item": "crate", "log": []})
    assert isinstance(paused, dict)
    [waiting] = paused["__interrupt__"]
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"
    assert thread_id in await interrupted_ids(sdk)

    pause = await pause_of(inbox, thread_id)
    assert pause.chain_name == "agent"
    assert pause.interrupt_id == waiting["id"]
    assert pause.context == {"question": "ship crate?"}
    answer = {"ship": True, "by": "boat"}
    await inbox.submit_decision(
        thread_id,
        interrupt_id=pause.interrupt_id,
        approved=True,
        decided_by="ana",
        response=DecisionResponse.resume(answer),
    )

    decision = await resumed_by_worker(
        sidecar, agent_server, "agent", lambda: decision_of(inbox, pause, "resumed")
    )
    assert decision.attempts == 1

    thread = await sdk.threads.get(thread_id)
    assert thread["status"] == "idle"
    state = await sdk.threads.get_state(thread_id)
    assert not state["interrupts"]
    assert not state["next"]
    assert isinstance(state["values"], dict)
    assert state["values"]["log"] == ["answer " + json.dumps(answer, sort_keys=True), "finished"]
    assert thread_id not in await interrupted_ids(sdk)
    assert agent_server.ran() == ["finish started", "finish"]
    # The worker ran the thread once, on the server: the first run and the resume.
    runs = await sdk.runs.list(thread_id)
    assert sorted(r["status"] for r in runs) == ["success", "success"]
    # And the pause left the inbox.
    page = await inbox.list_pending_interrupts()
    assert thread_id not in {p.execution_id for p in page.pending_interrupts}


async def test_g11_a_worker_joins_the_run_in_progress_instead_of_running_the_thread_again(
    sidecar: SharedSidecar,
    agent_server: AgentServer,
    sdk: LangGraphClient,
    inbox: AsyncCheckpointdClient,
) -> None:
    """A run resuming the thread is in progress on the server (a worker started it and
    died): a worker that takes the decision waits for that run and reports ``resumed`` once
    it ended, without a second run; the thread went on once."""
    gate = agent_server.directory / "gate"
    thread_id = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(thread_id, "agent", input={"item": "box", "gate": str(gate), "log": []})
    pause = await pause_of(inbox, thread_id)
    await inbox.submit_decision(
        thread_id, interrupt_id=pause.interrupt_id, approved=True, decided_by="bo"
    )
    # The run a dead worker left: the resume, stopped in `finish` until the gate opens.
    await sdk.runs.create(
        thread_id, "agent", command={"resume": {pause.interrupt_id: {"approved": True}}}
    )

    async def finish_started() -> bool | None:
        return True if agent_server.ran() == ["finish started"] else None

    await eventually(finish_started, "the run in progress to reach finish")
    assert (await sdk.threads.get(thread_id))["status"] == "busy"

    # The worker's client, its joins seen: the gate opens once the worker waits on the run.
    joining = asyncio.Event()
    client = get_client(url=agent_server.url, api_key=None)
    join = client.runs.join

    async def seen_join(thread: str, run_id: str, **options: Any) -> dict[str, Any]:
        joining.set()
        return await join(thread, run_id, **options)

    client.runs.join = seen_join  # type: ignore[method-assign,assignment]

    async def open_gate_once_joined() -> Decision:
        await asyncio.wait_for(joining.wait(), TIMEOUT_S)
        gate.touch()
        return await decision_of(inbox, pause, "resumed", "resume_failed")

    async with client:
        decision = await resumed_by_worker(
            sidecar, agent_server, "agent", open_gate_once_joined, client
        )
    assert decision.status == "resumed", decision.error
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
    state = await sdk.threads.get_state(thread_id)
    assert not state["interrupts"]
    assert isinstance(state["values"], dict)
    assert state["values"]["log"][-1] == "finished"
    assert agent_server.ran() == ["finish started", "finish"]
    assert len(await sdk.runs.list(thread_id)) == 2


async def test_g11_a_middleware_pause_of_the_agent_server_is_decided_with_an_edit(
    sidecar: SharedSidecar,
    agent_server: AgentServer,
    sdk: LangGraphClient,
    inbox: AsyncCheckpointdClient,
) -> None:
    """A LangChain v1 agent on the Agent Server pauses in HumanInTheLoopMiddleware; edited in
    checkpointd (K3), the worker sends LangChain's edit decision as the run's command: the
    tool ran with the edited arguments and the agent ended on the server."""
    thread_id = (await sdk.threads.create())["thread_id"]
    question: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    await sdk.runs.wait(thread_id, "hitl", input=question)
    pause = await pause_of(inbox, thread_id)
    assert pause.chain_name == "hitl"
    assert [a["name"] for a in pause.context["action_requests"]] == ["send_email"]
    await inbox.submit_decision(
        thread_id,
        interrupt_id=pause.interrupt_id,
        decided_by="cy",
        response=DecisionResponse(actions=(ActionDecision.edit({"to": "bob", "body": "hello"}),)),
    )

    decision = await resumed_by_worker(
        sidecar, agent_server, "hitl", lambda: decision_of(inbox, pause, "resumed")
    )
    assert decision.attempts == 1
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
    state = await sdk.threads.get_state(thread_id)
    assert not state["interrupts"]
    assert isinstance(state["values"], dict)
    messages = state["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    # The tool ran once, with the edited arguments (LangChain tells the model of the edit).
    assert messages[2]["content"].endswith("sent to bob: hello")
    assert messages[3]["content"] == "done"
    assert thread_id not in await interrupted_ids(sdk)
