"""Graph scenarios run one phase per process against checkpointd, each printing one JSON line.

    python tests/graph/graph_scenarios.py PHASE --target T --namespace NS --thread THREAD \\
        --surface {sync|async} [--runs FILE] [--fail ITEM]

Two graphs:

* ``chain``: ``a`` -> ``b`` -> ``c``, each appending its name to ``log``. Phases: ``chain``
  runs it to the end; ``fork`` walks ``get_state_history``, writes ``update_state`` on the
  checkpoint after ``a`` (a fork: a new checkpoint whose parent is the old one) and resumes
  from it; ``inspect`` reads the thread's state and whole history.
* ``fanout``: ``plan`` writes the items, then in one step ``audit`` (a static parallel
  branch) and one ``work`` task per item (``Send``), then ``gather``. Each run of a node is
  appended to the ``--runs`` file. Phase ``fanout`` runs it with ``--fail ITEM`` making that
  item's task raise once the step's other tasks have their writes stored (the error is
  caught and reported); ``fanout-resume`` invokes the thread again with nothing new, as a
  retry.

The functions take any saver, so the tests run the same phases on LangGraph's own
``InMemorySaver`` in one process as the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver

#: Items whose work task raises (set from --fail in the process that should fail).
FAIL: set[str] = set()
#: Where each node's run is appended, one name a line (from --runs).
RUNS: list[Path] = []
#: The saver and thread of the running phase: a failing task reads its step's writes there.
CURRENT: list[tuple[Any, str]] = []
#: Tasks of the fanout step besides the failing one (audit and the other two items).
OTHERS = 3


class Chain(TypedDict):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Any:
    def node(state: Chain) -> dict[str, Any]:
        return {"log": [name]}

    return node


def chain_graph(checkpointer: Any) -> Any:
    graph = StateGraph(Chain)
    for name in ("a", "b", "c"):
        graph.add_node(name, _step(name))
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("c", END)
    return graph.compile(checkpointer=checkpointer)


class Fanout(TypedDict, total=False):
    items: list[str]
    item: str
    results: Annotated[list[str], operator.add]
    log: Annotated[list[str], operator.add]


def _ran(name: str) -> None:
    for path in RUNS:
        with path.open("a") as runs:
            runs.write(name + "\n")


def plan(state: Fanout) -> dict[str, Any]:
    _ran("plan")
    return {"items": ["a", "b", "c"], "log": ["plan"]}


def audit(state: Fanout) -> dict[str, Any]:
    _ran("audit")
    return {"log": ["audit"]}


def work(state: Fanout) -> dict[str, Any]:
    item = state["item"]
    _ran(f"work:{item}")
    if item in FAIL:
        _wait_for_the_others()
        raise RuntimeError(f"work on {item} failed")
    return {"results": [f"done:{item}"]}


def _wait_for_the_others() -> None:
    """Fail only once the step's other tasks have their writes stored: which of them
    finish before a failure cancels the rest is otherwise a race."""
    saver, thread = CURRENT[-1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = saver.get_tuple({"configurable": {"thread_id": thread}})
        if found is not None and len({task for task, _, _ in found.pending_writes}) >= OTHERS:
            return
        time.sleep(0.02)
    raise TimeoutError("the other tasks' writes were not stored")


def gather(state: Fanout) -> dict[str, Any]:
    _ran("gather")
    return {"log": [f"gather:{len(state['results'])}"]}


def fan(state: Fanout) -> list[Send]:
    return [Send("work", {"item": item}) for item in state["items"]]


def fanout_graph(checkpointer: Any) -> Any:
    graph = StateGraph(Fanout)
    graph.add_node("plan", plan)
    graph.add_node("audit", audit)
    graph.add_node("work", work)
    graph.add_node("gather", gather)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "audit")
    graph.add_conditional_edges("plan", fan, ["work"])
    graph.add_edge(["audit", "work"], "gather")
    graph.add_edge("gather", END)
    return graph.compile(checkpointer=checkpointer)


# --- one surface or the other ----------------------------------------------------------


async def _invoke(graph: Any, surface: str, payload: Any, config: Any) -> Any:
    if surface == "sync":
        return graph.invoke(payload, config)
    return await graph.ainvoke(payload, config)


async def _state(graph: Any, surface: str, config: Any) -> Any:
    return graph.get_state(config) if surface == "sync" else await graph.aget_state(config)


async def _history(graph: Any, surface: str, config: Any) -> list[Any]:
    if surface == "sync":
        return list(graph.get_state_history(config))
    return [s async for s in graph.aget_state_history(config)]


async def _update(graph: Any, surface: str, config: Any, values: Any) -> Any:
    if surface == "sync":
        return graph.update_state(config, values)
    return await graph.aupdate_state(config, values)


def _id(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


# --- the phases ------------------------------------------------------------------------


async def phase(name: str, saver: Any, surface: str, thread: str) -> dict[str, Any]:
    """Run phase ``name`` on ``saver``; what it saw, without ids that differ between runs
    (checkpoint ids appear only as relations: which one is whose parent)."""
    config = {"configurable": {"thread_id": thread}}
    CURRENT[:] = [(saver, thread)]
    if name == "chain":
        graph = chain_graph(saver)
        result = await _invoke(graph, surface, {"log": []}, config)
        return {"log": result["log"], "history": len(await _history(graph, surface, config))}
    if name == "fork":
        graph = chain_graph(saver)
        history = await _history(graph, surface, config)
        (after_a,) = [s for s in history if s.next == ("b",)]
        forked = await _update(graph, surface, after_a.config, {"log": ["edited"]})
        fork_state = await _state(graph, surface, forked)
        result = await _invoke(graph, surface, None, forked)
        old = await _state(graph, surface, after_a.config)
        return {
            "history_logs": [s.values.get("log") for s in history],
            "fork_parent_is_old": _id(fork_state.parent_config) == _id(after_a.config),
            "fork_next": list(fork_state.next),
            "fork_log": fork_state.values["log"],
            "log": result["log"],
            "old_log": old.values["log"],
            "old_next": list(old.next),
        }
    if name == "inspect":
        graph = chain_graph(saver)
        history = await _history(graph, surface, config)
        head = await _state(graph, surface, config)
        ids = {_id(s.config): s for s in history}
        # The final checkpoint of the branch the fork left: nothing next, not the head.
        left = [s for s in history if not s.next and _id(s.config) != _id(head.config)]
        return {
            "log": head.values["log"],
            "next": list(head.next),
            "history_logs": [s.values.get("log") for s in history],
            "newest_first": [_id(s.config) for s in history] == sorted(ids, reverse=True),
            "left_branch_logs": [s.values["log"] for s in left],
        }
    if name == "fanout":
        graph = fanout_graph(saver)
        try:
            await _invoke(graph, surface, {"log": []}, config)
            error = ""
        except RuntimeError as exc:
            error = str(exc)
        state = await _state(graph, surface, config)
        return {
            "error": error,
            "next": sorted(state.next),
            "failed": sorted(t.error is not None for t in state.tasks),
            "values": {k: state.values.get(k) for k in ("items", "log", "results")},
        }
    if name == "fanout-resume":
        graph = fanout_graph(saver)
        result = await _invoke(graph, surface, None, config)
        state = await _state(graph, surface, config)
        return {
            "log": result["log"],
            "results": result["results"],
            "next": list(state.next),
            "history": len(await _history(graph, surface, config)),
        }
    raise ValueError(f"unknown phase {name}")


async def _with_saver(args: argparse.Namespace) -> dict[str, Any]:
    if args.surface == "sync":
        with CheckpointdSaver(args.target, namespace=args.namespace) as saver:
            saver.setup()
            return await phase(args.phase, saver, "sync", args.thread)
    async with AsyncCheckpointdSaver(args.target, namespace=args.namespace) as async_saver:
        await async_saver.setup()
        return await phase(args.phase, async_saver, "async", args.thread)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["chain", "fork", "inspect", "fanout", "fanout-resume"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--surface", choices=["sync", "async"], required=True)
    parser.add_argument("--runs", type=Path)
    parser.add_argument("--fail", action="append", default=[])
    args = parser.parse_args()
    FAIL.update(args.fail)
    if args.runs:
        RUNS.append(args.runs)
    print(json.dumps(asyncio.run(_with_saver(args))))


if __name__ == "__main__":
    main()
