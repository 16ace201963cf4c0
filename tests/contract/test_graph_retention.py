"""G12 and G13: retention of graph threads through a real server on every backend (and
behind PgBouncer), with real LangGraph graphs on the savers: ApplyGraphRetention and the
server's own --graph-retention job."""

from __future__ import annotations

import asyncio
import operator
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from checkpointd_client import (
    AsyncCheckpointdClient,
    CheckpointdClient,
    GraphRetentionResult,
    InvalidArgumentError,
)
from checkpointd_client.langgraph import AsyncCheckpointdSaver
from checkpointd_client.v1 import graph_service_pb2 as g
from tests.contract.test_graph import Graph, refusal_of, stored
from tests.graph import graph_phase
from tests.ops.helpers import sample, scrape
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

#: The idle time of the tests that wait for threads to become idle: long enough that a
#: thread written just before the call is not idle on a loaded machine.
IDLE_S = 2


@pytest.fixture
def graph(sidecar: SharedSidecar) -> Iterator[Graph]:
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Graph(channel, sidecar.namespace)


def _apply(
    graph: Graph, *, idle_s: int = 0, keep: int = 0, dry_run: bool = False, request_id: str = ""
) -> g.ApplyGraphRetentionResponse:
    request = g.ApplyGraphRetentionRequest(keep_newest=keep, dry_run=dry_run, request_id=request_id)
    if idle_s:
        request.idle_for.CopyFrom(Duration(seconds=idle_s))
    response: g.ApplyGraphRetentionResponse = graph("ApplyGraphRetention", request)
    return response


def _history(graph: Graph, thread: str, count: int, *, ns: str = "") -> None:
    """``count`` checkpoints; channel "a" changes at each, "b" only at the first."""
    parent = ""
    for i in range(count):
        checkpoint_id = f"c{i:03d}"
        values = {"a": f'"a{i}"'} | ({"b": '"b"'} if i == 0 else {})
        versions = {"a": f"{i:03d}", "b": "000"}
        graph.put(thread, checkpoint_id, values, versions=versions, ns=ns, parent=parent)
        _write(graph, thread, checkpoint_id, 0, "a", f'"w{i}"', ns=ns)
        parent = checkpoint_id


def _write(
    graph: Graph, thread: str, checkpoint_id: str, idx: int, channel: str, text: str, ns: str = ""
) -> None:
    value = g.TypedValue(type="json", data=text.encode())
    request = g.PutGraphWritesRequest(
        request_id=uuid.uuid4().hex,
        thread_id=thread,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        task_id="task",
        task_path="path",
        writes=[g.GraphWrite(idx=idx, channel=channel, value=value)],
    )
    graph("PutGraphWrites", request)


def _pause(graph: Graph, thread: str, checkpoint_id: str) -> None:
    """What LangGraph writes when a node calls interrupt()."""
    _write(graph, thread, checkpoint_id, -3, "__interrupt__", '[{"value": "ok?"}]')


# --- a real graph ------------------------------------------------------------------------


class Notes(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def _note(state: Notes) -> dict[str, Any]:
    return {"log": [f"{state['topic']}:{len(state['log'])}"]}


def _notes(checkpointer: Any) -> Any:
    """Two steps per run; ``topic`` is written by the first run only, so every later
    checkpoint reads the value an old one wrote."""
    builder = StateGraph(Notes)
    builder.add_node("first", _note)
    builder.add_node("second", _note)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=checkpointer)


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _saver(sidecar: SharedSidecar | Sidecar) -> AsyncCheckpointdSaver:
    return AsyncCheckpointdSaver(sidecar.target, namespace=sidecar.namespace)


async def _ids(saver: AsyncCheckpointdSaver, thread: str) -> list[str]:
    return [t.checkpoint["id"] async for t in saver.alist(_config(thread))]


def test_g12_keep_newest_keeps_what_the_kept_checkpoints_need_and_the_graph_goes_on(
    graph: Graph, sidecar: SharedSidecar
) -> None:
    """Four runs of a real graph (16 checkpoints); keep 4: the 4 newest read back through
    AsyncCheckpointdSaver.aget_tuple exactly as before (values, pending writes, metadata;
    the oldest kept names no parent), their states are the graph's, and the next run goes
    on from the newest with the whole log."""

    async def scenario() -> None:
        thread = f"notes-{uuid.uuid4().hex[:8]}"
        async with _saver(sidecar) as saver:
            notes = _notes(saver)
            await notes.ainvoke({"topic": "kept", "log": []}, _config(thread))
            for _ in range(3):
                await notes.ainvoke({"log": ["in"]}, _config(thread))
            ids = await _ids(saver, thread)
            assert len(ids) == 16
            kept = ids[:4]
            before = {i: await saver.aget_tuple(_config(thread, i)) for i in kept}
            states = {i: (await notes.aget_state(_config(thread, i))).values for i in kept}
            assert any(t is not None and t.pending_writes for t in before.values())
            reply = await asyncio.to_thread(_apply, graph, keep=4)
            assert reply.checkpoints_deleted == 12
            assert reply.writes_deleted > 0
            assert reply.channel_values_deleted > 0
            assert await _ids(saver, thread) == kept
            for checkpoint_id in kept:
                found = await saver.aget_tuple(_config(thread, checkpoint_id))
                first = before[checkpoint_id]
                assert found is not None
                assert first is not None
                assert found.checkpoint == first.checkpoint
                assert found.metadata == first.metadata
                assert found.pending_writes == first.pending_writes
                if checkpoint_id == kept[-1]:
                    assert found.parent_config is None  # its parent went
                else:
                    assert found.parent_config == first.parent_config
                state = await notes.aget_state(_config(thread, checkpoint_id))
                assert state.values == states[checkpoint_id]
                assert state.values["topic"] == "kept"  # written by the first run
            log = states[kept[0]]["log"]
            result = await notes.ainvoke({"log": ["more"]}, _config(thread))
            assert result["log"] == [*log, "more", f"kept:{len(log) + 1}", f"kept:{len(log) + 2}"]

    asyncio.run(scenario())


def test_g13_a_paused_graph_is_never_cut_and_resumes_after_retention(
    graph: Graph, sidecar: SharedSidecar
) -> None:
    """A real graph paused on interrupt() in a subgraph, idle and crowded, is left whole by
    both rules while an idle finished thread goes and a fresh one is cut to its newest;
    the paused one then resumes as if nothing had happened."""

    async def scenario() -> None:
        paused, done, fresh = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("p", "d", "f"))
        async with _saver(sidecar) as saver:
            review = graph_phase.build(saver)
            result = await review.ainvoke({"log": []}, _config(paused))
            assert [i.value["question"] for i in result["__interrupt__"]] == ["ship it?"]
            held = await _everything_of(saver, paused)
            await _notes(saver).ainvoke({"topic": "done", "log": []}, _config(done))
            await asyncio.sleep(IDLE_S + 0.5)
            await _notes(saver).ainvoke({"topic": "fresh", "log": []}, _config(fresh))
            reply = await asyncio.to_thread(_apply, graph, idle_s=IDLE_S, keep=1)
            assert (reply.threads_deleted, reply.paused_threads_kept) == (1, 1)
            assert reply.checkpoints_deleted == 4 + 3  # the finished thread, fresh's older
            assert await _ids(saver, done) == []
            assert len(await _ids(saver, fresh)) == 1
            assert await _everything_of(saver, paused) == held
            resumed = await review.ainvoke(Command(resume="approved"), _config(paused))
            assert resumed["log"] == ["prep", "prep", "answer:approved", "done"]
            assert (await review.aget_state(_config(paused))).interrupts == ()
            # Resumed, it is a thread like any other.
            again = await asyncio.to_thread(_apply, graph, keep=1)
            assert again.paused_threads_kept == 0
            assert len(await _ids(saver, paused)) == 1

    asyncio.run(scenario())


async def _everything_of(saver: AsyncCheckpointdSaver, thread: str) -> list[Any]:
    """Every checkpoint of the thread in every checkpoint_ns, with its values and writes."""
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    return [
        (t.config, t.checkpoint, t.metadata, t.pending_writes) async for t in saver.alist(config)
    ]


def test_g12_idle_threads_go_and_active_threads_stay(graph: Graph) -> None:
    """Threads whose newest checkpoint is older than idle_for go in every checkpoint_ns;
    a thread written since stays whole; a paused idle thread stays (G13)."""
    _history(graph, "old", 3)
    _history(graph, "old", 2, ns="sub:1")
    _history(graph, "paused", 2)
    _pause(graph, "paused", "c001")
    time.sleep(IDLE_S + 0.5)
    _history(graph, "new", 3)
    reply = _apply(graph, idle_s=IDLE_S)
    assert reply == g.ApplyGraphRetentionResponse(
        threads_deleted=1,
        checkpoints_deleted=5,
        writes_deleted=5,
        channel_values_deleted=7,
        paused_threads_kept=1,
    )
    assert {row[0] for row in stored(graph)} == {"new", "paused"}
    assert len(graph.ids(thread_id="new")) == 3


def test_g12_a_dry_run_changes_nothing_and_counts_what_a_run_deletes(graph: Graph) -> None:
    _history(graph, "t", 6)
    _history(graph, "t", 3, ns="sub:1")
    _history(graph, "u", 2)
    before = stored(graph)
    dry = _apply(graph, keep=2, dry_run=True, request_id="dry-1")
    assert stored(graph) == before
    assert dry == g.ApplyGraphRetentionResponse(
        checkpoints_deleted=5, writes_deleted=5, channel_values_deleted=5
    )
    assert _apply(graph, keep=2, request_id="dry-1") == dry  # the id was not taken
    assert len(stored(graph)) == len(before) - 5


def test_g12_bad_input_is_invalid_argument_and_changes_nothing(graph: Graph) -> None:
    """A negative keep_newest, a zero or negative idle_for, no rule at all, a namespace that
    is not one: INVALID_FIELD naming the field; nothing deleted."""
    _history(graph, "t", 3)
    before = stored(graph)
    negative = Duration(seconds=-60)
    bad: list[tuple[g.ApplyGraphRetentionRequest, str]] = [
        (g.ApplyGraphRetentionRequest(keep_newest=-1), "keep_newest"),
        (g.ApplyGraphRetentionRequest(idle_for=Duration(seconds=0), keep_newest=1), "idle_for"),
        (g.ApplyGraphRetentionRequest(idle_for=negative, keep_newest=1), "idle_for"),
        (g.ApplyGraphRetentionRequest(), "idle_for"),
        (g.ApplyGraphRetentionRequest(keep_newest=1, request_id="r\x00"), "request_id"),
    ]
    for request, field in bad:
        code, reason, metadata = refusal_of(graph, "ApplyGraphRetention", request)
        assert (code, reason, metadata["field"]) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_FIELD",
            field,
        )
    with pytest.raises(grpc.RpcError) as refused:
        graph.stub.ApplyGraphRetention(
            g.ApplyGraphRetentionRequest(namespace="not a namespace", keep_newest=1), timeout=10
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stored(graph) == before


def test_g12_a_retry_with_the_same_request_id_is_answered_from_memory(graph: Graph) -> None:
    """The retry answers the first counts and deletes nothing, though there is more to cut
    now; the id with another rule is REQUEST_ID_REUSED and deletes nothing."""
    _history(graph, "t", 4)
    first = _apply(graph, keep=1, request_id="ret-1")
    assert first.checkpoints_deleted == 3
    _history(graph, "u", 4)
    after_first = stored(graph)
    assert _apply(graph, keep=1, request_id="ret-1") == first
    assert stored(graph) == after_first
    code, reason, metadata = refusal_of(
        graph,
        "ApplyGraphRetention",
        g.ApplyGraphRetentionRequest(keep_newest=2, request_id="ret-1"),
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REQUEST_ID_REUSED")
    assert metadata["method"] == "ApplyGraphRetention"
    assert stored(graph) == after_first


# --- the server's own job ----------------------------------------------------------------


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the retention job did not get there in time"
        time.sleep(0.1)


def test_g12_the_server_applies_graph_retention_by_itself(
    sidecar_factory: Callable[..., Sidecar],
) -> None:
    """--graph-retention '*=idle:8s,keep:2;kept=off': within a round or two a thread keeps
    its 2 newest checkpoints; once idle it goes; a paused thread and the namespace whose
    policy is off keep everything."""
    server = sidecar_factory(
        "--graph-retention", "*=idle:8s,keep:2;kept=off", "--metrics-listen", "127.0.0.1:0"
    )
    with grpc.insecure_channel(server.target) as channel:
        graph = Graph(channel, server.namespace)
        elsewhere = Graph(channel, "kept")
        _history(graph, "t", 5)
        _history(graph, "paused", 4)
        _pause(graph, "paused", "c003")
        _history(elsewhere, "t", 5)
        _wait_for(lambda: graph.ids(thread_id="t") == ["c004", "c003"])
        _wait_for(lambda: graph.ids(thread_id="t") == [])
        assert len(graph.ids(thread_id="paused")) == 4
        assert len(elsewhere.ids(thread_id="t")) == 5
    # The metrics count what the job did: 3 checkpoints cut, then the thread's last 2.
    address = re.search(r"metrics on (http://\S+/metrics)", server.log_path.read_text())
    assert address is not None
    metrics = scrape(address.group(1))
    deleted = "checkpointd_graph_retention_deleted_total"
    assert sample(metrics, deleted, kind="threads") == 1
    assert sample(metrics, deleted, kind="checkpoints") == 5
    assert sample(metrics, deleted, kind="channel_values") == 6
    paused = sample(metrics, "checkpointd_graph_retention_kept_threads_total", reason="paused")
    assert paused is not None
    assert paused >= 1
    assert "graph retention in default: 1 threads, 2 checkpoints" in server.log_path.read_text()


# --- through the Python clients ----------------------------------------------------------


def test_g12_the_python_clients_apply_graph_retention(graph: Graph, sidecar: SharedSidecar) -> None:
    """CheckpointdClient.apply_graph_retention and its async twin send the rules and answer
    the server's counts as a GraphRetentionResult: a dry run changes nothing, the run then
    deletes what it counted, and a retry with the same request id answers the first counts."""
    _history(graph, "t", 6)
    _history(graph, "t", 3, ns="sub:1")
    _history(graph, "u", 2)
    before = stored(graph)
    expected = GraphRetentionResult(
        threads_deleted=0,
        checkpoints_deleted=5,
        writes_deleted=5,
        channel_values_deleted=5,
        paused_threads_kept=0,
        delta_threads_kept=0,
    )
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        dry = client.apply_graph_retention(keep_newest=2, dry_run=True)
        assert dry == expected
        assert stored(graph) == before

    async def apply() -> tuple[GraphRetentionResult, GraphRetentionResult]:
        async with AsyncCheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
            first = await client.apply_graph_retention(keep_newest=2, request_id="cl-1")
            again = await client.apply_graph_retention(keep_newest=2, request_id="cl-1")
            return first, again

    first, again = asyncio.run(apply())
    assert first == again == expected
    assert len(stored(graph)) == len(before) - 5
    assert graph.ids(thread_id="t") == ["c005", "c004", "c002", "c001"]  # 2 of each ns


def test_g12_the_python_client_sends_idle_for_as_a_timedelta(
    graph: Graph, sidecar: SharedSidecar
) -> None:
    """idle_for is a timedelta; an idle paused thread is kept and counted (G13)."""
    _history(graph, "old", 3)
    _history(graph, "paused", 2)
    _pause(graph, "paused", "c001")
    time.sleep(IDLE_S + 0.5)
    _history(graph, "new", 2)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        result = client.apply_graph_retention(idle_for=timedelta(seconds=IDLE_S))
    assert (result.threads_deleted, result.checkpoints_deleted) == (1, 3)
    assert result.paused_threads_kept == 1
    assert {row[0] for row in stored(graph)} == {"new", "paused"}


def test_g12_the_python_client_raises_the_servers_refusal_of_a_bad_rule(
    graph: Graph, sidecar: SharedSidecar
) -> None:
    """No rule, a zero idle_for, a negative keep_newest: InvalidArgumentError naming the
    field, and nothing deleted."""
    _history(graph, "t", 3)
    before = stored(graph)
    bad: list[tuple[dict[str, Any], str]] = [
        ({}, "idle_for"),
        ({"idle_for": timedelta(0)}, "idle_for"),
        ({"keep_newest": -1}, "keep_newest"),
    ]
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        for rules, field in bad:
            with pytest.raises(InvalidArgumentError) as refused:
                client.apply_graph_retention(**rules)
            assert (refused.value.reason, refused.value.metadata["field"]) == (
                "INVALID_FIELD",
                field,
            )
    assert stored(graph) == before
