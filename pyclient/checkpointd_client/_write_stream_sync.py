"""The blocking client's Write stream: the writes of every thread of one client share one
``WriteService.Write`` stream (contract S1). The rules are those of
:mod:`checkpointd_client._write_stream`; here a thread waits on a future, gRPC sends the
queued items from its own thread, and a reader thread hands out the answers. A stream that
stops answering is replaced as there (contract S2), under the owner's lock.
"""

from __future__ import annotations

import contextvars
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any, cast

import grpc
from google.protobuf.message import Message

from checkpointd_client._stream_health import StreamHealth
from checkpointd_client._write_stream import (
    Metadata,
    RoutedRpc,
    StreamUnsupported,
    UnaryCall,
    deadline_passed,
    item_of,
    result_of,
    stopped_answering,
    stream_failure,
    streamable,
    write_service,
)

if TYPE_CHECKING:
    from checkpointd_client.v1 import write_service_pb2

__all__ = ["WriteStream"]


class _Stream:
    """One open Write stream; ``lock`` is its owner's, guarding ``pending``, ``ended`` and
    ``answers``."""

    def __init__(
        self,
        stub: Any,
        metadata: Metadata,
        lock: threading.Lock,
        health: StreamHealth,
    ) -> None:
        self.lock = lock
        self.queue: queue.SimpleQueue[write_service_pb2.WriteRequest | None] = queue.SimpleQueue()
        self.pending: dict[int, futures.Future[write_service_pb2.WriteResponse]] = {}
        self.ended = False
        self.answers = 0
        """Answers received: an item timed out with none since it was sent marks the stream."""
        self._health = health
        # Opened in an empty context: grpc consumes the request iterator on a thread of its own
        # in a copy of the caller's contextvars, which would keep what they hold alive for as
        # long as the stream (fastaiagent's current checkpointer: this stream's owner, never
        # freed then, and drained by fastaiagent at every disconnect).
        self.call: Any = contextvars.Context().run(
            stub.Write, self._requests(), metadata=tuple(metadata)
        )
        threading.Thread(target=self._read, name="checkpointd-write-stream", daemon=True).start()

    def abandon(self, error: BaseException) -> None:
        """Fail every unanswered item with ``error`` and cancel the stream: nothing useful
        is left on it. Called under ``lock``."""
        self.ended = True
        unanswered = list(self.pending.values())
        self.pending.clear()
        self.queue.put(None)
        for future in unanswered:
            if not future.done():
                future.set_exception(error)
        self.call.cancel()

    def _requests(self) -> Iterator[write_service_pb2.WriteRequest]:
        while (item := self.queue.get()) is not None:
            yield item

    def _read(self) -> None:
        failure: BaseException | None = None
        try:
            for response in self.call:
                self._health.answered()
                with self.lock:
                    self.answers += 1
                    future = self.pending.pop(response.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(response)
        except grpc.RpcError as exc:
            failure = exc
        finally:
            with self.lock:
                self.ended = True
                unanswered = list(self.pending.values())
                self.pending.clear()
            self.queue.put(None)
            error = stream_failure(failure)
            for future in unanswered:
                if not future.done():
                    future.set_exception(error)


class WriteStream:
    """The Write stream of one blocking client, opened on the first write and again after it
    breaks or stops answering; ``route`` puts a write on it. Thread-safe."""

    def __init__(
        self,
        channel: Callable[[], Any],
        metadata: Metadata,
        *,
        enabled: bool = True,
        health: StreamHealth | None = None,
    ) -> None:
        self._channel = channel
        self._metadata = tuple(metadata)
        self._enabled = enabled
        self.health = health if health is not None else StreamHealth()
        """When the next stream may open after streams that stopped answering (S2)."""
        self._lock = threading.Lock()
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        self.unsupported = False
        """Whether the server answered UNIMPLEMENTED: every write goes unary from then on."""

    def route(self, rpc: RoutedRpc) -> RoutedRpc:
        """``rpc`` (a unary multicallable) as it is called by the client's retry loop, sent
        over the stream when it can be, unary otherwise."""
        if not self._enabled:
            return rpc
        # Called as the multicallable would be: (request, *, timeout, metadata).
        unary = cast(UnaryCall, rpc)

        def routed(request: Message, *, timeout: float, metadata: Metadata) -> Any:
            if not self._streams(request, metadata):
                return unary(request, timeout=timeout, metadata=metadata)
            try:
                return self._send(request, timeout)
            except StreamUnsupported:
                self.unsupported = True
                return unary(request, timeout=timeout, metadata=metadata)

        return cast(RoutedRpc, routed)

    def _streams(self, request: Message, metadata: Metadata) -> bool:
        """Whether this call goes on the stream: it may (:func:`streamable`), the server has
        the stream, and one is open or may be opened now (S2)."""
        if self.unsupported or not streamable(request, metadata, self._metadata):
            return False
        stream = self._stream
        return (stream is not None and not stream.ended) or self.health.may_open()

    def _send(self, request: Message, timeout: float) -> Message:
        future: futures.Future[write_service_pb2.WriteResponse] = futures.Future()
        with self._lock:
            stream = self._stream
            if stream is None or stream.ended:
                stub = write_service()[1].WriteServiceStub(self._channel())
                stream = self._stream = _Stream(stub, self._metadata, self._lock, self.health)
            correlation_id = next(self._ids)
            stream.pending[correlation_id] = future
            answers = stream.answers
            stream.queue.put(item_of(correlation_id, request))
        try:
            response = future.result(timeout)
        except futures.TimeoutError:
            with self._lock:
                stream.pending.pop(correlation_id, None)
                if stream.answers == answers:  # not one answer since this item left: stuck
                    self._stopped_answering(stream)
            raise deadline_passed() from None
        return result_of(response, request)

    def _stopped_answering(self, stream: _Stream) -> None:
        """Replace a stream that stopped answering (under the lock): new writes and the
        retries of its unanswered items (same request ids) go to a fresh stream, or unary
        while :attr:`health` holds streams back; the stream itself is cancelled."""
        if stream.ended:
            return  # it broke or was replaced meanwhile
        if self._stream is stream:
            self._stream = None
        self.health.stopped_answering()
        stream.abandon(stopped_answering())

    def close(self) -> None:
        """End the stream (the channel's close cancels what is in flight)."""
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.queue.put(None)
            stream.call.cancel()
