"""Contracts G8-G10: LangGraph's interrupts in the shared pending-interrupt inbox, with real
``StateGraph``s on the blocking saver, through a real server on every backend. A pause is
listed, watched and decided like a fastaiagent one; a thread's parallel interrupts are
separate pauses, each decided and resumed by its id; what resumes a pause ends it."""

from __future__ import annotations

import operator
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import grpc
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from checkpointd_client import (
    CheckpointdClient,
    InterruptEvent,
    InvalidArgumentError,
    NotFoundError,
    PendingInterrupt,
    SnapshotComplete,
    SnapshotItem,
)
from checkpointd_client.langgraph import CheckpointdSaver
from checkpointd_client.v1 import graph_service_pb2 as g
from checkpointd_client.v1 import graph_service_pb2_grpc as g_grpc
from tests.contract.helpers import interrupted
from tests.support.shared_server import SharedSidecar


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def review(state: State) -> dict[str, Any]:
    answer = interrupt({"reason": "refund", "amount": 42})
    return {"log": [f"review:{answer}"]}


def asker(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        answer = interrupt({"reason": f"ask-{name}"})
        return {"log": [f"{name}:{answer}"]}

    return node


def one_pause(saver: CheckpointdSaver) -> Any:
    """START -> review (interrupts) -> END."""
    graph = StateGraph(State)
    graph.add_node("review", review)
    graph.add_edge(START, "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


def two_pauses(saver: CheckpointdSaver) -> Any:
    """START -> a and b in parallel, each interrupting -> END."""
    graph = StateGraph(State)
    graph.add_node("a", asker("a"))
    graph.add_node("b", asker("b"))
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge("a", END)
    graph.add_edge("b", END)
    return graph.compile(checkpointer=saver)


@pytest.fixture
def saver(sidecar: SharedSidecar) -> Iterator[CheckpointdSaver]:
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, graph_name="support") as s:
        yield s


@pytest.fixture
def thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:10]}"}}


def rows_of(client: CheckpointdClient, thread_id: str) -> list[PendingInterrupt]:
    listed = client.list_pending_interrupts().pending_interrupts
    return [p for p in listed if p.execution_id == thread_id]


def test_g8_a_graph_pause_is_listed_watched_and_decided(client, saver, thread):
    """A node's interrupt() is a pending interrupt named by its id, with the graph's name,
    the value's reason and the value as context; the watch snapshot shows it, a decision
    naming its id is stored on it and announced."""
    graph = one_pause(saver)
    result = graph.invoke({"log": []}, thread)
    [raised] = result["__interrupt__"]
    thread_id = thread["configurable"]["thread_id"]
    [row] = rows_of(client, thread_id)
    assert row.interrupt_id == raised.id
    assert (row.chain_name, row.reason, row.node_id, row.checkpoint_ns) == (
        "support",
        "refund",
        "review",
        "",
    )
    assert row.context == {"reason": "refund", "amount": 42}
    assert row.checkpoint_id == graph.get_state(thread).config["configurable"]["checkpoint_id"]
    assert row.decision is None
    assert [
        p.interrupt_id
        for p in client.list_pending_interrupts(chain_name="support").pending_interrupts
        if p.execution_id == thread_id
    ] == [raised.id]

    with client.watch_interrupts(timeout=60) as watch:
        snapshot = []
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
            assert isinstance(item, SnapshotItem)
            snapshot.append(item.pending)
        assert [p.interrupt_id for p in snapshot if p.execution_id == thread_id] == [raised.id]
        decided = client.submit_decision(
            thread_id, interrupt_id=raised.id, approved=True, decided_by="ana"
        )
        assert decided.interrupt_id == raised.id
        assert decided.decision is not None
        assert decided.decision.decided_by == "ana"
        for item in watch:
            if isinstance(item, InterruptEvent) and item.pending.execution_id == thread_id:
                assert item.type == "decided"
                assert item.pending.interrupt_id == raised.id
                break
    [row] = rows_of(client, thread_id)
    assert row.decision is not None
    assert row.decision.approved


def test_g8_bad_input_is_refused_and_changes_nothing(client, saver, thread, sidecar):
    """An unknown interrupt id, an interrupt id on a fastaiagent run, and a descriptor without
    an id are refused with a reason; nothing is decided or written."""
    one_pause(saver).invoke({"log": []}, thread)
    thread_id = thread["configurable"]["thread_id"]
    with pytest.raises(NotFoundError) as unknown:
        client.submit_decision(thread_id, interrupt_id="f" * 32, approved=True, decided_by="x")
    assert unknown.value.reason == "NO_PENDING_INTERRUPT"
    with pytest.raises(NotFoundError):  # a graph pause needs its id
        client.submit_decision(thread_id, approved=True, decided_by="x")
    [row] = rows_of(client, thread_id)
    assert row.decision is None

    execution_id = f"exec-{uuid.uuid4().hex[:10]}"
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending)
    with pytest.raises(NotFoundError) as on_fastaiagent:
        client.submit_decision(execution_id, interrupt_id="abc", approved=True, decided_by="x")
    assert on_fastaiagent.value.reason == "NO_PENDING_INTERRUPT"
    [fastaiagent_row] = rows_of(client, execution_id)
    assert fastaiagent_row.decision is None
    assert fastaiagent_row.interrupt_id == ""

    checkpoint_id = row.checkpoint_id
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = g_grpc.GraphServiceStub(channel)
        for bad in (
            [g.GraphInterrupt(reason="no id")],
            [g.GraphInterrupt(interrupt_id="x" * 129)],
            [g.GraphInterrupt(interrupt_id="same"), g.GraphInterrupt(interrupt_id="same")],
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.PutGraphWrites(
                    g.PutGraphWritesRequest(
                        namespace=sidecar.namespace,
                        thread_id=thread_id,
                        checkpoint_id=checkpoint_id,
                        task_id="t-bad",
                        writes=[
                            g.GraphWrite(
                                idx=-3,
                                channel="__interrupt__",
                                value=g.TypedValue(type="json", data=b"[]"),
                            )
                        ],
                        interrupts=bad,
                    )
                )
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "interrupts.interrupt_id" in (refused.value.details() or "")
        stored = stub.GetGraphCheckpoint(
            g.GetGraphCheckpointRequest(
                namespace=sidecar.namespace, thread_id=thread_id, checkpoint_id=checkpoint_id
            )
        )
    assert all(w.task_id != "t-bad" for w in stored.checkpoint_tuple.pending_writes)
    assert [r.interrupt_id for r in rows_of(client, thread_id)] == [row.interrupt_id]
    with pytest.raises(InvalidArgumentError):
        client.submit_decision(thread_id, interrupt_id="x" * 129, approved=True, decided_by="x")


def test_g9_parallel_interrupts_are_separate_pauses(client, saver, thread):
    """Two parallel tasks that interrupt make two pending interrupts of one thread, each
    decided on its own; resuming one by its id ends that one only, then the other."""
    graph = two_pauses(saver)
    result = graph.invoke({"log": []}, thread)
    raised = {i.value["reason"]: i.id for i in result["__interrupt__"]}
    assert set(raised) == {"ask-a", "ask-b"}
    assert len(set(raised.values())) == 2
    thread_id = thread["configurable"]["thread_id"]
    rows = {r.reason: r for r in rows_of(client, thread_id)}
    assert {reason: r.interrupt_id for reason, r in rows.items()} == raised
    assert {r.node_id for r in rows.values()} == {"a", "b"}

    client.submit_decision(thread_id, interrupt_id=raised["ask-a"], approved=True, decided_by="x")
    rows = {r.reason: r for r in rows_of(client, thread_id)}
    assert rows["ask-a"].decision is not None
    assert rows["ask-b"].decision is None

    graph.invoke(Command(resume={raised["ask-a"]: "yes"}), thread)
    [left] = rows_of(client, thread_id)
    assert left.interrupt_id == raised["ask-b"]
    assert left.decision is None

    client.submit_decision(thread_id, interrupt_id=raised["ask-b"], approved=False, decided_by="y")
    final = graph.invoke(Command(resume={raised["ask-b"]: "no"}), thread)
    assert sorted(final["log"]) == ["a:yes", "b:no"]
    assert rows_of(client, thread_id) == []


def fan_out(saver: Any) -> Any:
    """START -> a Send to "review" per item, each interrupting -> END."""
    graph = StateGraph(State)
    graph.add_node("review", lambda item: {"log": [f"{item['name']}:{interrupt(item)}"]})
    graph.add_conditional_edges(
        START, lambda _: [Send("review", {"name": n, "reason": f"ask-{n}"}) for n in "xy"]
    )
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


def test_g8_a_pause_in_a_task_a_send_started_names_its_node(client, saver, thread):
    """A task a Send starts has no node in its task path (only the Send's index): its pauses
    are still named by the node the Send targets, and each resumes by its id."""
    graph = fan_out(saver)
    result = graph.invoke({"log": []}, thread)
    raised = {i.value["name"]: i.id for i in result["__interrupt__"]}
    thread_id = thread["configurable"]["thread_id"]
    rows = rows_of(client, thread_id)
    assert sorted((r.node_id, r.reason) for r in rows) == [
        ("review", "ask-x"),
        ("review", "ask-y"),
    ]
    final = graph.invoke(Command(resume={raised["x"]: "yes", raised["y"]: "no"}), thread)
    assert sorted(final["log"]) == ["x:yes", "y:no"]
    assert rows_of(client, thread_id) == []


@pytest.mark.parametrize("order", ["writes-first", "put-first"])
def test_g8_a_send_tasks_pause_is_named_whichever_comes_first(client, sidecar, thread, order):
    """Writes before the put (held, G18): the server names the pause by the put's Send
    targets. The put before the writes: the saver that put it names the pause itself."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.types import Interrupt

    thread_id = thread["configurable"]["thread_id"]
    root: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    sent = empty_checkpoint()
    sent["channel_values"]["__pregel_tasks"] = [Send("triage", {}), Send("refund", {})]
    at: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": sent["id"]}
    }
    pause = Interrupt(value={"reason": "refund"}, id=uuid.uuid4().hex)
    writes = [("__interrupt__", (pause,))]
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        if order == "writes-first":
            saver.put_writes(at, writes, "task-1", "~__pregel_push, 0000000001, 0000000000")
            assert rows_of(client, thread_id) == []
            saver.put(root, sent, {"step": 0}, {})
        else:
            saver.put(root, sent, {"step": 0}, {})
            saver.put_writes(at, writes, "task-1", "~__pregel_push, 0000000001, 0000000000")
    [row] = rows_of(client, thread_id)
    assert (row.interrupt_id, row.node_id) == (pause.id, "refund")


async def test_g8_send_tasks_pauses_are_named_when_the_put_is_slow(client, sidecar: SharedSidecar):
    """A real fan-out on an asyncio saver whose puts take a second: the Send tasks' interrupt
    writes reach the server before their checkpoint, and the pauses it publishes with the put
    name the node the Sends target."""
    import asyncio

    from checkpointd_client.langgraph import AsyncCheckpointdSaver

    class SlowPuts(AsyncCheckpointdSaver):
        async def aput(self, config, checkpoint, metadata, new_versions):
            await asyncio.sleep(1.0)
            return await super().aput(config, checkpoint, metadata, new_versions)

    thread_id = f"thread-{uuid.uuid4().hex[:10]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    async with SlowPuts(sidecar.target, namespace=sidecar.namespace) as saver:
        result = await fan_out(saver).ainvoke({"log": []}, config)
    assert len(result["__interrupt__"]) == 2
    rows = await asyncio.to_thread(rows_of, client, thread_id)
    assert sorted((r.node_id, r.reason) for r in rows) == [
        ("review", "ask-x"),
        ("review", "ask-y"),
    ]


def test_g10_the_resume_ends_the_pause_and_a_delete_removes_it(client, saver, thread):
    """The writes that resume a pause end it with a ``claimed`` event; a thread delete
    removes a thread's pauses with a ``removed`` event; a fastaiagent pause of the same id
    is another pause and stays."""
    graph = one_pause(saver)
    thread_id = thread["configurable"]["thread_id"]
    graph.invoke({"log": []}, thread)
    [row] = rows_of(client, thread_id)
    cp, pending = interrupted(thread_id)
    client.record_interrupt(cp, pending)  # a fastaiagent run that shares the id
    with client.watch_interrupts(timeout=60) as watch:
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
        final = graph.invoke(Command(resume="fine"), thread)
        assert final["log"] == ["review:fine"]
        for item in watch:
            if isinstance(item, InterruptEvent) and item.pending.execution_id == thread_id:
                assert (item.type, item.pending.interrupt_id) == ("claimed", row.interrupt_id)
                break
        assert [r.interrupt_id for r in rows_of(client, thread_id)] == [""]

        other = {"configurable": {"thread_id": f"{thread_id}-2"}}
        graph.invoke({"log": []}, other)
        assert len(rows_of(client, f"{thread_id}-2")) == 1
        saver.delete_thread(f"{thread_id}-2")
        for item in watch:
            if (
                isinstance(item, InterruptEvent)
                and item.pending.execution_id == f"{thread_id}-2"
                and item.type == "removed"
            ):
                break
        assert rows_of(client, f"{thread_id}-2") == []
    assert [r.interrupt_id for r in rows_of(client, thread_id)] == [""]


def test_g8_the_cli_lists_and_decides_a_graph_pause(client, saver, thread, sidecar):
    """`checkpointd interrupts list` shows a graph pause's interrupt id; `decide
    --interrupt-id` decides that pause."""
    result = one_pause(saver).invoke({"log": []}, thread)
    [raised] = result["__interrupt__"]
    thread_id = thread["configurable"]["thread_id"]
    where = ["--target", sidecar.target, "--namespace", sidecar.namespace]
    listed = subprocess.run(
        [sys.executable, "-m", "checkpointd", "interrupts", "list", *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert listed[0].split()[:2] == ["EXECUTION_ID", "INTERRUPT_ID"]
    assert any(line.split()[:2] == [thread_id, raised.id] for line in listed[1:])
    decided = subprocess.run(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "interrupts",
            "decide",
            thread_id,
            "--approve",
            "--interrupt-id",
            raised.id,
            "--decided-by",
            "cli",
            *where,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"(node review, interrupt {raised.id}) as cli" in decided
    [row] = rows_of(client, thread_id)
    assert row.decision is not None
    assert row.decision.decided_by == "cli"


def _interrupt_write(saver: CheckpointdSaver, thread_id: str, checkpoint_id: str, ident: str):
    """LangGraph's __interrupt__ write of a task at ``checkpoint_id``, as a node's interrupt()
    sends it (possibly before the put of that checkpoint)."""
    from langgraph.types import Interrupt

    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}
    }
    pause = Interrupt(value={"reason": "refund", "amount": 7}, id=ident)
    saver.put_writes(config, [("__interrupt__", (pause,))], "task-1", "~__pregel_pull, review")


def test_g18_a_pause_is_published_only_with_its_checkpoint(client, saver, thread):
    """An interrupt written before its checkpoint is put (LangGraph's durability "async"
    under load) is stored, but is no pause yet: not listed, not watched, not decidable. The
    put of its checkpoint publishes it, with its added event, in the same transaction."""
    from langgraph.checkpoint.base import empty_checkpoint

    thread_id = thread["configurable"]["thread_id"]
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    first = empty_checkpoint()
    parent = saver.put(root, first, {"step": -1}, {})
    later = empty_checkpoint()
    ident = uuid.uuid4().hex

    with client.watch_interrupts(timeout=60) as watch:
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
        _interrupt_write(saver, thread_id, later["id"], ident)
        assert rows_of(client, thread_id) == []
        with pytest.raises(NotFoundError):
            client.submit_decision(thread_id, interrupt_id=ident, approved=True, decided_by="x")
        # The writes themselves are kept: they come back with the checkpoint once it is put.
        saver.put(parent, later, {"step": 0}, {})
        for item in watch:
            if isinstance(item, InterruptEvent) and item.pending.execution_id == thread_id:
                assert (item.type, item.pending.interrupt_id) == ("added", ident)
                assert item.pending.checkpoint_id == later["id"]
                break
    [row] = rows_of(client, thread_id)
    assert (row.interrupt_id, row.checkpoint_id, row.reason) == (ident, later["id"], "refund")
    stored = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert stored is not None
    assert stored.checkpoint["id"] == later["id"]
    assert [(task, channel) for task, channel, _ in stored.pending_writes] == [
        ("task-1", "__interrupt__")
    ]
    decided = client.submit_decision(thread_id, interrupt_id=ident, approved=True, decided_by="x")
    assert decided.decision is not None


def test_g18_a_held_pause_goes_with_its_thread(client, saver, thread):
    """A thread deleted while an interrupt waits for its checkpoint takes the held
    description with it: a put of that checkpoint afterwards publishes nothing."""
    from langgraph.checkpoint.base import empty_checkpoint

    thread_id = thread["configurable"]["thread_id"]
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    later = empty_checkpoint()
    _interrupt_write(saver, thread_id, later["id"], uuid.uuid4().hex)
    saver.delete_thread(thread_id)
    saver.put(root, later, {"step": 0}, {})
    assert rows_of(client, thread_id) == []


async def test_g18_a_graph_whose_put_is_slow_shows_no_pause_before_its_checkpoint(
    client, sidecar: SharedSidecar
):
    """A real graph on an asyncio saver whose puts take a second (a loaded machine): LangGraph
    sends the node's __interrupt__ write at once and the checkpoint's put after it. While the
    put is under way the inbox has no pause; every pause it ever lists names a checkpoint the
    saver reads back; the pause is there once the graph has paused."""
    import asyncio

    from checkpointd_client.langgraph import AsyncCheckpointdSaver

    class SlowPuts(AsyncCheckpointdSaver):
        async def aput(self, config, checkpoint, metadata, new_versions):
            await asyncio.sleep(1.0)
            return await super().aput(config, checkpoint, metadata, new_versions)

    thread_id = f"thread-{uuid.uuid4().hex[:10]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    async with SlowPuts(sidecar.target, namespace=sidecar.namespace, graph_name="slow") as saver:
        graph = StateGraph(State)
        graph.add_node("review", review)
        graph.add_edge(START, "review")
        graph.add_edge("review", END)
        compiled = graph.compile(checkpointer=saver)
        start: State = {"log": []}
        running = asyncio.create_task(compiled.ainvoke(start, config))
        seen: list[str] = []
        while not running.done():
            for row in await asyncio.to_thread(rows_of, client, thread_id):
                found = await AsyncCheckpointdSaver.aget_tuple(
                    saver,
                    {
                        "configurable": {
                            "thread_id": thread_id,
                            "checkpoint_ns": "",
                            "checkpoint_id": row.checkpoint_id,
                        }
                    },
                )
                assert found is not None, "a pause was listed before its checkpoint was stored"
                seen.append(row.interrupt_id)
            await asyncio.sleep(0.05)
        [raised] = (await running)["__interrupt__"]
    [row] = rows_of(client, thread_id)
    assert row.interrupt_id == raised.id
    assert set(seen) <= {raised.id}
