"""The blocking client's Write stream: the writes of every thread of one client share one
``WriteService.Write`` stream (contract S1). The rules are those of
:mod:`checkpointd_client._write_stream`; here a thread waits on a future, gRPC sends the
queued items from its own thread (every item queued while the previous message was being
written goes in the next, as one batch: contract S3), and a reader thread hands out the
answers. A stream that
stops answering is replaced as there (contract S2), under the owner's lock.
"""

from __future__ import annotations

import collections
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
    BATCH_MAX_ITEMS,
    Answer,
    Metadata,
    Queued,
    RoutedRpc,
    StreamUnsupported,
    UnaryCall,
    batch_limit,
    batch_of,
    deadline_passed,
    result_of,
    stopped_answering,
    stream_failure,
    stream_size,
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
        self.queue: queue.SimpleQueue[Queued | None] = queue.SimpleQueue()
        """The writes to send; None ends the requests."""
        self.pending: dict[int, futures.Future[Answer]] = {}
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
        # gRPC asks for the next message once the previous one is sent: every write queued
        # meanwhile goes in it (S3). No timer: a write to an idle stream leaves at once.
        carry: collections.deque[Queued] = collections.deque()
        limit: int | None = None  # from the headers, read once the first write is queued
        while True:
            if not carry:
                first = self.queue.get()
                if first is None:
                    return
                carry.append(first)
            if limit is None:
                limit = batch_limit(self.call.initial_metadata())
            while len(carry) < BATCH_MAX_ITEMS:
                try:
                    queued = self.queue.get_nowait()
                except queue.Empty:
                    break
                if queued is None:
                    return
                carry.append(queued)
            yield batch_of(carry, limit)

    def _answered(self, correlation_id: int, answer: Answer) -> None:
        with self.lock:
            future = self.pending.pop(correlation_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def _read(self) -> None:
        failure: BaseException | None = None
        try:
            for response in self.call:
                self._health.answered()
                with self.lock:
                    self.answers += 1
                if response.results:  # the answers to batched items (S3)
                    for result in response.results:
                        self._answered(result.correlation_id, result)
                else:
                    self._answered(response.correlation_id, response)
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
            size = self._streams(request, metadata)
            if size is None:
                return unary(request, timeout=timeout, metadata=metadata)
            try:
                return self._send(request, size, timeout)
            except StreamUnsupported:
                self.unsupported = True
                return unary(request, timeout=timeout, metadata=metadata)

        return cast(RoutedRpc, routed)

    def _streams(self, request: Message, metadata: Metadata) -> int | None:
        """The size of the request when this call goes on the stream: it may
        (:func:`stream_size`), the server has the stream, and one is open or may be opened
        now (S2); None when it goes unary."""
        if self.unsupported:
            return None
        size = stream_size(request, metadata, self._metadata)
        if size is None:
            return None
        stream = self._stream
        if (stream is not None and not stream.ended) or self.health.may_open():
            return size
        return None

    def _send(self, request: Message, size: int, timeout: float) -> Message:
        future: futures.Future[Answer] = futures.Future()
        with self._lock:
            stream = self._stream
            if stream is None or stream.ended:
                stub = write_service()[1].WriteServiceStub(self._channel())
                stream = self._stream = _Stream(stub, self._metadata, self._lock, self.health)
            correlation_id = next(self._ids)
            stream.pending[correlation_id] = future
            answers = stream.answers
            stream.queue.put((correlation_id, request, size))
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
