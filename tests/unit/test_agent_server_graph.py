"""AgentServerGraph, the worker's runner of an Agent Server's graphs, against a stand-in of
langgraph-sdk's client: the thread's state in StateSnapshot's shape, the worker's Command sent
as the run's command (one run per thread: ``reject``), a run that ended in an error raised,
a busy thread's runs waited for, and langgraph-sdk not imported until the first request.
The real server: tests/graph/test_agent_server.py (make test-compat)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, cast

import pytest
from langgraph.types import Command

from checkpointd_client.langgraph import AgentServerGraph
from checkpointd_client.langgraph.agent_server import AgentServerRunError

CONFIG = {"configurable": {"thread_id": "t-1"}}

WAITING = {
    "values": {"log": []},
    "next": ["ask"],
    "checkpoint": {"thread_id": "t-1", "checkpoint_ns": "", "checkpoint_id": "c-2"},
    "metadata": {"step": 1},
    "tasks": [
        {
            "id": "task-1",
            "name": "ask",
            "error": None,
            "interrupts": [{"id": "i-1", "value": {"question": "ship?"}}],
        }
    ],
    "interrupts": [
        {"id": "i-1", "value": {"question": "ship?"}, "response_schema": {"type": "object"}}
    ],
}


class FakeThreads:
    def __init__(self, statuses: list[str], state: dict[str, Any]) -> None:
        self.statuses = statuses
        self.state = state

    async def get(self, thread_id: str) -> dict[str, Any]:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"thread_id": thread_id, "status": status}

    async def get_state(self, thread_id: str) -> dict[str, Any]:
        return self.state


class FakeRuns:
    def __init__(self, result: Any = None, in_progress: tuple[dict[str, Any], ...] = ()) -> None:
        self.result = result if result is not None else {"log": ["done"]}
        self.in_progress = list(in_progress)
        self.waits: list[tuple[str, str, dict[str, Any]]] = []
        self.joined: list[str] = []

    async def wait(self, thread_id: str, assistant_id: str, **options: Any) -> Any:
        self.waits.append((thread_id, assistant_id, options))
        return self.result

    async def list(self, thread_id: str, *, status: str) -> list[dict[str, Any]]:
        return [run for run in self.in_progress if run["status"] == status]

    async def join(self, thread_id: str, run_id: str) -> dict[str, Any]:
        self.joined.append(run_id)
        return {}


class FakeClient:
    def __init__(self, threads: FakeThreads, runs: FakeRuns) -> None:
        self.threads = threads
        self.runs = runs


def runner(threads: FakeThreads, runs: FakeRuns) -> AgentServerGraph:
    return AgentServerGraph(cast(Any, FakeClient(threads, runs)), "agent")


async def test_the_state_has_the_shape_of_a_state_snapshot() -> None:
    state = await runner(FakeThreads(["interrupted"], WAITING), FakeRuns()).aget_state(CONFIG)
    assert state.next == ("ask",)
    [waited] = state.interrupts
    assert (waited.id, waited.value) == ("i-1", {"question": "ship?"})
    assert waited.response_schema == {"type": "object"}
    [task] = state.tasks
    assert (task.name, [i.id for i in task.interrupts]) == ("ask", ["i-1"])
    assert state.values == {"log": []}
    assert state.config == {
        "configurable": {"thread_id": "t-1", "checkpoint_ns": "", "checkpoint_id": "c-2"}
    }


async def test_a_resume_is_the_runs_command_and_a_run_is_refused_on_a_busy_thread() -> None:
    runs = FakeRuns()
    graph = runner(FakeThreads(["interrupted"], WAITING), runs)
    result = await graph.ainvoke(Command(resume={"i-1": {"ship": True}}), CONFIG)
    assert result == {"log": ["done"]}
    [(thread, assistant, options)] = runs.waits
    assert (thread, assistant) == ("t-1", "agent")
    assert options["command"] == {"resume": {"i-1": {"ship": True}}}
    assert options["multitask_strategy"] == "reject"
    assert options["on_disconnect"] == "continue"
    assert "input" not in options


async def test_none_goes_on_from_the_newest_checkpoint_with_no_input() -> None:
    runs = FakeRuns()
    await runner(FakeThreads(["idle"], WAITING), runs).ainvoke(None, CONFIG)
    [(_, _, options)] = runs.waits
    assert "input" not in options
    assert "command" not in options


async def test_a_run_that_ended_in_an_error_raises() -> None:
    runs = FakeRuns(result={"__error__": {"error": "ValueError", "message": "boom"}})
    graph = runner(FakeThreads(["idle"], WAITING), runs)
    with pytest.raises(AgentServerRunError, match="ValueError: boom"):
        await graph.ainvoke(Command(resume={"i-1": True}), CONFIG)


async def test_a_busy_thread_is_waited_for_before_its_state_is_read() -> None:
    runs = FakeRuns(in_progress=({"run_id": "r-1", "status": "running", "created_at": "1"},))
    threads = FakeThreads(["busy", "idle"], {**WAITING, "next": [], "tasks": [], "interrupts": []})
    state = await runner(threads, runs).aget_state(CONFIG)
    assert runs.joined == ["r-1"]
    assert state.next == ()
    assert state.interrupts == ()


def test_client_options_are_for_a_url_only() -> None:
    with pytest.raises(TypeError):
        AgentServerGraph(cast(Any, object()), "agent", api_key="k")


def test_langgraph_sdk_is_imported_on_the_first_request_only() -> None:
    probe = (
        "import sys\n"
        "from checkpointd_client.langgraph import AgentServerGraph\n"
        "AgentServerGraph('http://127.0.0.1:9', 'agent')\n"
        "print('langgraph_sdk' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
