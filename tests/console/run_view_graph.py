"""A LangGraph thread as a LangGraph Studio user looks at it in the run view: messages that
grow step by step, a subgraph, two pauses (the first decided through the console and
resumed, the second waiting) and a fork (the state edited at an earlier checkpoint)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from checkpointd_client.langgraph import CheckpointdSaver
from tests.console.http import decide


class RefundState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    ticket: dict[str, Any]
    log: Annotated[list[str], operator.add]


def _check(state: RefundState) -> dict[str, Any]:
    return {"log": [f"checked {state['ticket']['item']}"]}


def _checks() -> Any:
    """A subgraph of one node: its checkpoints live in a checkpoint namespace of their own."""
    builder = StateGraph(RefundState)
    builder.add_node("lookup", _check)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", END)
    return builder.compile()


def _draft(state: RefundState) -> dict[str, Any]:
    return {
        "messages": [AIMessage(content="Refund 40 EUR for order A-1?", id="m-draft")],
        "ticket": {"item": "A-1", "amount": 40},
    }


def _approve_refund(state: RefundState) -> dict[str, Any]:
    answer = interrupt({"question": "Refund 40 EUR?", "item": state["ticket"]["item"]})
    return {"messages": [HumanMessage(content=f"refund: {answer}", id="m-refund")]}


def _approve_email(state: RefundState) -> dict[str, Any]:
    answer = interrupt({"question": "Email the customer?"})
    return {"log": [f"email: {answer}"]}


def refund_graph(saver: CheckpointdSaver) -> Any:
    """draft -> checks (a subgraph) -> approve_refund (pauses) -> approve_email (pauses)."""
    builder = StateGraph(RefundState)
    builder.add_node("draft", _draft)
    builder.add_node("checks", _checks())
    builder.add_node("approve_refund", _approve_refund)
    builder.add_node("approve_email", _approve_email)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "checks")
    builder.add_edge("checks", "approve_refund")
    builder.add_edge("approve_refund", "approve_email")
    builder.add_edge("approve_email", END)
    return builder.compile(checkpointer=saver)


@dataclass(frozen=True)
class ForkedThread:
    """What the tests look for: the pauses' ids and the fork's checkpoints."""

    thread: str
    first_pause: str
    second_pause: str
    fork_point: str
    """The checkpoint with two children: the run went on from it, and an edit forked it."""
    fork: str
    """The edit's checkpoint (the branch)."""


def forked_thread(target: str, url: str, thread: str) -> ForkedThread:
    """Runs the refund graph to its first pause, decides it on the console and resumes it,
    runs to the second pause (left waiting), then forks the thread at the checkpoint after
    ``draft`` with an edit of the ticket."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    with CheckpointdSaver(target, graph_name="refunds") as saver:
        graph = refund_graph(saver)
        first = graph.invoke(
            {"messages": [HumanMessage(content="I want a refund", id="m-ask")]}, config
        )
        [asked] = first["__interrupt__"]
        body = {"interrupt_id": str(asked.id), "response": {"resume": "yes"}, "reason": "ok"}
        assert decide(url, "default", thread, body=body).status == 200
        second = graph.invoke(Command(resume="yes"), config)
        [waiting] = second["__interrupt__"]
        after_draft = next(s for s in graph.get_state_history(config) if s.next == ("checks",))
        fork_config = graph.update_state(
            after_draft.config, {"ticket": {"item": "A-1", "amount": 25}}
        )
    return ForkedThread(
        thread=thread,
        first_pause=str(asked.id),
        second_pause=str(waiting.id),
        fork_point=after_draft.config["configurable"]["checkpoint_id"],
        fork=fork_config["configurable"]["checkpoint_id"],
    )
