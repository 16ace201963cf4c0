"""A thread's graph checkpoints sent one behind another on a Write stream (contract S5),
committed in their order without waiting for each other's answers.

The Write stream applies a thread's checkpoint only once the one sent before it was stored.
Waiting for that one's answer before even queueing the next would give each its own
transaction: on SQLite, where the store's group commit runs queued writes in one transaction
in the order they were queued, a checkpoint may instead take its place in that queue as soon
as the one before has taken its own, and share a transaction with it or with the writes queued
beside it. What S5 asks is then checked where it is decided, inside the transaction: the
checkpoint is written only if the one before was committed, or was written earlier in the same
transaction (which then commits or rolls back both).

The stream gives each checkpoint item a :class:`PutLink` and runs it with :data:`PUT_ORDER`
set to its :class:`PutOrder`. A store that orders its writes in a queue says so by calling
:meth:`PutOrder.queue` just before queueing and writes the :meth:`PutOrder.wrap`-ped body; a
store that does not (Postgres runs each put in a transaction of its own, on any of its
connections) leaves the order alone, and the stream then waits for the previous answer, as it
always did.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, TypeVar

from checkpointd.store.base import StoreError
from checkpointd.store.statements import Body, Statements

__all__ = ["PUT_ORDER", "PutLink", "PutOrder", "PutOrderBroken"]

T = TypeVar("T")


class PutOrderBroken(StoreError):
    """The checkpoint sent before this one on its stream was not stored, so this one was not
    written (the stream answers it PREVIOUS_PUT_NOT_STORED)."""


class PutLink:
    """One checkpoint item's place in its thread's chain on a stream: whether its write has
    taken its place in the store's commit order, and whether that write was stored."""

    __slots__ = ("_committed", "_placed", "_written_in")

    def __init__(self) -> None:
        self._placed = asyncio.Event()
        self._written_in: Statements | None = None
        self._committed = False

    def placed(self) -> None:
        """The write is queued in commit order, or the item ended (it never will be)."""
        self._placed.set()

    async def wait_placed(self) -> None:
        """Return once :meth:`placed` was called."""
        await self._placed.wait()

    def written(self, transaction: Statements) -> None:
        """The write's statements ran in ``transaction`` (called on the store's thread)."""
        self._written_in = transaction

    def committed(self) -> None:
        """The transaction that holds the write committed (its after-commit callback)."""
        self._committed = True

    def stored_for(self, transaction: Statements) -> bool:
        """Whether a write in ``transaction`` may follow this one: this one committed, or was
        written earlier in the same transaction."""
        return self._committed or self._written_in is transaction


@dataclass(frozen=True, slots=True)
class PutOrder:
    """A checkpoint item's own link and the link of the one before it on its stream."""

    own: PutLink
    after: PutLink | None

    def queue(self) -> None:
        """Say that the write is about to be queued in commit order; call it with nothing
        awaited between it and the queueing, so no later write can be queued ahead."""
        self.own.placed()

    def wrap(self, body: Body[T]) -> Body[T]:
        """``body``, written only when the one before was stored (:class:`PutOrderBroken`
        otherwise); marks this write's link as written in its transaction, and as committed
        when that transaction commits."""
        own, after = self.own, self.after

        async def ordered(conn: Statements) -> T:
            if after is not None and not after.stored_for(conn):
                raise PutOrderBroken("the checkpoint sent before this one was not stored")
            result = await body(conn)
            own.written(conn)
            conn.after_commit(own.committed)
            return result

        return ordered


#: The order of the checkpoint item a task runs, set by the Write stream for that task.
PUT_ORDER: Final[ContextVar[PutOrder | None]] = ContextVar("checkpointd_put_order", default=None)
