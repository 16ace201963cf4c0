"""WriteService: the hot writes of many callers over one stream (contracts S1, S3, S4).

Each item goes through the unary servicer method of its request (the same validation and
store call) after the same checks the unary call gets from the layers around it: the size
limit of the request guard and, when tokens are configured, the token's access and namespace
(:data:`checkpointd.auth.ITEM_GATE`). Items run concurrently, so the writes of many callers
reach the store's group commit together; each is answered as it finishes, with its response
or the ``google.rpc.Status`` the unary call would have ended with. The graph writes
(PutGraphCheckpoint, PutGraphWrites) are kinds of item too where GraphService is served, and
the stream's headers list the kinds it takes (S4). A thread's graph checkpoints are the one
exception to running concurrently: each waits for the one sent before it on the stream and
is applied only if that one was stored (S5), so a client may send the next before an answer.
Where the store commits its writes in the order they were queued (SQLite's group commit), the
wait ends once that one is queued, and the store checks in the transaction that it was stored
(:mod:`checkpointd.graph.put_order`): a thread's checkpoints sent together share commits.

A message carries one item or a batch (``items``, S3). Batched items are answered in the
``results`` of a shared WriteResponse: every answer that is ready when the writer comes
round (the items of one group commit finish together, and answers pile up while the previous
message is written) leaves in one message, so grpc.aio's per-message cost is paid once for
them. A message of one item is answered by a message of its own, as before batches existed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf.message import Message

from checkpointd.auth import ITEM_GATE
from checkpointd.edge import abort_with_error, error_status
from checkpointd.errors import InvalidField, MessageTooLarge, PreviousPutNotStored, ShuttingDown
from checkpointd.graph.put_order import PUT_ORDER, PutLink, PutOrder, PutOrderBroken
from checkpointd.servicers.checkpoints import CheckpointServicer
from checkpointd.servicers.common import UNCANCELLED
from checkpointd.servicers.graph import GraphServicer
from checkpointd.servicers.idempotency import IdempotencyServicer
from checkpointd.servicers.interrupts import InterruptServicer
from checkpointd_client.v1 import write_service_pb2 as svc
from checkpointd_client.v1 import write_service_pb2_grpc as svc_grpc

__all__ = [
    "KINDS_HEADER",
    "MAX_ITEMS_IN_FLIGHT",
    "MAX_ITEMS_PER_MESSAGE",
    "ORDERED_HEADER",
    "WRITE_METHOD",
    "WriteServicer",
]

WRITE_METHOD: Final = "/checkpointd.v1.WriteService/Write"
#: Items of one stream handled at once; the stream reads no further item until one finishes,
#: so a client that sends faster than the store writes is slowed by HTTP/2 flow control.
MAX_ITEMS_IN_FLIGHT: Final = 256
#: Items in one batched WriteRequest; a message with more gets INVALID_ARGUMENT (field
#: "items") for each of its items, none applied. At most what the stream handles at once.
MAX_ITEMS_PER_MESSAGE: Final = MAX_ITEMS_IN_FLIGHT
#: The response headers that say the stream is taken (clients write items only after them)
#: and that it takes batches of up to MAX_ITEMS_PER_MESSAGE items (S3): a server that
#: predates batches would ignore ``items`` and answer such a message as an empty item.
BATCH_HEADER: Final = "checkpointd-write-batch"
#: The response header that lists the kinds of item the stream takes (its routes' oneof
#: names, comma-separated; S4). One list rather than a flag per kind: what a server takes
#: depends on what it serves (the graph kinds only with GraphService), and a kind added later
#: needs no header of its own. A server without it takes the first four kinds only.
KINDS_HEADER: Final = "checkpointd-write-kinds"
#: The response header that lists the kinds of item applied in order per thread (S5): a
#: thread's graph checkpoint only once the one before it on the stream is stored.
ORDERED_HEADER: Final = "checkpointd-write-ordered"
#: The kind ordered per thread: a checkpoint shares its channel values with its parent.
_ORDERED_KIND: Final = "put_graph_checkpoint"

_SHUTDOWN_MESSAGE: Final = (
    "the server is shutting down; send the writes not answered again, with the same "
    "request ids, on this server once it is back or on another one"
)

Unary = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]
#: What the reader hands an item task: a message of one item, or an item of a batch.
Item = svc.WriteRequest | svc.WriteItem


class _Outbox:
    """The answers of one stream not yet written: whole messages (answers to single items)
    and the results of batched items, gathered into one WriteResponse until the writer takes
    them. ``ready`` is set while there is something to write or the reading has ended."""

    def __init__(self) -> None:
        self.singles: list[svc.WriteResponse] = []
        self.batch = svc.WriteResponse()
        self.ready = asyncio.Event()
        self.closed = False

    def result(self, correlation_id: int) -> svc.WriteResult:
        """A new result in the batch being gathered, to be filled in at once."""
        self.ready.set()
        result: svc.WriteResult = self.batch.results.add(correlation_id=correlation_id)
        return result

    def single(self, answer: svc.WriteResponse) -> None:
        self.singles.append(answer)
        self.ready.set()

    def close(self) -> None:
        """No answer follows: the writer ends once it has written what is here."""
        self.closed = True
        self.ready.set()

    def take(self) -> list[svc.WriteResponse]:
        """The messages to write now, the gathered batch last; empties the outbox."""
        taken, self.singles = self.singles, []
        if self.batch.results:
            taken.append(self.batch)
            self.batch = svc.WriteResponse()
        self.ready.clear()
        return taken


class _Reading:
    """A stream's reading of its messages, which the server's close interrupts.

    The reader task awaits each message itself (no task and no wait per message: at one
    caller that is two turns of the event loop a write). :meth:`stop` cancels that await
    when it is under way; :meth:`next` then answers None, as at the client's half-close. A
    message the cancelled read had already taken off the stream is never answered, like any
    write in flight when the server stops: its client sends it again (same request id)."""

    def __init__(self, messages: AsyncIterator[svc.WriteRequest]) -> None:
        self._messages = messages
        self._task: asyncio.Task[Any] | None = None  # set while a read is under way
        self._stopped = False

    async def next(self) -> svc.WriteRequest | None:
        """The next message; None once the client half-closed or :meth:`stop` was called."""
        if self._stopped:
            return None
        task = self._task = asyncio.current_task()
        try:
            return await anext(self._messages, None)
        except asyncio.CancelledError:
            # Ours only: a cancel of the stream itself (its call ended) goes on up.
            if self.stopped() and task is not None and task.uncancel() == 0:
                return None
            raise
        finally:
            self._task = None

    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    def stop(self) -> None:
        """Read no further message; interrupt the read under way, if any."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()


class _InFlight:
    """The item tasks of one stream being answered: the reader waits only when the stream
    holds :data:`MAX_ITEMS_IN_FLIGHT` of them (and, at its end, for the last), so an item
    costs a set entry and a done callback instead of a semaphore's turn. The set also keeps
    each task referenced: the event loop holds its tasks only weakly."""

    __slots__ = ("_waiter", "tasks")

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[bool]] = set()
        self._waiter: asyncio.Future[None] | None = None

    def finished(self, task: asyncio.Task[bool]) -> None:
        """One item answered (a task's done callback)."""
        self.tasks.discard(task)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def below(self, limit: int) -> None:
        """Return once fewer than ``limit`` items are in flight."""
        while len(self.tasks) >= limit:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    """The unary RPC the item stands for (its access, its name in errors and logs)."""
    call: Unary


class WriteServicer(svc_grpc.WriteServiceServicer):
    """Serves checkpointd.v1.WriteService through the unary servicers' methods."""

    def __init__(
        self,
        checkpoints: CheckpointServicer,
        idempotency: IdempotencyServicer,
        interrupts: InterruptServicer,
        graph: GraphServicer | None = None,
        *,
        max_message_bytes: int,
    ) -> None:
        self._max_message_bytes = max_message_bytes
        self._routes: dict[str, _Route] = {
            "put_checkpoint": _Route(
                "/checkpointd.v1.CheckpointService/PutCheckpoint", checkpoints.PutCheckpoint
            ),
            "put_idempotency_result": _Route(
                "/checkpointd.v1.IdempotencyService/PutIdempotencyResult",
                idempotency.PutIdempotencyResult,
            ),
            "record_interrupt": _Route(
                "/checkpointd.v1.InterruptService/RecordInterrupt", interrupts.RecordInterrupt
            ),
            "claim_interrupt": _Route(
                "/checkpointd.v1.InterruptService/ClaimInterrupt", interrupts.ClaimInterrupt
            ),
        }
        if graph is not None:
            self._routes["put_graph_checkpoint"] = _Route(
                "/checkpointd.v1.GraphService/PutGraphCheckpoint", graph.PutGraphCheckpoint
            )
            self._routes["put_graph_writes"] = _Route(
                "/checkpointd.v1.GraphService/PutGraphWrites", graph.PutGraphWrites
            )
        headers = [
            ("checkpointd-write-stream", "open"),
            (BATCH_HEADER, str(MAX_ITEMS_PER_MESSAGE)),
            (KINDS_HEADER, ",".join(self._routes)),
        ]
        if graph is not None:
            headers.append((ORDERED_HEADER, _ORDERED_KIND))
        self._headers = tuple(headers)
        self._unrouted = "is required: one of " + ", ".join(self._routes)
        self._closing = asyncio.Event()
        self._readers: set[_Reading] = set()
        self.streams_opened = 0
        """Write streams opened since start (tests observe coalescing by it)."""
        self.items_handled = 0
        """Items answered since start, over every stream."""

    def close(self) -> None:
        """Stop reading new items: open streams answer what they have read, then end with
        UNAVAILABLE (SHUTTING_DOWN) so their clients send the rest elsewhere or later."""
        self._closing.set()
        for reading in self._readers:
            reading.stop()

    # Written with context.write rather than as a generator: responses go out as items
    # finish, from one writer, while the reader goes on; the stubs only know the generator.
    async def Write(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[svc.WriteRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.streams_opened += 1
        # Headers at once: the asyncio client writes its first item only after them (see
        # checkpointd_client._write_stream), so it never writes to a stream already refused.
        await context.send_initial_metadata(self._headers)
        outbox = _Outbox()
        reader = asyncio.create_task(self._read(request_iterator, context, outbox))
        try:
            while True:
                await outbox.ready.wait()
                # Read before taking: once closed, what is taken is all there is. Answers
                # that finish while a message is written leave together in the next.
                closed = outbox.closed
                for message in outbox.take():
                    await context.write(message)
                if closed:
                    break
            await reader  # raises what ended the reading, if anything did
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self._closing.is_set():
            await abort_with_error(context, ShuttingDown(_SHUTDOWN_MESSAGE), method=WRITE_METHOD)

    async def _read(
        self,
        requests: AsyncIterator[svc.WriteRequest],
        context: grpc.aio.ServicerContext[Any, Any],
        outbox: _Outbox,
    ) -> None:
        """Start an item task per item read until the client half-closes or the server
        closes; then wait for the tasks and close the outbox after their answers."""
        # Nothing cancels an item's task (the stream ending leaves it to finish), so its
        # store call is not shielded again. Set once here: each item task starts with a
        # copy of this task's context, the mark and the item gate with it.
        UNCANCELLED.set(True)
        flight = _InFlight()
        # The newest graph checkpoint item of each (namespace, thread) on this stream (S5).
        newest_put: dict[tuple[str, str], _Previous] = {}

        def start(item: Item, batched: bool) -> None:
            after: _Previous | None = None
            key: tuple[str, str] | None = None
            link: PutLink | None = None
            kind = item.WhichOneof("request")
            if kind == _ORDERED_KIND:
                checkpoint = item.put_graph_checkpoint.checkpoint
                key = (item.put_graph_checkpoint.namespace, checkpoint.thread_id)
                after = newest_put.get(key)
                link = PutLink()
            task = asyncio.create_task(
                self._answer(item, kind, context, outbox, batched=batched, after=after, link=link)
            )
            flight.tasks.add(task)
            task.add_done_callback(flight.finished)
            if key is not None and link is not None:
                newest = newest_put[key] = _Previous(task, checkpoint.checkpoint_id, link)

                def forget(_: asyncio.Task[bool]) -> None:
                    if newest_put.get(key) is newest:
                        del newest_put[key]

                task.add_done_callback(forget)

        reading = _Reading(aiter(requests))
        if self._closing.is_set():
            reading.stop()
        self._readers.add(reading)
        try:
            while True:
                if len(flight.tasks) >= MAX_ITEMS_IN_FLIGHT:
                    await flight.below(MAX_ITEMS_IN_FLIGHT)
                message = await reading.next()
                if message is None:
                    # The client half-closed, or the server closes: answer what is in
                    # flight, then end.
                    break
                if not message.items:
                    start(message, False)
                    continue
                self._refuse_extras(message, outbox)
                if len(message.items) > MAX_ITEMS_PER_MESSAGE:
                    continue
                for item in message.items:
                    if len(flight.tasks) >= MAX_ITEMS_IN_FLIGHT:
                        await flight.below(MAX_ITEMS_IN_FLIGHT)
                    start(item, True)
            await flight.below(1)
        finally:
            self._readers.discard(reading)
            outbox.close()

    def _refuse_extras(self, message: svc.WriteRequest, outbox: _Outbox) -> None:
        """Answer what a batched message holds besides its items (S3): a request of its own
        (INVALID_ARGUMENT for its correlation_id), and more items than one message may carry
        (INVALID_ARGUMENT for each item, none applied)."""
        if message.WhichOneof("request") is not None:
            error = error_status(
                InvalidField("request", "must be unset in a message with items"),
                method=WRITE_METHOD,
            )
            outbox.single(svc.WriteResponse(correlation_id=message.correlation_id, error=error))
            self.items_handled += 1
        count = len(message.items)
        if count > MAX_ITEMS_PER_MESSAGE:
            error = error_status(
                InvalidField("items", f"at most {MAX_ITEMS_PER_MESSAGE} items in one message"),
                method=WRITE_METHOD,
            )
            for item in message.items:
                outbox.result(item.correlation_id).error.CopyFrom(error)
            self.items_handled += count

    async def _answer(
        self,
        item: Item,
        kind: str | None,
        context: grpc.aio.ServicerContext[Any, Any],
        outbox: _Outbox,
        *,
        batched: bool,
        after: _Previous | None = None,
        link: PutLink | None = None,
    ) -> bool:
        """Answer one item: its unary method's response, or the status it fails with; in the
        outbox's batch when it came in one, else as a message of its own. Whether it was
        applied. A graph checkpoint (``link``, its place in its thread's chain) ``after``
        another of its thread is applied only once that one was stored (S5). ``kind`` is the
        item's request field (read once by the reader)."""
        route = self._routes.get(kind or "")
        field: str  # the answer's field the outcome goes in: the kind, or "error"
        response: Message
        try:
            if route is None:
                raise InvalidField("request", self._unrouted)
            assert kind is not None
            request: Message = getattr(item, kind)
            if link is not None:
                if after is not None and not await after.ahead():
                    raise after.not_stored(item)
                # This task's context only (each item task runs in a copy of the reader's).
                PUT_ORDER.set(PutOrder(link, None if after is None else after.link))
            # What the layers around a unary call check, in their order: the token's access
            # and namespace, then the size limit (the guard).
            gate = ITEM_GATE.get()
            if gate is not None:
                gate(route.method, request)
            size = request.ByteSize()
            if size > self._max_message_bytes:
                raise MessageTooLarge(size, self._max_message_bytes)
            response = await route.call(request, context)
            field = kind
        except Exception as exc:
            method = route.method if route is not None else WRITE_METHOD
            if isinstance(exc, PutOrderBroken) and after is not None:
                exc = after.not_stored(item)
            field, response = "error", error_status(exc, method=method)
        finally:
            if link is not None:
                link.placed()  # its write is queued or never will be: the next may go on
        answer: svc.WriteResult | svc.WriteResponse
        if batched:
            answer = outbox.result(item.correlation_id)
        else:
            answer = svc.WriteResponse(correlation_id=item.correlation_id)
            outbox.single(answer)
        getattr(answer, field).CopyFrom(response)
        self.items_handled += 1
        return field != "error"


@dataclass(frozen=True, slots=True)
class _Previous:
    """The item task of a thread's newest graph checkpoint on a stream, its id and its
    link (:mod:`checkpointd.graph.put_order`)."""

    task: asyncio.Task[bool]
    checkpoint_id: str
    link: PutLink

    async def ahead(self) -> bool:
        """Wait until the item's write is queued in its store's commit order, or the item
        answered; False when it answered without being applied. A write still queued is
        checked in its transaction by the store (the next one is written only if it was)."""
        await self.link.wait_placed()
        task = self.task
        if not task.done():
            return True
        return not task.cancelled() and task.exception() is None and task.result()

    def not_stored(self, item: Item) -> PreviousPutNotStored:
        """The refusal of ``item``, sent behind this one, which was not stored."""
        return PreviousPutNotStored(
            item.put_graph_checkpoint.checkpoint.thread_id, self.checkpoint_id
        )
