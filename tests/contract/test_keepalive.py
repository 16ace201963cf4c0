"""I5: the keepalive policy docs/protocol.md publishes holds on a real server: a client that
pings far more often than the guide asks is still never cut off on a silent watch stream.

tests/test_keepalive_policy.py checks the published figures against the server's options;
this checks what they do, next to a server with gRPC's default policy, which does cut the
same client off (so the client really pings that often).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from checkpointd_client import CheckpointdClient, RetryPolicy
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc
from tests.contract.helpers import interrupted
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

#: A client that pings every second, ten times the rate the guide asks for, without pause.
EAGER_PINGS = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
PATIENCE = 30.0


class Reader:
    """Reads a server stream on a thread into a queue (an RpcError or None ends it)."""

    def __init__(self, call: Iterator[object]) -> None:
        self.items: queue.Queue[object] = queue.Queue()
        self._call = call
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self._call:
                self.items.put(message)
        except grpc.RpcError as exc:
            self.items.put(exc)
        else:
            self.items.put(None)

    def next(self, patience: float = PATIENCE) -> object:
        return self.items.get(timeout=patience)


def _silent_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    """A server stream that sends nothing until the client leaves."""
    while context.is_active():
        time.sleep(0.05)
    yield from ()


def _default_policy_server() -> tuple[grpc.Server, str]:
    handler = grpc.method_handlers_generic_handler(
        "test.Silent",
        {
            "Watch": grpc.unary_stream_rpc_method_handler(
                _silent_stream,
                request_deserializer=lambda b: b,
                response_serializer=lambda b: b,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_i5_a_watch_pinged_every_second_stays_open_where_grpc_defaults_cut_it_off(
    sidecar: Sidecar,
) -> None:
    """The same eager client is cut off ("too many pings") by a server with gRPC's default
    policy, but its checkpointd watch stream stays open for twice as long and then still
    delivers the next event."""
    control_server, control_target = _default_policy_server()
    with (
        grpc.insecure_channel(control_target, options=EAGER_PINGS) as control_channel,
        grpc.insecure_channel(sidecar.target, options=EAGER_PINGS) as channel,
    ):
        watch_call = svc_grpc.InterruptServiceStub(channel).WatchInterrupts(
            svc.WatchInterruptsRequest()
        )
        watch = Reader(watch_call)
        first = watch.next()
        assert isinstance(first, svc.WatchInterruptsResponse), first
        assert first.HasField("snapshot_complete")
        started = time.monotonic()
        control_call = control_channel.unary_stream(
            "/test.Silent/Watch",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )(b"")
        control = Reader(control_call)
        try:
            ended = control.next()
            cut_after = time.monotonic() - started
            assert isinstance(ended, grpc.RpcError), ended
            assert ended.code() == grpc.StatusCode.UNAVAILABLE, ended
            assert "ping" in (ended.details() or "").lower(), ended

            # The checkpointd stream has had the same pings, and as many again.
            time.sleep(cut_after)
            # Open all along: nothing but progress (I6) has come, no ending.
            while not watch.items.empty():
                item = watch.items.get_nowait()
                assert isinstance(item, svc.WatchInterruptsResponse), item
                assert item.HasField("progress"), item
            with CheckpointdClient(sidecar.target, retry=RetryPolicy(max_attempts=1)) as client:
                client.record_interrupt(*interrupted("after-the-pings"))
            while True:
                message = watch.next()
                assert isinstance(message, svc.WatchInterruptsResponse), message
                if message.HasField("event"):
                    break
            assert message.event.pending.execution_id == "after-the-pings"
        finally:
            control_call.cancel()
            watch_call.cancel()
            control_server.stop(0)
