"""LangChain v1 agents paused by ``HumanInTheLoopMiddleware``, decided in checkpointd's inbox
and resumed by ``GraphResumeWorker`` as LangChain's own in-memory run resumes them (G11).

``create_agent`` with a scripted offline chat model that asks for two tool calls at once
(``send_email``, then ``delete_file``), both gated. Batched (the default): one pause whose
value is a ``HITLRequest``; the worker answers ``{"decisions": [...]}``, the verdict for each
call in order. Per call: one pause per call (a ``ToolApprovalRequest``), each answered by its
id with one decision. A verdict the pause does not allow is refused before the graph runs:
the decision is ``resume_failed`` with the reason, and the thread still waits, untouched.
Real server, both backends.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from checkpointd_client import (
    ActionDecision,
    CheckpointdClient,
    DecisionResponse,
    PendingInterrupt,
)
from checkpointd_client.langgraph import AsyncCheckpointdSaver, GraphResumeWorker
from tests.support.shared_server import SharedSidecar

TIMEOUT_S = 60
CALLS = [
    {"name": "send_email", "args": {"to": "alice", "body": "hi"}, "id": "call-1"},
    {"name": "delete_file", "args": {"path": "report.txt"}, "id": "call-2"},
]


class ScriptedModel(GenericFakeChatModel):
    """An offline chat model: its script of messages, one per call; tools change nothing."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@pytest.fixture
def ran() -> list[str]:
    """What the tools did, in order."""
    return []


def build(checkpointer: Any, ran: list[str], **middleware: Any) -> Any:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        ran.append(f"send_email:{to}")
        return "sent"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(f"delete_file:{path}")
        return "deleted"

    script = iter([AIMessage(content="", tool_calls=CALLS), AIMessage(content="done")])
    gates = middleware.pop("interrupt_on", {"send_email": True, "delete_file": True})
    return create_agent(
        ScriptedModel(messages=script),
        tools=[send_email, delete_file],
        middleware=[HumanInTheLoopMiddleware(interrupt_on=gates, **middleware)],
        checkpointer=checkpointer,
    )


def _outcome(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The tool messages and the final answer: what the run did, comparable across savers."""
    return [
        (type(m).__name__, str(m.content))
        for m in result["messages"]
        if isinstance(m, ToolMessage) or (isinstance(m, AIMessage) and m.content)
    ]


def reference(answers: Any, **middleware: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """LangChain's own in-memory run, resumed with ``answers`` (a callable of the pause)."""
    ran: list[str] = []
    agent = build(InMemorySaver(), ran, **middleware)
    config = {"configurable": {"thread_id": "reference"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config)
    result = agent.invoke(Command(resume=answers(paused["__interrupt__"])), config)
    return _outcome(result), ran


def pauses(client: CheckpointdClient, thread: str, count: int) -> list[PendingInterrupt]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = [p for p in client.iter_pending_interrupts() if p.execution_id == thread]
        if len(found) == count:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def _decisions(client: CheckpointdClient) -> Iterator[PendingInterrupt]:
    token = ""
    while True:
        page = client.list_decisions(page_token=token)
        yield from page.pending_interrupts
        token = page.next_page_token
        if not token:
            return


def status_of(client: CheckpointdClient, thread: str, interrupt_id: str, status: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        for decided in _decisions(client):
            if (decided.execution_id, decided.interrupt_id) == (thread, interrupt_id):
                assert decided.decision is not None
                if decided.decision.status == status:
                    return decided.decision
        assert time.monotonic() < deadline, f"{interrupt_id} never became {status}"
        time.sleep(0.05)


class Reachable(Protocol):
    """Where a sidecar answers: its target and the namespace a test writes in."""

    @property
    def target(self) -> str: ...

    @property
    def namespace(self) -> str: ...


async def run_decided(
    sidecar: Reachable, ran: list[str], decide: Any, count: int, **middleware: Any
) -> tuple[dict[str, Any], list[PendingInterrupt]]:
    """Pause the agent in the sidecar, decide its ``count`` pauses with ``decide(client,
    pauses)`` and let a worker resume them; the thread's last state and the pauses."""
    thread = f"agent-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    async with AsyncCheckpointdSaver(
        sidecar.target, namespace=sidecar.namespace, graph_name="agent"
    ) as saver:
        agent = build(saver, ran, **middleware)
        await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, config)
        worker = GraphResumeWorker(
            sidecar.target, graphs={"agent": agent}, namespace=sidecar.namespace
        )
        running = asyncio.create_task(worker.arun())
        try:
            with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
                found = await asyncio.to_thread(pauses, client, thread, count)
                await asyncio.to_thread(decide, client, found)
            state = await agent.aget_state(config)
        finally:
            worker.stop()
            await running
    return {"state": state, "thread": thread}, found


async def test_g11_a_batched_pause_approved_in_the_inbox_runs_both_calls(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """One pause for both calls, its value LangChain's HITLRequest; approved once, the worker
    answers an approve per call, and the agent ends as LangChain's own run with those
    decisions."""
    expected, expected_ran = reference(
        lambda _: {"decisions": [{"type": "approve"}, {"type": "approve"}]}
    )

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        assert [a["name"] for a in pause.context["action_requests"]] == [
            "send_email",
            "delete_file",
        ]
        client.submit_decision(
            pause.execution_id, interrupt_id=pause.interrupt_id, approved=True, decided_by="ana"
        )
        assert status_of(client, pause.execution_id, pause.interrupt_id, "resumed").attempts == 1

    done, _ = await run_decided(sidecar, ran, decide, 1)
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    # Parallel tasks: the order the two calls start in is not the run's.
    assert sorted(ran) == sorted(expected_ran) == ["delete_file:report.txt", "send_email:alice"]


async def test_g11_a_batched_pause_rejected_with_a_reason_tells_the_model(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """Rejected with a reason: neither call runs, and the model is told the reason for each,
    as LangChain's own run with two reject decisions."""
    expected, expected_ran = reference(
        lambda _: {"decisions": [{"type": "reject", "message": "not today"}] * 2}
    )

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        client.submit_decision(
            pause.execution_id,
            interrupt_id=pause.interrupt_id,
            approved=False,
            decided_by="ana",
            reason="not today",
        )
        status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, _ = await run_decided(sidecar, ran, decide, 1)
    assert _outcome(done["state"].values) == expected
    assert ran == expected_ran == []


async def test_g11_per_call_pauses_are_decided_one_by_one(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """Per call: a pause per tool call, each decided on its own (email approved, delete
    rejected), each answered by its id with one decision, as LangChain's own run."""

    def answers(interrupts: Any) -> dict[str, Any]:
        return {
            i.id: {"type": "approve"}
            if i.value["name"] == "send_email"
            else {"type": "reject", "message": "keep it"}
            for i in interrupts
        }

    expected, expected_ran = reference(answers, interrupt_mode="per_call")

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        for pause in sorted(found, key=lambda p: p.context["name"]):
            approved = pause.context["name"] == "send_email"
            client.submit_decision(
                pause.execution_id,
                interrupt_id=pause.interrupt_id,
                approved=approved,
                decided_by="bo",
                reason=None if approved else "keep it",
            )
            status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, found = await run_decided(sidecar, ran, decide, 2, interrupt_mode="per_call")
    assert {p.context["type"] for p in found} == {"tool_approval"}
    assert {p.node_id for p in found} == {"tools"}  # a Send task's pause, named by its node
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    assert ran == expected_ran == ["send_email:alice"]


async def test_g11_a_verdict_the_pause_does_not_allow_is_refused_before_the_graph_runs(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """delete_file allows approve only: a rejection is reported resume_failed, naming what
    the pause allows, and nothing is written to the thread (it still waits, no tool ran)."""
    gates = {"send_email": True, "delete_file": {"allowed_decisions": ["approve"]}}

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        client.submit_decision(
            pause.execution_id, interrupt_id=pause.interrupt_id, approved=False, decided_by="cy"
        )
        failed = status_of(client, pause.execution_id, pause.interrupt_id, "resume_failed")
        assert "does not allow 'reject' for 'delete_file'" in failed.error

    done, [pause] = await run_decided(sidecar, ran, decide, 1, interrupt_on=gates)
    assert [i.id for i in done["state"].interrupts] == [pause.interrupt_id]
    assert ran == []


async def test_k3_a_batched_pause_edited_and_answered_resumes_as_langchain_does(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """Typed answers from the inbox: the email edited (another recipient), the deletion
    answered for the tool; the worker sends them as LangChain's decisions, and the agent ends
    as LangChain's own run with the same decisions."""
    edited = {"to": "bob", "body": "hello"}
    expected, expected_ran = reference(
        lambda _: {
            "decisions": [
                {"type": "edit", "edited_action": {"name": "send_email", "args": edited}},
                {"type": "respond", "message": "Already deleted."},
            ]
        },
        interrupt_on={"send_email": True, "delete_file": True},
    )

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        client.submit_decision(
            pause.execution_id,
            interrupt_id=pause.interrupt_id,
            decided_by="ana",
            response=DecisionResponse(
                actions=(ActionDecision.edit(edited), ActionDecision.respond("Already deleted."))
            ),
        )
        status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, _ = await run_decided(sidecar, ran, decide, 1)
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    assert ran == expected_ran == ["send_email:bob"]


async def test_k3_a_per_call_edit_resumes_with_the_new_arguments(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """Per call: the email edited, the deletion approved, each by its id; the run is
    LangChain's own with those answers."""
    edited = {"to": "carol", "body": "hey"}

    def answers(interrupts: Any) -> dict[str, Any]:
        return {
            i.id: {"type": "edit", "edited_action": {"name": "send_email", "args": edited}}
            if i.value["name"] == "send_email"
            else {"type": "approve"}
            for i in interrupts
        }

    expected, expected_ran = reference(answers, interrupt_mode="per_call")

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        for pause in sorted(found, key=lambda p: p.context["name"]):
            email = pause.context["name"] == "send_email"
            assert "edit" in pause.context["allowed_decisions"]
            answer = ActionDecision.edit(edited) if email else ActionDecision.approve()
            client.submit_decision(
                pause.execution_id,
                interrupt_id=pause.interrupt_id,
                decided_by="bo",
                response=DecisionResponse(actions=(answer,)),
            )
            status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, _ = await run_decided(sidecar, ran, decide, 2, interrupt_mode="per_call")
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    assert sorted(ran) == sorted(expected_ran) == ["delete_file:report.txt", "send_email:carol"]


async def test_k3_a_refused_verdict_is_replaced_by_a_new_decision_and_the_agent_goes_on(
    sidecar: SharedSidecar, ran: list[str]
) -> None:
    """A rejection delete_file does not allow fails before the graph runs; the pause still
    waits, a new decision (approve both) replaces the failed one, and the agent finishes as
    LangChain's own run approving both."""
    gates = {"send_email": True, "delete_file": {"allowed_decisions": ["approve"]}}
    expected, expected_ran = reference(
        lambda _: {"decisions": [{"type": "approve"}, {"type": "approve"}]}, interrupt_on=gates
    )

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        client.submit_decision(
            pause.execution_id, interrupt_id=pause.interrupt_id, approved=False, decided_by="cy"
        )
        status_of(client, pause.execution_id, pause.interrupt_id, "resume_failed")
        [still] = pauses(client, pause.execution_id, 1)
        assert still.interrupt_id == pause.interrupt_id
        client.submit_decision(
            pause.execution_id, interrupt_id=pause.interrupt_id, approved=True, decided_by="cy"
        )
        status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, _ = await run_decided(sidecar, ran, decide, 1, interrupt_on=gates)
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    # The two approved calls run as parallel tasks: the order they start in is not the run's.
    assert sorted(ran) == sorted(expected_ran)
