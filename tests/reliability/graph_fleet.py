"""Paused LangGraph threads and the GraphResumeWorker processes that resume them, one process
per role, for the G11 / K4 kill runs.

    python tests/reliability/graph_fleet.py start --target T --namespace NS --dir D --count N
    python tests/reliability/graph_fleet.py worker --target T --namespace NS --dir D --name W
        [--lease-seconds L] [--saver async|sync] [--stall]

The graph "orders": ``approve`` calls ``interrupt()``; then ``slow``; then ``finish``. Each
run of a node body is appended to ``D/events.jsonl`` (one JSON line with the pid, the thread
and the attempt of the lease it runs under), and so is every write a worker makes, with how
the server answered it (``ok``, or the reason it refused it).

``start`` runs N threads up to their interrupt and prints ``{thread: interrupt_id}`` as JSON.
``worker`` runs a :class:`GraphResumeWorker` (one resume at a time) until SIGTERM.

Kill points: ``D/plan.json`` (``{thread: point}``, written before the threads are decided)
names a point of a resume at which the first worker to reach it for that thread stops and
waits to be killed, after logging a ``hold`` event (the test kills the pid it names):

* ``lease``: the lease is taken and the worker reads the thread, before anything is written;
* ``node``: inside ``slow``, once the answered ``approve`` step's checkpoint is saved;
* ``end``: the last checkpoint (after ``finish``) is saved, the outcome not reported yet.

With ``--stall``, the first worker of the fleet to run ``slow`` for a thread logs a ``stall``
event and then blocks there until ``D/<thread>.go`` exists, and goes on as if nothing
happened: with the asyncio saver the whole event loop blocks (as in a process stopped by
SIGSTOP, a paused VM, a long GC: it cannot renew its lease); with the blocking saver the
graph's thread does. A worker resumes a thread marked ``D/<thread>.unfenced`` without K4's
fence on its writes (the workers before K4), to show what the fence prevents.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import operator
import os
import signal
import sys
import time
import uuid
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd_client import CheckpointdError
from checkpointd_client.fencing import LeaseFence, current_fence
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver, GraphResumeWorker

GRAPH_NAME = "orders"
#: The kill points a plan may name, in the order a resume reaches them.
POINTS = ("lease", "node", "end")
#: How often a blocked node looks for the go file.
POLL_S = 0.02

T = TypeVar("T")


class State(TypedDict):
    log: Annotated[list[str], operator.add]


class Fleet:
    """Where one fleet's processes meet: the events file, the plan, the hold and go files."""

    def __init__(self, directory: Path, *, resuming: bool) -> None:
        self.directory = directory
        #: Whether this process resumes (a worker), not pauses (``start``).
        self.resuming = resuming
        self.events = directory / "events.jsonl"

    def plan(self) -> dict[str, str]:
        """The kill plan, as the test has written it so far."""
        plan = self.directory / "plan.json"
        return dict(json.loads(plan.read_text())) if plan.exists() else {}

    def log(self, event: str, **data: Any) -> None:
        fence = current_fence()
        line = json.dumps(
            {"event": event, "pid": os.getpid(), "attempt": fence.attempt if fence else 0, **data},
            sort_keys=True,
        )
        with self.events.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def first(self, thread: str, what: str) -> bool:
        """Whether this process is the first of the fleet to get here (``what`` on ``thread``)."""
        try:
            fd = os.open(self.directory / f"{thread}.{what}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def holds_at(self, thread: str, point: str) -> bool:
        """Whether the resume of ``thread`` stops at ``point`` here: the plan says so, this
        is a worker, and no process stopped there before."""
        return self.resuming and self.plan().get(thread) == point and self.first(thread, point)

    async def hold(self, thread: str, point: str) -> None:
        """Say so, then wait to be killed (the lease is renewed meanwhile)."""
        self.log("hold", thread=thread, point=point)
        await asyncio.Event().wait()

    def stall(self, thread: str) -> None:
        """Block this thread (the event loop, when called there) until the test says go."""
        self.log("stall", thread=thread)
        while not self.went_on(thread):
            time.sleep(POLL_S)

    def went_on(self, thread: str) -> bool:
        """Whether the test let a stall in the thread's resume go on."""
        return (self.directory / f"{thread}.go").exists()


def _thread(config: RunnableConfig) -> str:
    return str(config["configurable"]["thread_id"])


def _log_of(checkpoint: Checkpoint) -> list[str]:
    values = checkpoint.get("channel_values") or {}
    log = values.get("log") or []
    return list(log)


def _note(fleet: Fleet, method: str, config: RunnableConfig) -> dict[str, Any]:
    thread = _thread(config)
    # Whether it started after a stall in this thread's resume was over.
    return {"method": method, "thread": thread, "after_stall": fleet.went_on(thread)}


@contextlib.contextmanager
def _noted(
    fleet: Fleet, method: str, config: RunnableConfig, *, end: bool = False
) -> Iterator[None]:
    """Note the write and the server's answer: ``ok``, or the reason it refused it."""
    note = _note(fleet, method, config)
    try:
        yield
    except CheckpointdError as exc:
        fleet.log("write", outcome=str(exc.reason), **note)
        raise
    fleet.log("write", outcome="ok", end=end, **note)


def _answered(fleet: Fleet, note: dict[str, Any], end: bool, call: asyncio.Future[Any]) -> None:
    if call.cancelled():
        outcome = "cancelled"
    elif (exc := call.exception()) is None:
        outcome = "ok"
    else:
        outcome = str(exc.reason) if isinstance(exc, CheckpointdError) else type(exc).__name__
    fleet.log("write", outcome=outcome, end=end and outcome == "ok", **note)


async def _sent(
    fleet: Fleet,
    method: str,
    config: RunnableConfig,
    write: Coroutine[Any, Any, T],
    *,
    end: bool = False,
) -> T:
    """Send the write and note the server's answer: ``ok``, or the reason it refused it. The
    call goes on when the resume is cancelled meanwhile (shielded), so that the answer to
    each write a worker started is noted, whichever of its writes and its lease renewal the
    server answers first."""
    call = asyncio.ensure_future(write)
    call.add_done_callback(functools.partial(_answered, fleet, _note(fleet, method, config), end))
    return await asyncio.shield(call)


class FleetSaver(AsyncCheckpointdSaver):
    """The asyncio saver, noting each write's answer and stopping at the plan's ``lease`` and
    ``end`` points."""

    fleet: Fleet

    async def aget_tuple(self, config: RunnableConfig) -> Any:
        thread = _thread(config)
        if self.fleet.holds_at(thread, "lease"):
            await self.fleet.hold(thread, "lease")
        return await super().aget_tuple(config)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        end = "finish" in _log_of(checkpoint)
        put = super().aput(config, checkpoint, metadata, new_versions)
        stored = await _sent(self.fleet, "put", config, put, end=end)
        thread = _thread(config)
        if end and self.fleet.holds_at(thread, "end"):
            await self.fleet.hold(thread, "end")
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        put = super().aput_writes(config, writes, task_id, task_path)
        await _sent(self.fleet, "put_writes", config, put)


class BlockingFleetSaver(CheckpointdSaver):
    """The blocking saver (the graph runs in a thread of its own), noting each write's
    answer."""

    fleet: Fleet

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with _noted(self.fleet, "put", config, end="finish" in _log_of(checkpoint)):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with _noted(self.fleet, "put_writes", config):
            super().put_writes(config, writes, task_id, task_path)


def build(saver: FleetSaver | BlockingFleetSaver, fleet: Fleet, stall: bool) -> Any:
    """approve (interrupt) -> slow -> finish, each node run logged."""
    blocking = isinstance(saver, BlockingFleetSaver)

    def approve(state: State, config: RunnableConfig) -> dict[str, Any]:
        answer = interrupt({"reason": "approve the order", "thread": _thread(config)})
        fleet.log("node", node="approve", thread=_thread(config), approved=answer["approved"])
        return {"log": ["approve"]}

    async def saved_after_approve(thread: str) -> None:
        # LangGraph saves a step's checkpoint in the background (durability "async"): the
        # kill point "node" is once the answered step is saved.
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        while (await compiled.aget_state(config)).next != ("slow",):  # noqa: ASYNC110 (no event)
            await asyncio.sleep(POLL_S)

    async def slow(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = _thread(config)
        fleet.log("node", node="slow", thread=thread)
        if fleet.holds_at(thread, "node"):
            await saved_after_approve(thread)
            await fleet.hold(thread, "node")
        await asyncio.sleep(0.05)
        if stall and fleet.first(thread, "stall"):
            await saved_after_approve(thread)  # nothing of the worker's in flight
            # Blocks the event loop (no renewal, no other task), then returns at once.
            fleet.stall(thread)
        return {"log": ["slow"]}

    def blocking_slow(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = _thread(config)
        fleet.log("node", node="slow", thread=thread)
        time.sleep(0.05)
        if stall and fleet.first(thread, "stall"):
            saved: RunnableConfig = {"configurable": {"thread_id": thread}}
            while compiled.get_state(saved).next != ("slow",):  # nothing in flight
                time.sleep(POLL_S)
            fleet.stall(thread)  # blocks the graph's thread; the worker's loop goes on
        return {"log": ["slow"]}

    def finish(state: State, config: RunnableConfig) -> dict[str, Any]:
        fleet.log("node", node="finish", thread=_thread(config))
        return {"log": ["finish"]}

    graph = StateGraph(State)
    graph.add_node("approve", approve)
    graph.add_node("slow", blocking_slow if blocking else slow)
    graph.add_node("finish", finish)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", "slow")
    graph.add_edge("slow", "finish")
    graph.add_edge("finish", END)
    compiled = graph.compile(checkpointer=saver)
    return compiled


def saver_for(args: argparse.Namespace, fleet: Fleet) -> FleetSaver | BlockingFleetSaver:
    saver: FleetSaver | BlockingFleetSaver
    if args.saver == "sync":
        saver = BlockingFleetSaver(args.target, namespace=args.namespace, graph_name=GRAPH_NAME)
    else:
        saver = FleetSaver(args.target, namespace=args.namespace, graph_name=GRAPH_NAME)
    saver.fleet = fleet
    return saver


async def pause(target: str, namespace: str, directory: Path, count: int) -> dict[str, str]:
    """Run ``count`` new threads up to their interrupt: ``{thread: interrupt_id}``."""
    fleet = Fleet(directory, resuming=False)
    async with FleetSaver(target, namespace=namespace, graph_name=GRAPH_NAME) as saver:
        saver.fleet = fleet
        graph = build(saver, fleet, stall=False)
        paused: dict[str, str] = {}
        for n in range(count):
            thread = f"order-{n:04d}-{uuid.uuid4().hex[:8]}"
            result = await graph.ainvoke({"log": []}, {"configurable": {"thread_id": thread}})
            [waiting] = result["__interrupt__"]
            paused[thread] = waiting.id
        return paused


async def start(args: argparse.Namespace) -> None:
    paused = await pause(args.target, args.namespace, args.dir, args.count)
    print(json.dumps(paused), flush=True)


def unfence_marked(directory: Path) -> None:
    """Resumes of the threads marked ``D/<thread>.unfenced`` write without K4's fence, as
    the workers did before K4: the control that shows what the fence prevents."""
    from checkpointd_client import fencing, resume_worker
    from checkpointd_client.langgraph import resume_worker as graph_resume_worker

    @contextlib.contextmanager
    def writes_under(fence: LeaseFence) -> Iterator[LeaseFence]:
        if (directory / f"{fence.execution_id}.unfenced").exists():
            yield fence
            return
        with fencing.writes_under(fence):
            yield fence

    resume_worker.writes_under = writes_under  # type: ignore[attr-defined]
    graph_resume_worker.writes_under = writes_under  # type: ignore[attr-defined]


async def work(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.INFO, format=f"{args.name}: %(name)s: %(message)s", stream=sys.stderr
    )
    unfence_marked(args.dir)
    fleet = Fleet(args.dir, resuming=True)
    saver = saver_for(args, fleet)
    worker = GraphResumeWorker(
        args.target,
        graphs={GRAPH_NAME: build(saver, fleet, args.stall)},
        namespace=args.namespace,
        name=args.name,
        lease_seconds=args.lease_seconds,
        concurrency=1,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    print(f"{args.name}: ready (pid {os.getpid()})", file=sys.stderr, flush=True)
    try:
        await worker.arun()
    finally:
        if isinstance(saver, FleetSaver):
            await saver.aclose()
        else:
            saver.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("start", "worker"))
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--name", default=f"worker-{os.getpid()}")
    parser.add_argument("--lease-seconds", type=int, default=2)
    parser.add_argument("--saver", choices=("async", "sync"), default="async")
    parser.add_argument("--stall", action="store_true")
    args = parser.parse_args()
    asyncio.run(start(args) if args.role == "start" else work(args))


if __name__ == "__main__":
    main()
