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
worker reads the thread's state, and a worker that takes a decision over finishes what the one
before it started (G11):

* the thread still waits on the interrupt: it resumes it with the decision;
* the interrupt is answered but the thread stopped midway (tasks left to run, no pause: the
  worker before it died after the resume was saved): it goes on from the newest checkpoint
  (``invoke(None)``), the answered steps not run again;
* the thread is at a new pause or at its end: it reports ``resumed`` without running anything.

It reports only when the thread has reached a new pause or its end, so a thread goes on once
per decision.

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
from checkpointd_client.fencing import LeaseFence, writes_under
from checkpointd_client.langgraph._shape import review
from checkpointd_client.models import Decision, PendingInterrupt
from checkpointd_client.resume_worker import ResumeWorker

__all__ = ["GraphResolver", "GraphResumeWorker", "ResumeRefused", "resume_for", "resume_value"]

#: Builds (or finds) the compiled graph of a pause on demand; None when this worker has none.
GraphResolver = Callable[[PendingInterrupt], Any]


def resume_value(decision: Decision) -> dict[str, Any]:
    """What ``interrupt()`` returns in the node once the decision is carried out (a plain
    ``interrupt()``'s answer; see :func:`resume_for` for LangChain's middleware)."""
    return {
        "approved": decision.approved,
        "decided_by": decision.decided_by,
        "reason": decision.reason,
        "metadata": dict(decision.metadata),
    }


class ResumeRefused(ValueError):
    """The decision cannot answer the pause: the pause does not allow it."""


def _hitl_decision(decision: Decision, index: int, action_name: str) -> dict[str, Any]:
    """The LangChain ``HumanInTheLoopMiddleware`` decision for one action: the decision's
    typed answer for it when it carries one (K3), else its verdict (approve, or reject with
    the reason as the message the model is told)."""
    response = decision.response
    if response is not None and response.actions:
        if index >= len(response.actions):
            raise ResumeRefused(
                f"the decision answers {len(response.actions)} action(s); the pause asks "
                f"about more ({action_name!r} is number {index + 1})"
            )
        action = response.actions[index]
        if action.type == "edit":
            return {"type": "edit", "edited_action": {"name": action_name, "args": action.args}}
        answer: dict[str, Any] = {"type": action.type}
        if action.message is not None:
            answer["message"] = action.message
        return answer
    if decision.approved:
        return {"type": "approve"}
    rejected: dict[str, Any] = {"type": "reject"}
    if decision.reason:
        rejected["message"] = decision.reason
    return rejected


def _refuse_unless_allowed(answer: dict[str, Any], name: Any, permitted: Any) -> None:
    if isinstance(permitted, list) and answer["type"] not in permitted:
        raise ResumeRefused(
            f"the pause does not allow {answer['type']!r} for {name!r} "
            f"(allowed: {', '.join(map(str, permitted))})"
        )


def _refuse_unless_fits(answer: dict[str, Any], name: Any, schema: Any) -> None:
    """Check ``answer`` against the interrupt's ``response_schema`` as LangGraph will, so
    an answer it would refuse is not written as a ``__resume__`` the thread keeps. Read back
    from a checkpoint the schema is its JSON schema: the decision types it allows are checked;
    a Python type (a graph's own) is validated whole."""
    _refuse_unless_allowed(answer, name, review(schema).get("allowed_decisions"))
    if not (isinstance(schema, type) or _is_annotated(schema)):
        return
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(schema).validate_python(answer)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error.get("loc", ())))
        raise ResumeRefused(
            f"the pause does not take this {answer['type']!r} for {name!r}: "
            f"{error.get('msg', exc)}" + (f" (at {where})" if where else "")
        ) from None


def resume_for(interrupt: Any, decision: Decision) -> Any:
    """The answer the graph expects to the LangGraph ``Interrupt`` a decision is on.

    * LangChain's ``HumanInTheLoopMiddleware``, batched (the value is a ``HITLRequest``:
      ``action_requests`` and ``review_configs``): ``{"decisions": [...]}``, one per action in
      order: the decision's typed answer for it (approve, edit, reject, respond: K3), or else
      its verdict (``approve``, or ``reject`` with the reason as its message); refused
      (:class:`ResumeRefused`) when an action's ``allowed_decisions`` lacks it.
    * The middleware per call (the value's ``type`` is ``"tool_approval"``): one such
      decision, checked against the interrupt's ``response_schema`` when it has one.
    * Any other interrupt: the decision's resume value when it carries one (K3), else
      :func:`resume_value`.
    """
    value = getattr(interrupt, "value", None)
    response = decision.response
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        allowed = {
            config.get("action_name"): config.get("allowed_decisions")
            for config in value.get("review_configs") or ()
            if isinstance(config, dict)
        }
        if response is not None and len(response.actions) != len(value["action_requests"]):
            raise ResumeRefused(
                f"the pause asks about {len(value['action_requests'])} action(s); the decision "
                f"answers {len(response.actions)}"
            )
        answers = []
        for index, action in enumerate(value["action_requests"]):
            name = action.get("name") if isinstance(action, dict) else None
            answer = _hitl_decision(decision, index, str(name))
            _refuse_unless_allowed(answer, name, allowed.get(name))
            answers.append(answer)
        return {"decisions": answers}
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        if response is not None and len(response.actions) != 1:
            raise ResumeRefused("a per-call tool approval takes exactly one action decision")
        answer = _hitl_decision(decision, 0, str(value.get("name")))
        _refuse_unless_fits(answer, value.get("name"), getattr(interrupt, "response_schema", None))
        return answer
    if response is not None:
        if response.actions:
            raise ResumeRefused(
                "the pause is not a HumanInTheLoopMiddleware request: it takes a resume value"
            )
        return response.resume_value
    return resume_value(decision)


def _is_annotated(schema: Any) -> bool:
    """Whether ``schema`` is a typing construct pydantic can validate (a Union, Annotated)."""
    return (
        schema is not None and not isinstance(schema, (dict, str)) and hasattr(schema, "__origin__")
    )


class GraphResumeWorker(ResumeWorker):
    """Watches a namespace for decided LangGraph pauses and resumes each exactly once.

    ``graphs`` maps graph names (the chain names of their pauses) to compiled graphs whose
    checkpointer is a checkpointd saver on the same server and namespace, or to an
    :class:`~checkpointd_client.langgraph.AgentServerGraph` (a graph LangGraph's Agent
    Server runs on such a saver, resumed through the server's runs API); ``resolver`` is
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
        fence: LeaseFence,
        decision: Decision,
    ) -> str | None:
        thread_id, _, interrupt_id = key
        lock = self._threads.setdefault(thread_id, asyncio.Lock())
        # K4: the saver's writes carry the lease, so none lands once another worker has it.
        async with lock:
            with writes_under(fence):
                return await self._resume_thread(runner, thread_id, interrupt_id, decision)

    async def _resume_thread(
        self, runner: Any, thread_id: str, interrupt_id: str, decision: Decision
    ) -> str | None:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        blocking = _is_blocking(runner)
        if blocking:
            state = await asyncio.to_thread(runner.get_state, config)
        else:
            state = await runner.aget_state(config)
        waited = _find(state, interrupt_id)
        if waited is not None:
            # Refused here, before the graph runs: a resume LangGraph refuses would be kept as
            # a failed __resume__ write of the thread.
            answer = resume_for(waited, decision)
            run_input: Any = Command(resume={interrupt_id: answer})
        elif _stopped_midway(state):
            # A worker before this one resumed the thread and died before it reached a new
            # pause or the end (G11): the resume is saved, its next tasks are not run yet.
            # LangGraph goes on from the newest checkpoint when invoked with None.
            run_input = None
        else:
            return None  # resumed to a pause or the end by a worker that died before reporting
        if blocking:
            await asyncio.to_thread(runner.invoke, run_input, config)
        else:
            await runner.ainvoke(run_input, config)
        return None


def _is_blocking(graph: Any) -> bool:
    """Whether the graph's checkpointer is the blocking saver (its ``a*`` methods are not
    implemented, so the graph runs with ``invoke`` in a thread)."""
    from checkpointd_client.langgraph import CheckpointdSaver

    return isinstance(getattr(graph, "checkpointer", None), CheckpointdSaver)


def _interrupts(state: Any) -> list[Any]:
    """The interrupts the thread's state waits on: its own and its tasks' (a subgraph's)."""
    found = list(getattr(state, "interrupts", ()))
    for task in getattr(state, "tasks", ()):
        found.extend(getattr(task, "interrupts", ()))
    return found


def _find(state: Any, interrupt_id: str) -> Any:
    """The interrupt the thread's state still waits on by that id, or None."""
    return next((i for i in _interrupts(state) if getattr(i, "id", None) == interrupt_id), None)


def _stopped_midway(state: Any) -> bool:
    """Whether the thread has tasks left to run and waits on no interrupt: a run that stopped
    (its process died) between two steps, not at a pause or at its end."""
    return bool(getattr(state, "next", ())) and not _interrupts(state)
