"""Run ONE phase of a LangGraph graph against checkpointd in this process, print one JSON line.

    python tests/graph/graph_phase.py {pause|resume} --target T --namespace NS \\
        --thread THREAD --surface {sync|async}

The graph: ``prep`` appends to the log, then ``review`` (a compiled subgraph, so its
checkpoints live under a checkpoint_ns of their own) appends, calls ``interrupt()`` and
appends the resume value, then ``done`` appends. ``pause`` invokes it with an empty log and
stops at the interrupt; ``resume`` invokes ``Command(resume="approved")`` on the same thread.
The line holds the phase's result, the thread's state and the length of its history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def prep(state: State) -> dict[str, Any]:
    return {"log": ["prep"]}


def ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "ship it?", "seen": list(state["log"])})
    return {"log": [f"answer:{answer}"]}


def done(state: State) -> dict[str, Any]:
    return {"log": ["done"]}


def build(checkpointer: Any) -> Any:
    review = StateGraph(State)
    review.add_node("ask", ask)
    review.add_edge(START, "ask")
    review.add_edge("ask", END)
    graph = StateGraph(State)
    graph.add_node("prep", prep)
    graph.add_node("review", review.compile())
    graph.add_node("done", done)
    graph.add_edge(START, "prep")
    graph.add_edge("prep", "review")
    graph.add_edge("review", "done")
    graph.add_edge("done", END)
    return graph.compile(checkpointer=checkpointer)


def _summary(result: dict[str, Any], state: Any, history: int) -> dict[str, Any]:
    interrupts = [i.value for i in result.get("__interrupt__", [])]
    return {
        "log": result.get("log"),
        "interrupts": interrupts,
        "next": list(state.next),
        "state_log": state.values.get("log"),
        "history": history,
    }


def run_sync(args: argparse.Namespace, config: Any, payload: Any) -> dict[str, Any]:
    with CheckpointdSaver(args.target, namespace=args.namespace) as saver:
        saver.setup()
        graph = build(saver)
        result = graph.invoke(payload, config)
        history = len(list(graph.get_state_history(config)))
        return _summary(result, graph.get_state(config), history)


async def run_async(args: argparse.Namespace, config: Any, payload: Any) -> dict[str, Any]:
    async with AsyncCheckpointdSaver(args.target, namespace=args.namespace) as saver:
        await saver.setup()
        graph = build(saver)
        result = await graph.ainvoke(payload, config)
        history = len([s async for s in graph.aget_state_history(config)])
        return _summary(result, await graph.aget_state(config), history)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["pause", "resume"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--surface", choices=["sync", "async"], required=True)
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    payload: Any = {"log": []} if args.phase == "pause" else Command(resume="approved")
    if args.surface == "sync":
        summary = run_sync(args, config, payload)
    else:
        summary = asyncio.run(run_async(args, config, payload))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
