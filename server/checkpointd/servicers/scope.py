"""What every RPC checks before its own fields: the namespace it acts in (N1) and, for a
retriable write, the request id it is remembered by (C9) and the fingerprint that tells a
retry of it from a reuse of that id (C10).

Checked here once, by the decorator around each handler, so every handler checks them first
and in the same order (the first bad field is the one refused), and every write is
fingerprinted under its own RPC's name. The call's context stays in the decorator: the
handlers it wraps do not use it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypedDict, TypeVar, cast

import grpc
from google.protobuf.message import Message

from checkpointd import validation as v
from checkpointd.fingerprint import fingerprint

__all__ = ["Rpc", "WriteArgs", "WriteKey", "namespaced", "retriable"]


class _Namespaced(Protocol):
    """A request that names its namespace."""

    @property
    def namespace(self) -> str: ...


class _Retriable(_Namespaced, Protocol):
    """A write request that may carry a request id."""

    @property
    def request_id(self) -> str: ...


S = TypeVar("S")
R = TypeVar("R")
N = TypeVar("N", bound=_Namespaced)
W = TypeVar("W", bound=_Retriable)

#: A handler as gRPC calls it; the console and the Write stream call it too (the console
#: without a call context).
Rpc: TypeAlias = Callable[[S, N, grpc.aio.ServicerContext[Any, Any] | None], Coroutine[Any, Any, R]]


class WriteArgs(TypedDict):
    """A :class:`WriteKey` as the store's remembered writes take it, by keyword."""

    namespace: str
    request_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class WriteKey:
    """A retriable write's namespace, request id and fingerprint: what the store remembers
    the write by, so that a retry is answered with the first result (C9, C10)."""

    namespace: str
    request_id: str
    """Empty when the request has none: nothing is remembered."""
    fingerprint: str
    """Empty when the request has no request id."""

    @property
    def args(self) -> WriteArgs:
        """The key as every remembered store write takes it: ``store.write(..., **key.args)``."""
        return WriteArgs(
            namespace=self.namespace, request_id=self.request_id, fingerprint=self.fingerprint
        )


def namespaced(handler: Callable[[S, N, str], Awaitable[R]]) -> Rpc[S, N, R]:
    """The RPC whose handler is given the request's validated namespace."""

    @functools.wraps(handler)
    async def rpc(self: S, request: N, context: grpc.aio.ServicerContext[Any, Any] | None) -> R:
        return await handler(self, request, v.namespace(request.namespace))

    return rpc


def retriable(handler: Callable[[S, W, WriteKey], Awaitable[R]]) -> Rpc[S, W, R]:
    """The RPC whose handler is given the request's :class:`WriteKey`: its namespace and
    request id validated, its fingerprint taken under the handler's name (the RPC's)."""
    method = handler.__name__

    @functools.wraps(handler)
    async def rpc(self: S, request: W, context: grpc.aio.ServicerContext[Any, Any] | None) -> R:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        # Every request is a message; the protocol above only names the fields read here.
        key = WriteKey(namespace, request_id, fingerprint(method, cast(Message, request)))
        return await handler(self, request, key)

    return rpc
