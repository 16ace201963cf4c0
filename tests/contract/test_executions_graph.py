"""Contract C12: LangGraph threads are executions too. ListExecutions lists them beside the
fastaiagent runs, newest activity first, with their framework, graph name and a status by
LangGraph's own signs; GetExecution describes one with its pauses. Real ``StateGraph``s on
the blocking saver, through a real server on every backend."""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import grpc
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from checkpointd_client import (
    CheckpointdClient,
    Execution,
    InvalidArgumentError,
    NotFoundError,
)
from checkpointd_client.langgraph import CheckpointdSaver
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import checkpoint_service_pb2 as svc
from checkpointd_client.v1 import checkpoint_service_pb2_grpc
from checkpointd_client.v1 import graph_service_pb2 as g
from tests.contract.helpers import checkpoint
from tests.support.grpc_errors import error_details
from tests.support.shared_server import SharedSidecar


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def step(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"log": [name]}

    return node


def asker(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        answer = interrupt({"reason": f"ask-{name}"})
        return {"log": [f"{name}:{answer}"]}

    return node


def broken(state: State) -> dict[str, Any]:
    raise RuntimeError("the node broke")


def chain(saver: CheckpointdSaver, *nodes: tuple[str, Any]) -> Any:
    """START -> each node in turn -> END."""
    graph = StateGraph(State)
    previous = START
    for name, node in nodes:
        graph.add_node(name, node)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=saver)


def fan_out(saver: CheckpointdSaver) -> Any:
    """START -> a and b in parallel, each interrupting -> END."""
    graph = StateGraph(State)
    graph.add_node("a", asker("a"))
    graph.add_node("b", asker("b"))
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge("a", END)
    graph.add_edge("b", END)
    return graph.compile(checkpointer=saver)


def nested(saver: CheckpointdSaver) -> Any:
    """START -> inner (a subgraph: START -> x -> END) -> END: checkpoints in two
    checkpoint_ns."""
    inner = StateGraph(State)
    inner.add_node("x", step("x"))
    inner.add_edge(START, "x")
    inner.add_edge("x", END)
    graph = StateGraph(State)
    graph.add_node("inner", inner.compile())
    graph.add_edge(START, "inner")
    graph.add_edge("inner", END)
    return graph.compile(checkpointer=saver)


@pytest.fixture
def saver(sidecar: SharedSidecar) -> Iterator[CheckpointdSaver]:
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, graph_name="support") as s:
        yield s


def new_thread(**configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:10]}", **configurable}}


def thread_id(config: dict[str, Any]) -> str:
    return str(config["configurable"]["thread_id"])


def checkpoints_of(client: CheckpointdClient, thread: str) -> int:
    """The thread's checkpoints in every checkpoint_ns, as ListGraphCheckpoints lists them."""
    request = g.ListGraphCheckpointsRequest(
        namespace=client.namespace, thread_id=thread, page_size=1000
    )
    return len(client.call_graph("ListGraphCheckpoints", request).checkpoint_tuples)


def _populate(client: CheckpointdClient, saver: CheckpointdSaver) -> dict[str, str]:
    """Oldest first: a fastaiagent run; an ended thread (its graph named by the run's
    configurable); a failed thread (a node raised); a paused thread (named by the saver's
    graph_name); a thread whose step is under way (a task wrote, the next checkpoint is not
    written); a fastaiagent run. Returns their ids by name."""
    ids = {"old_run": f"run-{uuid.uuid4().hex[:8]}", "new_run": f"run-{uuid.uuid4().hex[:8]}"}
    client.put_checkpoint(checkpoint(ids["old_run"], chain_name="refunds", node_id="a"))

    ended = new_thread(graph_name="billing")
    chain(saver, ("a", step("a")), ("b", step("b"))).invoke({"log": []}, ended)
    ids["ended"] = thread_id(ended)

    failed = new_thread()
    with pytest.raises(RuntimeError, match="the node broke"):
        chain(saver, ("a", step("a")), ("boom", broken)).invoke({"log": []}, failed)
    ids["failed"] = thread_id(failed)

    paused = new_thread()
    result = chain(saver, ("a", step("a")), ("review", asker("review"))).invoke({"log": []}, paused)
    assert result["__interrupt__"]
    ids["paused"] = thread_id(paused)

    running = new_thread()
    graph = chain(saver, ("a", step("a")))
    graph.invoke({"log": []}, running)
    # A task of the next step has written; its checkpoint is not written yet.
    newest = graph.get_state(running).config
    saver.put_writes(newest, [("log", ["c"])], task_id=str(uuid.uuid4()), task_path="c")
    ids["running"] = thread_id(running)

    client.put_checkpoint(checkpoint(ids["new_run"], node_id="z"))
    return ids


def _by_id(executions: list[Execution]) -> dict[str, Execution]:
    return {e.execution_id: e for e in executions}


def test_c12_threads_are_listed_beside_runs_with_framework_status_and_graph_name(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """Each thread once, among the runs by last activity, framework langgraph, its status by
    LangGraph's signs (paused, failed, running, ended), its graph's name where known, its
    checkpoints counted and its newest root checkpoint named; the runs are as before."""
    ids = _populate(client, saver)
    page = client.list_executions()
    assert page.next_page_token == ""
    got = [(e.execution_id, e.framework, e.status) for e in page.executions]
    assert got == [
        (ids["new_run"], "fastaiagent", "running"),
        (ids["running"], "langgraph", "running"),
        (ids["paused"], "langgraph", "paused"),
        (ids["failed"], "langgraph", "failed"),
        (ids["ended"], "langgraph", "ended"),
        (ids["old_run"], "fastaiagent", "running"),
    ]
    listed = _by_id(page.executions)
    assert listed[ids["ended"]].chain_name == "billing"
    assert listed[ids["paused"]].chain_name == "support"
    assert listed[ids["paused"]].last_node_id == "review"
    assert listed[ids["failed"]].chain_name == ""
    assert listed[ids["old_run"]].chain_name == "refunds"
    for name in ("ended", "failed", "paused", "running"):
        thread = listed[ids[name]]
        assert thread.checkpoint_count == checkpoints_of(client, ids[name])
        assert thread.last_sequence == 0
        assert thread.last_activity_at is not None
        newest = saver.get_tuple({"configurable": {"thread_id": ids[name]}})
        assert newest is not None
        assert thread.last_checkpoint_id == newest.config["configurable"]["checkpoint_id"]


def test_c12_a_thread_counts_its_checkpoints_in_every_checkpoint_ns(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """A subgraph's checkpoints count too, and its activity; the newest checkpoint named is
    the root graph's."""
    config = new_thread()
    nested(saver).invoke({"log": []}, config)
    thread = thread_id(config)
    [listed] = client.list_executions(framework="langgraph").executions
    request = g.ListGraphCheckpointsRequest(
        namespace=client.namespace, thread_id=thread, checkpoint_ns="", page_size=1000
    )
    root = client.call_graph("ListGraphCheckpoints", request).checkpoint_tuples
    assert listed.execution_id == thread
    assert listed.checkpoint_count == checkpoints_of(client, thread)
    assert listed.status == "ended"
    assert listed.last_checkpoint_id == root[0].checkpoint.checkpoint_id


def test_c12_an_error_write_fails_a_thread_and_a_resume_runs_it_again(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """A thread is failed while its newest root checkpoint holds an __error__ write; a pause
    is paused whatever the writes; once the pause is answered and the graph ends, ended."""
    config = new_thread()
    graph = chain(saver, ("review", asker("review")))
    graph.invoke({"log": []}, config)
    thread = thread_id(config)

    def status() -> str:
        return client.get_execution(thread).execution.status

    assert status() == "paused"
    graph.invoke(Command(resume="yes"), config)
    assert status() == "ended"
    newest = graph.get_state(config).config
    saver.put_writes(newest, [("__error__", "boom")], task_id=str(uuid.uuid4()), task_path="x")
    assert status() == "failed"


def test_c12_a_thread_whose_newest_checkpoint_has_sends_to_run_is_running(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """A thread stopped before the tasks its Sends start (its newest root checkpoint names
    them, none has written) has next tasks to run, as LangGraph reads it: running, not
    ended; once they ran and the graph ended, ended."""
    graph = StateGraph(State)
    graph.add_node("plan", step("plan"))
    graph.add_node("worker", step("worker"))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", lambda state: [Send("worker", state)] * 2, ["worker"])
    graph.add_edge("worker", END)
    compiled: Any = graph.compile(checkpointer=saver, interrupt_before=["worker"])
    config = new_thread()
    compiled.invoke({"log": []}, config)
    thread = thread_id(config)
    assert compiled.get_state(config).next == ("worker", "worker")

    def status() -> str:
        return client.get_execution(thread).execution.status

    assert status() == "running"
    compiled.invoke(None, config)
    assert compiled.get_state(config).next == ()
    assert status() == "ended"


def test_c12_filters_apply_to_threads_and_framework_filters(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """framework narrows to one kind; status, chain (a thread's graph name) and active_since
    apply to threads as to runs."""
    ids = _populate(client, saver)

    def listed(**filters: Any) -> list[str]:
        return [e.execution_id for e in client.list_executions(**filters).executions]

    threads = [ids[name] for name in ("running", "paused", "failed", "ended")]
    assert listed(framework="langgraph") == threads
    assert listed(framework="fastaiagent") == [ids["new_run"], ids["old_run"]]
    assert listed(status="paused") == [ids["paused"]]
    assert listed(status="failed") == [ids["failed"]]
    assert listed(status="ended") == [ids["ended"]]
    assert listed(status="running") == [ids["new_run"], ids["running"], ids["old_run"]]
    assert listed(status="running", framework="langgraph") == [ids["running"]]
    assert listed(chain_name="billing") == [ids["ended"]]
    assert listed(chain_name="support") == [ids["paused"]]
    assert listed(active_since=datetime.now(UTC) + timedelta(hours=1)) == []
    assert len(listed(active_since=datetime.now(UTC) - timedelta(hours=1))) == 6
    with pytest.raises(ValueError, match="framework must be one of"):
        client.list_executions(framework="crewai")


def test_c12_pages_merge_runs_and_threads(client: CheckpointdClient, saver: CheckpointdSaver):
    """Pages of one: every run and thread once, in the one-page order; a token is bound to
    its framework filter."""
    ids = _populate(client, saver)
    whole = [e.execution_id for e in client.list_executions().executions]
    seen: list[str] = []
    token = ""
    while True:
        page = client.list_executions(page_size=1, page_token=token)
        assert len(page.executions) <= 1
        seen += [e.execution_id for e in page.executions]
        token = page.next_page_token
        if not token:
            break
    assert seen == whole
    assert sorted(seen) == sorted(ids.values())
    threads: list[str] = []
    token = ""
    while True:
        page = client.list_executions(page_size=2, page_token=token, framework="langgraph")
        threads += [e.execution_id for e in page.executions]
        token = page.next_page_token
        if not token:
            break
    assert threads == [ids[name] for name in ("running", "paused", "failed", "ended")]
    first = client.list_executions(page_size=1)
    with pytest.raises(InvalidArgumentError) as other:
        client.list_executions(page_size=1, page_token=first.next_page_token, framework="langgraph")
    assert other.value.reason == "INVALID_PAGE_TOKEN"


def test_c12_get_execution_of_a_thread_shows_its_pauses_and_decision(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """A thread waiting on two interrupts: its summary and both pauses; a decision on one is
    on that pause and is the newest decided; no idempotency keys. framework fastaiagent on a
    thread's id is NOT_FOUND."""
    config = new_thread()
    fan_out(saver).invoke({"log": []}, config)
    thread = thread_id(config)
    detail = client.get_execution(thread)
    assert detail.execution.framework == "langgraph"
    assert detail.execution.status == "paused"
    assert detail.execution.chain_name == "support"
    assert sorted(p.node_id for p in detail.pauses) == ["a", "b"]
    assert detail.pending == detail.pauses[0]
    assert detail.last_decided is None
    assert (detail.idempotency_keys, detail.idempotency_key_count) == ([], 0)

    chosen = detail.pauses[1]
    client.submit_decision(
        thread, interrupt_id=chosen.interrupt_id, approved=True, decided_by="ana"
    )
    detail = client.get_execution(thread, framework="langgraph")
    decided = {p.interrupt_id: p.decision for p in detail.pauses}
    assert decided[chosen.interrupt_id] is not None
    assert decided[chosen.interrupt_id].decided_by == "ana"  # type: ignore[union-attr]
    assert [d for i, d in decided.items() if i != chosen.interrupt_id] == [None]
    assert detail.last_decided is not None
    assert detail.last_decided.interrupt_id == chosen.interrupt_id

    with pytest.raises(NotFoundError) as missing:
        client.get_execution(thread, framework="fastaiagent")
    assert missing.value.reason == "NO_CHECKPOINTS"


def test_c12_a_run_and_a_thread_of_one_id_stay_apart(
    client: CheckpointdClient, saver: CheckpointdSaver
):
    """The same id as a fastaiagent run and a LangGraph thread: listed twice, once per
    framework, neither reading the other's pauses; GetExecution takes the run unless asked
    for the thread."""
    same = f"same-{uuid.uuid4().hex[:8]}"
    client.put_checkpoint(checkpoint(same, node_id="a"))
    chain(saver, ("review", asker("review"))).invoke(
        {"log": []}, {"configurable": {"thread_id": same}}
    )
    listed = {(e.framework, e.status) for e in client.list_executions().executions}
    assert listed == {("fastaiagent", "running"), ("langgraph", "paused")}
    run = client.get_execution(same)
    assert (run.execution.framework, run.pending, run.pauses) == ("fastaiagent", None, [])
    thread = client.get_execution(same, framework="langgraph")
    assert [p.node_id for p in thread.pauses] == ["review"]


def test_c12_an_unknown_framework_is_invalid(sidecar):
    """A framework value the server does not know, in either request, is INVALID_ARGUMENT
    (INVALID_FIELD) naming the field; a known one is served."""
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        listing = svc.ListExecutionsRequest(namespace=sidecar.namespace)
        listing.framework = 9  # type: ignore[assignment]
        one = svc.GetExecutionRequest(namespace=sidecar.namespace, execution_id="any")
        one.framework = 9  # type: ignore[assignment]
        for call in (
            (lambda: stub.ListExecutions(listing, timeout=10)),
            (lambda: stub.GetExecution(one, timeout=10)),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call()
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            details = error_details(refused.value)
            assert details.reason == "INVALID_FIELD"
            assert details.metadata["field"] == "framework"
        listed = stub.ListExecutions(
            svc.ListExecutionsRequest(
                namespace=sidecar.namespace, framework=pb.FRAMEWORK_LANGGRAPH
            ),
            timeout=10,
        )
        assert list(listed.executions) == []
