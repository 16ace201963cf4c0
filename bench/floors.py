"""The floors of a sidecar call: what gRPC itself costs on this machine, over the same kind of
socket, measured in the same run as the cases.

* ``unary echo``: a bare ``grpc.aio`` server (a subprocess, like the sidecar) that answers a
  unary call with its own request bytes; no protobuf, no interceptors, no store.
* ``bidi stream round trip``: one message sent and its echo read on an open bidirectional
  stream of the same server: the cost of a call without the unary call's setup.
* ``Health/Check``: ``grpc.health.v1.Health/Check`` on the real checkpointd server: the
  whole server path without a store call.

The echo payload is the size of the ``put`` case's request (about 2 KB). Run as a script,
this module is the echo server: ``python bench/floors.py SOCKET_PATH`` serves on a Unix socket
and prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

UNARY_METHOD = "/bench.Echo/Unary"
STREAM_METHOD = "/bench.Echo/Stream"
#: About the size of a PutCheckpoint request with the 2 KB state.
PAYLOAD = b"x" * 2100


async def _unary(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def _stream(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def _serve(socket_path: str) -> None:
    server = grpc.aio.server()
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Stream": grpc.stream_stream_rpc_method_handler(_stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", handlers),))
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


@dataclass(frozen=True)
class EchoServer:
    """A running echo server: its gRPC target and its pid (whose CPU the floors read)."""

    target: str
    pid: int


@contextmanager
def echo_server(workdir: Path) -> Iterator[EchoServer]:
    """A running echo server subprocess."""
    socket_path = workdir / "echo.sock"
    process = subprocess.Popen(
        [sys.executable, __file__, str(socket_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the echo server did not start")
        yield EchoServer(f"unix://{socket_path}", process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)
        socket_path.unlink(missing_ok=True)


def _identity(raw: bytes) -> bytes:
    return raw


def unary_echo(channel: grpc.Channel) -> Any:
    """A callable that makes one unary echo call of the payload."""
    call = channel.unary_unary(
        UNARY_METHOD, request_serializer=_identity, response_deserializer=_identity
    )

    def once() -> None:
        assert len(call(PAYLOAD, timeout=30)) == len(PAYLOAD)

    return once


class StreamRoundTrip:
    """One open bidi stream; each :meth:`__call__` sends the payload and reads its echo."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        call = channel.stream_stream(
            STREAM_METHOD, request_serializer=_identity, response_deserializer=_identity
        )
        self._responses = call(iter(self._outbox.get, None))

    def __call__(self) -> None:
        self._outbox.put(PAYLOAD)
        assert len(next(self._responses)) == len(PAYLOAD)

    def close(self) -> None:
        self._outbox.put(None)
        for _ in self._responses:  # drain to the end of the stream
            pass


def health_check(channel: grpc.Channel) -> Any:
    """A callable that makes one Health/Check call (overall status) and expects SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="")

    def once() -> None:
        response = stub.Check(request, timeout=30)
        assert response.status == health_pb2.HealthCheckResponse.SERVING

    return once


def wait_ready(channel: grpc.Channel) -> None:
    """Block until the channel is connected (so connecting is not measured)."""
    grpc.channel_ready_future(channel).result(timeout=30)
    time.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
