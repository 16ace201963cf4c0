"""A real gRPC proxy in front of a real checkpointd server, which can be told to misbehave.

It is a ``grpc.server`` (sync, thread pool) whose one generic handler forwards every unary
call as raw bytes to the upstream server over a ``grpc`` channel: the caller's metadata and
remaining deadline go with it, and the upstream answer (message, or status code, details and
trailing metadata, ``grpc-status-details-bin`` included) comes back unchanged. Nothing is
parsed, so what the client sees is what the server said, except where a test scripted a fault:

* :meth:`GrpcFaultProxy.fail_next`: answer the next calls with an error *before* forwarding
  (the server never sees them), e.g. ``UNAVAILABLE`` as when the store is down.
* :meth:`GrpcFaultProxy.lose_reply_next`: forward, let the server do the work, then answer
  ``UNAVAILABLE`` as if the reply had been lost on the way back.
* :meth:`GrpcFaultProxy.stall_next`: hold the next calls without forwarding until the caller
  gives up (deadline or cancel) or the proxy closes, as a server that hangs.

Every call is recorded (method, raw request, metadata, the deadline it arrived with, whether
it was forwarded), so a test can check what the client sent on each attempt. Streaming
methods are not proxied (answered ``UNIMPLEMENTED``, so clients fall back to unary calls),
except the Write stream when the proxy is made with ``write_stream=True``
(:mod:`tests.support.grpc_fault_stream`): its items are recorded as calls of their unary
methods, the rules above apply to them, and so do the stream faults
(:meth:`~GrpcFaultProxy.drop_reply_next`, :meth:`~GrpcFaultProxy.withhold_replies_next`,
:meth:`~GrpcFaultProxy.black_hole_next_stream`, :meth:`~GrpcFaultProxy.recycle_streams`).
Only loopback and Unix-socket addresses are used, upstream and listening.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from types import TracebackType
from typing import Any, Self

import grpc
from google.protobuf import any_pb2, descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from tests.support.grpc_fault_rules import Kind, ProxiedCall, Rule, clean, matches
from tests.support.grpc_fault_stream import WRITE_METHOD, ProxiedStream, StreamFault

__all__ = ["GrpcFaultProxy", "ProxiedCall"]

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
_ITEM_ONLY = frozenset({Kind.DROP_REPLY})
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),  # the proxy forwards each attempt once; retrying is the client's
]


def _check_loopback(target: str) -> None:
    """Refuse any upstream that is not a Unix socket or a loopback address."""
    if target.startswith("unix:"):
        return
    host = target.removeprefix("ipv4:").removeprefix("ipv6:").rpartition(":")[0]
    if host not in _LOOPBACK_HOSTS:
        raise ValueError(f"the fault proxy only forwards to loopback or unix targets: {target!r}")


def _is_streaming(method: str) -> bool:
    """Whether the method is known (its protobuf module imported) and streams either way."""
    try:
        desc = descriptor_pool.Default().FindMethodByName(method.lstrip("/").replace("/", "."))
    except KeyError:
        return False
    return bool(desc.client_streaming or desc.server_streaming)


class GrpcFaultProxy:
    """Forward gRPC calls to ``upstream`` and inject scripted faults; a context manager.

    ``listen`` is ``"unix"`` (a socket in a fresh temporary directory) or ``"tcp"``
    (``127.0.0.1`` on a port the kernel picks). Clients connect to :attr:`target`.
    """

    def __init__(
        self,
        upstream: str,
        *,
        listen: str = "unix",
        max_workers: int = 32,
        write_stream: bool = False,
        write_batches: bool = True,
        write_kinds: bool = True,
    ) -> None:
        _check_loopback(upstream)
        self.upstream = upstream
        self.write_stream = write_stream
        """Whether the Write stream is proxied (else UNIMPLEMENTED, as other streams)."""
        self.write_batches = write_batches
        """Whether the Write stream's headers say it takes batches (else the proxy strips
        the entry, and the stream looks like one of a server that predates batches)."""
        self.write_kinds = write_kinds
        """Whether the Write stream's headers list the kinds of item it takes (else the proxy
        strips the entry, and the stream looks like one of a server that predates the graph
        items, contract S4)."""
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._calls: list[ProxiedCall] = []
        self._stream_faults: list[StreamFault] = []
        self._streams: dict[int, ProxiedStream] = {}
        self._streams_opened = 0
        self._closing = threading.Event()
        self._closed = False
        self._socket_dir: str | None = None
        self._channel = grpc.insecure_channel(upstream, options=_CHANNEL_OPTIONS)
        self._executor = futures.ThreadPoolExecutor(max_workers, thread_name_prefix="fault-proxy")
        self._server = grpc.server(
            self._executor, handlers=[_Handler(self)], options=_CHANNEL_OPTIONS
        )
        try:
            if listen == "unix":
                # Short: Unix socket paths are limited to about 100 bytes.
                self._socket_dir = tempfile.mkdtemp(prefix="cfp-", dir="/tmp")
                self.target = f"unix://{self._socket_dir}/proxy.sock"
                self._server.add_insecure_port(self.target)
            elif listen == "tcp":
                port = self._server.add_insecure_port("127.0.0.1:0")
                self.target = f"127.0.0.1:{port}"
            else:
                raise ValueError(f"listen must be 'unix' or 'tcp', got {listen!r}")
            self._server.start()
        except BaseException:
            self.close()
            raise

    # --- scripting ----------------------------------------------------------------------

    def fail_next(
        self,
        method_suffix: str,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        *,
        times: int = 1,
        details: str = "",
        reason: str = "",
    ) -> None:
        """Answer the next ``times`` calls of the method with ``code``, without forwarding.

        With ``reason`` the status carries a ``google.rpc.ErrorInfo`` with that reason, as
        checkpointd's own errors do.
        """
        details = details or f"fault proxy: injected {code.name}"
        self._add(Rule(method_suffix, Kind.FAIL, times, code, details, reason))

    def lose_reply_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Forward the next ``times`` calls, then answer UNAVAILABLE whatever the server said."""
        self._add(Rule(method_suffix, Kind.LOSE_REPLY, times, details="fault proxy: reply lost"))

    def stall_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Hold the next ``times`` calls, unforwarded, until the caller gives up or we close."""
        self._add(Rule(method_suffix, Kind.STALL, times))

    def drop_reply_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Write stream: forward the next ``times`` items of the method and drop their
        replies, without a word; the stream goes on answering the others."""
        self._add(Rule(method_suffix, Kind.DROP_REPLY, times))

    def withhold_replies_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Forward the next ``times`` calls of the method and hold their replies until the
        caller gives up. On the Write stream, from the first such item's reply on every reply
        of its stream is held until the caller gives the stream up (a stream that wedged
        while its connection lives)."""
        self._add(Rule(method_suffix, Kind.WITHHOLD, times))

    def black_hole_next_stream(self, *, times: int = 1, headers: bool = True) -> None:
        """Write stream: the next ``times`` streams forward every item to the server and no
        reply to the caller, until it gives the stream up; with ``headers`` the server's
        headers pass (so the client writes its items), without them nothing does."""
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        with self._lock:
            self._stream_faults.extend([StreamFault(headers=headers)] * times)

    def recycle_streams(self) -> int:
        """End every open Write stream ``UNAVAILABLE`` now, as a proxy recycling its
        connections; return how many were open."""
        with self._lock:
            open_streams = list(self._streams.values())
        for stream in open_streams:
            stream.end()
        return len(open_streams)

    def clear_faults(self) -> None:
        """Drop every scripted fault not yet applied."""
        with self._lock:
            self._rules.clear()
            self._stream_faults.clear()

    def _add(self, rule: Rule) -> None:
        if rule.times < 1:
            raise ValueError(f"times must be >= 1, got {rule.times}")
        with self._lock:
            self._rules.append(rule)

    def take_rule(self, method: str, *, item: bool = False) -> Rule | None:
        """Pop one use of the first rule that matches ``method`` (rules apply in order); a
        unary call (``item`` False) passes over the rules only stream items can take."""
        with self._lock:
            for rule in self._rules:
                if not item and rule.kind in _ITEM_ONLY:
                    continue
                if matches(method, rule.suffix):
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
                    return rule
        return None

    # --- observation --------------------------------------------------------------------

    def calls(self, method_suffix: str = "") -> list[ProxiedCall]:
        """The calls received for the method (every method when empty), in arrival order."""
        with self._lock:
            calls = list(self._calls)
        return [c for c in calls if not method_suffix or matches(c.method, method_suffix)]

    def requests(self, method_suffix: str, message: Callable[[bytes], Any]) -> list[Any]:
        """The requests received for the method, parsed by ``message`` (``Request.FromString``)."""
        return [message(c.request) for c in self.calls(method_suffix)]

    def received(self, method_suffix: str = "") -> int:
        """How many calls of the method arrived at the proxy."""
        return len(self.calls(method_suffix))

    def forwarded(self, method_suffix: str = "") -> int:
        """How many calls of the method the proxy forwarded to the server."""
        return sum(c.forwarded for c in self.calls(method_suffix))

    def streams_opened(self) -> int:
        """How many Write streams the proxy has taken."""
        with self._lock:
            return self._streams_opened

    def open_streams(self) -> int:
        """How many Write streams are open now (the caller has not ended or cancelled them)."""
        with self._lock:
            return len(self._streams)

    def reset_counts(self) -> None:
        """Forget the calls recorded so far."""
        with self._lock:
            self._calls.clear()

    # --- forwarding ---------------------------------------------------------------------

    @property
    def channel(self) -> grpc.Channel:
        """The channel to the upstream server."""
        return self._channel

    @property
    def closing(self) -> threading.Event:
        """Set once the proxy closes."""
        return self._closing

    def record(self, call: ProxiedCall) -> None:
        """Keep ``call`` in the record."""
        with self._lock:
            self._calls.append(call)

    def _forward_stream(
        self, requests: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        with self._lock:
            fault = self._stream_faults.pop(0) if self._stream_faults else None
            stream = ProxiedStream(self, fault)
            self._streams[stream.serial] = stream
            self._streams_opened += 1
        try:
            yield from stream.serve(requests, context)
        finally:
            with self._lock:
                self._streams.pop(stream.serial, None)

    def _forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = tuple((key, value) for key, value in context.invocation_metadata())
        remaining = context.time_remaining()
        rule = self.take_rule(method)
        fault = rule.kind.value if rule is not None else None
        forwarded = rule is None or rule.kind in (Kind.LOSE_REPLY, Kind.WITHHOLD)
        self.record(ProxiedCall(method, request, metadata, remaining, fault, forwarded))

        if rule is not None and rule.kind is Kind.FAIL:
            _abort(context, rule.code, rule.details, rule.reason)
        if rule is not None and rule.kind is Kind.STALL:
            self._hold(context)

        upstream: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
            method, request_serializer=None, response_deserializer=None
        )
        call = upstream.future(
            request,
            timeout=remaining,
            metadata=clean(metadata),
        )

        def stop_upstream() -> None:  # the caller gave up: stop the upstream call too
            call.cancel()

        context.add_callback(stop_upstream)
        try:
            response: bytes = call.result()
        except grpc.FutureCancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "fault proxy: call cancelled")
        except grpc.RpcError:
            if rule is not None and rule.kind is Kind.WITHHOLD:
                self._hold(context)
            if rule is not None:  # LOSE_REPLY: the server answered; the caller never hears it
                context.abort(rule.code, rule.details)
            context.set_trailing_metadata(call.trailing_metadata() or ())
            context.abort(call.code(), call.details() or "")
        if rule is not None and rule.kind is Kind.WITHHOLD:
            self._hold(context)
        if rule is not None:
            context.abort(rule.code, rule.details)
        initial = clean(call.initial_metadata())
        if initial:
            context.send_initial_metadata(initial)
        context.set_trailing_metadata(clean(call.trailing_metadata()))
        return response

    def _hold(self, context: grpc.ServicerContext) -> None:
        """Answer nothing until the caller gives up (deadline, cancel) or the proxy closes."""
        gone = threading.Event()
        context.add_callback(gone.set)  # runs when the call ends: deadline, cancel, stop
        while not gone.wait(0.05) and context.is_active() and not self._closing.is_set():
            pass
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "fault proxy: stalled call")

    # --- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop serving (calls in flight are cancelled), close the channel, remove the socket."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._server.stop(grace=None).wait(timeout=10)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._channel.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GrpcFaultProxy(target={self.target!r}, upstream={self.upstream!r})"


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str, reason: str) -> None:
    """End the call with ``code``; with a reason, as a ``google.rpc.Status`` with ErrorInfo."""
    if not reason:
        context.abort(code, details)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="checkpointd.v1"))
    status = status_pb2.Status(code=code.value[0], message=details, details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


class _Handler(grpc.GenericRpcHandler):
    """Hands every unary method, and the Write stream if asked, to the proxy, as raw bytes
    both ways."""

    def __init__(self, proxy: GrpcFaultProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        if method == WRITE_METHOD and self._proxy.write_stream:
            return grpc.stream_stream_rpc_method_handler(
                self._proxy._forward_stream, request_deserializer=None, response_serializer=None
            )
        if _is_streaming(method):
            return None  # answered UNIMPLEMENTED by gRPC

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self._proxy._forward(method, request, context)

        return grpc.unary_unary_rpc_method_handler(
            forward, request_deserializer=None, response_serializer=None
        )
