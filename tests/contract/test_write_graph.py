"""Contract S4: the graph writes (PutGraphCheckpoint, PutGraphWrites) ride the Write stream
where its headers list their kinds. Over the raw stubs, each graph item, alone or batched, is
answered exactly as its unary call and stores what the unary call stores; a refused one fails
alone inside a batch; an oversize one is refused alone; its request id is the unary call's
(C10). Through the fault proxy, the LangGraph savers send put and put_writes on the client's
one stream, and against a stream whose headers do not list the graph kinds (a server that
predates them) they send them unary while the other writes stay on the stream.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from checkpointd_client import AsyncCheckpointdClient, Checkpoint, CheckpointdClient
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from checkpointd_client.v1 import checkpoint_pb2, checkpoint_service_pb2
from checkpointd_client.v1 import graph_service_pb2 as g
from checkpointd_client.v1 import graph_service_pb2_grpc as g_grpc
from checkpointd_client.v1 import write_service_pb2 as w
from checkpointd_client.v1 import write_service_pb2_grpc as w_grpc
from tests.contract.conftest import NO_RETRY
from tests.graph.graph_scenarios import chain_graph
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

KINDS = ["sync", "async"]
#: The item field of each graph RPC the stream carries.
FIELDS = {"PutGraphCheckpoint": "put_graph_checkpoint", "PutGraphWrites": "put_graph_writes"}


def _value(text: str) -> g.TypedValue:
    return g.TypedValue(type="json", data=text.encode())


def _put(
    namespace: str,
    thread: str,
    checkpoint_id: str,
    *,
    parent: str = "",
    version: str = "1",
    request_id: str | None = None,
    **fields: Any,
) -> g.PutGraphCheckpointRequest:
    """A put of checkpoint ``checkpoint_id`` bringing channel ``a`` at ``version``."""
    checkpoint: dict[str, Any] = {
        "thread_id": thread,
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent,
        "checkpoint": _value('{"v": 1}'),
        "metadata_json": json.dumps({"step": int(version)}),
        "channel_versions": {"a": version},
    }
    checkpoint.update(fields)
    return g.PutGraphCheckpointRequest(
        namespace=namespace,
        request_id=uuid.uuid4().hex if request_id is None else request_id,
        checkpoint=g.GraphCheckpoint(**checkpoint),
        new_values=[g.GraphChannelValue(channel="a", version=version, value=_value(version))],
    )


def _writes(
    namespace: str,
    thread: str,
    checkpoint_id: str,
    *,
    task: str = "task",
    idx: tuple[int, ...] = (0, 1),
    request_id: str | None = None,
) -> g.PutGraphWritesRequest:
    return g.PutGraphWritesRequest(
        namespace=namespace,
        request_id=uuid.uuid4().hex if request_id is None else request_id,
        thread_id=thread,
        checkpoint_id=checkpoint_id,
        task_id=task,
        task_path="~",
        writes=[g.GraphWrite(idx=n, channel="a", value=_value(f"{n}")) for n in idx],
    )


def _field_of(request: Message) -> str:
    return FIELDS[type(request).__name__.removesuffix("Request")]


def _single(correlation_id: int, request: Message) -> w.WriteRequest:
    message = w.WriteRequest(correlation_id=correlation_id)
    getattr(message, _field_of(request)).CopyFrom(request)
    return message


def _batch(requests: dict[int, Message]) -> w.WriteRequest:
    message = w.WriteRequest()
    for correlation_id, request in requests.items():
        item = message.items.add(correlation_id=correlation_id)
        getattr(item, _field_of(request)).CopyFrom(request)
    return message


def _stream(target: str, messages: list[w.WriteRequest]) -> dict[int, Any]:
    """Send ``messages`` on one Write stream, half-close; every answer by correlation id."""
    with grpc.insecure_channel(target) as channel:
        answers = list(w_grpc.WriteServiceStub(channel).Write(iter(messages), timeout=60))
    by_id: dict[int, Any] = {a.correlation_id: a for a in answers if not a.results}
    by_id.update({r.correlation_id: r for a in answers for r in a.results})
    assert len(by_id) == sum(len(m.items) or 1 for m in messages), answers
    return by_id


def _unary(target: str, request: Message) -> Message | status_pb2.Status:
    """The unary call's response, or the Status it failed with."""
    method = type(request).__name__.removesuffix("Request")
    with grpc.insecure_channel(target) as channel:
        try:
            response: Message = getattr(g_grpc.GraphServiceStub(channel), method)(
                request, timeout=10
            )
        except grpc.RpcError as error:
            failed = error
        else:
            return response
    status: status_pb2.Status | None = rpc_status.from_call(failed)
    assert status is not None, failed
    return status


def _outcome(answer: Any) -> Message:
    """The response or the error Status an item was answered with."""
    kind = answer.WhichOneof("result")
    assert kind is not None, answer
    outcome: Message = getattr(answer, kind)
    return outcome


def _reason(status: status_pb2.Status) -> str:
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info), status
    return info.reason


def _stored(target: str, namespace: str, thread: str, checkpoint_id: str) -> Any:
    """The stored tuple of a checkpoint with its thread id cleared (None when there is none),
    so two threads written alike compare equal."""
    with grpc.insecure_channel(target) as channel:
        response = g_grpc.GraphServiceStub(channel).GetGraphCheckpoint(
            g.GetGraphCheckpointRequest(
                namespace=namespace, thread_id=thread, checkpoint_id=checkpoint_id
            ),
            timeout=10,
        )
    if not response.HasField("checkpoint_tuple"):
        return None
    found = response.checkpoint_tuple
    found.checkpoint.thread_id = ""
    return found


def test_s4_graph_items_are_answered_and_stored_exactly_as_their_unary_calls(
    sidecar: SharedSidecar,
) -> None:
    """The same graph writes on two threads, one over the stream (an item alone, then a
    batch) and one as unary calls: every item is answered with its unary call's response,
    or with exactly its unary call's Status when it is refused, and the two threads' stored
    checkpoints, values and pending writes are the same."""
    namespace = sidecar.namespace

    def writes_of(thread: str) -> list[Message]:
        return [
            _put(namespace, thread, "c1"),
            _writes(namespace, thread, "c1"),
            _put(namespace, thread, "c2", parent="c1", version="2"),
            _writes(namespace, thread, "c2", task="t2", idx=(-1,)),
            _put(namespace, "", "c3"),  # refused: no thread id
            _put(namespace, thread, "c4", parent="c2", version="3"),
            _writes(namespace, thread, "c2", idx=(0, 0)),  # refused: idx twice
            _put(namespace, thread, "c5", metadata_json='{"x": "a\\u0000b"}'),  # refused: NUL
        ]

    streamed, unary = f"s-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    sent = writes_of(streamed)
    answers = _stream(
        sidecar.target, [_single(1, sent[0]), _batch(dict(enumerate(sent[1:], start=2)))]
    )
    expected = [_unary(sidecar.target, request) for request in writes_of(unary)]
    for correlation_id, outcome in enumerate(expected, start=1):
        answer = answers[correlation_id]
        if isinstance(outcome, status_pb2.Status):
            assert answer.WhichOneof("result") == "error"
        else:
            assert answer.WhichOneof("result") == _field_of(sent[correlation_id - 1])
        assert _outcome(answer) == outcome, correlation_id
    assert [_reason(o) for o in expected if isinstance(o, status_pb2.Status)] == [
        "INVALID_FIELD"
    ] * 3
    for checkpoint_id in ("c1", "c2", "c3", "c4", "c5"):
        stored = _stored(sidecar.target, namespace, streamed, checkpoint_id)
        assert stored == _stored(sidecar.target, namespace, unary, checkpoint_id), checkpoint_id
        assert (stored is None) == (checkpoint_id in ("c3", "c5"))
    c1 = _stored(sidecar.target, namespace, streamed, "c1")
    assert [w.idx for w in c1.pending_writes] == [0, 1]


def test_s4_a_refused_graph_item_fails_alone_inside_a_batch(sidecar: SharedSidecar) -> None:
    """One batch mixes graph items with a PutCheckpoint: the item with a bad thread id fails
    with its unary call's INVALID_ARGUMENT (field ``checkpoint.thread_id``); every other
    item of the batch, graph or not, is answered and stored."""
    namespace = sidecar.namespace
    thread = f"t-{uuid.uuid4().hex[:8]}"
    bad = _put(namespace, "t" * 1000, "c1")
    put = checkpoint_service_pb2.PutCheckpointRequest(
        namespace=namespace,
        request_id=uuid.uuid4().hex,
        checkpoint=checkpoint_pb2.Checkpoint(
            execution_id=thread, node_id="n", status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED
        ),
    )
    batch = _batch(
        {
            1: _put(namespace, thread, "c1"),
            2: bad,
            3: _writes(namespace, thread, "c0"),
            4: _put(namespace, thread, "c2", parent="c1", version="2"),
        }
    )
    batch.items.add(correlation_id=5, put_checkpoint=put)
    answers = _stream(sidecar.target, [batch])
    refused = _unary(sidecar.target, bad)
    assert isinstance(refused, status_pb2.Status)
    assert answers[2].error == refused
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    info = error_details_pb2.ErrorInfo()
    assert refused.details[0].Unpack(info)
    assert info.metadata["field"] == "checkpoint.thread_id"
    assert [answers[n].WhichOneof("result") for n in (1, 3, 4, 5)] == [
        "put_graph_checkpoint",
        "put_graph_writes",
        "put_graph_checkpoint",
        "put_checkpoint",
    ]
    assert _stored(sidecar.target, namespace, thread, "c1") is not None
    assert _stored(sidecar.target, namespace, thread, "c2") is not None
    with CheckpointdClient(sidecar.target, namespace=namespace, retry=NO_RETRY) as client:
        assert len(list(client.iter_checkpoints(thread))) == 1


@pytest.mark.parametrize("first_path", ["stream", "unary"])
@pytest.mark.parametrize("method", list(FIELDS))
def test_s4_c10_a_graph_item_sent_again_with_its_request_id_is_a_retry(
    sidecar: SharedSidecar, method: str, first_path: str
) -> None:
    """A graph write sent one way and again the other (unary, then as a stream item, or the
    reverse) is a retry: answered as the first; its request id on other content, as a
    stream item, is refused REQUEST_ID_REUSED naming the id and the method; and a late
    retry on the stream after the thread was deleted is answered as the first and writes
    nothing again (the thread stays deleted, the writes stay gone)."""
    namespace = sidecar.namespace
    thread = f"t-{uuid.uuid4().hex[:8]}"
    rid = f"rid-{uuid.uuid4().hex[:8]}"
    if method == "PutGraphCheckpoint":
        request: Message = _put(namespace, thread, "c1", request_id=rid)
        other: Message = _put(namespace, thread, "c1", version="2", request_id=rid)
    else:
        _unary(sidecar.target, _put(namespace, thread, "c1"))
        request = _writes(namespace, thread, "c1", request_id=rid)
        other = _writes(namespace, thread, "c1", idx=(0, 1, 2), request_id=rid)

    def send(message: Message, path: str) -> Message:
        if path == "unary":
            return _unary(sidecar.target, message)
        return _outcome(_stream(sidecar.target, [_single(7, message)])[7])

    first = send(request, first_path)
    assert not isinstance(first, status_pb2.Status), first
    again = "unary" if first_path == "stream" else "stream"
    assert send(request, again) == first
    refused = send(other, "stream")
    assert isinstance(refused, status_pb2.Status)
    assert refused.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    info = error_details_pb2.ErrorInfo()
    assert refused.details[0].Unpack(info)
    assert (info.reason, dict(info.metadata)) == (
        "REQUEST_ID_REUSED",
        {"request_id": rid, "method": method},
    )
    assert _stored(sidecar.target, namespace, thread, "c1").checkpoint.channel_versions == {
        "a": "1"
    }
    _unary(
        sidecar.target,
        g.DeleteGraphThreadRequest(
            namespace=namespace, request_id=uuid.uuid4().hex, thread_id=thread
        ),
    )
    assert send(request, "stream") == first  # the late retry
    if method == "PutGraphCheckpoint":
        assert _stored(sidecar.target, namespace, thread, "c1") is None
    else:
        _unary(sidecar.target, _put(namespace, thread, "c1"))  # the checkpoint again, fresh id
        assert list(_stored(sidecar.target, namespace, thread, "c1").pending_writes) == []


def test_s4_an_oversize_graph_item_is_refused_alone_and_the_stream_goes_on(
    sidecar_factory: Any,
) -> None:
    """A graph item over --max-message-bytes gets its unary call's RESOURCE_EXHAUSTED
    (MESSAGE_TOO_LARGE) and writes nothing; the graph item after it (another thread's: one
    of the same thread would follow the refused one, S5) is stored."""
    limit = 4096
    server: Sidecar = sidecar_factory("--max-message-bytes", str(limit))
    thread = f"t-{uuid.uuid4().hex[:8]}"
    other = f"u-{uuid.uuid4().hex[:8]}"
    big = _put("default", thread, "big", checkpoint=_value(json.dumps("x" * limit)))
    small = _put("default", other, "small")
    answers = _stream(server.target, [_single(1, big), _single(2, small)])
    refused = _unary(server.target, big)
    assert isinstance(refused, status_pb2.Status)
    assert answers[1].error.code == refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert _reason(answers[1].error) == _reason(refused) == "MESSAGE_TOO_LARGE"
    assert answers[2].WhichOneof("result") == "put_graph_checkpoint"
    assert _stored(server.target, "default", thread, "big") is None
    assert _stored(server.target, "default", other, "small") is not None


async def _run_chain(kind: str, target: str, namespace: str, thread: str, **options: Any) -> Any:
    """Invoke LangGraph's three-node chain twice on a saver; the thread's final state and
    the number of checkpoints in its history."""
    config: Any = {"configurable": {"thread_id": thread}}
    if kind == "async":
        async with AsyncCheckpointdSaver(target, namespace=namespace, **options) as saver:
            graph = chain_graph(saver)
            for turn in ("x", "y"):
                await graph.ainvoke({"log": [turn]}, config)
            state = await graph.aget_state(config)
            return state.values, len([s async for s in graph.aget_state_history(config)])

    def run() -> Any:
        with CheckpointdSaver(target, namespace=namespace, **options) as saver:
            graph = chain_graph(saver)
            for turn in ("x", "y"):
                graph.invoke({"log": [turn]}, config)
            return graph.get_state(config).values, len(list(graph.get_state_history(config)))

    return await asyncio.to_thread(run)


@pytest.mark.parametrize("kind", KINDS)
async def test_s4_the_savers_put_and_put_writes_travel_on_one_write_stream(
    sidecar: SharedSidecar, kind: str
) -> None:
    """A LangGraph chain invoked twice through a saver: every PutGraphCheckpoint and
    PutGraphWrites reaches the server as an item of one Write stream and the reads as unary
    calls; with write_stream=False every graph write is a unary call and no stream opens;
    both runs end in the same state with the same history."""
    runs = {}
    for stream in (True, False):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        with GrpcFaultProxy(sidecar.target, write_stream=True, max_workers=8) as proxy:
            runs[stream] = await _run_chain(
                kind, proxy.target, sidecar.namespace, thread, write_stream=stream
            )
            writes = proxy.calls("PutGraphCheckpoint") + proxy.calls("PutGraphWrites")
            reads = proxy.calls("GetGraphCheckpoint")
            assert len(proxy.calls("PutGraphCheckpoint")) >= 8
            assert len(proxy.calls("PutGraphWrites")) >= 6
            assert {call.stream is not None for call in writes} == {stream}
            assert reads
            assert all(call.stream is None for call in reads)
            assert proxy.streams_opened() == (1 if stream else 0)
    assert runs[True] == runs[False]
    assert runs[True][0] == {"log": ["x", "a", "b", "c", "y", "a", "b", "c"]}


@pytest.mark.parametrize("kind", KINDS)
async def test_s4_a_stream_that_does_not_list_the_graph_kinds_gets_them_as_unary_calls(
    sidecar: SharedSidecar, kind: str
) -> None:
    """Through a proxy that strips the header entry listing the kinds a stream takes (as a
    server that predates the graph items sends none, and would refuse them as items without
    a request): graph writes made at once with checkpoint puts, the first of them before the
    stream's headers came, all go unary and succeed, while the puts share one stream; a
    saver's LangGraph run then writes unary too and ends as it does on the stream."""
    from checkpointd_client._write_stream import FIRST_KINDS, KINDS_HEADER, kinds_taken

    assert kinds_taken(None) == kinds_taken([("checkpointd-write-batch", "256")]) == FIRST_KINDS
    assert kinds_taken([(KINDS_HEADER, b"put_checkpoint,put_graph_writes")]) == {
        "put_checkpoint",
        "put_graph_writes",
    }
    namespace = sidecar.namespace
    run = f"old-{uuid.uuid4().hex[:8]}"
    count = 8
    with GrpcFaultProxy(
        sidecar.target, write_stream=True, write_kinds=False, max_workers=8
    ) as proxy:
        checkpoints = [Checkpoint(execution_id=f"{run}-{n}") for n in range(count)]
        graph_puts = [_put(namespace, f"{run}-{n}", "c1") for n in range(count)]
        if kind == "async":
            async with AsyncCheckpointdClient(
                proxy.target, namespace=namespace, retry=NO_RETRY
            ) as aclient:
                await asyncio.gather(
                    *(aclient.call_graph("PutGraphCheckpoint", r) for r in graph_puts),
                    *(aclient.put_checkpoint(c) for c in checkpoints),
                )
                assert not aclient._writes.unsupported
        else:

            def write() -> None:
                with (
                    CheckpointdClient(proxy.target, namespace=namespace, retry=NO_RETRY) as client,
                    ThreadPoolExecutor(2 * count) as pool,
                ):
                    done = [
                        *(
                            pool.submit(client.call_graph, "PutGraphCheckpoint", r)
                            for r in graph_puts
                        ),
                        *(pool.submit(client.put_checkpoint, c) for c in checkpoints),
                    ]
                    for future in done:
                        future.result()
                    assert not client._writes.unsupported

            await asyncio.to_thread(write)
        assert proxy.streams_opened() == 1
        graph_calls = proxy.calls("PutGraphCheckpoint")
        assert len(graph_calls) == count
        assert all(call.stream is None and call.forwarded for call in graph_calls)
        assert all(call.stream is not None for call in proxy.calls("PutCheckpoint"))
        old = await _run_chain(kind, proxy.target, namespace, f"{run}-chain", retry=NO_RETRY)
        assert all(
            call.stream is None
            for call in proxy.calls("PutGraphCheckpoint") + proxy.calls("PutGraphWrites")
        )
    assert old == await _run_chain(kind, sidecar.target, namespace, f"{run}-new")
    for n in range(count):
        assert _stored(sidecar.target, namespace, f"{run}-{n}", "c1") is not None
