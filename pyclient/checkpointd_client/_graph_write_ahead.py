"""A graph write sent on the blocking client's Write stream ahead of its answer, for the
pipelining LangGraph saver (contract G22). The answer is waited for later, with the
client's deadline counted from the send and its retries: a write the stream lost is sent
again with the same request id (S1), as :meth:`CheckpointdClient.call_graph` sends it.

Kept apart from the clients, the blocking one being generated from the asyncio one
(tools/unasync.py): :class:`GraphWrite` serves the blocking saver, :class:`AsyncGraphWrite`
the asyncio one, and both lose a write to the stream by one rule (:func:`_not_sent_again`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import grpc

from checkpointd_client._async_client import AsyncCheckpointdClient
from checkpointd_client._sync_client import _STREAMED_GRAPH_METHODS, CheckpointdClient
from checkpointd_client._write_stream import AsyncInFlight, KindNotTaken, StreamUnsupported
from checkpointd_client._write_stream_sync import InFlight
from checkpointd_client.errors import CheckpointdError, UnavailableError

__all__ = [
    "AsyncGraphWrite",
    "GraphWrite",
    "abegin_graph_write",
    "begin_graph_write",
    "begin_graph_write_after",
]

#: What the stream losing a write raises: sent again unless a resend is not allowed.
_LOST = (UnavailableError, KindNotTaken, StreamUnsupported)


def begin_graph_write(client: CheckpointdClient, method: str, request: Any) -> GraphWrite:
    """Send a ``PutGraphCheckpoint`` or ``PutGraphWrites`` request on ``client``'s Write
    stream and return without waiting for its answer (:meth:`GraphWrite.result` waits). A
    write that cannot go on the stream (S4) is sent unary at once, answered on return."""
    _check_method(method)
    core = client._core
    deadline = core.deadline(None)
    in_flight = None if client._closed else client._writes.begin(request, core.call_metadata(()))
    if in_flight is None:  # unary (or a closed client, which call_graph refuses)
        return GraphWrite(
            client, method, request, deadline, answer=client.call_graph(method, request)
        )
    return GraphWrite(client, method, request, deadline, in_flight=in_flight)


#: The client a write is sent on, and what it sent it as.
Client = TypeVar("Client", CheckpointdClient, AsyncCheckpointdClient)
Sent = TypeVar("Sent", InFlight, AsyncInFlight)


class _SentAhead(Generic[Client, Sent]):
    """What a graph write sent ahead keeps: its request and deadline (to send it again),
    and its answer once in; one waiter at a time (``_lock``, of the client's kind)."""

    __slots__ = (
        "_answer",
        "_client",
        "_deadline",
        "_error",
        "_in_flight",
        "_lock",
        "_method",
        "_request",
    )

    #: Makes the lock that lets one caller wait while the others read what it got.
    _new_lock: ClassVar[Callable[[], Any]]

    def __init__(
        self,
        client: Client,
        method: str,
        request: Any,
        deadline: float,
        *,
        in_flight: Sent | None = None,
        answer: Any = None,
    ) -> None:
        self._client: Client = client
        self._method = method
        self._request = request
        self._deadline = deadline
        self._in_flight: Sent | None = in_flight
        self._answer = answer
        self._error: CheckpointdError | None = None
        self._lock = type(self)._new_lock()

    def done(self) -> bool:
        """Whether its answer (or error) is in: :meth:`result` would not wait."""
        return self._in_flight is None or self._in_flight.done()

    def _outcome(self) -> Any:
        """The answer, or its error raised."""
        if self._error is not None:
            raise self._error
        return self._answer


class GraphWrite(_SentAhead[CheckpointdClient, InFlight]):
    """A graph write sent ahead of its answer on the blocking client."""

    __slots__ = ()
    _new_lock = threading.Lock

    def result(self, *, resend: bool = True) -> Any:
        """The response, once the write is durable; its error raised. A write the stream lost
        (it broke, or does not take the kind) is sent again with the same request id, as a
        :meth:`CheckpointdClient.call_graph` call within what is left of the deadline, unless
        ``resend`` is False (the loss is raised: a checkpoint whose parent was not stored must
        not be sent again, S5). Called again, it answers (or raises) the same at once."""
        with self._lock:
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:
                try:
                    self._answer = self._wait(in_flight, resend)
                except CheckpointdError as exc:
                    self._error = exc
        return self._outcome()

    def _wait(self, in_flight: InFlight, resend: bool) -> Any:
        core = self._client._core
        try:
            return in_flight.result(core.remaining(self._deadline))
        except _LOST as exc:
            if not resend:
                if isinstance(exc, CheckpointdError):
                    raise
                raise _not_sent_again() from exc
            # Sent again: the request id makes it a retry (S1, S4). A deadline that has passed
            # still gets one attempt's minimum, so the error is the server's or the deadline's.
            timeout = max(core.remaining(self._deadline), 0.001)
            return self._client.call_graph(self._method, self._request, timeout=timeout)


async def abegin_graph_write(
    client: AsyncCheckpointdClient, method: str, request: Any
) -> AsyncGraphWrite:
    """:func:`begin_graph_write` on the asyncio client: a write that cannot go on the
    stream is sent unary and awaited here."""
    _check_method(method)
    core = client._core
    deadline = core.deadline(None)
    in_flight = None if client._closed else client._writes.begin(request, core.call_metadata(()))
    if in_flight is None:
        answer = await client.call_graph(method, request)
        return AsyncGraphWrite(client, method, request, deadline, answer=answer)
    return AsyncGraphWrite(client, method, request, deadline, in_flight=in_flight)


class AsyncGraphWrite(_SentAhead[AsyncCheckpointdClient, AsyncInFlight]):
    """A graph write sent ahead of its answer on the asyncio client (as :class:`GraphWrite`)."""

    __slots__ = ()
    _new_lock = asyncio.Lock

    async def result(self, *, resend: bool = True) -> Any:
        """As :meth:`GraphWrite.result`, awaited."""
        async with self._lock:
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:
                try:
                    self._answer = await self._wait(in_flight, resend)
                except CheckpointdError as exc:
                    self._error = exc
        return self._outcome()

    async def _wait(self, in_flight: AsyncInFlight, resend: bool) -> Any:
        core = self._client._core
        try:
            return await in_flight.result(core.remaining(self._deadline))
        except _LOST as exc:
            if not resend:
                if isinstance(exc, CheckpointdError):
                    raise
                raise _not_sent_again() from exc
            timeout = max(core.remaining(self._deadline), 0.001)  # as GraphWrite's
            return await self._client.call_graph(self._method, self._request, timeout=timeout)


def _check_method(method: str) -> None:
    if method not in _STREAMED_GRAPH_METHODS:
        raise ValueError(f"only {sorted(_STREAMED_GRAPH_METHODS)} are sent ahead of an answer")


def _not_sent_again() -> UnavailableError:
    """The error of a write the stream handed back to send unary (S4) that must not be sent
    again (S5)."""
    return UnavailableError(
        "the write stream did not take this write; it was not sent again",
        code=grpc.StatusCode.UNAVAILABLE,
    )


#: A write sent ahead on either client.
Ahead = TypeVar("Ahead", "GraphWrite", "AsyncGraphWrite")


def begin_graph_write_after(previous: Ahead, request: Any) -> Ahead | None:
    """Send a ``PutGraphCheckpoint`` request behind ``previous``, the thread's checkpoint
    before it, still unanswered on the stream that applies a thread's checkpoints in order
    (S5), on the client ``previous`` went on: the server stores it only once ``previous`` is
    stored. None when it cannot be sent so (``previous`` answered, its stream gone, a server
    that does not order): wait for ``previous``, then :func:`begin_graph_write` (or
    :func:`abegin_graph_write`). It never waits, on either client."""
    in_flight, client = previous._in_flight, previous._client
    if in_flight is None or client._closed:
        return None
    core = client._core
    deadline = core.deadline(None)
    behind = client._writes.begin_after(in_flight, request, core.call_metadata(()))
    if behind is None:
        return None
    return type(previous)(client, "PutGraphCheckpoint", request, deadline, in_flight=behind)
