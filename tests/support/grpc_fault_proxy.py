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
methods are not proxied (answered ``UNIMPLEMENTED``). Only loopback and Unix-socket
addresses are used, upstream and listening.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import Any, Self

import grpc
from google.protobuf import any_pb2, descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = ["GrpcFaultProxy", "ProxiedCall"]

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
# Metadata that belongs to the transport of one hop, not to the call: never forwarded.
_HOP_METADATA = frozenset({"user-agent", "te", "content-type", "grpc-accept-encoding"})
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),  # the proxy forwards each attempt once; retrying is the client's
]


class _Kind(Enum):
    FAIL = "fail before forwarding"
    LOSE_REPLY = "forward, then lose the reply"
    STALL = "hold until the caller gives up"


@dataclass
class _Rule:
    suffix: str
    kind: _Kind
    times: int
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    details: str = ""
    reason: str = ""


@dataclass(frozen=True)
class ProxiedCall:
    """One call as the proxy received it."""

    method: str
    """The full method name, ``/checkpointd.v1.CheckpointService/PutCheckpoint``."""
    request: bytes
    """The serialized request; parse it with the request message's ``FromString``."""
    metadata: tuple[tuple[str, str | bytes], ...]
    """The call's metadata as received (hop-by-hop keys included)."""
    time_remaining: float | None
    """Seconds left before the call's deadline when it arrived; ``None`` without one."""
    fault: str | None
    """The scripted fault applied to the call, if any."""
    forwarded: bool
    """Whether the call reached the upstream server."""


def _matches(method: str, suffix: str) -> bool:
    return method == suffix or method.endswith("/" + suffix)


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

    def __init__(self, upstream: str, *, listen: str = "unix", max_workers: int = 32) -> None:
        _check_loopback(upstream)
        self.upstream = upstream
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._calls: list[ProxiedCall] = []
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
        self._add(_Rule(method_suffix, _Kind.FAIL, times, code, details, reason))

    def lose_reply_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Forward the next ``times`` calls, then answer UNAVAILABLE whatever the server said."""
        self._add(_Rule(method_suffix, _Kind.LOSE_REPLY, times, details="fault proxy: reply lost"))

    def stall_next(self, method_suffix: str, *, times: int = 1) -> None:
        """Hold the next ``times`` calls, unforwarded, until the caller gives up or we close."""
        self._add(_Rule(method_suffix, _Kind.STALL, times))

    def clear_faults(self) -> None:
        """Drop every scripted fault not yet applied."""
        with self._lock:
            self._rules.clear()

    def _add(self, rule: _Rule) -> None:
        if rule.times < 1:
            raise ValueError(f"times must be >= 1, got {rule.times}")
        with self._lock:
            self._rules.append(rule)

    def _take_rule(self, method: str) -> _Rule | None:
        """Pop one use of the first rule that matches ``method`` (rules apply in order)."""
        with self._lock:
            for rule in self._rules:
                if _matches(method, rule.suffix):
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
        return [c for c in calls if not method_suffix or _matches(c.method, method_suffix)]

    def requests(self, method_suffix: str, message: Callable[[bytes], Any]) -> list[Any]:
        """The requests received for the method, parsed by ``message`` (``Request.FromString``)."""
        return [message(c.request) for c in self.calls(method_suffix)]

    def received(self, method_suffix: str = "") -> int:
        """How many calls of the method arrived at the proxy."""
        return len(self.calls(method_suffix))

    def forwarded(self, method_suffix: str = "") -> int:
        """How many calls of the method the proxy forwarded to the server."""
        return sum(c.forwarded for c in self.calls(method_suffix))

    def reset_counts(self) -> None:
        """Forget the calls recorded so far."""
        with self._lock:
            self._calls.clear()

    # --- forwarding ---------------------------------------------------------------------

    def _record(self, call: ProxiedCall) -> None:
        with self._lock:
            self._calls.append(call)

    def _forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = tuple((key, value) for key, value in context.invocation_metadata())
        remaining = context.time_remaining()
        rule = self._take_rule(method)
        fault = rule.kind.value if rule is not None else None
        forwarded = rule is None or rule.kind is _Kind.LOSE_REPLY
        self._record(ProxiedCall(method, request, metadata, remaining, fault, forwarded))

        if rule is not None and rule.kind is _Kind.FAIL:
            _abort(context, rule.code, rule.details, rule.reason)
        if rule is not None and rule.kind is _Kind.STALL:
            gone = threading.Event()
            context.add_callback(gone.set)  # runs when the call ends: deadline, cancel, stop
            while not gone.wait(0.05) and context.is_active() and not self._closing.is_set():
                pass
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "fault proxy: stalled call")

        upstream: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
            method, request_serializer=None, response_deserializer=None
        )
        call = upstream.future(
            request,
            timeout=remaining,
            metadata=tuple((k, v) for k, v in metadata if not _is_hop_metadata(k)),
        )

        def stop_upstream() -> None:  # the caller gave up: stop the upstream call too
            call.cancel()

        context.add_callback(stop_upstream)
        try:
            response: bytes = call.result()
        except grpc.FutureCancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "fault proxy: call cancelled")
        except grpc.RpcError:
            if rule is not None:  # LOSE_REPLY: the server answered; the caller never hears it
                context.abort(rule.code, rule.details)
            context.set_trailing_metadata(call.trailing_metadata() or ())
            context.abort(call.code(), call.details() or "")
        if rule is not None:
            context.abort(rule.code, rule.details)
        initial = _clean(call.initial_metadata())
        if initial:
            context.send_initial_metadata(initial)
        context.set_trailing_metadata(_clean(call.trailing_metadata()))
        return response

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


def _is_hop_metadata(key: str) -> bool:
    return key.startswith(":") or key in _HOP_METADATA


def _clean(metadata: Sequence[tuple[str, str | bytes]] | None) -> tuple[tuple[str, Any], ...]:
    return tuple((k, v) for k, v in metadata or () if not _is_hop_metadata(k))


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str, reason: str) -> None:
    """End the call with ``code``; with a reason, as a ``google.rpc.Status`` with ErrorInfo."""
    if not reason:
        context.abort(code, details)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="checkpointd.v1"))
    status = status_pb2.Status(code=code.value[0], message=details, details=[detail])
    context.abort_with_status(rpc_status.to_status(status))


class _Handler(grpc.GenericRpcHandler):
    """Hands every unary method to the proxy, as raw bytes both ways."""

    def __init__(self, proxy: GrpcFaultProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        if _is_streaming(method):
            return None  # answered UNIMPLEMENTED by gRPC

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self._proxy._forward(method, request, context)

        return grpc.unary_unary_rpc_method_handler(
            forward, request_deserializer=None, response_serializer=None
        )
