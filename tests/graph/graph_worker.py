"""A process that pauses a LangGraph thread, or runs a GraphResumeWorker, against checkpointd.

    python tests/graph/graph_worker.py pause --target T --namespace NS --thread THREAD --dir D
    python tests/graph/graph_worker.py work --target T --namespace NS --dir D [--block]
    (either with --graph chain for the second graph)

The graph "support": ``a`` and ``b`` run in parallel, each calls ``interrupt()`` and, once
resumed, appends "<node>:<approved>" to ``D/<thread>.log``; then ``ship`` appends "ship".
``pause`` runs the thread up to its two interrupts and prints their ids as JSON. ``work``
runs a worker (2 s leases) until killed; with ``--block``, a node that got its resume value
writes ``D/<thread>.entered`` and then hangs, so the test can kill the worker mid-resume.

The graph "chain": ``approve`` calls ``interrupt()`` and, once resumed, appends
"approve:<approved>:<by>"; then ``slow`` appends "slow-entered", and (with ``--block``) writes
``D/<thread>.entered`` and hangs, else appends "slow"; then ``finish`` appends "finish". A
worker killed inside ``slow`` leaves the approve step's writes saved and the thread midway.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd_client.langgraph import AsyncCheckpointdSaver, GraphResumeWorker


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def build(saver: AsyncCheckpointdSaver, directory: Path, block: bool) -> Any:
    def asker(name: str) -> Any:
        async def node(state: State, config: RunnableConfig) -> dict[str, Any]:
            answer = interrupt({"reason": f"approve-{name}", "node": name})
            thread = config["configurable"]["thread_id"]
            if block:
                (directory / f"{thread}.entered").write_text(str(os.getpid()))
                await asyncio.Event().wait()  # hangs until the test kills the process
            with (directory / f"{thread}.log").open("a") as log:
                log.write(f"{name}:{answer['approved']}:{answer['decided_by']}\n")
            return {"log": [f"{name}:{answer['approved']}"]}

        return node

    def ship(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        with (directory / f"{thread}.log").open("a") as log:
            log.write("ship\n")
        return {"log": ["ship"]}

    graph = StateGraph(State)
    graph.add_node("a", asker("a"))
    graph.add_node("b", asker("b"))
    graph.add_node("ship", ship)
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "ship")
    graph.add_edge("ship", END)
    return graph.compile(checkpointer=saver)


def build_chain(saver: AsyncCheckpointdSaver, directory: Path, block: bool) -> Any:
    def log(config: RunnableConfig, line: str) -> None:
        with (directory / f"{config['configurable']['thread_id']}.log").open("a") as out:
            out.write(f"{line}\n")

    def approve(state: State, config: RunnableConfig) -> dict[str, Any]:
        answer = interrupt({"reason": "approve", "node": "approve"})
        log(config, f"approve:{answer['approved']}:{answer['decided_by']}")
        return {"log": ["approve"]}

    async def slow(state: State, config: RunnableConfig) -> dict[str, Any]:
        log(config, "slow-entered")
        if block:
            thread = config["configurable"]["thread_id"]
            # LangGraph saves the approve step's checkpoint in the background (durability
            # "async"): hang only once it is saved, the point this graph is killed at.
            saved: RunnableConfig = {"configurable": {"thread_id": thread}}
            while (await compiled.aget_state(saved)).next != ("slow",):  # noqa: ASYNC110 (no event)
                await asyncio.sleep(0.02)
            (directory / f"{thread}.entered").write_text(str(os.getpid()))
            await asyncio.Event().wait()  # hangs until the test kills the process
        log(config, "slow")
        return {"log": ["slow"]}

    def finish(state: State, config: RunnableConfig) -> dict[str, Any]:
        log(config, "finish")
        return {"log": ["finish"]}

    graph = StateGraph(State)
    graph.add_node("approve", approve)
    graph.add_node("slow", slow)
    graph.add_node("finish", finish)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", "slow")
    graph.add_edge("slow", "finish")
    graph.add_edge("finish", END)
    compiled = graph.compile(checkpointer=saver)
    return compiled


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["pause", "work"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--thread", default="")
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--graph", choices=["support", "chain"], default="support")
    args = parser.parse_args()
    async with AsyncCheckpointdSaver(
        args.target, namespace=args.namespace, graph_name=args.graph
    ) as saver:
        builder = build if args.graph == "support" else build_chain
        graph = builder(saver, args.dir, args.block)
        if args.phase == "pause":
            config = {"configurable": {"thread_id": args.thread}}
            result = await graph.ainvoke({"log": []}, config)
            ids = {i.value["node"]: i.id for i in result["__interrupt__"]}
            print(json.dumps(ids), flush=True)
            return
        worker = GraphResumeWorker(
            args.target, graphs={args.graph: graph}, namespace=args.namespace, lease_seconds=2
        )
        print(json.dumps({"worker": os.getpid(), "at": time.time()}), flush=True)
        await worker.arun()


if __name__ == "__main__":
    asyncio.run(main())
