"""G1-G7 and C10: the graph store (GraphService) through a real server on every backend, over
the raw generated stubs, as a saver in any language would call it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client.v1 import graph_service_pb2 as g
from checkpointd_client.v1 import graph_service_pb2_grpc as g_grpc
from tests.contract.graph_breakers import GRAPH_BREAKERS, graph_checkpoint
from tests.support.shared_server import SharedSidecar

TIMEOUT = 10.0


class Graph:
    """The GraphService stub, with the test's namespace filled into every request."""

    def __init__(self, channel: grpc.Channel, namespace: str) -> None:
        self.stub = g_grpc.GraphServiceStub(channel)
        self.namespace = namespace

    def __call__(self, method: str, request: Any) -> Any:
        request.namespace = self.namespace
        return getattr(self.stub, method)(request, timeout=TIMEOUT)

    def put(
        self,
        thread: str,
        checkpoint_id: str,
        values: dict[str, str],
        *,
        versions: dict[str, str] | None = None,
        ns: str = "",
        parent: str = "",
        metadata: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> None:
        """Put a checkpoint naming ``versions`` (default: version "1" of each value) and
        bringing ``values`` (JSON text by channel) at the versions it names."""
        versions = versions or dict.fromkeys(values, "1")
        self(
            "PutGraphCheckpoint",
            g.PutGraphCheckpointRequest(
                request_id=request_id,
                checkpoint=graph_checkpoint(
                    thread_id=thread,
                    checkpoint_ns=ns,
                    checkpoint_id=checkpoint_id,
                    parent_checkpoint_id=parent,
                    metadata_json=json.dumps(metadata or {}),
                    channel_versions=versions,
                ),
                new_values=[
                    g.GraphChannelValue(
                        channel=channel,
                        version=versions[channel],
                        value=g.TypedValue(type="json", data=text.encode()),
                    )
                    for channel, text in values.items()
                ],
            ),
        )

    def get(self, thread: str, checkpoint_id: str = "", ns: str = "") -> g.GraphCheckpointTuple:
        response = self(
            "GetGraphCheckpoint",
            g.GetGraphCheckpointRequest(
                thread_id=thread, checkpoint_ns=ns, checkpoint_id=checkpoint_id
            ),
        )
        found: g.GraphCheckpointTuple = response.checkpoint_tuple
        return found

    def ids(self, **fields: Any) -> list[str]:
        """Every listed checkpoint id, page after page (page_size in ``fields``)."""
        request = g.ListGraphCheckpointsRequest(**fields)
        ids: list[str] = []
        while True:
            response = self("ListGraphCheckpoints", request)
            ids.extend(t.checkpoint.checkpoint_id for t in response.checkpoint_tuples)
            if not response.next_page_token:
                return ids
            request.page_token = response.next_page_token

    def writes(
        self, thread: str, checkpoint_id: str, task: str, *writes: tuple[int, str, str]
    ) -> None:
        self(
            "PutGraphWrites",
            g.PutGraphWritesRequest(
                request_id=uuid.uuid4().hex,
                thread_id=thread,
                checkpoint_id=checkpoint_id,
                task_id=task,
                task_path="path",
                writes=[
                    g.GraphWrite(
                        idx=idx,
                        channel=channel,
                        value=g.TypedValue(type="json", data=text.encode()),
                    )
                    for idx, channel, text in writes
                ],
            ),
        )


@pytest.fixture
def graph(sidecar: SharedSidecar) -> Iterator[Graph]:
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Graph(channel, sidecar.namespace)


def values_of(found: g.GraphCheckpointTuple) -> dict[str, str]:
    return {v.channel: v.value.data.decode() for v in found.channel_values}


def test_g1_put_then_get_returns_the_checkpoint_its_values_and_writes_in_one_call(
    graph: Graph,
) -> None:
    """A get by id, or of the newest, returns the checkpoint as put, the values it names with
    their type and bytes, and its pending writes; a thread without checkpoints has none."""
    graph.put("t", "c1", {"a": '"x"'}, metadata={"step": 1})
    graph.put("t", "c2", {"a": '"y"', "b": "[1]"}, versions={"a": "2", "b": "1"}, parent="c1")
    graph.writes("t", "c2", "task", (0, "a", '"w"'))
    newest = graph.get("t")
    assert newest.checkpoint.checkpoint_id == "c2"
    assert newest.checkpoint.parent_checkpoint_id == "c1"
    assert newest.checkpoint.checkpoint == g.TypedValue(type="json", data=b"{}")
    assert dict(newest.checkpoint.channel_versions) == {"a": "2", "b": "1"}
    assert values_of(newest) == {"a": '"y"', "b": "[1]"}
    assert {v.value.type for v in newest.channel_values} == {"json"}
    (write,) = newest.pending_writes
    assert (write.task_id, write.task_path, write.idx, write.channel) == ("task", "path", 0, "a")
    first = graph.get("t", "c1")
    assert json.loads(first.checkpoint.metadata_json) == {"step": 1}
    assert values_of(first) == {"a": '"x"'}
    assert list(first.pending_writes) == []
    assert not graph("GetGraphCheckpoint", g.GetGraphCheckpointRequest(thread_id="none")).HasField(
        "checkpoint_tuple"
    )


def test_g2_a_put_stores_only_the_values_it_brings_and_reads_the_others_by_version(
    graph: Graph,
) -> None:
    """A checkpoint that changes one channel brings only that value; the others are read at
    the versions it names; a stored version keeps its first value; a version no put brought
    is simply absent."""
    graph.put("t", "c1", {"a": '"a1"', "b": '"b1"'})
    graph.put("t", "c2", {"a": '"a2"'}, versions={"a": "2", "b": "1"})
    graph.put("t", "c3", {"b": '"other"'}, versions={"a": "2", "b": "1"})  # b@1 is stored
    graph.put("t", "c4", {}, versions={"a": "9"})
    assert values_of(graph.get("t", "c2")) == {"a": '"a2"', "b": '"b1"'}
    assert values_of(graph.get("t", "c3")) == {"a": '"a2"', "b": '"b1"'}
    assert values_of(graph.get("t", "c1")) == {"a": '"a1"', "b": '"b1"'}
    assert values_of(graph.get("t", "c4")) == {}


def test_g3_special_writes_replace_and_other_writes_keep_the_first(graph: Graph) -> None:
    """Writes are keyed by (checkpoint, task, idx): a request of only negative (special)
    indexes replaces the stored writes with its keys; any other request keeps them."""
    graph.put("t", "c1", {})
    graph.writes("t", "c1", "task", (0, "a", '"first"'), (-1, "__error__", '"e1"'))
    graph.writes("t", "c1", "task", (0, "a", '"second"'), (-1, "__error__", '"e2"'))
    graph.writes("t", "c1", "task", (-3, "__interrupt__", '"i1"'), (-1, "__error__", '"e3"'))
    found = {(w.idx, w.channel): w.value.data.decode() for w in graph.get("t").pending_writes}
    assert found == {(0, "a"): '"first"', (-1, "__error__"): '"e3"', (-3, "__interrupt__"): '"i1"'}


def test_g4_list_is_newest_first_filtered_and_paged(graph: Graph) -> None:
    """A listing is newest first by checkpoint id, by thread or across threads, by
    checkpoint_ns, by metadata containment, before an id, and pages to the same rows."""
    for i in range(5):
        graph.put("t1", f"c{i}", {}, metadata={"step": i, "source": "loop" if i % 2 else "input"})
    graph.put("t1", "c9", {}, ns="child:1", metadata={"step": 9, "nested": {"k": [1]}})
    graph.put("t2", "c5", {}, metadata={"step": 5})
    assert graph.ids(thread_id="t1", checkpoint_ns="") == ["c4", "c3", "c2", "c1", "c0"]
    assert graph.ids(thread_id="t1") == ["c9", "c4", "c3", "c2", "c1", "c0"]
    assert graph.ids() == ["c9", "c5", "c4", "c3", "c2", "c1", "c0"]
    assert graph.ids(thread_id="t1", page_size=2) == graph.ids(thread_id="t1")
    loop = json.dumps({"source": "loop"})
    assert graph.ids(metadata_filter_json=loop) == ["c3", "c1"]
    both = json.dumps({"source": "input", "step": 2})
    assert graph.ids(metadata_filter_json=both) == ["c2"]
    assert graph.ids(metadata_filter_json=json.dumps({"nested": {"k": [1]}})) == ["c9"]
    assert graph.ids(metadata_filter_json=json.dumps({"step": "2"})) == []
    assert graph.ids(thread_id="t1", before_checkpoint_id="c3", page_size=1) == ["c2", "c1", "c0"]


def test_g5_delete_copy_and_prune_whole_threads(graph: Graph) -> None:
    """DeleteGraphThread takes every checkpoint_ns of a thread; DeleteGraphRuns the runs'
    checkpoints in every thread; CopyGraphThread copies checkpoints, values and writes;
    PruneGraphThreads keeps the newest of each checkpoint_ns with its values and writes."""
    graph.put("src", "c1", {"a": '"1"'}, metadata={"run_id": "r1"})
    graph.put(
        "src", "c2", {"a": '"2"'}, versions={"a": "2"}, parent="c1", metadata={"run_id": "r2"}
    )
    graph.put("src", "c3", {}, ns="child:1", metadata={"run_id": "r2"})
    graph.writes("src", "c2", "task", (0, "a", '"w"'))
    copied = graph(
        "CopyGraphThread", g.CopyGraphThreadRequest(source_thread_id="src", target_thread_id="dst")
    )
    assert copied.checkpoints_copied == 3
    assert graph.ids(thread_id="dst") == ["c3", "c2", "c1"]
    assert values_of(graph.get("dst")) == {"a": '"2"'}
    assert len(graph.get("dst").pending_writes) == 1
    runs = graph("DeleteGraphRuns", g.DeleteGraphRunsRequest(run_ids=["r1"]))
    assert runs.checkpoints_deleted == 2  # c1 in both threads
    assert graph.ids(thread_id="src") == ["c3", "c2"]
    pruned = graph(
        "PruneGraphThreads",
        g.PruneGraphThreadsRequest(thread_ids=["dst"], strategy=g.GRAPH_PRUNE_STRATEGY_KEEP_LATEST),
    )
    graph.put("dst", "c0", {})
    assert pruned.checkpoints_deleted == 0  # c1 of dst went with its run
    deleted = graph("DeleteGraphThread", g.DeleteGraphThreadRequest(thread_id="src"))
    assert deleted.checkpoints_deleted == 2
    assert graph.ids(thread_id="src") == []
    pruned = graph(
        "PruneGraphThreads",
        g.PruneGraphThreadsRequest(thread_ids=["dst"], strategy=g.GRAPH_PRUNE_STRATEGY_KEEP_LATEST),
    )
    assert pruned.checkpoints_deleted == 1
    assert graph.ids(thread_id="dst") == ["c3", "c2"]
    assert values_of(graph.get("dst")) == {"a": '"2"'}
    assert graph.get("dst").checkpoint.parent_checkpoint_id == ""
    graph.put("delta", "c1", {}, metadata={"counters_since_delta_snapshot": {"a": 1}})
    graph.put("delta", "c2", {})
    kept = graph(
        "PruneGraphThreads",
        g.PruneGraphThreadsRequest(
            thread_ids=["delta"], strategy=g.GRAPH_PRUNE_STRATEGY_KEEP_LATEST
        ),
    )
    assert kept.checkpoints_deleted == 0
    assert graph.ids(thread_id="delta") == ["c2", "c1"]
    gone = graph(
        "PruneGraphThreads",
        g.PruneGraphThreadsRequest(
            thread_ids=["dst", "delta"], strategy=g.GRAPH_PRUNE_STRATEGY_DELETE
        ),
    )
    assert gone.checkpoints_deleted == 4
    assert graph.ids() == []


def test_g6_a_retry_with_the_same_request_id_is_answered_like_the_first_and_writes_nothing(
    graph: Graph,
) -> None:
    """A retried delete returns the first count; a late retry of a put after the thread was
    deleted does not bring it back."""
    graph.put("t", "c1", {}, request_id="put-1")
    first = graph(
        "DeleteGraphThread", g.DeleteGraphThreadRequest(request_id="del-1", thread_id="t")
    )
    graph.put("t", "c1", {}, request_id="put-1")  # the late retry of the first put
    assert graph.ids(thread_id="t") == []
    again = graph(
        "DeleteGraphThread", g.DeleteGraphThreadRequest(request_id="del-1", thread_id="t")
    )
    assert (first.checkpoints_deleted, again.checkpoints_deleted) == (1, 1)
    graph.put("t", "c1", {}, request_id="put-2")
    assert graph.ids(thread_id="t") == ["c1"]


def stored(graph: Graph) -> list[tuple[Any, ...]]:
    """Every checkpoint of the namespace with its values and writes, read back."""
    request = g.ListGraphCheckpointsRequest()
    found: list[tuple[Any, ...]] = []
    while True:
        response = graph("ListGraphCheckpoints", request)
        for t in response.checkpoint_tuples:
            cp = t.checkpoint
            full = graph.get(cp.thread_id, cp.checkpoint_id, cp.checkpoint_ns)
            found.append(
                (
                    cp.thread_id,
                    cp.checkpoint_ns,
                    cp.checkpoint_id,
                    cp.parent_checkpoint_id,
                    cp.metadata_json,
                    sorted(values_of(full).items()),
                    sorted(
                        (w.task_id, w.idx, w.channel, w.value.data) for w in full.pending_writes
                    ),
                )
            )
        if not response.next_page_token:
            return found
        request.page_token = response.next_page_token


def refusal_of(graph: Graph, method: str, request: Any) -> tuple[Any, str, dict[str, str]]:
    """The status code, reason and metadata a call is refused with."""
    with pytest.raises(grpc.RpcError) as raised:
        graph(method, request)
    status = rpc_status.from_call(raised.value)
    assert status is not None, raised.value
    info = error_details_pb2.ErrorInfo()
    assert status.details, status
    assert status.details[0].Unpack(info), status
    return raised.value.code(), info.reason, dict(info.metadata)


def _put(request_id: str, checkpoint_id: str) -> g.PutGraphCheckpointRequest:
    return g.PutGraphCheckpointRequest(
        request_id=request_id,
        checkpoint=graph_checkpoint(
            thread_id="t", checkpoint_id=checkpoint_id, parent_checkpoint_id="c2"
        ),
    )


def _writes(request_id: str, text: str) -> g.PutGraphWritesRequest:
    return g.PutGraphWritesRequest(
        request_id=request_id,
        thread_id="t",
        checkpoint_id="c2",
        task_id="task",
        task_path="path",
        writes=[
            g.GraphWrite(idx=0, channel="a", value=g.TypedValue(type="json", data=text.encode()))
        ],
    )


KEEP_LATEST = g.GRAPH_PRUNE_STRATEGY_KEEP_LATEST
#: Each mutating graph RPC: a first request, and another one of the same RPC that would
#: change the store if it were applied.
C10_CALLS: list[tuple[str, Any, Any]] = [
    ("PutGraphCheckpoint", _put("c10-put", "c3"), _put("c10-put", "c4")),
    ("PutGraphWrites", _writes("c10-writes", '"w1"'), _writes("c10-writes", '"w2"')),
    (
        "CopyGraphThread",
        g.CopyGraphThreadRequest(request_id="c10-copy", source_thread_id="t", target_thread_id="u"),
        g.CopyGraphThreadRequest(request_id="c10-copy", source_thread_id="t", target_thread_id="v"),
    ),
    (
        "DeleteGraphRuns",
        g.DeleteGraphRunsRequest(request_id="c10-runs", run_ids=["r-none"]),
        g.DeleteGraphRunsRequest(request_id="c10-runs", run_ids=["r1"]),
    ),
    (
        "PruneGraphThreads",
        g.PruneGraphThreadsRequest(
            request_id="c10-prune", thread_ids=["none"], strategy=KEEP_LATEST
        ),
        g.PruneGraphThreadsRequest(request_id="c10-prune", thread_ids=["t"], strategy=KEEP_LATEST),
    ),
    (
        "DeleteGraphThread",
        g.DeleteGraphThreadRequest(request_id="c10-thread", thread_id="none"),
        g.DeleteGraphThreadRequest(request_id="c10-thread", thread_id="t"),
    ),
    (
        "ApplyGraphRetention",
        g.ApplyGraphRetentionRequest(request_id="c10-retention", keep_newest=5),
        g.ApplyGraphRetentionRequest(request_id="c10-retention", keep_newest=1),
    ),
]


@pytest.mark.parametrize(("method", "first", "other"), C10_CALLS, ids=[c[0] for c in C10_CALLS])
def test_c10_graph_a_request_id_reused_on_another_request_is_refused_and_writes_nothing(
    graph: Graph, method: str, first: Any, other: Any
) -> None:
    """Each mutating graph RPC: the identical retry is answered like the first call; the id
    on another request of the same RPC, or of another RPC, is FAILED_PRECONDITION
    REQUEST_ID_REUSED naming the id and the first RPC, and the store is unchanged."""
    graph.put("t", "c1", {"a": '"1"'}, metadata={"run_id": "r1"})
    graph.put("t", "c2", {"a": '"2"'}, versions={"a": "2"}, parent="c1", metadata={"run_id": "r2"})
    answer = graph(method, first)
    after_first = stored(graph)
    assert graph(method, first) == answer  # the retry
    assert stored(graph) == after_first
    expected = (
        grpc.StatusCode.FAILED_PRECONDITION,
        "REQUEST_ID_REUSED",
        {"request_id": first.request_id, "method": method},
    )
    assert refusal_of(graph, method, other) == expected
    assert stored(graph) == after_first
    elsewhere: tuple[str, Any]
    if method == "DeleteGraphThread":  # the id on another RPC
        elsewhere = ("DeleteGraphRuns", g.DeleteGraphRunsRequest(run_ids=["r1"]))
    else:
        elsewhere = ("DeleteGraphThread", g.DeleteGraphThreadRequest(thread_id="t"))
    elsewhere[1].request_id = first.request_id
    assert refusal_of(graph, *elsewhere) == expected
    assert stored(graph) == after_first
    assert graph(method, first) == answer  # still answered as the first call


def test_g7_bad_input_is_invalid_argument_and_writes_nothing(graph: Graph) -> None:
    """Every refused GraphService request is INVALID_ARGUMENT and leaves no row behind."""
    namespaced = _Namespaced(graph)
    codes = set()
    for send in GRAPH_BREAKERS.values():
        with pytest.raises(grpc.RpcError) as refused:
            send(namespaced)
        codes.add(refused.value.code())
    # JSON that Postgres's jsonb cannot hold is refused on every backend, never INTERNAL.
    unstorable = [
        g.PutGraphCheckpointRequest(checkpoint=graph_checkpoint(metadata_json='{"a": "\\ud800"}')),
        g.ListGraphCheckpointsRequest(metadata_filter_json='{"a": "\\u0000"}'),
        g.ListGraphCheckpointsRequest(metadata_filter_json='{"a": ["\\udfff"]}'),
    ]
    for request in unstorable:
        method = type(request).__name__.removesuffix("Request")
        with pytest.raises(grpc.RpcError) as refused:
            graph(method, request)
        codes.add(refused.value.code())
    assert codes == {grpc.StatusCode.INVALID_ARGUMENT}
    assert graph.ids() == []
    assert graph.ids(thread_id="t") == []


class _Namespaced:
    """What GRAPH_BREAKERS call (``s.graph.Method(request, timeout=...)``), in the test's
    namespace."""

    def __init__(self, graph: Graph) -> None:
        self.graph = self
        self._graph = graph

    def __getattr__(self, method: str) -> Any:
        def call(request: Any, timeout: float) -> Any:
            return self._graph(method, request)

        return call
