"""The asyncio client's Write stream: every concurrent write of one client shares one
``WriteService.Write`` stream (contract S1).

A write is queued on the open stream at once (no timer: the first write after an idle
moment leaves immediately) and answered when the server's answer with its correlation id
arrives, in whatever order. Every write queued while the previous message was being written
leaves in the next message, as one batch (``WriteRequest.items``, contract S3; at most
:data:`BATCH_MAX_ITEMS` items and about :data:`BATCH_MAX_BYTES`), so grpc.aio's cost per
message is paid once per batch, and the server hands the batch to its store's group commit
together and answers it in one message. A server that does not say in its headers that it
takes batches (:data:`BATCH_HEADER`) gets one item per message. The graph writes
(PutGraphCheckpoint, PutGraphWrites) go on the stream only when its headers list their kinds
(:data:`KINDS_HEADER`, contract S4): an item of a kind a server does not take goes unary.

A stream that breaks fails the writes it had not answered with ``UnavailableError``; the
client's retry loop sends them again, with the same request ids and claim tokens, on a new
stream, so nothing is written twice. A stream that stops answering while its connection
stays up (contract S2) is found out by the first item whose deadline passes with no answer
on the stream since it was sent: that call ends ``DEADLINE_EXCEEDED`` as it must, the
stream's other unanswered items fail with ``UnavailableError`` (sent again, same ids, on a
fresh stream or unary), the stream is cancelled, and :class:`StreamHealth` decides when the
next stream may open; until then writes go unary. A server without the stream (``UNIMPLEMENTED``) is
remembered: this client uses the unary calls from then on. Calls with metadata of their own
go unary too, since a stream carries one set of metadata, and so do requests above 1 MiB.

A pipelining LangGraph saver (G22) puts a write on the stream with :meth:`AsyncWriteStream.begin`
and waits for its answer later (:class:`AsyncInFlight`); :meth:`AsyncWriteStream.begin_after`
puts a thread's next checkpoint behind its unanswered one only on the same stream, and only
when the stream's headers list the kind as applied in order (:data:`ORDERED_HEADER`, S5).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeVar, Union, cast

import grpc
from google.protobuf.message import Message

from checkpointd_client._stream_health import StreamHealth
from checkpointd_client.errors import (
    DeadlineExceededError,
    InternalError,
    UnavailableError,
    error_from_rpc_error,
    error_from_status,
)
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
)

if TYPE_CHECKING:
    from checkpointd_client.v1 import write_service_pb2

__all__ = [
    "BATCH_HEADER",
    "BATCH_MAX_BYTES",
    "BATCH_MAX_ITEMS",
    "KINDS_HEADER",
    "AsyncInFlight",
    "AsyncWriteStream",
    "KindNotTaken",
    "StreamUnsupported",
    "batch_limit",
    "batch_of",
    "deadline_passed",
    "goes_behind",
    "kinds_taken",
    "refuse_kinds",
    "result_of",
    "stopped_answering",
    "stream_failure",
    "stream_size",
]

Metadata = Sequence[tuple[str, str | bytes]]
UnaryCall = Callable[..., Any]
#: A stub's unary multicallable, which :meth:`route` returns in a form of the same type.
RoutedRpc = TypeVar("RoutedRpc")

#: The WriteRequest/WriteResponse oneof field of each request type the stream carries.
ITEM_FIELDS: Final[dict[type[Message], str]] = {
    checkpoint_service_pb2.PutCheckpointRequest: "put_checkpoint",
    idempotency_service_pb2.PutIdempotencyResultRequest: "put_idempotency_result",
    interrupt_service_pb2.RecordInterruptRequest: "record_interrupt",
    interrupt_service_pb2.ClaimInterruptRequest: "claim_interrupt",
    graph_service_pb2.PutGraphCheckpointRequest: "put_graph_checkpoint",
    graph_service_pb2.PutGraphWritesRequest: "put_graph_writes",
}

#: Statuses that end a stream for a reason the unary call would have met too (a token or
#: permission refused at the start): the items fail with them as they are. Any other end is
#: a broken stream, and its items are retried.
_FINAL_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


def write_service() -> tuple[ModuleType, ModuleType]:
    """The generated WriteService modules, imported on the first stream write: they import
    google.rpc.status_pb2 (googleapis-common-protos' when installed), which a client that
    never streams should not load."""
    from checkpointd_client.v1 import write_service_pb2, write_service_pb2_grpc

    return write_service_pb2, write_service_pb2_grpc


#: Larger requests go unary: one item above the server's transport limit would end the whole
#: stream (RESOURCE_EXHAUSTED) and fail the other callers' items with it.
STREAM_ITEM_MAX_BYTES: Final = 1024 * 1024


#: Items in one batched message: the server refuses a message with more (its
#: MAX_ITEMS_PER_MESSAGE), so the client never sends one.
BATCH_MAX_ITEMS: Final = 256
#: Bytes of requests in one batched message, past its first item: the sum stays far below
#: the transport limit of any server (--max-message-bytes plus 16 MiB), so a batch is never
#: refused as a whole for its size.
BATCH_MAX_BYTES: Final = STREAM_ITEM_MAX_BYTES


def stream_size(request: Message, metadata: Metadata, stream_metadata: Metadata) -> int | None:
    """The size of a call that may go on the stream: no metadata of its own (a stream
    carries one set) and not large (:data:`STREAM_ITEM_MAX_BYTES`); None for one that may
    not."""
    if tuple(metadata) != tuple(stream_metadata):
        return None
    size = request.ByteSize()
    return size if size <= STREAM_ITEM_MAX_BYTES else None


#: The response header entry a server sends as it takes a stream (see write_service.proto).
ACCEPTED_HEADER: Final = ("checkpointd-write-stream", "open")


def accepted(headers: Sequence[tuple[str, str | bytes]] | None) -> bool:
    """Whether a stream's response headers say the server took it. A refusal answered at
    once (trailers only: UNIMPLEMENTED, UNAUTHENTICATED) has none, and is not written to."""
    return any(tuple(entry) == ACCEPTED_HEADER for entry in headers or ())


#: The response header entry by which a server says it takes batches, and of how many items
#: at most (S3). A server without it predates batches: it would ignore ``items`` and answer
#: the message as an item with no request, so it gets one item per message.
BATCH_HEADER: Final = "checkpointd-write-batch"


def batch_limit(headers: Sequence[tuple[str, str | bytes]] | None) -> int:
    """The most items a stream with these response headers takes in one message: 0 when the
    server does not take batches, never more than :data:`BATCH_MAX_ITEMS`."""
    for key, value in headers or ():
        if key == BATCH_HEADER:
            text = value.decode() if isinstance(value, bytes) else value
            return min(int(text), BATCH_MAX_ITEMS) if text.isdigit() else 0
    return 0


#: The response header entry that lists the kinds of item a server takes on the stream (S4).
KINDS_HEADER: Final = "checkpointd-write-kinds"
#: The kinds a server without :data:`KINDS_HEADER` takes: those it had before the header.
#: Any other kind it would answer INVALID_ARGUMENT (an item with no request).
FIRST_KINDS: Final = frozenset(
    {"put_checkpoint", "put_idempotency_result", "record_interrupt", "claim_interrupt"}
)
#: Every kind this client sends: a stream that takes them all needs no check per item.
EVERY_KIND: Final = frozenset(ITEM_FIELDS.values())


def kinds_taken(headers: Sequence[tuple[str, str | bytes]] | None) -> frozenset[str]:
    """The kinds of item a stream with these response headers takes (:data:`KINDS_HEADER`;
    :data:`FIRST_KINDS` when the server does not say)."""
    return _kinds(headers, KINDS_HEADER, FIRST_KINDS)


#: The response header entry that lists the kinds a stream applies in order per thread (S5).
ORDERED_HEADER: Final = "checkpointd-write-ordered"


def kinds_ordered(headers: Sequence[tuple[str, str | bytes]] | None) -> frozenset[str]:
    """The kinds of item a stream with these response headers applies in order per thread
    (:data:`ORDERED_HEADER`; none when the server does not say)."""
    return _kinds(headers, ORDERED_HEADER, frozenset())


def _kinds(
    headers: Sequence[tuple[str, str | bytes]] | None, entry: str, unsaid: frozenset[str]
) -> frozenset[str]:
    """The comma-separated kinds of header ``entry``; ``unsaid`` without it."""
    for key, value in headers or ():
        if key == entry:
            text = value.decode() if isinstance(value, bytes) else value
            return frozenset(kind.strip() for kind in text.split(","))
    return unsaid


def goes_behind(stream: Any, current: Any, correlation_id: int, request: Message) -> bool:
    """Whether ``request`` may go on ``stream`` behind its unanswered item ``correlation_id``
    (S5): ``stream`` is the ``current`` one, still open, and applies the kind in order (either
    client's stream, under its owner's lock where it has one)."""
    return (
        stream is current
        and not stream.ended
        and correlation_id in stream.pending
        and ITEM_FIELDS[type(request)] in stream.ordered
    )


class StreamUnsupported(Exception):
    """The server has no Write stream: send the call unary."""


class KindNotTaken(Exception):
    """The stream does not take this kind of item (S4): send this call unary, the others
    still on the stream."""


#: A write waiting to be sent: its correlation id, its request and the request's size.
Queued = tuple[int, Message, int]
#: The answer to one item: a WriteResponse of its own, or a WriteResult of a batch.
Answer = Union["write_service_pb2.WriteResponse", "write_service_pb2.WriteResult"]


def refuse_kinds(queued: collections.deque[Queued], kinds: frozenset[str]) -> list[int]:
    """Take the writes of kinds not in ``kinds`` off the queue; their correlation ids (each
    is then sent as its unary call, S4)."""
    refused = [entry[0] for entry in queued if ITEM_FIELDS[type(entry[1])] not in kinds]
    if refused:
        kept = [entry for entry in queued if ITEM_FIELDS[type(entry[1])] in kinds]
        queued.clear()
        queued.extend(kept)
    return refused


def batch_of(queued: collections.deque[Queued], limit: int) -> write_service_pb2.WriteRequest:
    """One message with the oldest queued writes, taken off the queue: as its items (contract
    S3), at most ``limit`` (:func:`batch_limit`) and no more than :data:`BATCH_MAX_BYTES` of
    requests past the first; or, when ``limit`` is 0, the oldest alone as the message's own
    item, for a server that predates batches."""
    message: write_service_pb2.WriteRequest = write_service()[0].WriteRequest()
    if limit == 0:
        correlation_id, request, _ = queued.popleft()
        message.correlation_id = correlation_id
        getattr(message, ITEM_FIELDS[type(request)]).CopyFrom(request)
        return message
    items = message.items
    size = 0
    while queued and len(items) < limit:
        correlation_id, request, request_size = queued[0]
        size += request_size
        if items and size > BATCH_MAX_BYTES:
            break
        queued.popleft()
        getattr(items.add(correlation_id=correlation_id), ITEM_FIELDS[type(request)]).CopyFrom(
            request
        )
    return message


def result_of(response: Answer, request: Message) -> Message:
    """The unary response inside ``response`` (a WriteResponse, or a WriteResult of a batch:
    the same fields), or its error raised as the unary call would."""
    kind = response.WhichOneof("result")
    if kind == "error":
        raise error_from_status(response.error.code, response.error.SerializeToString())
    if kind != ITEM_FIELDS[type(request)]:
        raise InternalError(  # a server fault, not a reason to send the write again
            f"the write stream answered a {ITEM_FIELDS[type(request)]} item with {kind}",
            code=grpc.StatusCode.INTERNAL,
        )
    result: Message = getattr(response, kind)
    return result


def stream_failure(exc: BaseException | None) -> BaseException:
    """What the unanswered items of a stream that ended with ``exc`` (None: ended without an
    error) fail with: StreamUnsupported, the status itself, or UnavailableError (retried)."""
    if isinstance(exc, grpc.RpcError):
        error = error_from_rpc_error(exc)
        if error.code == grpc.StatusCode.UNIMPLEMENTED:
            return StreamUnsupported()
        if error.code in _FINAL_CODES or isinstance(error, UnavailableError):
            return error
        return UnavailableError(
            f"the write stream broke ({error}); the write is sent again",
            code=grpc.StatusCode.UNAVAILABLE,
            reason=error.reason,
        )
    return UnavailableError(
        "the write stream ended before answering; the write is sent again",
        code=grpc.StatusCode.UNAVAILABLE,
    )


def deadline_passed() -> DeadlineExceededError:
    """The error of a write whose answer did not come within its timeout."""
    return DeadlineExceededError(
        "the call's deadline passed before the write stream answered",
        code=grpc.StatusCode.DEADLINE_EXCEEDED,
    )


def stopped_answering() -> UnavailableError:
    """What the other unanswered items of a stream that stopped answering fail with: retried,
    with the same request ids, on a fresh stream or unary (contract S2)."""
    return UnavailableError(
        "the write stream stopped answering (a call's deadline passed with no answer on it); "
        "the write is sent again on a fresh stream",
        code=grpc.StatusCode.UNAVAILABLE,
    )


class _Stream:
    """One open Write stream: the writes queued to send and the futures of the unanswered."""

    # The stub is typed for blocking channels; on an aio channel Write takes async iterators.
    def __init__(self, stub: Any, metadata: Metadata, health: StreamHealth) -> None:
        self.queued: collections.deque[Queued] = collections.deque()
        self._wake = asyncio.Event()
        """Set while writes are queued or the stream ended: the sender has something to do."""
        self.pending: dict[int, asyncio.Future[Answer]] = {}
        self.ended = False
        self.answers = 0
        """Answers received: an item timed out with none since it was sent marks the stream."""
        self.kinds: frozenset[str] | None = None
        """The kinds of item the stream takes (S4), once its headers came."""
        self.ordered: frozenset[str] = frozenset()
        """The kinds it applies in order per thread (S5), once its headers came."""
        self._health = health
        # Opened, and read, in empty contexts: the call's tasks and the reader would otherwise
        # keep the caller's contextvars (and what they hold) alive for as long as the stream.
        self.call: Any = contextvars.Context().run(
            stub.Write, self._requests(), metadata=tuple(metadata)
        )
        self.reader = asyncio.get_running_loop().create_task(
            self._read(), context=contextvars.Context()
        )

    def send(self, correlation_id: int, request: Message, size: int) -> None:
        """Queue a write: it leaves in the next message the sender writes."""
        self.queued.append((correlation_id, request, size))
        self._wake.set()

    def stop(self) -> None:
        """Send nothing more: the sender ends the requests."""
        self.ended = True
        self._wake.set()

    async def finished(self) -> None:
        """Wait until the call and its reader have ended (after a cancel: at once)."""
        await asyncio.gather(self.reader, return_exceptions=True)
        with contextlib.suppress(grpc.RpcError, asyncio.CancelledError):
            await self.call.code()
        # grpc's request consumer: after the requests ended it waits for grpc's poller thread
        # to confirm the half-close, which a loaded machine delays past the call's end; and
        # once the call has ended, call.cancel() no longer cancels it. Wait for it (briefly,
        # then cancel it). grpc.aio names it only privately, hence the getattr.
        consumer = getattr(self.call, "_async_request_poller", None)
        if isinstance(consumer, asyncio.Task) and not consumer.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(consumer), CONSUMER_GRACE_S)
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
        await asyncio.sleep(0)

    def abandon(self, error: BaseException) -> None:
        """Fail every unanswered item with ``error`` and cancel the stream: nothing useful
        is left on it."""
        self.stop()
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        self.call.cancel()

    async def _requests(self) -> AsyncIterator[write_service_pb2.WriteRequest]:
        # The server sends its headers as it takes the stream. Writing only after them means a
        # stream refused at once (UNIMPLEMENTED on an older server, a token refused) is never
        # written to after its status: grpc.aio would then report INTERNAL ("Internal error
        # from Core", grpc/grpc#36066) instead of the status, and miss the fallback. A
        # trailers-only refusal also resolves initial_metadata(), possibly before done() is
        # true, so the headers must say the stream was taken.
        headers = await self.call.initial_metadata()
        if not accepted(headers) or self.call.done():
            return
        limit = batch_limit(headers)
        self.ordered = kinds_ordered(headers)
        kinds = self.kinds = kinds_taken(headers)
        every = kinds >= EVERY_KIND
        # grpc.aio asks for the next message once the previous one is written: every write
        # queued meanwhile goes in it (S3). No timer: a write to an idle stream leaves at once.
        while True:
            await self._wake.wait()
            if self.ended:
                return
            if not every:  # writes of kinds the server does not take go unary (S4)
                self._refuse(refuse_kinds(self.queued, kinds))
                if not self.queued:
                    self._wake.clear()
                    continue
            message = batch_of(self.queued, limit)
            if not self.queued:
                self._wake.clear()
            yield message

    def _answered(self, correlation_id: int, answer: Answer) -> None:
        future = self.pending.pop(correlation_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def _refuse(self, correlation_ids: list[int]) -> None:
        """Hand writes the stream does not take back to their callers, to send unary."""
        for correlation_id in correlation_ids:
            future = self.pending.pop(correlation_id, None)
            if future is not None and not future.done():
                future.set_exception(KindNotTaken())

    async def _read(self) -> None:
        failure: BaseException | None = None
        try:
            async for response in self.call:
                self.answers += 1
                self._health.answered()
                if response.results:  # the answers to batched items (S3)
                    for result in response.results:
                        self._answered(result.correlation_id, result)
                else:
                    self._answered(response.correlation_id, response)
        except (grpc.RpcError, asyncio.CancelledError) as exc:
            failure = exc
        finally:
            self.stop()
            error = stream_failure(failure)
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(error)
            self.pending.clear()


#: How long close() lets the server end a stream it half-closed before cancelling it.
CLOSE_GRACE_S = 2.0

#: How long a stream's end waits for grpc's request consumer before cancelling it.
CONSUMER_GRACE_S = 1.0


def _forget(streams: set[_Stream], stream: _Stream, _reader: object) -> None:
    streams.discard(stream)


class AsyncInFlight:
    """A write on the stream whose answer may still be coming."""

    __slots__ = ("_answers", "_correlation_id", "_future", "_owner", "_request", "_stream")

    def __init__(
        self,
        owner: AsyncWriteStream,
        stream: _Stream,
        future: asyncio.Future[Answer],
        correlation_id: int,
        answers: int,
        request: Message,
    ) -> None:
        self._owner = owner
        self._stream = stream
        self._future = future
        self._correlation_id = correlation_id
        self._answers = answers
        self._request = request

    def done(self) -> bool:
        """Whether the answer (or the error) is in."""
        return self._future.done()

    async def result(self, seconds: float) -> Message:
        """The answer, waited for at most ``seconds``: the unary call's response, or its
        error raised (``DEADLINE_EXCEEDED`` when no answer came in time, S2). Once."""
        stream = self._stream
        try:
            async with asyncio.timeout(seconds):
                response = await self._future
        except TimeoutError:
            stream.pending.pop(self._correlation_id, None)
            if stream.answers == self._answers:  # not one answer since this item left: stuck
                self._owner._stopped_answering(stream)
            raise deadline_passed() from None
        return result_of(response, self._request)


class AsyncWriteStream:
    """The Write stream of one asyncio client, opened on the first write and again after it
    breaks or stops answering; ``route`` puts a write on it."""

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
        self._stream: _Stream | None = None
        # Every stream whose reader still runs (the current one, and ones replaced after they
        # stopped answering), for close() to wait on.
        self._streams_open: set[_Stream] = set()
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

        # ``timeout`` is the keyword of the gRPC call this stands in for.
        async def routed(request: Message, *, timeout: float, metadata: Metadata) -> Any:  # noqa: ASYNC109
            size = self._streams(request, metadata)
            if size is None:
                return await unary(request, timeout=timeout, metadata=metadata)
            try:
                return await self._send(request, size, timeout)
            except KindNotTaken:
                return await unary(request, timeout=timeout, metadata=metadata)
            except StreamUnsupported:
                self.unsupported = True
                return await unary(request, timeout=timeout, metadata=metadata)

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

    async def _send(self, request: Message, size: int, seconds: float) -> Message:
        return await self._enqueue(request, size).result(seconds)

    def begin(self, request: Message, metadata: Metadata) -> AsyncInFlight | None:
        """Put ``request`` on the stream and return at once, its answer to come
        (:meth:`AsyncInFlight.result`); None when it goes unary (:meth:`route`'s rule), for
        the caller to send itself. Called in the event loop of the client."""
        if not self._enabled:
            return None
        size = self._streams(request, metadata)
        return None if size is None else self._enqueue(request, size)

    def begin_after(
        self, previous: AsyncInFlight, request: Message, metadata: Metadata
    ) -> AsyncInFlight | None:
        """Put ``request`` on the stream behind ``previous``, an unanswered item of the same
        thread, when the server then applies it only once ``previous`` is stored (S5): the
        same stream, still open, that orders this kind. None otherwise: wait for
        ``previous``, then send."""
        size = self._streams(request, metadata) if self._enabled else None
        stream = previous._stream
        if size is None or not goes_behind(stream, self._stream, previous._correlation_id, request):
            return None
        return self._put(stream, request, size)

    def _enqueue(self, request: Message, size: int) -> AsyncInFlight:
        stream = self._stream
        if stream is None or stream.ended:
            stub = write_service()[1].WriteServiceStub(self._channel())
            stream = self._stream = _Stream(stub, self._metadata, self.health)
            self._streams_open.add(stream)
            # The callback holds the set, not self, and runs in an empty context (by default
            # it keeps the caller's): a running reader must not keep the client alive (P7).
            forget = functools.partial(_forget, self._streams_open, stream)
            stream.reader.add_done_callback(forget, context=contextvars.Context())
        return self._put(stream, request, size)

    def _put(self, stream: _Stream, request: Message, size: int) -> AsyncInFlight:
        correlation_id = next(self._ids)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        stream.pending[correlation_id] = future
        in_flight = AsyncInFlight(self, stream, future, correlation_id, stream.answers, request)
        stream.send(correlation_id, request, size)
        return in_flight

    def _stopped_answering(self, stream: _Stream) -> None:
        """Replace a stream that stopped answering: new writes and the retries of its
        unanswered items (same request ids) go to a fresh stream, or unary while
        :attr:`health` holds streams back; the stream itself is cancelled."""
        if stream.ended:
            return  # it broke or was replaced meanwhile
        if self._stream is stream:
            self._stream = None
        self.health.stopped_answering()
        stream.abandon(stopped_answering())

    async def close(self) -> None:
        """End the stream and wait until it has: its reader, grpc's status task and its
        request consumer have all finished when this returns, as have those of streams
        replaced earlier. (Left pending, they run when the event loop is closed, and grpc's
        poller then fails on it: ``RuntimeError: Event loop is closed``.)"""
        stream, self._stream = self._stream, None
        if stream is not None and not stream.ended:
            # Half-close and let the server end the call: its status then comes through grpc's
            # own status task, done by the time the call's code is known. A cancel ends the call
            # here at once, while that task still waits on grpc's poller thread for a moment
            # that a loaded machine stretches past the loop's close.
            stream.stop()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stream.finished(), CLOSE_GRACE_S)
        # The current stream too when its reader is done already: grpc's status task may not be.
        streams = list(self._streams_open | ({stream} if stream is not None else set()))
        for each in streams:
            each.call.cancel()
        for each in streams:
            await each.finished()
