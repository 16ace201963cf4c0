"""The blocking client's Write stream: the writes of every thread of one client share one
``WriteService.Write`` stream (contract S1). The rules are those of
:mod:`checkpointd_client._write_stream`; here a thread waits on a future, gRPC sends the
queued items from its own thread, and a reader thread hands out the answers.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any, cast

import grpc
from google.protobuf.message import Message

from checkpointd_client._write_stream import (
    Metadata,
    RoutedRpc,
    StreamUnsupported,
    UnaryCall,
    deadline_passed,
    item_of,
    result_of,
    stream_failure,
    streamable,
    write_service,
)

if TYPE_CHECKING:
    from checkpointd_client.v1 import write_service_pb2

__all__ = ["WriteStream"]


class _Stream:
    """One open Write stream; ``lock`` is its owner's, guarding ``pending`` and ``ended``."""

    def __init__(
        self,
        stub: Any,
        metadata: Metadata,
        lock: threading.Lock,
    ) -> None:
        self.lock = lock
        self.queue: queue.SimpleQueue[write_service_pb2.WriteRequest | None] = queue.SimpleQueue()
        self.pending: dict[int, futures.Future[write_service_pb2.WriteResponse]] = {}
        self.ended = False
        self.call: Any = stub.Write(self._requests(), metadata=tuple(metadata))
        threading.Thread(target=self._read, name="checkpointd-write-stream", daemon=True).start()

    def _requests(self) -> Iterator[write_service_pb2.WriteRequest]:
        while (item := self.queue.get()) is not None:
            yield item

    def _read(self) -> None:
        failure: BaseException | None = None
        try:
            for response in self.call:
                with self.lock:
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
    breaks; ``route`` puts a write on it. Thread-safe."""

    def __init__(
        self, channel: Callable[[], Any], metadata: Metadata, *, enabled: bool = True
    ) -> None:
        self._channel = channel
        self._metadata = tuple(metadata)
        self._enabled = enabled
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
            if not streamable(request, metadata, self._metadata) or self.unsupported:
                return unary(request, timeout=timeout, metadata=metadata)
            try:
                return self._send(request, timeout)
            except StreamUnsupported:
                self.unsupported = True
                return unary(request, timeout=timeout, metadata=metadata)

        return cast(RoutedRpc, routed)

    def _send(self, request: Message, timeout: float) -> Message:
        future: futures.Future[write_service_pb2.WriteResponse] = futures.Future()
        with self._lock:
            stream = self._stream
            if stream is None or stream.ended:
                stub = write_service()[1].WriteServiceStub(self._channel())
                stream = self._stream = _Stream(stub, self._metadata, self._lock)
            correlation_id = next(self._ids)
            stream.pending[correlation_id] = future
            stream.queue.put(item_of(correlation_id, request))
        try:
            response = future.result(timeout)
        except futures.TimeoutError:
            with self._lock:
                stream.pending.pop(correlation_id, None)
            raise deadline_passed() from None
        return result_of(response, request)

    def close(self) -> None:
        """End the stream (the channel's close cancels what is in flight)."""
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.queue.put(None)
            stream.call.cancel()
