"""The edge's layers wrap all four kinds of RPC alike: the token, the access, the namespace of
every request message, the size limit, the store gate, the error statuses and the metrics.

A real grpc.aio server on a Unix socket serves a test service with one method of each kind,
registered through the ComposingRegistrar with the server's own layers.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from checkpointd.auth import Authenticator, Grant, Role
from checkpointd.edge import ComposingRegistrar, Kind, server_layers
from checkpointd.errors import CheckpointNotFound
from checkpointd.metrics import Metrics
from checkpointd_client.v1.checkpoint_service_pb2 import GetCheckpointRequest as Msg

SERVICE = "test.Edge"
WRITER = "writer-token-0123456789"
READER = "reader-token-0123456789"
LIMIT = 200


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def _unary(request: Msg, context: Any) -> Msg:
    if request.execution_id == "missing":
        raise CheckpointNotFound("missing", "x")
    if request.execution_id == "crash":
        raise RuntimeError("SELECT secret FROM somewhere")
    return request


async def _server_stream(request: Msg, context: Any) -> AsyncIterator[Msg]:
    for _ in range(2):
        yield request


async def _client_stream(requests: AsyncIterator[Msg], context: Any) -> Msg:
    ids = [request.execution_id async for request in requests]
    return Msg(namespace="team-a", execution_id=",".join(ids))


async def _bidi(requests: AsyncIterator[Msg], context: Any) -> AsyncIterator[Msg]:
    async for request in requests:
        if request.execution_id == "missing":
            raise CheckpointNotFound("missing", "x")
        yield request


class Edge:
    """The test server and a channel to it."""

    def __init__(self, server: grpc.aio.Server, channel: grpc.aio.Channel, metrics: Metrics):
        self.server, self.channel, self.metrics = server, channel, metrics
        self.store_open = True

    def call(self, kind: Kind) -> Callable[..., Any]:
        method = f"/{SERVICE}/{kind.name}"
        make: Callable[..., Any] = {
            Kind.UNARY: self.channel.unary_unary,
            Kind.SERVER_STREAM: self.channel.unary_stream,
            Kind.CLIENT_STREAM: self.channel.stream_unary,
            Kind.BIDI_STREAM: self.channel.stream_stream,
        }[kind]
        call: Callable[..., Any] = make(
            method, request_serializer=Msg.SerializeToString, response_deserializer=Msg.FromString
        )
        return call

    def handled(self, kind: Kind, code: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "grpc_server_handled_total",
            {
                "grpc_service": SERVICE,
                "grpc_method": kind.name,
                "grpc_type": kind.value,
                "grpc_code": code,
            },
        )
        return value or 0.0

    async def settled_count(self, kind: Kind, code: str) -> float:
        """The handled count once the server's side of the call has finished.

        The client can hold the status before the server's layer has counted the call (both run
        in this loop), so wait for the count to appear, then read it.
        """
        for _ in range(500):
            if self.handled(kind, code):
                break
            await asyncio.sleep(0.01)
        return self.handled(kind, code)


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[Edge]:
    authenticator = Authenticator(
        [
            Grant("writer", _digest(WRITER), frozenset({"team-a"}), Role.READ_WRITE),
            Grant("reader", _digest(READER), None, Role.READ_ONLY),
        ]
    )
    metrics = Metrics()
    server = grpc.aio.server()
    state: dict[str, Edge] = {}
    layers = server_layers(
        max_message_bytes=LIMIT,
        store_is_open=lambda: state["edge"].store_open,
        exempt_prefixes=("/grpc.health.v1.",),
        authenticator=authenticator,
        metrics=metrics,
    )
    handlers = {
        Kind.UNARY.name: grpc.unary_unary_rpc_method_handler(
            _unary, Msg.FromString, Msg.SerializeToString
        ),
        Kind.SERVER_STREAM.name: grpc.unary_stream_rpc_method_handler(
            _server_stream, Msg.FromString, Msg.SerializeToString
        ),
        Kind.CLIENT_STREAM.name: grpc.stream_unary_rpc_method_handler(
            _client_stream, Msg.FromString, Msg.SerializeToString
        ),
        Kind.BIDI_STREAM.name: grpc.stream_stream_rpc_method_handler(
            _bidi, Msg.FromString, Msg.SerializeToString
        ),
    }
    ComposingRegistrar(server, layers).add_registered_method_handlers(SERVICE, handlers)
    address = f"unix://{tmp_path / 'edge.sock'}"
    server.add_insecure_port(address)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    state["edge"] = Edge(server, channel, metrics)
    try:
        yield state["edge"]
    finally:
        await channel.close()
        await server.stop(None)


async def _requests(*messages: Msg) -> AsyncIterator[Msg]:
    for message in messages:
        yield message


async def _invoke(edge: Edge, kind: Kind, token: str | None, *messages: Msg) -> list[Msg]:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    stub = edge.call(kind)
    if kind is Kind.UNARY:
        return [await stub(messages[0], metadata=metadata)]
    if kind is Kind.SERVER_STREAM:
        return [reply async for reply in stub(messages[0], metadata=metadata)]
    if kind is Kind.CLIENT_STREAM:
        return [await stub(_requests(*messages), metadata=metadata)]
    return [reply async for reply in stub(_requests(*messages), metadata=metadata)]


def _reason(error: grpc.aio.AioRpcError) -> str:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            info = error_details_pb2.ErrorInfo()
            assert isinstance(value, bytes)
            status_pb2.Status.FromString(value).details[0].Unpack(info)
            return str(info.reason)
    return ""


async def _refused(
    edge: Edge, kind: Kind, token: str | None, *messages: Msg
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _invoke(edge, kind, token, *messages)
    return caught.value


OK = Msg(namespace="team-a", execution_id="e1")
ALL_KINDS = pytest.mark.parametrize("kind", list(Kind))


def _opening(kind: Kind) -> tuple[Msg, ...]:
    """What a call refused as it opens sends: nothing on a request stream. A grpc.aio client
    writing to a stream the server has already ended can see INTERNAL ("Internal error from
    Core", grpc/grpc#36066) in place of the server's status; the refusal needs no message."""
    return () if kind.streams_requests else (OK,)


@ALL_KINDS
async def test_every_kind_answers_an_admitted_call_and_counts_it(edge: Edge, kind: Kind) -> None:
    replies = await _invoke(edge, kind, WRITER, OK, OK)
    assert replies
    assert all(reply.namespace == "team-a" for reply in replies)
    assert await edge.settled_count(kind, "OK") == 1


@ALL_KINDS
async def test_every_kind_refuses_a_call_without_a_token(edge: Edge, kind: Kind) -> None:
    error = await _refused(edge, kind, None, *_opening(kind))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert _reason(error) == "MISSING_TOKEN"
    assert await edge.settled_count(kind, "UNAUTHENTICATED") == 1


@ALL_KINDS
async def test_every_kind_refuses_an_unknown_token(edge: Edge, kind: Kind) -> None:
    error = await _refused(edge, kind, "not-a-known-token-000", *_opening(kind))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert _reason(error) == "INVALID_TOKEN"


@ALL_KINDS
async def test_every_kind_refuses_a_read_only_token_on_a_method_of_no_known_access(
    edge: Edge, kind: Kind
) -> None:
    """A method missing from the access table counts as a write."""
    error = await _refused(edge, kind, READER, *_opening(kind))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert _reason(error) == "READ_ONLY_TOKEN"


@ALL_KINDS
async def test_every_request_message_is_held_to_the_tokens_namespaces(
    edge: Edge, kind: Kind
) -> None:
    """The second message of a stream is checked as well as the first."""
    other = Msg(namespace="team-b", execution_id="e2")
    error = await _refused(edge, kind, WRITER, OK if kind.streams_requests else other, other)
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert _reason(error) == "NAMESPACE_NOT_ALLOWED"
    assert await edge.settled_count(kind, "PERMISSION_DENIED") == 1


@ALL_KINDS
async def test_every_request_message_is_held_to_the_size_limit(edge: Edge, kind: Kind) -> None:
    big = Msg(namespace="team-a", execution_id="x" * LIMIT)
    error = await _refused(edge, kind, WRITER, OK if kind.streams_requests else big, big)
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _reason(error) == "MESSAGE_TOO_LARGE"


@ALL_KINDS
async def test_every_kind_is_unavailable_until_the_store_is_open(edge: Edge, kind: Kind) -> None:
    edge.store_open = False
    error = await _refused(edge, kind, WRITER, *_opening(kind))
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert _reason(error) == "STORE_UNAVAILABLE"


@pytest.mark.parametrize("kind", [Kind.UNARY, Kind.BIDI_STREAM])
async def test_domain_errors_become_their_status_and_others_internal_without_their_text(
    edge: Edge, kind: Kind
) -> None:
    missing = await _refused(edge, kind, WRITER, Msg(namespace="team-a", execution_id="missing"))
    assert missing.code() is grpc.StatusCode.NOT_FOUND
    assert _reason(missing) == "CHECKPOINT_NOT_FOUND"
    if kind is Kind.UNARY:
        crash = await _refused(edge, kind, WRITER, Msg(namespace="team-a", execution_id="crash"))
        assert crash.code() is grpc.StatusCode.INTERNAL
        assert "secret" not in (crash.details() or "")
        assert await edge.settled_count(kind, "INTERNAL") == 1
