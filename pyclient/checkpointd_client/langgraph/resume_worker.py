"""The resume worker of LangGraph pauses: carries out each decision on a graph's interrupt
exactly once (contracts K2, G11).

A node that calls ``interrupt(value)`` on a checkpointd saver puts a pending interrupt in the
inbox (G8): a human on the approvals page, the CLI or a bot in any language decides it with
``SubmitDecision`` (naming its ``interrupt_id``). A :class:`GraphResumeWorker`, in the process
that has the compiled graphs, resumes the thread::

    from checkpointd_client.langgraph import AsyncCheckpointdSaver, GraphResumeWorker

    saver = AsyncCheckpointdSaver(namespace="support", graph_name="support")
    graph = builder.compile(checkpointer=saver)
    worker = GraphResumeWorker(graphs={"support": graph}, namespace="support")
    await worker.arun()               # or worker.run(); worker.stop() ends it

Graphs are keyed by the chain name of their pauses: the saver's ``graph_name`` (or the run's
``configurable["graph_name"]``). The worker is :class:`~checkpointd_client.resume_worker.
ResumeWorker`'s design for graph pauses: it watches the namespace and sweeps the open
decisions, takes each decision's lease (one holder at a time, renewed while the graph runs;
a worker killed mid-resume leaves the lease to run out, and another worker takes over), and
reports ``resumed`` or ``resume_failed``.

The graph resumes with ``Command(resume={interrupt_id: value})``, ``value`` being the
decision as a dict: ``{"approved": bool, "decided_by": str, "reason": str | None,
"metadata": dict}``, which is what ``interrupt()`` returns in the node. Before resuming, the
worker reads the thread's state: when the interrupt is no longer pending there (a worker
before it resumed the thread and died before reporting), it reports ``resumed`` without
running the graph again, so a thread is resumed once per decision.

A graph compiled with the blocking :class:`~checkpointd_client.langgraph.CheckpointdSaver`
runs in a thread of its own (``graph.invoke``); one compiled with the asyncio saver runs in
the worker's loop (``graph.ainvoke``), and is cancelled when the lease is lost.

LangGraph runs of one thread must not overlap: a worker resumes a thread's pauses one after
another, but two workers may each take one pause of the same thread at the same time. Run
one worker per namespace, or decide a thread's parallel pauses one at a time, when that
matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.types import Command

from checkpointd_client.client import AsyncCheckpointdClient
from checkpointd_client.config import RetryPolicy
from checkpointd_client.credentials import TlsConfig
from checkpointd_client.models import Decision, PendingInterrupt
from checkpointd_client.resume_worker import ResumeWorker

__all__ = ["GraphResolver", "GraphResumeWorker", "resume_value"]

#: Builds (or finds) the compiled graph of a pause on demand; None when this worker has none.
GraphResolver = Callable[[PendingInterrupt], Any]


def resume_value(decision: Decision) -> dict[str, Any]:
    """What ``interrupt()`` returns in the node once the decision is carried out."""
    return {
        "approved": decision.approved,
        "decided_by": decision.decided_by,
        "reason": decision.reason,
        "metadata": dict(decision.metadata),
    }


class GraphResumeWorker(ResumeWorker):
    """Watches a namespace for decided LangGraph pauses and resumes each exactly once.

    ``graphs`` maps graph names (the chain names of their pauses) to compiled graphs whose
    checkpointer is a checkpointd saver on the same server and namespace; ``resolver`` is
    asked for names that are not there. ``target`` and the other options are those of
    :class:`~checkpointd_client.resume_worker.ResumeWorker`.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        graphs: Mapping[str, Any] | None = None,
        resolver: GraphResolver | None = None,
        namespace: str = "default",
        name: str | None = None,
        lease_seconds: int = 30,
        concurrency: int = 4,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
    ) -> None:
        super().__init__(
            graphs,
            resolver=resolver,
            target=target,
            namespace=namespace,
            name=name,
            lease_seconds=lease_seconds,
            concurrency=concurrency,
            timeout=timeout,
            retry=retry,
            token=token,
            tls=tls,
        )
        # LangGraph runs of one thread must not overlap: this worker resumes a thread's
        # pauses one after another.
        self._threads: dict[str, asyncio.Lock] = {}

    def _accepts(self, pending: PendingInterrupt) -> bool:
        return bool(pending.interrupt_id)

    async def _resume(
        self,
        client: AsyncCheckpointdClient,
        runner: Any,
        key: tuple[str, str, str],
        decision: Decision,
    ) -> str | None:
        thread_id, _, interrupt_id = key
        lock = self._threads.setdefault(thread_id, asyncio.Lock())
        async with lock:
            return await self._resume_thread(runner, thread_id, interrupt_id, decision)

    async def _resume_thread(
        self, runner: Any, thread_id: str, interrupt_id: str, decision: Decision
    ) -> str | None:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        command: Command[Any] = Command(resume={interrupt_id: resume_value(decision)})
        if _is_blocking(runner):
            state = await asyncio.to_thread(runner.get_state, config)
            if not _waits_on(state, interrupt_id):
                return None
            await asyncio.to_thread(runner.invoke, command, config)
            return None
        state = await runner.aget_state(config)
        if not _waits_on(state, interrupt_id):
            return None  # resumed by a worker that died before it reported
        await runner.ainvoke(command, config)
        return None


def _is_blocking(graph: Any) -> bool:
    """Whether the graph's checkpointer is the blocking saver (its ``a*`` methods are not
    implemented, so the graph runs with ``invoke`` in a thread)."""
    from checkpointd_client.langgraph import CheckpointdSaver

    return isinstance(getattr(graph, "checkpointer", None), CheckpointdSaver)


def _waits_on(state: Any, interrupt_id: str) -> bool:
    """Whether the thread's state still waits on the interrupt (its own or a subgraph's)."""
    return any(getattr(i, "id", None) == interrupt_id for i in getattr(state, "interrupts", ()))
