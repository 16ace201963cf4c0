"""The server's edge: every per-call concern, composed with each method's handler once.

A :data:`Layer` is a small function that receives a method and the next step of its call and
returns the step that runs around it. :func:`compose` builds each method's chain once, when
the services are registered (:class:`ComposingRegistrar` stands for the server in the
generated ``add_*Servicer_to_server`` functions), instead of running ``grpc.aio``
interceptors, which rebuild their whole chain and new handler objects on every call. The same
chain serves all four kinds of RPC (unary, server-, client- and bidi-streaming).

The layers of the server (:func:`server_layers`), outermost first:

* :func:`metrics_layer` counts and times every call by its final status code;
* :func:`error_layer` turns every error into a status carrying a ``google.rpc.ErrorInfo``
  (see :mod:`checkpointd.errors`); an unexpected exception is logged with its traceback and
  answered ``INTERNAL`` with an incident id, never with the exception text (which could hold
  SQL or paths);
* :func:`auth_layer` checks the bearer token and the method's access before the request is
  parsed, and the namespace of each request message once it is;
* :func:`size_layer` refuses request messages larger than the limit;
* :func:`store_gate_layer` answers ``UNAVAILABLE`` until the store has been opened.

A request whose bytes do not parse is ``INVALID_ARGUMENT`` (``MALFORMED_REQUEST``), not
gRPC's ``UNKNOWN`` with the parser's text. Checks of request messages run on the request
itself before the handler for unary requests, and on each message as the handler reads it
from its request iterator for streaming ones (a streaming handler reads that iterator, not
``context.read()``, which would bypass them).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from checkpointd.auth import (
    CALL_GRANT,
    ITEM_CHECKED_STREAMS,
    ITEM_GATE,
    RPC_ACCESS,
    Access,
    Authenticator,
    Role,
    check_namespace,
    log_denied,
)
from checkpointd.errors import (
    ERROR_DOMAIN,
    InvalidToken,
    MalformedRequest,
    MessageTooLarge,
    MissingToken,
    ReadOnlyToken,
    StatusInfo,
    internal_status,
    status_for,
)
from checkpointd.store.base import StoreUnavailable

if TYPE_CHECKING:
    from checkpointd.metrics import Metrics

__all__ = [
    "Call",
    "ComposingRegistrar",
    "Kind",
    "Layer",
    "Method",
    "Step",
    "abort_with_error",
    "auth_layer",
    "compose",
    "error_layer",
    "error_status",
    "metrics_layer",
    "server_layers",
    "size_layer",
    "store_gate_layer",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class Kind(enum.Enum):
    """The four kinds of RPC, named as go-grpc-prometheus's ``grpc_type`` label names them."""

    UNARY = "unary"
    SERVER_STREAM = "server_stream"
    CLIENT_STREAM = "client_stream"
    BIDI_STREAM = "bidi_stream"

    @property
    def streams_requests(self) -> bool:
        """Whether the client sends a stream of messages."""
        return self in (Kind.CLIENT_STREAM, Kind.BIDI_STREAM)

    @property
    def streams_responses(self) -> bool:
        """Whether the server sends a stream of messages."""
        return self in (Kind.SERVER_STREAM, Kind.BIDI_STREAM)


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC: its full name (``/package.Service/Method``) and its kind."""

    path: str
    kind: Kind

    @property
    def service(self) -> str:
        """``package.Service``."""
        return self.path.lstrip("/").rpartition("/")[0]

    @property
    def name(self) -> str:
        """The method's short name."""
        return self.path.rpartition("/")[2]


MessageCheck = Callable[[Any], None]
"""Raises a domain error when a request message is refused."""


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """A streamed request message whose bytes did not parse."""

    message_type: str


_UNPARSED: Any = object()


class Call:
    """One call as the layers see it: its context and its request (parsed on first use)."""

    __slots__ = ("_checks", "_parse", "_parsed", "_raw", "context")

    def __init__(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        raw: Any,
        parse: Callable[[Any], Any] | None,
    ) -> None:
        self.context = context
        self._raw = raw
        # None: the request is a stream of messages parsed by gRPC (undecodable ones marked).
        self._parse = parse
        self._parsed: Any = _UNPARSED
        self._checks: list[MessageCheck] = []

    @property
    def request(self) -> Any:
        """The parsed request of a unary-request call (MalformedRequest when it does not parse)."""
        if self._parsed is _UNPARSED:
            assert self._parse is not None, "a streaming request has no single request"
            self._parsed = self._parse(self._raw)
        return self._parsed

    def check_messages(self, check: MessageCheck) -> None:
        """Apply ``check`` to the request now (unary requests), or to each message as the
        handler reads it (streaming requests)."""
        if self._parse is not None:
            check(self.request)
        else:
            self._checks.append(check)

    async def requests(self) -> AsyncIterator[Any]:
        """The messages of a streaming request, each checked as it is read."""
        async for message in self._raw:
            if isinstance(message, _Undecodable):
                raise MalformedRequest(message.message_type)
            for check in self._checks:
                check(message)
            yield message


Step = Callable[[Call], Awaitable[Any]]
"""The rest of a call: its layers inside this one, then the handler."""

Layer = Callable[[Method, Step], Step]
"""Wraps the step of one method (called once per method, at registration)."""


def _message_type(deserializer: Callable[[bytes], Any] | None) -> str:
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "request"))


def _strict(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    """Parse a unary request, MalformedRequest when its bytes do not parse."""
    if deserializer is None:
        return lambda raw: raw
    message_type = _message_type(deserializer)

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:  # DecodeError, or anything else the parser raises on bad bytes
            raise MalformedRequest(message_type) from None

    return parse


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """Parse a streamed message; bytes that do not parse become :class:`_Undecodable` (gRPC
    would end the call ``UNKNOWN`` with the parser's text)."""
    if deserializer is None:
        return None
    message_type = _message_type(deserializer)

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:
            return _Undecodable(message_type)

    return parse


async def _drain(result: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Run a streaming handler: write what a generator yields, or await a handler that writes
    with ``context.write`` itself."""
    if inspect.isasyncgen(result):
        async for response in result:
            await context.write(response)
    else:
        await result


def _endpoint(kind: Kind, handler: Callable[..., Any]) -> Step:
    """The innermost step: the servicer's handler."""
    if kind is Kind.UNARY:

        async def unary(call: Call) -> Any:
            return await handler(call.request, call.context)

        return unary
    if kind is Kind.SERVER_STREAM:

        async def server_stream(call: Call) -> None:
            await _drain(handler(call.request, call.context), call.context)

        return server_stream
    if kind is Kind.CLIENT_STREAM:

        async def client_stream(call: Call) -> Any:
            return await handler(call.requests(), call.context)

        return client_stream

    async def bidi_stream(call: Call) -> None:
        await _drain(handler(call.requests(), call.context), call.context)

    return bidi_stream


_MAKERS: dict[Kind, Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    Kind.UNARY: grpc.unary_unary_rpc_method_handler,
    Kind.SERVER_STREAM: grpc.unary_stream_rpc_method_handler,
    Kind.CLIENT_STREAM: grpc.stream_unary_rpc_method_handler,
    Kind.BIDI_STREAM: grpc.stream_stream_rpc_method_handler,
}


def _kind_of(handler: grpc.RpcMethodHandler[Any, Any]) -> tuple[Kind, Callable[..., Any]]:
    for kind, inner in (
        (Kind.UNARY, handler.unary_unary),
        (Kind.SERVER_STREAM, handler.unary_stream),
        (Kind.CLIENT_STREAM, handler.stream_unary),
        (Kind.BIDI_STREAM, handler.stream_stream),
    ):
        if inner is not None:
            return kind, inner
    raise ValueError("a method handler without a behaviour")


def compose(
    path: str, handler: grpc.RpcMethodHandler[Any, Any], layers: Sequence[Layer]
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` of the method ``path`` with ``layers`` around it (the first outermost)."""
    kind, inner = _kind_of(handler)
    method = Method(path, kind)
    step = _endpoint(kind, inner)
    for layer in reversed(layers):
        step = layer(method, step)
    run = step
    if kind.streams_requests:

        async def streamed(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            return await run(Call(context, requests, None))

        return _MAKERS[kind](
            streamed,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )
    parse = _strict(handler.request_deserializer)

    # The request arrives as bytes and is parsed only when a layer or the handler needs it,
    # so a caller refused on its token costs no parsing.
    async def unary_request(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await run(Call(context, raw, parse))

    return _MAKERS[kind](
        unary_request, request_deserializer=None, response_serializer=handler.response_serializer
    )


# --- the layers ------------------------------------------------------------------------------


def _code_name(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None) -> str:
    """The status a call ended with: set by abort or set_code, else OK or UNKNOWN."""
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED"
    if exc is not None and not isinstance(exc, grpc.aio.AbortError):
        return "UNKNOWN"
    code: object = context.code()  # an int on some grpc versions
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):
        return _CODE_NAMES.get(code, "UNKNOWN")
    return "OK" if exc is None else "UNKNOWN"


_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}


def metrics_layer(metrics: Metrics) -> Layer:
    """Count and time every call by method, kind and final status code."""
    # With the metrics only (prometheus_client).
    from checkpointd.metrics import WATCH_METHOD, LabelCache

    started_series = LabelCache(metrics.rpc_started)
    handled_series = LabelCache(metrics.rpc_handled)
    seconds_series = LabelCache(metrics.rpc_seconds)
    in_flight_series = LabelCache(metrics.rpcs_in_flight)

    def layer(method: Method, step: Step) -> Step:
        service, name = method.service, method.name
        labels = (service, name, method.kind.value)
        is_watch = method.path == WATCH_METHOD

        # The labelled series are made on a method's first call, so a method shows in the
        # metrics only once it has been called.
        async def measured(call: Call) -> Any:
            started_series(*labels).inc()
            in_flight = in_flight_series(service, name)
            in_flight.inc()
            if is_watch:
                metrics.watch_streams.inc()
            started = time.perf_counter()
            failure: BaseException | None = None
            try:
                return await step(call)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                seconds_series(*labels).observe(time.perf_counter() - started)
                handled_series(*labels, _code_name(call.context, failure)).inc()
                in_flight.dec()
                if is_watch:
                    metrics.watch_streams.dec()

        return measured

    return layer


def _status_proto(info: StatusInfo) -> status_pb2.Status:
    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.ErrorInfo(reason=info.reason, domain=ERROR_DOMAIN, metadata=info.metadata)
    )
    return status_pb2.Status(code=info.code.value[0], message=info.message, details=[detail])


def _status_info(exc: BaseException, method: str) -> StatusInfo:
    """The table's status of ``exc``, or INTERNAL with an incident id logged with the
    traceback (a bug's text never reaches the caller)."""
    info = status_for(exc)
    if info is None:
        incident = uuid.uuid4().hex[:12]
        log.error("internal error in %s (incident %s)", method, incident, exc_info=exc)
        info = internal_status(incident)
    return info


def error_status(exc: BaseException, *, method: str) -> status_pb2.Status:
    """The ``google.rpc.Status`` a call failing with ``exc`` ends with; the Write stream
    answers a failed item with it (contract S1)."""
    return _status_proto(_status_info(exc, method))


async def abort_with_error(
    context: grpc.aio.ServicerContext[Any, Any], exc: BaseException, *, method: str
) -> NoReturn:
    """End a call with the status of ``exc`` (:func:`error_status`). Always raises
    (``grpc.aio.AbortError``)."""
    info = _status_info(exc, method)
    await context.abort(
        info.code,
        info.message,
        trailing_metadata=((_STATUS_DETAILS_KEY, _status_proto(info).SerializeToString()),),
    )
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


def error_layer(method: Method, step: Step) -> Step:
    """Answer every error raised inside with its status (see :func:`abort_with_error`)."""

    async def mapped(call: Call) -> Any:
        try:
            return await step(call)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with_error(call.context, exc, method=method.path)

    return mapped


def auth_layer(authenticator: Authenticator, *, exempt_prefixes: Sequence[str]) -> Layer:
    """Admit only calls whose bearer token may use the method, and each request message only
    in a namespace the token is granted. The token is checked before the request is parsed.
    Methods starting with one of ``exempt_prefixes`` (health, reflection) need no token."""
    exempt = tuple(exempt_prefixes)

    def layer(method: Method, step: Step) -> Step:
        if method.path.startswith(exempt):
            return step
        if method.path in ITEM_CHECKED_STREAMS:
            return _item_checked(authenticator, method, step)
        # A method missing from the table counts as a write, the stricter class.
        access = RPC_ACCESS.get(method.path, Access.WRITE)

        async def authorized(call: Call) -> Any:
            context = call.context
            try:
                grant = authenticator.admit(method.path, access, context.invocation_metadata())
            except (MissingToken, InvalidToken, ReadOnlyToken) as exc:
                log_denied(method.path, context.peer(), exc)
                raise

            def namespace_allowed(request: Any) -> None:
                check_namespace(method.path, context.peer(), grant, request)

            call.check_messages(namespace_allowed)
            return await _step_with(CALL_GRANT, grant, step, call)

        return authorized

    return layer


async def _step_with(var: ContextVar[T], value: T, step: Step, call: Call) -> Any:
    """Run ``step`` with ``var`` set to ``value`` (how the layers hand the servicer what they
    checked), and set it back after."""
    token = var.set(value)
    try:
        return await step(call)
    finally:
        var.reset(token)


def _item_checked(authenticator: Authenticator, method: Method, step: Step) -> Step:
    """A stream of calls (WriteService.Write): the token is checked when it opens, and each
    item's access and namespace, as its unary call's would be, by the servicer through
    :data:`~checkpointd.auth.ITEM_GATE` (S1)."""

    async def checked(call: Call) -> Any:
        context = call.context
        peer = context.peer()
        try:
            grant = authenticator.admit(method.path, Access.READ, context.invocation_metadata())
        except (MissingToken, InvalidToken) as exc:
            log_denied(method.path, peer, exc)
            raise

        def gate(item_method: str, request: Any) -> None:
            if (
                RPC_ACCESS.get(item_method, Access.WRITE) is Access.WRITE
                and grant.role is not Role.READ_WRITE
            ):
                refused = ReadOnlyToken(item_method.rsplit("/", 1)[-1], grant.name)
                log_denied(item_method, peer, refused)
                raise refused
            check_namespace(item_method, peer, grant, request)

        # The item tasks the servicer starts copy this context, and with it the gate.
        return await _step_with(ITEM_GATE, gate, step, call)

    return checked


def size_layer(max_message_bytes: int) -> Layer:
    """Refuse request messages larger than ``max_message_bytes`` (RESOURCE_EXHAUSTED, with a
    message naming the setting), below the transport's own, wider limit."""

    def check_size(request: Any) -> None:
        size = request.ByteSize()
        if size > max_message_bytes:
            raise MessageTooLarge(size, max_message_bytes)

    def layer(method: Method, step: Step) -> Step:
        if method.path in ITEM_CHECKED_STREAMS:
            # Each item is held to the limit as its own call by the servicer, so one oversize
            # item is answered alone instead of ending the stream that carries other callers'.
            return step

        async def sized(call: Call) -> Any:
            call.check_messages(check_size)
            return await step(call)

        return sized

    return layer


def store_gate_layer(is_open: Callable[[], bool], *, exempt_prefixes: Sequence[str]) -> Layer:
    """Answer calls UNAVAILABLE (STORE_UNAVAILABLE) until ``is_open()``, as for any store
    outage. Methods starting with one of ``exempt_prefixes`` (health, reflection) pass."""
    exempt = tuple(exempt_prefixes)

    def layer(method: Method, step: Step) -> Step:
        if method.path.startswith(exempt):
            return step

        async def gated(call: Call) -> Any:
            if not is_open():
                raise StoreUnavailable("the server is still waiting for its database to come up")
            return await step(call)

        return gated

    return layer


def server_layers(
    *,
    max_message_bytes: int,
    store_is_open: Callable[[], bool],
    exempt_prefixes: Sequence[str],
    authenticator: Authenticator | None,
    metrics: Metrics | None,
) -> tuple[Layer, ...]:
    """The server's layers, outermost first: metrics see the final status of every call; a
    caller without a valid token learns nothing else; the size and store checks come last."""
    layers: list[Layer] = []
    if metrics is not None:
        layers.append(metrics_layer(metrics))
    layers.append(error_layer)
    if authenticator is not None:
        layers.append(auth_layer(authenticator, exempt_prefixes=exempt_prefixes))
    layers.append(size_layer(max_message_bytes))
    layers.append(store_gate_layer(store_is_open, exempt_prefixes=exempt_prefixes))
    return tuple(layers)


# --- registration ----------------------------------------------------------------------------


class _ComposedGeneric(grpc.GenericRpcHandler):  # type: ignore[misc,unused-ignore]
    """A generic handler whose method handlers are composed with the layers, once each."""

    def __init__(self, inner: grpc.GenericRpcHandler, layers: tuple[Layer, ...]) -> None:
        self._inner = inner
        self._layers = layers
        self._composed: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        path: str = handler_call_details.method
        composed = self._composed.get(path)
        if composed is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # unknown methods are not remembered: callers choose their names
            composed = self._composed[path] = compose(path, handler, self._layers)
        return composed


class ComposingRegistrar:
    """Stands for the server in the generated ``add_*Servicer_to_server`` functions and
    registers each method's handler composed with ``layers`` (outermost first)."""

    def __init__(self, server: grpc.aio.Server, layers: tuple[Layer, ...]) -> None:
        self._server = server
        self._layers = layers

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        """Register generic handlers (the fallback for methods not registered by name)."""
        self._server.add_generic_rpc_handlers(
            tuple(_ComposedGeneric(handler, self._layers) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        """Register a service's method handlers, each composed once."""
        self._server.add_registered_method_handlers(
            service_name,
            {
                name: compose(f"/{service_name}/{name}", handler, self._layers)
                for name, handler in method_handlers.items()
            },
        )
