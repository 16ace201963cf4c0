"""A LangGraph graph whose checkpoints live in checkpointd: pause for a person, resume."""

import asyncio
import operator
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from checkpointd_client.langgraph import AsyncCheckpointdSaver, GraphResumeWorker


class Order(TypedDict):
    amount: int
    log: Annotated[list[str], operator.add]


def approve(state: Order) -> dict:
    # Waits in the approvals inbox; returns the decision once a person has made it.
    decision = interrupt({"amount": state["amount"]})
    verdict = "approved" if decision["approved"] else "rejected"
    return {"log": [f"{verdict} by {decision['decided_by']}"]}


def cli() -> str:
    """checkpointd's command line as it runs from here: its name where it is on PATH, else its
    path beside this Python (.venv/bin/checkpointd after `make install`)."""
    beside = Path(sys.executable).with_name("checkpointd")
    if shutil.which("checkpointd") == str(beside):
        return "checkpointd"
    return os.path.relpath(beside)


async def main() -> None:
    # $CHECKPOINTD_TARGET, default 127.0.0.1:7470; graph_name is the pause's chain in the inbox.
    async with AsyncCheckpointdSaver(graph_name="orders") as saver:
        builder = StateGraph(Order)
        builder.add_node("approve", approve)
        builder.add_edge(START, "approve")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"order-{uuid.uuid4().hex[:8]}"}}

        paused = await graph.ainvoke({"amount": 500, "log": []}, config)
        [pause] = paused["__interrupt__"]
        thread = config["configurable"]["thread_id"]
        print(f"paused: thread {thread}, interrupt {pause.id}, waiting for {pause.value}")
        print("decide it on http://127.0.0.1:7471/ or in another terminal with:")
        print(
            f"  {cli()} interrupts decide {thread} --interrupt-id {pause.id} --approve",
            flush=True,
        )

        # A worker (in this process here; usually a service of its own) resumes decided pauses.
        worker = GraphResumeWorker(None, graphs={"orders": graph})
        running = asyncio.create_task(worker.arun())
        while (await graph.aget_state(config)).interrupts:  # noqa: ASYNC110 (a graph's state has no event)
            await asyncio.sleep(0.2)
        worker.stop()
        await running
        print("resumed:", (await graph.aget_state(config)).values["log"])


asyncio.run(main())
