"""Cross-cutting RPC behaviour: the request size limit and the mapping of errors to statuses,
and the composition of every cross-cutting layer with each method's handler.

Servicers raise domain errors; this is the single place that turns them into gRPC statuses
carrying a ``google.rpc.ErrorInfo`` (see :mod:`checkpointd.errors`). An unexpected exception
is logged with its traceback and answered ``INTERNAL`` with an incident id, never with the
exception text (which could hold SQL or paths).

The layers (metrics, authentication, this guard, the store gate) are :class:`Layer` objects:
each wraps one method's handler. :class:`ComposingRegistrar` applies them once per method,
when the services are registered, instead of as ``grpc.aio`` interceptors, which run their
whole chain and build new handler objects on every call. Each layer is still usable as a
server interceptor (``intercept_service`` wraps the handler it is given).
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, cast

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from checkpointd.errors import (
    ERROR_DOMAIN,
    MalformedRequest,
    MessageTooLarge,
    StatusInfo,
    status_for,
)

__all__ = [
    "ComposingRegistrar",
    "Layer",
    "LayerInterceptor",
    "RequestGuardInterceptor",
    "abort_with_error",
]

log = logging.getLogger(__name__)

_STATUS_DETAILS_KEY = "grpc-status-details-bin"

#: The context of a call, whatever its messages: a layer wraps every method alike.
Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:  # grpc.RpcMethodHandler is generic only to the type checker
    #: A method's handler, whatever its messages.
    MethodHandler: TypeAlias = grpc.RpcMethodHandler[Any, Any]

Handler = Callable[[Any, Context], Awaitable[Any]]


def behaviour(function: Callable[..., object]) -> Callable[[Any, Context], Any]:
    """A handler's function as the asyncio server runs it. grpc's stubs describe the
    blocking server's (a plain function of a ``grpc.ServicerContext``); under ``grpc.aio``
    it takes an asyncio context and returns an awaitable or an async generator."""
    return cast("Callable[[Any, Context], Any]", function)


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """A request whose bytes did not parse. gRPC would answer such a call ``UNKNOWN`` with
    the parser's exception text; the guard answers it ``INVALID_ARGUMENT`` instead."""

    message_type: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """Wrap a request deserializer so that bytes that do not parse become :class:`_Undecodable`."""
    if deserializer is None:
        return None
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    message_type = str(getattr(descriptor, "full_name", "request"))

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:  # DecodeError, or anything else the parser raises on bad bytes
            return _Undecodable(message_type)

    return parse


async def _abort(context: Context, info: StatusInfo) -> None:
    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.ErrorInfo(reason=info.reason, domain=ERROR_DOMAIN, metadata=info.metadata)
    )
    status = status_pb2.Status(code=info.code.value[0], message=info.message, details=[detail])
    await context.abort(
        info.code,
        info.message,
        trailing_metadata=((_STATUS_DETAILS_KEY, status.SerializeToString()),),
    )


async def abort_with_error(context: Context, exc: BaseException, *, method: str) -> NoReturn:
    """End an RPC with the status of ``exc``, exactly as the request guard does for unary
    handlers: the table's code and ErrorInfo reason, or INTERNAL with an incident id logged
    with the traceback. Streaming handlers call it themselves (the guard only maps the errors
    of unary handlers). Always raises (``grpc.aio.AbortError``)."""
    info = status_for(exc)
    if info is None:
        incident = uuid.uuid4().hex[:12]
        log.error("internal error in %s (incident %s)", method, incident, exc_info=exc)
        info = StatusInfo(
            grpc.StatusCode.INTERNAL,
            "INTERNAL",
            f"internal error (incident {incident}); see the server log",
            {"incident": incident},
        )
    await _abort(context, info)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


class Layer(Protocol):
    """One cross-cutting behaviour: wraps the handler of ``method`` (called once per method)."""

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler: ...


class LayerInterceptor(grpc.aio.ServerInterceptor):
    """A :class:`Layer` used as a server interceptor (the handler is wrapped on each call)."""

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self.wrap(handler_call_details.method, handler)


def _compose(layers: tuple[Layer, ...], method: str, handler: MethodHandler) -> MethodHandler:
    for layer in reversed(layers):  # the first layer ends up outermost
        handler = layer.wrap(method, handler)
    return handler


class _ComposedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose method handlers are composed with the layers, once each."""

    def __init__(self, inner: grpc.GenericRpcHandler, layers: tuple[Layer, ...]) -> None:
        self._inner = inner
        self._layers = layers
        self._composed: dict[str, MethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        composed = self._composed.get(method)
        if composed is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # unknown methods are not remembered: callers choose their names
            composed = self._composed[method] = _compose(self._layers, method, handler)
        return composed


class ComposingRegistrar:
    """Stands for the server in the generated ``add_*Servicer_to_server`` functions and
    registers each method's handler composed with ``layers`` (outermost first), so a call
    runs the layers without any per-call interceptor machinery."""

    def __init__(self, server: grpc.aio.Server, layers: tuple[Layer, ...]) -> None:
        self._server = server
        self._layers = layers

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        """Register generic handlers (the fallback for methods not registered by name)."""
        self._server.add_generic_rpc_handlers(
            tuple(_ComposedGeneric(handler, self._layers) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, MethodHandler]
    ) -> None:
        """Register a service's method handlers, each composed once."""
        self._server.add_registered_method_handlers(
            service_name,
            {
                name: _compose(self._layers, f"/{service_name}/{name}", handler)
                for name, handler in method_handlers.items()
            },
        )


class RequestGuardInterceptor(LayerInterceptor):
    """Refuses oversize requests and maps every error raised by a unary handler."""

    def __init__(self, *, max_message_bytes: int) -> None:
        self._max_message_bytes = max_message_bytes

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler:
        """Guard a unary or server-streaming handler; others pass unchanged."""
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._guard_stream(method, handler.unary_stream, self._max_message_bytes),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._guard(method, behaviour(handler.unary_unary)),
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    @staticmethod
    def _guard_stream(method: str, inner: Callable[..., Any], limit: int) -> Handler:
        """Answer an undecodable stream request INVALID_ARGUMENT and an oversize one
        RESOURCE_EXHAUSTED, as for unary calls; run the others as they are."""

        async def guarded(request: Any, context: Context) -> None:
            if isinstance(request, _Undecodable):
                await abort_with_error(
                    context, MalformedRequest(request.message_type), method=method
                )
            size = request.ByteSize()
            if size > limit:
                await abort_with_error(context, MessageTooLarge(size, limit), method=method)
            result = inner(request, context)
            if inspect.isasyncgen(result):
                async for response in result:
                    await context.write(response)
            else:
                await result

        return guarded

    def _guard(self, method: str, inner: Handler) -> Handler:
        limit = self._max_message_bytes

        async def guarded(request: Message | _Undecodable, context: Context) -> Any:
            try:
                if isinstance(request, _Undecodable):
                    raise MalformedRequest(request.message_type)
                size = request.ByteSize()
                if size > limit:
                    raise MessageTooLarge(size, limit)
                return await inner(request, context)
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                info = status_for(exc)
                if info is None:
                    incident = uuid.uuid4().hex[:12]
                    log.exception("internal error in %s (incident %s)", method, incident)
                    info = StatusInfo(
                        grpc.StatusCode.INTERNAL,
                        "INTERNAL",
                        f"internal error (incident {incident}); see the server log",
                        {"incident": incident},
                    )
                await _abort(context, info)

        return guarded
