"""What every servicer shares: the store, the limits, the clock, a cancel-safe call, and the
filling of a list reply within the message size."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol, TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from checkpointd.fencing import Fenceable, fence_of, fenced_write
from checkpointd.paging import encode_token
from checkpointd.servicers.scope import WriteKey
from checkpointd.store.interface import Store

if TYPE_CHECKING:
    from checkpointd.graph.store import GraphStore
    from checkpointd.store.executions import ExecutionReader
    from checkpointd.watch import WatchHub

__all__ = ["UNCANCELLED", "ServiceDeps", "StoreServicer", "fill_within", "shielded", "utc_now"]

T = TypeVar("T")
R = TypeVar("R")
M = TypeVar("M", bound=Message)


class _Sequenced(Protocol):
    """A stored row with its place in the store's order, which page tokens carry."""

    @property
    def sequence(self) -> int: ...


Row = TypeVar("Row", bound=_Sequenced)

#: True in a task that no RPC's end cancels (a Write stream's item: the stream's end does not
#: stop its items). A store call there needs no shield, and is spared its task and future.
UNCANCELLED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "checkpointd_uncancelled", default=False
)


def utc_now() -> datetime:
    """The server clock, UTC, microsecond precision."""
    return datetime.now(tz=UTC)


@dataclass(frozen=True, slots=True)
class ServiceDeps:
    """Everything a servicer needs, built once by the app."""

    store: Store
    max_message_bytes: int
    """Requests above this size are refused; list pages stop before reaching it."""
    request_retention: timedelta
    """How long request ids and claim tokens are remembered (I3, D1, C9)."""
    prune_batch_size: int = 1000
    """Rows per prune transaction (C7)."""
    clock: Callable[[], datetime] = field(default=utc_now)
    watch_hub: WatchHub | None = None
    """The fan-out of interrupt events to WatchInterrupts streams (I5); None serves none."""
    graph_store: GraphStore | None = None
    """The graph store's store (GraphService); None serves no GraphService."""
    executions: ExecutionReader | None = None
    """The execution summaries (ListExecutions, GetExecution); None answers UNIMPLEMENTED."""


class StoreServicer:
    """A servicer over the store: what the app built for it, and the store it names."""

    def __init__(self, deps: ServiceDeps) -> None:
        self._deps = deps
        self._store = deps.store

    async def _fenced(
        self, request: Fenceable, write: WriteKey, call: Callable[[], Awaitable[T]]
    ) -> T:
        """Run ``call`` (the store call of ``write``) to its end (:func:`shielded`), under
        the request's fence when it has one (K4); the fence is checked here, after the
        request's other fields."""
        fence = fence_of(request)
        if fence is None:  # most writes: the store call itself, with no wrapper around it
            return await shielded(call())
        return await shielded(fenced_write(self._store, write.namespace, fence, call))

    def _fill_page(
        self,
        reply: RepeatedCompositeFieldContainer[M],
        rows: Sequence[Row],
        to_message: Callable[[Row], M],
        scope: tuple[object, ...],
        *,
        more: bool,
    ) -> str:
        """Fill ``reply`` with a page's rows within the message size (:func:`fill_within`) and
        return the next page's token: after the last row that went in, for ``scope``; empty
        when every row went in and the store has no more (``more``)."""
        count = fill_within(reply, rows, to_message, self._deps.max_message_bytes)
        if not more and count == len(rows):
            return ""
        return encode_token(rows[count - 1].sequence if count else 0, scope)


async def shielded(call: Awaitable[T]) -> T:
    """Await a store call that must run to its end even if the RPC is cancelled.

    A client that gives up (deadline, disconnect) cancels the handler. Cancelling a store
    call midway could leave a transaction open on a shared connection, or leave the caller
    unsure whether a write landed; finishing it keeps the store consistent, and a retry with
    the same request id then finds the stored result. In a task marked :data:`UNCANCELLED`
    the call is awaited as it is.
    """
    if UNCANCELLED.get():
        return await call
    return await asyncio.shield(asyncio.ensure_future(call))


def fill_within(
    reply: RepeatedCompositeFieldContainer[M],
    rows: Iterable[R],
    to_message: Callable[[R], M],
    budget: int,
) -> int:
    """Append each row's message to ``reply`` while the reply stays within ``budget`` bytes,
    and say how many went in; the first always goes in, so a page is never empty.

    The stores read a page by the rows' stored sizes (B1); a row can encode a little larger,
    so every list reply is measured again as it is built, and the rows left out start the
    next page.
    """
    count = 0
    for row in rows:
        message = to_message(row)
        budget -= message.ByteSize() + 8  # field tag and length prefix
        if budget < 0 and count:
            break  # the page is full by size; the next one starts at this row
        reply.append(message)
        count += 1
    return count
