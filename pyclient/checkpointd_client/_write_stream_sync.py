"""The blocking client's Write stream: the writes of every thread of one client share one
``WriteService.Write`` stream (contract S1). The rules are those of
:mod:`checkpointd_client._write_stream`; here a thread waits on a :class:`_Slot`, gRPC sends
the queued items from its own thread (every item queued while the previous message was being
written goes in the next, as one batch: contract S3), and a reader thread hands out the
answers. A stream that stops answering is replaced as there (contract S2), under the owner's
lock, and a write of a kind the stream's headers do not list goes unary as there (contract S4).

A slot is one lock, released by the reader with the answer: a ``concurrent.futures.Future``
would cost a Condition, its waiter lock and a notify_all on every write. The answers are read
by a thread of their own rather than by a waiting caller because gRPC's blocking ``next()``
takes no timeout: a caller reading for the others could not leave at its own deadline while
the stream answers them (a reply lost on a live stream, contract S2), short of cancelling a
stream that works.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import grpc
from google.protobuf.message import Message

from checkpointd_client._stream_health import StreamHealth
from checkpointd_client._write_stream import (
    EVERY_KIND,
    ITEM_FIELDS,
    Answer,
    KindNotTaken,
    Metadata,
    Queued,
    RoutedRpc,
    StreamUnsupported,
    UnaryCall,
    batch_limit,
    batch_of,
    deadline_passed,
    goes_behind,
    kinds_ordered,
    kinds_taken,
    refuse_kinds,
    result_of,
    stopped_answering,
    stream_failure,
    stream_size,
    write_service,
)

if TYPE_CHECKING:
    from checkpointd_client.v1 import write_service_pb2

__all__ = ["InFlight", "WriteStream"]


class _Slot:
    """Where one waiting call gets its answer, or the error it fails with. Whoever takes the
    slot out of ``_Stream.pending`` (under the stream's lock) fills it, once."""

    __slots__ = ("_ready", "answer", "error")

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()  # held until filled: the waiter blocks on it
        self.answer: Answer | None = None
        self.error: BaseException | None = None

    def set(self, answer: Answer) -> None:
        self.answer = answer
        self._ready.release()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._ready.release()

    def wait(self, timeout: float) -> bool:
        """Block until filled or ``timeout`` seconds pass; whether it was filled."""
        return self._ready.acquire(timeout=timeout)


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
        self.pending: dict[int, _Slot] = {}
        self.ended = False
        self.answers = 0
        """Answers received: an item timed out with none since it was sent marks the stream."""
        self.kinds: frozenset[str] | None = None
        """The kinds of item the stream takes (S4), once its headers came."""
        self.ordered: frozenset[str] = frozenset()
        """The kinds it applies in order per thread (S5), once its headers came."""
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
        for slot in unanswered:
            slot.fail(error)
        self.call.cancel()

    def _requests(self) -> Iterator[write_service_pb2.WriteRequest]:
        # gRPC asks for the next message once the previous one is sent: every write queued
        # meanwhile goes in it (S3, batch_of's limits). No timer: a write to an idle stream
        # leaves at once. Only this thread takes from the queue, so empty() is exact here,
        # and cheaper than get_nowait() raising queue.Empty at the end of every drain.
        get, empty = self.queue.get, self.queue.empty
        carry: collections.deque[Queued] = collections.deque()
        limit: int | None = None  # from the headers, read once the first write is queued
        kinds = EVERY_KIND
        every = True  # whether the stream takes every kind (no check per item)
        while True:
            if not carry:
                first = get()
                if first is None:
                    return
                carry.append(first)
            if limit is None:
                headers = self.call.initial_metadata()
                limit = batch_limit(headers)
                self.ordered = kinds_ordered(headers)
                kinds = self.kinds = kinds_taken(headers)
                every = kinds >= EVERY_KIND
            while not empty():
                queued = get()
                if queued is None:
                    return
                carry.append(queued)
            if not every:  # writes of kinds the server does not take go unary (S4)
                self._refuse(refuse_kinds(carry, kinds))
                if not carry:
                    continue
            yield batch_of(carry, limit)

    def _refuse(self, correlation_ids: list[int]) -> None:
        """Hand writes the stream does not take back to their callers, to send unary."""
        with self.lock:
            refused = [self.pending.pop(id_, None) for id_ in correlation_ids]
        for slot in refused:
            if slot is not None:
                slot.fail(KindNotTaken())

    def _read(self) -> None:
        failure: BaseException | None = None
        lock, pending, answered = self.lock, self.pending, self._health.answered
        try:
            for response in self.call:
                answered()
                results = response.results
                # One lock round per message, the slots filled outside it.
                with lock:
                    self.answers += 1
                    if results:  # the answers to batched items (S3)
                        taken = [(pending.pop(r.correlation_id, None), r) for r in results]
                    else:
                        taken = [(pending.pop(response.correlation_id, None), response)]
                for slot, answer in taken:
                    if slot is not None:
                        slot.set(answer)
        except grpc.RpcError as exc:
            failure = exc
        finally:
            with lock:
                self.ended = True
                unanswered = list(pending.values())
                pending.clear()
            self.queue.put(None)
            error = stream_failure(failure)
            for slot in unanswered:
                slot.fail(error)


class InFlight:
    """A write on the stream whose answer may still be coming."""

    __slots__ = ("_answers", "_correlation_id", "_owner", "_request", "_slot", "_stream")

    def __init__(
        self,
        owner: WriteStream,
        stream: _Stream,
        slot: _Slot,
        correlation_id: int,
        answers: int,
        request: Message,
    ) -> None:
        self._owner = owner
        self._stream = stream
        self._slot = slot
        self._correlation_id = correlation_id
        self._answers = answers
        self._request = request

    def done(self) -> bool:
        """Whether the answer (or the error) is in."""
        return self._slot.answer is not None or self._slot.error is not None

    def result(self, timeout: float) -> Message:
        """The answer, waited for at most ``timeout`` seconds: the unary call's response, or
        its error raised (``DEADLINE_EXCEEDED`` when no answer came in time, S2). Once."""
        slot, stream, owner = self._slot, self._stream, self._owner
        if not slot.wait(timeout):
            with owner._lock:
                if stream.pending.pop(self._correlation_id, None) is not None:
                    if stream.answers == self._answers:  # no answer since this item left: stuck
                        owner._stopped_answering(stream)
                    raise deadline_passed()
            # Taken out just now by the reader, or by a stream that failed: it is being filled.
            # An answer that made it is the call's result; a failure is the deadline's.
            slot.wait(-1)
            if slot.error is not None:
                raise deadline_passed() from None
        if slot.error is not None:
            raise slot.error
        return result_of(cast("Answer", slot.answer), self._request)


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
            except KindNotTaken:
                return unary(request, timeout=timeout, metadata=metadata)
            except StreamUnsupported:
                self.unsupported = True
                return unary(request, timeout=timeout, metadata=metadata)

        return cast(RoutedRpc, routed)

    def _streams(self, request: Message, metadata: Metadata) -> int | None:
        """The size of the request when this call goes on the stream: it may
        (:func:`stream_size`), the server has the stream, and one is open (that takes its
        kind, S4, as far as its headers said yet) or may be opened now (S2); None when it
        goes unary."""
        if self.unsupported:
            return None
        size = stream_size(request, metadata, self._metadata)
        if size is None:
            return None
        stream = self._stream
        if stream is not None and not stream.ended:
            kinds = stream.kinds
            return size if kinds is None or ITEM_FIELDS[type(request)] in kinds else None
        return size if self.health.may_open() else None

    def _send(self, request: Message, size: int, timeout: float) -> Message:
        return self._enqueue(request, size).result(timeout)

    def begin(self, request: Message, metadata: Metadata) -> InFlight | None:
        """Put ``request`` on the stream and return at once, its answer to come
        (:meth:`InFlight.result`); None when it goes unary (:meth:`route`'s rule), for the
        caller to send itself."""
        if not self._enabled:
            return None
        size = self._streams(request, metadata)
        return None if size is None else self._enqueue(request, size)

    def begin_after(
        self, previous: InFlight, request: Message, metadata: Metadata
    ) -> InFlight | None:
        """Put ``request`` on the stream behind ``previous``, an unanswered item of the same
        thread, when the server then applies it only once ``previous`` is stored (S5): the
        same stream, still open, that orders this kind. None otherwise: wait for
        ``previous``, then send."""
        size = self._streams(request, metadata) if self._enabled else None
        if size is None:
            return None
        with self._lock:
            stream = previous._stream
            if not goes_behind(stream, self._stream, previous._correlation_id, request):
                return None
            return self._put(stream, request, size)

    def _enqueue(self, request: Message, size: int) -> InFlight:
        with self._lock:
            stream = self._stream
            if stream is None or stream.ended:
                stub = write_service()[1].WriteServiceStub(self._channel())
                stream = self._stream = _Stream(stub, self._metadata, self._lock, self.health)
            return self._put(stream, request, size)

    def _put(self, stream: _Stream, request: Message, size: int) -> InFlight:
        """Queue ``request`` on ``stream`` (under the lock)."""
        slot = _Slot()
        correlation_id = next(self._ids)
        stream.pending[correlation_id] = slot
        stream.queue.put((correlation_id, request, size))
        return InFlight(self, stream, slot, correlation_id, stream.answers, request)

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
