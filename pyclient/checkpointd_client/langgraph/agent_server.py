"""Resume through LangGraph's Agent Server: a :class:`GraphResumeWorker` runner that carries a
decision out with the server's runs API instead of running the compiled graph itself.

LangGraph's Agent Server (``langgraph dev``, ``langgraph-api``) can keep its threads in
checkpointd: its ``langgraph.json`` names a factory of :class:`AsyncCheckpointdSaver` as its
checkpointer, and every pause of its graphs is a pending interrupt in the inbox, its chain
name the run's ``graph_id``. A worker that held the compiled graph would resume such a thread
behind the server's back: the thread's checkpoints would go on, but the server's own view of
it (``threads.get(...)["status"]``, ``threads.search(status="interrupted")``, its runs) would
still say it waits. :class:`AgentServerGraph` asks the server to run it instead::

    from checkpointd_client.langgraph import AgentServerGraph, GraphResumeWorker

    worker = GraphResumeWorker(graphs={"agent": AgentServerGraph("http://127.0.0.1:2024", "agent")})
    await worker.arun()

It has the async surface the worker uses of a compiled graph: :meth:`aget_state` reads the
thread's state (``threads.get_state``) as LangGraph's ``StateSnapshot`` offers it (``next``,
``tasks``, ``interrupts``, ``values``), and :meth:`ainvoke` runs the thread on the server
(``runs.wait``): with the worker's ``Command(resume={interrupt_id: answer})`` as the run's
command, or with no input to go on from the newest checkpoint (a thread that stopped midway,
contract G11). The worker's rules hold unchanged: a decision the pause does not allow is
refused before anything runs, and it reports ``resumed`` once the thread is at a new pause or
its end.

Runs on one thread do not overlap: each run is created with ``multitask_strategy="reject"``,
so the server refuses it (and the worker reports ``resume_failed``) while another run is busy
on the thread, rather than queueing a second one. Before reading the state, a thread that is
busy is waited for (``runs.join``): a worker that took a decision over from one that died or
lost its lease mid-run finds the run that one started (the server carries a run on when its
caller goes away, ``on_disconnect="continue"``) and reports once it ended, without running the
thread again. A run that ends in an error raises :class:`AgentServerRunError`.

The writes of such a run are the Agent Server's saver's, in the server's process: the
worker's lease does not fence them (contract K4 covers what the worker writes itself). The
server's one-run-per-thread rule keeps two runs off one thread.

``langgraph-sdk`` is imported when the first request is made; LangGraph itself depends on
it, so the ``langgraph`` extra brings it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from types import TracebackType

    from langgraph_sdk.client import LangGraphClient

__all__ = [
    "AgentServerGraph",
    "AgentServerInterrupt",
    "AgentServerRunError",
    "AgentServerState",
    "AgentServerTask",
]


class AgentServerRunError(RuntimeError):
    """A run the Agent Server carried out ended in an error (its ``__error__``)."""


@dataclass(frozen=True)
class AgentServerInterrupt:
    """An interrupt a thread waits on, as the Agent Server reports it: LangGraph's
    ``Interrupt`` (``id``, ``value``) and the JSON schema of the answer it takes, if any."""

    id: str
    value: Any
    response_schema: Any = None


@dataclass(frozen=True)
class AgentServerTask:
    """A task of the thread's next step (``ThreadTask``), with the interrupts it raised."""

    id: str
    name: str
    interrupts: tuple[AgentServerInterrupt, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class AgentServerState:
    """A thread's state on the Agent Server in the shape of LangGraph's ``StateSnapshot``:
    ``next`` (the nodes left to run), ``tasks``, ``interrupts`` (the thread's pending ones),
    ``values``, ``config``, ``metadata``; ``raw`` is the server's answer as it came."""

    values: Any
    next: tuple[str, ...]
    tasks: tuple[AgentServerTask, ...]
    interrupts: tuple[AgentServerInterrupt, ...]
    config: dict[str, Any]
    metadata: Any = None
    raw: Mapping[str, Any] = field(default_factory=dict)


class AgentServerGraph:
    """A graph of an Agent Server, by assistant: the runner :class:`GraphResumeWorker` takes in
    ``graphs`` to resume its threads through the server's runs API.

    ``url_or_client`` is the server's URL (a client is made with ``langgraph_sdk.get_client``
    on first use, ``client_options`` passed to it: ``api_key``, ``headers``, ``timeout``) or a
    ``LangGraphClient`` of one, used as it is. ``assistant_id`` is the assistant (or graph
    id) the runs are made with. ``join_busy`` (default on) waits for a run in progress on the
    thread before reading its state."""

    def __init__(
        self,
        url_or_client: str | LangGraphClient,
        assistant_id: str,
        *,
        join_busy: bool = True,
        **client_options: Any,
    ) -> None:
        if isinstance(url_or_client, str):
            self._url: str | None = url_or_client
            self._client: LangGraphClient | None = None
        else:
            if client_options:
                raise TypeError("client options are for a URL; the client is used as it is")
            self._url = None
            self._client = url_or_client
        self.assistant_id = assistant_id
        self.join_busy = join_busy
        self._client_options = client_options
        self._own_client = self._client is None

    @property
    def client(self) -> LangGraphClient:
        """The Agent Server's client (made on first use from the URL)."""
        if self._client is None:
            from langgraph_sdk import get_client

            self._client = get_client(url=self._url, **self._client_options)
        return self._client

    async def aclose(self) -> None:
        """Close the client this graph made (a client it was given is left open)."""
        if self._own_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aget_state(self, config: Mapping[str, Any]) -> AgentServerState:
        """The thread's state, as ``CompiledStateGraph.aget_state`` gives it; a thread busy
        with a run is waited for first (``join_busy``)."""
        thread_id = _thread_id(config)
        if self.join_busy:
            await self._join_runs_in_progress(thread_id)
        state = await self.client.threads.get_state(thread_id)
        return _snapshot(thread_id, state)

    async def ainvoke(self, run_input: Any, config: Mapping[str, Any]) -> Any:
        """Run the thread on the server until it pauses or ends and return its values:
        a LangGraph ``Command`` as the run's command, ``None`` to go on from the newest
        checkpoint, anything else as the run's input. The run is refused while another is
        busy on the thread (``multitask_strategy="reject"``); one that ends in an error
        raises :class:`AgentServerRunError`."""
        thread_id = _thread_id(config)
        options: dict[str, Any] = {}
        if _is_command(run_input):
            options["command"] = _command(run_input)
        elif run_input is not None:
            options["input"] = run_input
        result = await self.client.runs.wait(
            thread_id,
            self.assistant_id,
            multitask_strategy="reject",
            on_disconnect="continue",
            raise_error=False,
            **options,
        )
        error = result.get("__error__") if isinstance(result, dict) else None
        if error is not None:
            raise AgentServerRunError(_error_text(error))
        return result

    async def _join_runs_in_progress(self, thread_id: str) -> None:
        """Wait for the runs in progress on the thread (a run a worker before this one
        started, and died or lost its lease in), oldest first, until none is left."""
        seen: set[str] = set()
        while True:
            thread = await self.client.threads.get(thread_id)
            if thread.get("status") != "busy":
                return
            running = await self.client.runs.list(thread_id, status="running")
            pending = await self.client.runs.list(thread_id, status="pending")
            runs = [run for run in [*running, *pending] if run["run_id"] not in seen]
            if not runs:
                return
            for run in sorted(runs, key=lambda r: str(r.get("created_at", ""))):
                seen.add(run["run_id"])
                await self.client.runs.join(thread_id, run["run_id"])


def _thread_id(config: Mapping[str, Any]) -> str:
    return str(config["configurable"]["thread_id"])


def _is_command(value: Any) -> bool:
    try:
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - the worker imports langgraph
        return False
    return isinstance(value, Command)


def _command(command: Any) -> dict[str, Any]:
    """A LangGraph ``Command`` as the runs API's command (``resume``, ``update``, ``goto``)."""
    if getattr(command, "graph", None) is not None:
        raise ValueError("the runs API takes no Command(graph=...): it runs the thread's graph")
    sent: dict[str, Any] = {}
    if command.resume is not None:
        sent["resume"] = command.resume
    if command.update is not None:
        sent["update"] = command.update
    goto = command.goto
    if goto:
        names = [goto] if isinstance(goto, str) else list(goto)
        if not all(isinstance(name, str) for name in names):
            raise ValueError("the runs API takes goto by node name only")
        sent["goto"] = names[0] if isinstance(goto, str) else names
    return sent


def _interrupt(raw: Any) -> AgentServerInterrupt:
    if isinstance(raw, Mapping):
        return AgentServerInterrupt(
            id=str(raw.get("id", "")),
            value=raw.get("value"),
            response_schema=raw.get("response_schema"),
        )
    return AgentServerInterrupt(id=str(getattr(raw, "id", "")), value=getattr(raw, "value", raw))


def _interrupts(raw: Any) -> tuple[AgentServerInterrupt, ...]:
    return tuple(_interrupt(each) for each in raw or ())


def _snapshot(thread_id: str, state: Mapping[str, Any]) -> AgentServerState:
    tasks = tuple(
        AgentServerTask(
            id=str(task.get("id", "")),
            name=str(task.get("name", "")),
            interrupts=_interrupts(task.get("interrupts")),
            error=task.get("error"),
        )
        for task in state.get("tasks") or ()
    )
    checkpoint = state.get("checkpoint") or {}
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if isinstance(checkpoint, Mapping):
        configurable.update(
            (key, checkpoint[key])
            for key in ("checkpoint_ns", "checkpoint_id")
            if key in checkpoint
        )
    return AgentServerState(
        values=state.get("values"),
        next=tuple(_names(state.get("next"))),
        tasks=tasks,
        interrupts=_interrupts(state.get("interrupts")),
        config={"configurable": configurable},
        metadata=state.get("metadata"),
        raw=state,
    )


def _names(raw: Sequence[Any] | None) -> list[str]:
    return [str(name) for name in raw or ()]


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        kind, message = error.get("error"), error.get("message")
        return f"{kind}: {message}" if kind else str(message)
    return str(error)
