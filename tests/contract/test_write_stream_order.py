"""Contract S5: on a Write stream, a thread's graph checkpoints are applied in the order sent.
Each waits for the one of its thread before it on the stream and is stored only if that one
was; one after a checkpoint that failed fails FAILED_PRECONDITION (PREVIOUS_PUT_NOT_STORED,
naming the one not stored) and writes nothing, while other threads' items are unaffected.
The server says so in its stream headers. (A crash mid-run with checkpoints sent behind
unanswered ones: tests/graph/test_durability_modes.py, G22.)"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
from google.rpc import error_details_pb2

from checkpointd_client import CheckpointdClient
from checkpointd_client.v1 import graph_service_pb2, write_service_pb2, write_service_pb2_grpc
from tests.contract.conftest import NO_RETRY
from tests.support.shared_server import SharedSidecar


def _put(namespace: str, thread: str, checkpoint_id: str, parent: str = "") -> Any:
    return graph_service_pb2.PutGraphCheckpointRequest(
        namespace=namespace,
        request_id=uuid.uuid4().hex,
        checkpoint=graph_service_pb2.GraphCheckpoint(
            thread_id=thread,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=parent,
            checkpoint=graph_service_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
        ),
    )


def _batch(requests: list[Any]) -> write_service_pb2.WriteRequest:
    items = [
        write_service_pb2.WriteItem(correlation_id=i + 1, put_graph_checkpoint=request)
        for i, request in enumerate(requests)
    ]
    return write_service_pb2.WriteRequest(items=items)


def _answers(target: str, message: write_service_pb2.WriteRequest) -> tuple[dict[int, Any], Any]:
    """Send one message on a fresh stream; its answers by correlation id, and the headers."""
    with grpc.insecure_channel(target) as channel:
        call = write_service_pb2_grpc.WriteServiceStub(channel).Write(iter([message]), timeout=60)
        results = {r.correlation_id: r for answer in call for r in answer.results}
        return results, call.initial_metadata()


def _stored(sidecar: SharedSidecar, thread: str) -> list[str]:
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as client:
        found = client.call_graph(
            "ListGraphCheckpoints",
            graph_service_pb2.ListGraphCheckpointsRequest(
                namespace=sidecar.namespace, thread_id=thread, page_size=100
            ),
        )
    return sorted(t.checkpoint.checkpoint_id for t in found.checkpoint_tuples)


def _reason(result: Any) -> tuple[int, str, dict[str, str]]:
    info = error_details_pb2.ErrorInfo()
    assert result.error.details[0].Unpack(info)
    return result.error.code, info.reason, dict(info.metadata)


def test_s5_the_server_says_it_orders_a_threads_graph_checkpoints(sidecar: SharedSidecar) -> None:
    """The header entry, named alike by server and client, lists put_graph_checkpoint."""
    from checkpointd.servicers.write import ORDERED_HEADER
    from checkpointd_client import _write_stream

    assert _write_stream.ORDERED_HEADER == ORDERED_HEADER
    thread = uuid.uuid4().hex
    _, headers = _answers(sidecar.target, _batch([_put(sidecar.namespace, thread, "c1")]))
    assert dict(headers)[ORDERED_HEADER] == "put_graph_checkpoint"
    assert _write_stream.kinds_ordered(headers) == {"put_graph_checkpoint"}
    assert _write_stream.kinds_ordered(()) == frozenset()


def test_s5_a_checkpoint_after_one_not_stored_is_not_stored_and_others_are(
    sidecar: SharedSidecar,
) -> None:
    """One batch: thread T's first checkpoint is refused (no checkpoint id); T's next two,
    each after the one before, fail PREVIOUS_PUT_NOT_STORED naming that one; thread U's
    checkpoints among them are stored in their order."""
    ns, t, u = sidecar.namespace, uuid.uuid4().hex, uuid.uuid4().hex
    message = _batch(
        [
            _put(ns, t, ""),  # refused: INVALID_ARGUMENT
            _put(ns, u, "u1"),
            _put(ns, t, "t2", parent="t1"),
            _put(ns, u, "u2", parent="u1"),
            _put(ns, t, "t3", parent="t2"),
        ]
    )
    answers, _ = _answers(sidecar.target, message)
    assert set(answers) == {1, 2, 3, 4, 5}
    assert answers[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    failed = grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert _reason(answers[3]) == (
        failed,
        "PREVIOUS_PUT_NOT_STORED",
        {"thread_id": t, "checkpoint_id": ""},
    )
    assert _reason(answers[5]) == (
        failed,
        "PREVIOUS_PUT_NOT_STORED",
        {"thread_id": t, "checkpoint_id": "t2"},
    )
    assert answers[2].WhichOneof("result") == "put_graph_checkpoint"
    assert answers[4].WhichOneof("result") == "put_graph_checkpoint"
    assert _stored(sidecar, t) == []
    assert _stored(sidecar, u) == ["u1", "u2"]


def test_s5_a_threads_chain_sent_in_one_batch_is_stored_whole(sidecar: SharedSidecar) -> None:
    """Twenty checkpoints of one thread, each the parent of the next, in one message: each
    answered as its unary call, all stored."""
    ns, thread = sidecar.namespace, uuid.uuid4().hex
    ids = [f"c{i:02d}" for i in range(20)]
    requests = [_put(ns, thread, c, parent=ids[i - 1] if i else "") for i, c in enumerate(ids)]
    answers, _ = _answers(sidecar.target, _batch(requests))
    assert {a.WhichOneof("result") for a in answers.values()} == {"put_graph_checkpoint"}
    assert _stored(sidecar, thread) == ids


def test_s5_a_checkpoint_behind_one_the_store_refuses_in_its_transaction_is_not_stored(
    sidecar: SharedSidecar,
) -> None:
    """One batch: thread U's checkpoint keeps the store busy, so T's two checkpoints arrive
    while it commits (on SQLite they are then queued together, for one transaction). T's first
    reuses a request id recorded for another request, which the store refuses inside its
    transaction (REQUEST_ID_REUSED); T's second, sent behind it, fails PREVIOUS_PUT_NOT_STORED
    naming it, and neither is stored. U's checkpoint is stored."""
    ns, t, u, z = sidecar.namespace, *(uuid.uuid4().hex for _ in range(3))
    taken = _put(ns, z, "z1")
    answers, _ = _answers(sidecar.target, _batch([taken]))
    assert answers[1].WhichOneof("result") == "put_graph_checkpoint"
    reused = _put(ns, t, "t1")
    reused.request_id = taken.request_id
    answers, _ = _answers(
        sidecar.target, _batch([_put(ns, u, "u1"), reused, _put(ns, t, "t2", parent="t1")])
    )
    failed = grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert answers[1].WhichOneof("result") == "put_graph_checkpoint"
    assert _reason(answers[2])[:2] == (failed, "REQUEST_ID_REUSED")
    assert _reason(answers[3]) == (
        failed,
        "PREVIOUS_PUT_NOT_STORED",
        {"thread_id": t, "checkpoint_id": "t1"},
    )
    assert _stored(sidecar, t) == []
    assert _stored(sidecar, u) == ["u1"]
    assert _stored(sidecar, z) == ["z1"]
