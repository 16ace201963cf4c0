"""Group commit: concurrent writes share one transaction (one fsync, one round trip).

A store hands each write to :meth:`GroupCommit.submit`, which returns once the write is
durable. The first write after an idle moment is committed at once, alone, in its caller's
task (nothing waits on purpose, nothing is handed over); the writes that arrive while a commit
is in flight queue up, and one task then runs them through the store's ``commit`` function in
batches of at most ``max_batch``, each batch formed of what arrived during the previous one.
``commit`` returns one outcome per write, in order: a result, or the exception that write alone
failed with (a duplicate id, say), which touches no other write of the batch. When ``commit``
itself raises, no write of the batch committed and each of its callers gets that error.

Writes with equal ``key`` never share a batch (the later one waits for the next), so a batch
can be written as one multi-row statement without two rows of it colliding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from checkpointd.store.base import StoreError, StoreUnavailable

__all__ = ["GroupCommit"]

I = TypeVar("I")  # noqa: E741 (the conventional name of an item type)
R = TypeVar("R")


@dataclass(slots=True)
class _Queued(Generic[I, R]):
    item: I
    done: asyncio.Future[R]


def _fresh(exc: Exception) -> Exception:
    """A copy of an error that failed a whole batch, one per caller (a single exception object
    raised in several tasks would collect all their tracebacks)."""
    if type(exc) in (StoreError, StoreUnavailable):
        copy = type(exc)(*exc.args)
        copy.__cause__ = exc.__cause__
        return copy
    return exc


class GroupCommit(Generic[I, R]):
    """Queue writes and commit them in batches through ``commit`` (see the module docstring).

    ``commit(items)`` must return exactly one outcome per item: its result, or an
    :class:`Exception` instance that is that item's own failure.
    """

    def __init__(
        self,
        commit: Callable[[list[I]], Awaitable[Sequence[R | Exception]]],
        *,
        max_batch: int,
        key: Callable[[I], Hashable] | None = None,
        inline: Callable[[list[I]], Awaitable[Sequence[R | Exception]]] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._commit = commit
        # The lone write's commit, run in its caller's task: without what the caller's own
        # call already gives it (a store's timeout and error translation around submit).
        self._inline = commit if inline is None else inline
        self._max_batch = max_batch
        self._key = key
        self._queue: list[_Queued[I, R]] = []
        self._task: asyncio.Task[None] | None = None
        self._busy = False  # a commit is in flight (in a caller's task or in self._task)

    async def submit(self, item: I) -> R:
        """Queue ``item``; return its outcome once the batch holding it has committed.

        A caller cancelled before its batch started is dropped from the queue; one cancelled
        later leaves a write that may still commit (as any cancelled write may).
        """
        if not self._busy:
            self._busy = True
            try:
                (outcome,) = await self._inline([item])
            finally:
                self._busy = False
                if self._queue:
                    self._start()
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        queued: _Queued[I, R] = _Queued(item, asyncio.get_running_loop().create_future())
        self._queue.append(queued)
        return await queued.done

    def _start(self) -> None:
        """Start the task that commits the queue (a commit in flight starts it when done)."""
        if not self._busy and self._task is None:
            self._busy = True
            self._task = asyncio.ensure_future(self._run())

    def _next_batch(self) -> list[_Queued[I, R]]:
        """Take up to ``max_batch`` live writes off the queue, at most one per key."""
        batch: list[_Queued[I, R]] = []
        kept: list[_Queued[I, R]] = []
        keys: set[Hashable] = set()
        for position, queued in enumerate(self._queue):
            if len(batch) == self._max_batch:
                kept.extend(self._queue[position:])
                break
            if queued.done.done():  # its caller gave up
                continue
            if self._key is not None:
                key = self._key(queued.item)
                if key in keys:
                    kept.append(queued)
                    continue
                keys.add(key)
            batch.append(queued)
        self._queue = kept
        return batch

    async def _run(self) -> None:
        try:
            while self._queue:
                batch = self._next_batch()
                if batch:
                    await self._commit_batch(batch)
        except BaseException:  # cancelled: the event loop is shutting down
            for queued in self._queue:
                queued.done.cancel()
            self._queue.clear()
            raise
        finally:
            self._task = None
            self._busy = False

    async def _commit_batch(self, batch: list[_Queued[I, R]]) -> None:
        try:
            outcomes = await self._commit([queued.item for queued in batch])
            if len(outcomes) != len(batch):
                raise StoreError("group commit returned the wrong number of outcomes")
        except Exception as exc:  # the batch failed as a whole: none of it committed
            for queued in batch:
                if not queued.done.done():
                    queued.done.set_exception(_fresh(exc))
            return
        except BaseException:
            for queued in batch:
                queued.done.cancel()
            raise
        for queued, outcome in zip(batch, outcomes, strict=True):
            if queued.done.done():
                continue
            if isinstance(outcome, Exception):
                queued.done.set_exception(outcome)
            else:
                queued.done.set_result(outcome)
