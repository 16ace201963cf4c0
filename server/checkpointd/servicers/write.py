"""WriteService: the four hot writes of many callers over one stream (contract S1).

Each item goes through the unary servicer method of its request (the same validation and
store call) after the same checks the unary call gets from the layers around it: the size
limit of the request guard and, when tokens are configured, the token's access and namespace
(:data:`checkpointd.auth.ITEM_GATE`). Items run concurrently, so the writes of many callers
reach the store's group commit together; each is answered as it finishes, with its response
or the ``google.rpc.Status`` the unary call would have ended with.
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
from checkpointd.errors import InvalidField, MessageTooLarge, ShuttingDown
from checkpointd.servicers.checkpoints import CheckpointServicer
from checkpointd.servicers.idempotency import IdempotencyServicer
from checkpointd.servicers.interrupts import InterruptServicer
from checkpointd_client.v1 import write_service_pb2 as svc
from checkpointd_client.v1 import write_service_pb2_grpc as svc_grpc

__all__ = ["MAX_ITEMS_IN_FLIGHT", "WRITE_METHOD", "WriteServicer"]

WRITE_METHOD: Final = "/checkpointd.v1.WriteService/Write"
#: Items of one stream handled at once; the stream reads no further item until one finishes,
#: so a client that sends faster than the store writes is slowed by HTTP/2 flow control.
MAX_ITEMS_IN_FLIGHT: Final = 256
#: The response headers that say the stream is taken: clients write items only after them.
ACCEPTED_HEADERS: Final = (("checkpointd-write-stream", "open"),)

_SHUTDOWN_MESSAGE: Final = (
    "the server is shutting down; send the writes not answered again, with the same "
    "request ids, on this server once it is back or on another one"
)

Unary = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]


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
        self._closing = asyncio.Event()
        self.streams_opened = 0
        """Write streams opened since start (tests observe coalescing by it)."""
        self.items_handled = 0
        """Items answered since start, over every stream."""

    def close(self) -> None:
        """Stop reading new items: open streams answer what they have read, then end with
        UNAVAILABLE (SHUTTING_DOWN) so their clients send the rest elsewhere or later."""
        self._closing.set()

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
        await context.send_initial_metadata(ACCEPTED_HEADERS)
        answers: asyncio.Queue[svc.WriteResponse | None] = asyncio.Queue()
        reader = asyncio.create_task(self._read(request_iterator, context, answers))
        try:
            while True:
                answer = await answers.get()
                if answer is None:
                    break
                await context.write(answer)
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
        answers: asyncio.Queue[svc.WriteResponse | None],
    ) -> None:
        """Start an item task per request until the client half-closes or the server closes;
        then wait for the tasks and put the end mark (None) after their answers."""
        slots = asyncio.Semaphore(MAX_ITEMS_IN_FLIGHT)
        running: set[asyncio.Task[None]] = set()

        async def handle(item: svc.WriteRequest) -> None:
            try:
                answers.put_nowait(await self._answer(item, context))
            finally:
                slots.release()

        iterator = aiter(requests)
        stop = asyncio.ensure_future(self._closing.wait())
        try:
            while not self._closing.is_set():
                await slots.acquire()
                nxt = asyncio.ensure_future(anext(iterator, None))
                await asyncio.wait((nxt, stop), return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()  # shutting down: no further item is read
                    break
                item = nxt.result()
                if item is None:
                    break  # the client half-closed: answer what is in flight, then end
                task = asyncio.create_task(handle(item))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(set(running))
        finally:
            stop.cancel()
            answers.put_nowait(None)

    async def _answer(
        self, item: svc.WriteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> svc.WriteResponse:
        """The answer to one item: its unary method's response, or the status it fails with."""
        kind = item.WhichOneof("request")
        route = self._routes.get(kind or "")
        try:
            if route is None:
                raise InvalidField(
                    "request",
                    "is required: one of put_checkpoint, put_idempotency_result, "
                    "record_interrupt, claim_interrupt",
                )
            assert kind is not None
            request: Message = getattr(item, kind)
            # What the layers around a unary call check, in their order: the token's access
            # and namespace, then the size limit (the guard).
            gate = ITEM_GATE.get()
            if gate is not None:
                gate(route.method, request)
            size = request.ByteSize()
            if size > self._max_message_bytes:
                raise MessageTooLarge(size, self._max_message_bytes)
            response = await route.call(request, context)
        except Exception as exc:
            method = route.method if route is not None else WRITE_METHOD
            answer = svc.WriteResponse(
                correlation_id=item.correlation_id, error=error_status(exc, method=method)
            )
        else:
            answer = svc.WriteResponse(correlation_id=item.correlation_id)
            getattr(answer, kind).CopyFrom(response)
        self.items_handled += 1
        return answer
