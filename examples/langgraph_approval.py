"""A LangGraph graph that pauses for a person, and the worker that resumes it.

A refund graph drafts a refund, then its ``approve`` node calls ``interrupt()`` with what a
person needs to see. The checkpointd saver puts that pause in the pending-interrupt inbox
(the approvals page, ``checkpointd interrupts list``, ``WatchInterrupts``) with its interrupt
id. Anyone may decide it, in any language; a :class:`GraphResumeWorker`, which has the
compiled graph, resumes the thread with the decision, once::

    checkpointd serve --console-listen 127.0.0.1:7471 &   # the sidecar and its approvals page
    python examples/langgraph_approval.py start 120        # a refund of 120 waits for approval
    python examples/langgraph_approval.py worker &         # resumes decided refunds
    checkpointd interrupts list                            # THREAD and INTERRUPT_ID
    checkpointd interrupts decide THREAD --interrupt-id ID --approve
    python examples/langgraph_approval.py show THREAD      # refunded (or refused), once

In the node, ``interrupt()`` returns the decision: ``{"approved": bool, "decided_by": str,
"reason": str | None, "metadata": dict}``. The worker holds a lease on each decision while it
resumes the thread; if it dies mid-resume, another worker takes the decision over once the
lease runs out. Ctrl-C or SIGTERM stops the worker cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import signal
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd_client.langgraph import AsyncCheckpointdSaver, GraphResumeWorker

GRAPH = "refunds"


class Refund(TypedDict):
    amount: float
    log: Annotated[list[str], operator.add]


def draft(state: Refund) -> dict[str, Any]:
    return {"log": [f"drafted a refund of {state['amount']}"]}


def approve(state: Refund) -> dict[str, Any]:
    # Everything before interrupt() runs again on resume: keep side effects after it.
    decision = interrupt({"reason": "refund_approval", "amount": state["amount"]})
    verdict = "approved" if decision["approved"] else "refused"
    return {"log": [f"{verdict} by {decision['decided_by']}"]}


def pay(state: Refund) -> dict[str, Any]:
    approved = state["log"][-1].startswith("approved")
    return {"log": ["paid" if approved else "not paid"]}


def build(saver: AsyncCheckpointdSaver) -> Any:
    graph = StateGraph(Refund)
    graph.add_node("draft", draft)
    graph.add_node("approve", approve)
    graph.add_node("pay", pay)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "approve")
    graph.add_edge("approve", "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=saver)


async def start(saver: AsyncCheckpointdSaver, amount: float) -> None:
    thread = f"refund-{uuid.uuid4().hex[:8]}"
    result = await build(saver).ainvoke(
        {"amount": amount, "log": []}, {"configurable": {"thread_id": thread}}
    )
    [paused] = result["__interrupt__"]
    print(json.dumps({"thread": thread, "interrupt_id": paused.id, "waiting_for": paused.value}))


async def show(saver: AsyncCheckpointdSaver, thread: str) -> None:
    state = await build(saver).aget_state({"configurable": {"thread_id": thread}})
    waiting = [i.id for i in state.interrupts]
    print(json.dumps({"thread": thread, "log": state.values.get("log"), "waiting": waiting}))


async def work(saver: AsyncCheckpointdSaver, target: str | None, namespace: str) -> None:
    worker = GraphResumeWorker(target, graphs={GRAPH: build(saver)}, namespace=namespace)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, worker.stop)
    await worker.arun()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=None, help="default: $CHECKPOINTD_TARGET")
    parser.add_argument("--namespace", default="default")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("start", help="start a refund that waits for approval").add_argument(
        "amount", type=float
    )
    commands.add_parser("show", help="a refund thread's log").add_argument("thread")
    commands.add_parser("worker", help="resume decided refunds until Ctrl-C")
    args = parser.parse_args()
    async with AsyncCheckpointdSaver(
        args.target, namespace=args.namespace, graph_name=GRAPH
    ) as saver:
        if args.command == "start":
            await start(saver, args.amount)
        elif args.command == "show":
            await show(saver, args.thread)
        else:
            await work(saver, args.target, args.namespace)


if __name__ == "__main__":
    asyncio.run(main())
