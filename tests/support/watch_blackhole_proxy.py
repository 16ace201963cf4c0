"""A gRPC proxy for WatchInterrupts streams that can black-hole them (contract P6).

It forwards each WatchInterrupts call to the server as raw bytes (its request, its metadata,
every reply). :meth:`WatchBlackholeProxy.go_dark` makes the streams open at that moment stop
delivering replies while their calls stay open and the client's connection stays up (the
proxy's gRPC server still answers its pings): the failure a middlebox that drops a stream's
data causes, which no keepalive notices. Streams opened later are forwarded again, so a client
that reconnects gets through. Other methods are not proxied (UNIMPLEMENTED).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from types import TracebackType
from typing import Any, Self

import grpc

__all__ = ["WatchBlackholeProxy"]

WATCH_METHOD = "/checkpointd.v1.InterruptService/WatchInterrupts"


def _raw(data: bytes) -> bytes:
    return data


class WatchBlackholeProxy:
    """A proxy in front of ``upstream`` (a gRPC target) on 127.0.0.1; use as a context
    manager. ``target`` is the address clients dial."""

    def __init__(self, upstream: str) -> None:
        self._channel = grpc.insecure_channel(upstream)
        self._lock = threading.Lock()
        self._open: set[threading.Event] = set()  # one "gone dark" flag per open stream
        self.streams_opened = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        handler = grpc.unary_stream_rpc_method_handler(
            self._watch, request_deserializer=_raw, response_serializer=_raw
        )
        self._server.add_generic_rpc_handlers((_OneMethod(WATCH_METHOD, handler),))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{port}"
        self._server.start()

    def go_dark(self) -> int:
        """Stop delivering the replies of every stream open now; the number of them."""
        with self._lock:
            for dark in self._open:
                dark.set()
            return len(self._open)

    def _watch(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        dark = threading.Event()
        with self._lock:
            self._open.add(dark)
            self.streams_opened += 1
        metadata = tuple((k, v) for k, v in context.invocation_metadata() if not k.startswith(":"))
        upstream: Any = self._channel.unary_stream(
            WATCH_METHOD, request_serializer=_raw, response_deserializer=_raw
        )(request, metadata=metadata, timeout=_timeout(context))
        context.add_callback(upstream.cancel)
        try:
            for reply in upstream:
                if dark.is_set():
                    break
                yield reply
            else:
                return
            # Dark: hold the call open, deliver nothing, until the client gives up on it.
            upstream.cancel()
            while context.is_active():
                time.sleep(0.05)
        except grpc.RpcError as exc:
            if not dark.is_set() and context.is_active():
                context.abort(exc.code(), exc.details() or "")
        finally:
            with self._lock:
                self._open.discard(dark)

    def close(self) -> None:
        """Stop the proxy and close its upstream channel."""
        self._server.stop(None)
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _timeout(context: grpc.ServicerContext) -> float | None:
    """The client's deadline, passed on; None for none (gRPC gives a far future's)."""
    remaining = context.time_remaining()
    return remaining if remaining is not None and remaining < 86_400 else None


class _OneMethod(grpc.GenericRpcHandler):
    """Routes one method, by its full name, to one handler."""

    def __init__(self, method: str, handler: grpc.RpcMethodHandler[bytes, bytes]) -> None:
        self._method = method
        self._handler = handler

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        if handler_call_details.method == self._method:
            return self._handler
        return None
