"""G19 and G20: a DeltaChannel's history walked by the server (GetGraphDeltaHistory), and the
deletes and copies that keep every chain back to its seed, on every backend, over the raw
generated stubs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from checkpointd_client.v1 import graph_service_pb2 as g
from tests.contract.graph_breakers import graph_checkpoint
from tests.contract.test_graph import Graph, refusal_of

DELTA = {"counters_since_delta_snapshot": {"m": [1, 1]}}


@pytest.fixture
def graph(sidecar: Any) -> Iterator[Graph]:
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Graph(channel, sidecar.namespace)


def put(
    graph: Graph,
    thread: str,
    checkpoint_id: str,
    parent: str,
    values: dict[str, str | None],
    metadata: dict[str, Any] | None = None,
) -> None:
    """A checkpoint naming version ``<channel>@<id>`` of each channel: a JSON value, or an
    ``"empty"`` one for None (what a DeltaChannel between snapshots stores)."""
    versions = {channel: f"{channel}@{checkpoint_id}" for channel in values}
    graph(
        "PutGraphCheckpoint",
        g.PutGraphCheckpointRequest(
            request_id=uuid.uuid4().hex,
            checkpoint=graph_checkpoint(
                thread_id=thread,
                checkpoint_id=checkpoint_id,
                parent_checkpoint_id=parent,
                metadata_json=json.dumps(metadata or {}),
                channel_versions=versions,
            ),
            new_values=[
                g.GraphChannelValue(
                    channel=channel,
                    version=versions[channel],
                    value=g.TypedValue(type="json", data=text.encode())
                    if text is not None
                    else g.TypedValue(type="empty"),
                )
                for channel, text in values.items()
            ],
        ),
    )


def write(
    graph: Graph, thread: str, checkpoint_id: str, task: str, path: str, *channels: str
) -> None:
    """One task's writes at a checkpoint, one per channel, each valued ``"<task>:<channel>"``."""
    graph(
        "PutGraphWrites",
        g.PutGraphWritesRequest(
            request_id=uuid.uuid4().hex,
            thread_id=thread,
            checkpoint_id=checkpoint_id,
            task_id=task,
            task_path=path,
            writes=[
                g.GraphWrite(
                    idx=idx,
                    channel=channel,
                    value=g.TypedValue(type="json", data=json.dumps(f"{task}:{channel}").encode()),
                )
                for idx, channel in enumerate(channels)
            ],
        ),
    )


def walk(graph: Graph, thread: str, checkpoint_id: str, *channels: str, page_size: int = 0) -> Any:
    """Every page of the walk: the ancestors' (id, writes, seeds) and the pages' count."""
    request = g.GetGraphDeltaHistoryRequest(
        thread_id=thread, checkpoint_id=checkpoint_id, channels=channels, page_size=page_size
    )
    found: list[tuple[str, list[tuple[str, str, str]], list[tuple[str, str]]]] = []
    pages = 0
    while True:
        response = graph("GetGraphDeltaHistory", request)
        pages += 1
        for ancestor in response.ancestors:
            found.append(
                (
                    ancestor.checkpoint_id,
                    [(w.task_id, w.channel, w.value.data.decode()) for w in ancestor.writes],
                    [(s.channel, s.value.data.decode()) for s in ancestor.seeds],
                )
            )
        if not response.next_page_token:
            return found, pages
        request.page_token = response.next_page_token


def _chain(graph: Graph, thread: str) -> None:
    """c1 (m seeded) <- c2 <- c3 <- c4, and a fork c5 <- c2; m is empty after c1, x never
    has a value; c2 has two tasks whose path order is not their id order."""
    put(graph, thread, "c1", "", {"m": '["a"]', "x": None})
    put(graph, thread, "c2", "c1", {"m": None, "x": None}, DELTA)
    put(graph, thread, "c3", "c2", {"m": None}, DELTA)
    put(graph, thread, "c4", "c3", {"m": None}, DELTA)
    put(graph, thread, "c5", "c2", {"m": None}, DELTA)
    write(graph, thread, "c1", "t1", "p", "m", "o")
    write(graph, thread, "c2", "ta", "z", "m", "x")
    write(graph, thread, "c2", "tb", "a", "m")
    write(graph, thread, "c3", "t3", "p", "x", "o")
    write(graph, thread, "c4", "t4", "p", "m")  # pending at the target: never returned
    write(graph, thread, "c5", "t5", "p", "m")


def test_g19_the_walk_follows_the_parents_to_each_seed_in_writes_order(graph: Graph) -> None:
    """From the parent, each ancestor's writes to the channels still walked (by task path,
    then task id), a channel ending at its nearest stored value with that ancestor's writes;
    a fork's other branch never contributes; the newest is the default target."""
    thread = uuid.uuid4().hex
    _chain(graph, thread)
    found, pages = walk(graph, thread, "c4", "m", "x")
    assert pages == 1
    assert found == [
        ("c3", [("t3", "x", '"t3:x"')], []),
        ("c2", [("tb", "m", '"tb:m"'), ("ta", "m", '"ta:m"'), ("ta", "x", '"ta:x"')], []),
        ("c1", [("t1", "m", '"t1:m"')], [("m", '["a"]')]),
    ]
    fork, _ = walk(graph, thread, "c5", "m")
    assert [a[0] for a in fork] == ["c2", "c1"]
    assert walk(graph, thread, "", "m") == (fork, 1)  # c5 is the newest
    assert walk(graph, thread, "c1", "m") == ([], 1)  # no parent
    assert walk(graph, thread, "nope", "m") == ([], 1)
    assert walk(graph, uuid.uuid4().hex, "", "m") == ([], 1)


def test_g19_pages_resume_the_same_walk_and_a_foreign_token_is_refused(graph: Graph) -> None:
    """page_size=1 answers the same ancestors a page at a time; a token is refused for
    another request, as is a bad channel list."""
    thread = uuid.uuid4().hex
    _chain(graph, thread)
    whole, _ = walk(graph, thread, "c4", "m", "x")
    paged, pages = walk(graph, thread, "c4", "m", "x", page_size=1)
    assert paged == whole
    assert pages == 3
    first = graph(
        "GetGraphDeltaHistory",
        g.GetGraphDeltaHistoryRequest(
            thread_id=thread, checkpoint_id="c4", channels=["m", "x"], page_size=1
        ),
    )
    foreign = g.GetGraphDeltaHistoryRequest(
        thread_id=thread, checkpoint_id="c4", channels=["m"], page_token=first.next_page_token
    )
    code, reason, _ = refusal_of(graph, "GetGraphDeltaHistory", foreign)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN")
    for channels in ([], ["m", "m"], [f"c{n}" for n in range(101)], [""]):
        bad = g.GetGraphDeltaHistoryRequest(thread_id=thread, channels=channels)
        code, reason, metadata = refusal_of(graph, "GetGraphDeltaHistory", bad)
        assert (code, reason, metadata["field"]) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_FIELD",
            "channels",
        )


def test_g19_a_parent_that_is_not_older_ends_the_walk(graph: Graph) -> None:
    """Parents that loop (each naming the other) end the walk instead of repeating it."""
    thread = uuid.uuid4().hex
    put(graph, thread, "k2", "k9", {"m": None}, DELTA)
    put(graph, thread, "k9", "k2", {"m": None}, DELTA)
    found, pages = walk(graph, thread, "k9", "m", page_size=1)
    assert ([a[0] for a in found], pages) == (["k2"], 1)


def test_g20_a_delete_of_runs_keeps_what_a_remaining_chain_walks_through(graph: Graph) -> None:
    """Deleting a run whose checkpoints a later run's DeltaChannel walks back through keeps
    those (up to the seed) and deletes the rest: the later run reads the same history."""
    thread = uuid.uuid4().hex
    r1 = {"run_id": "r1"}
    put(graph, thread, "c0", "", {"m": None}, {**r1, **DELTA})
    put(graph, thread, "c1", "c0", {"m": '["a"]'}, r1)
    put(graph, thread, "c2", "c1", {"m": None}, {**r1, **DELTA})
    put(graph, thread, "c2b", "c1", {"m": None}, {**r1, **DELTA})  # a branch nothing follows
    put(graph, thread, "c3", "c2", {"m": None}, {**r1, **DELTA})
    put(graph, thread, "c4", "c3", {"m": None}, {"run_id": "r2", **DELTA})
    for checkpoint_id in ("c0", "c1", "c2", "c2b", "c3"):
        write(graph, thread, checkpoint_id, f"t-{checkpoint_id}", "p", "m")
    before, _ = walk(graph, thread, "c4", "m")
    response = graph("DeleteGraphRuns", g.DeleteGraphRunsRequest(request_id="d1", run_ids=["r1"]))
    assert response.checkpoints_deleted == 2
    assert walk(graph, thread, "c4", "m")[0] == before
    assert [a[0] for a in before] == ["c3", "c2", "c1"]
    assert sorted(graph.ids(thread_id=thread)) == ["c1", "c2", "c3", "c4"]
    # Once nothing walks through them, the run's checkpoints go.
    graph("DeleteGraphRuns", g.DeleteGraphRunsRequest(request_id="d2", run_ids=["r2"]))
    graph("DeleteGraphRuns", g.DeleteGraphRunsRequest(request_id="d3", run_ids=["r1"]))
    assert graph.ids(thread_id=thread) == []


def test_g20_a_copy_keeps_every_chain_to_its_seed(graph: Graph) -> None:
    """A copied thread walks every checkpoint's history as its source does."""
    thread, copy = uuid.uuid4().hex, uuid.uuid4().hex
    _chain(graph, thread)
    graph(
        "CopyGraphThread",
        g.CopyGraphThreadRequest(request_id="copy", source_thread_id=thread, target_thread_id=copy),
    )
    for checkpoint_id in ("c2", "c3", "c4", "c5"):
        assert walk(graph, copy, checkpoint_id, "m", "x") == walk(
            graph, thread, checkpoint_id, "m", "x"
        )
