"""The graph writes a pipelining saver sent ahead of their answers, per thread (contract G22).

A write sent ahead is durable once its answer is in; the saver waits for a thread's writes
(:meth:`WritesAhead.wait`) before it reads or changes that thread, so a reader of the thread
through this saver sees them, and raises the first that failed there. A thread's checkpoint
goes out behind the previous one while that one is unanswered only where the server then
stores it only once the previous one is stored (S5); otherwise it waits for the previous
one, and every write before it, to be durable. Either way no stored checkpoint lacks its
parent: a checkpoint after one that failed is never sent again. Answers already in are let
go as writes are added, so a long run holds only what is still unanswered, at most
:data:`MAX_AHEAD` a thread: the next write waits for the oldest beyond that.

:class:`WritesAhead` serves the blocking saver (thread-safe), :class:`AsyncWritesAhead` the
asyncio one (one event loop); both keep their books in :class:`_Thread` and differ only in
how they wait.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from checkpointd_client.errors import CheckpointdError

__all__ = [
    "MAX_AHEAD",
    "AsyncPendingWrite",
    "AsyncWritesAhead",
    "PendingWrite",
    "WritesAhead",
]

#: Unanswered writes of one thread before the next one waits for the oldest.
MAX_AHEAD = 64


class PendingWrite(Protocol):
    """A write sent ahead: the blocking client's ``GraphWrite``."""

    def done(self) -> bool:
        """Whether its answer is in."""

    def result(self, *, resend: bool = True) -> Any:
        """Its response once durable, waiting if it must (sent again where the stream lost
        it, with ``resend``); its error raised, every time."""


class AsyncPendingWrite(Protocol):
    """A write sent ahead: the asyncio client's ``AsyncGraphWrite``."""

    def done(self) -> bool:
        """Whether its answer is in."""

    async def result(self, *, resend: bool = True) -> Any:
        """As :meth:`PendingWrite.result`, awaited."""


#: Sends a write: behind the given unanswered checkpoint of its thread (None when it cannot
#: be, S5), or, given None, on its own.
Send = Callable[[PendingWrite | None], PendingWrite | None]
#: :data:`Send` of the asyncio saver (sending alone may be a unary call, awaited).
AsyncSend = Callable[[AsyncPendingWrite | None], Awaitable[AsyncPendingWrite | None]]


class _Sent:
    __slots__ = ("checkpoint", "write")

    def __init__(self, write: Any, checkpoint: bool) -> None:
        self.write = write
        self.checkpoint = checkpoint


class _Thread:
    """One thread's writes ahead, oldest first; the first error among those let go; whether
    a checkpoint of it failed (those after it are then never sent again). The books only:
    the callers wait, under their own lock where they have one."""

    __slots__ = ("checkpoint_failed", "error", "last_checkpoint", "sent")

    def __init__(self) -> None:
        self.sent: deque[_Sent] = deque()
        self.error: CheckpointdError | None = None
        self.last_checkpoint: Any = None
        self.checkpoint_failed = False

    def record(self, write: Any, checkpoint: bool) -> list[_Sent]:
        """Keep a write just sent; the answered writes at the front to let go (and the
        oldest, answered or not, beyond :data:`MAX_AHEAD`), whose results the caller reads."""
        self.sent.append(_Sent(write, checkpoint))
        if checkpoint:
            self.last_checkpoint = write
        sent, one_more = self.sent, len(self.sent) > MAX_AHEAD
        taken: list[_Sent] = []
        while sent and (sent[0].write.done() or (one_more and not taken)):
            taken.append(sent.popleft())
        return taken

    def take_through(self, previous: Any) -> list[_Sent]:
        """The writes up to ``previous``, this thread's newest checkpoint, in order, taken
        off (none when it was let go already, and nothing before it is left)."""
        found = (i for i, item in enumerate(self.sent) if item.write is previous)
        through = next(found, -1)
        return [self.sent.popleft() for _ in range(through + 1)]

    def take_all(self) -> tuple[list[_Sent], CheckpointdError | None]:
        """Every write still kept and the error kept from those let go, taken off."""
        taken, error = list(self.sent), self.error
        self.sent.clear()
        self.error = None
        return taken, error

    def resends(self, item: _Sent) -> bool:
        """Whether a write the stream lost may be sent again: not a checkpoint after one of
        this thread that failed (its parent may not be stored, S5)."""
        return not (item.checkpoint and self.checkpoint_failed)

    def failed(self, item: _Sent) -> None:
        self.checkpoint_failed = self.checkpoint_failed or item.checkpoint

    def keep(self, error: CheckpointdError | None) -> None:
        """Keep the first error of the writes let go, to raise at the thread's next wait."""
        self.error = self.error or error


class _Threads:
    """The threads with writes ahead, by id (the callers hold their lock around these)."""

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}

    def thread(self, thread_id: str, thread: _Thread | None = None) -> _Thread:
        """The thread's books: ``thread`` put back if a wait let it go meanwhile."""
        found = self._threads.get(thread_id)
        if found is None:
            found = self._threads[thread_id] = thread or _Thread()
        return found

    def taken(
        self, thread_ids: Iterable[str] | None
    ) -> tuple[dict[str, _Thread], list[tuple[_Thread, list[_Sent], CheckpointdError | None]]]:
        """The threads of ``thread_ids`` (every one when None) and what each kept, taken."""
        if thread_ids is None:
            threads = dict(self._threads)
        else:
            found = ((thread_id, self._threads.get(thread_id)) for thread_id in thread_ids)
            threads = {thread_id: thread for thread_id, thread in found if thread is not None}
        return threads, [(thread, *thread.take_all()) for thread in threads.values()]

    def holds(self, thread_ids: Iterable[str] | None) -> bool:
        """Whether any of the threads of ``thread_ids`` (any thread when None) has writes
        ahead, or an error kept."""
        if thread_ids is None:
            return bool(self._threads)
        return any(thread_id in self._threads for thread_id in thread_ids)

    def forget(self, threads: dict[str, _Thread]) -> None:
        """Let go of the threads with nothing left ahead: only once what a wait took is
        settled, so a checkpoint sent meanwhile went behind the last one (S5)."""
        for thread_id, thread in threads.items():
            if not thread.sent and self._threads.get(thread_id) is thread:
                del self._threads[thread_id]


class WritesAhead:
    """The unanswered writes of each thread, for the blocking saver. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads = _Threads()

    def add(self, thread_id: str, send: Send, *, checkpoint: bool) -> None:
        """Send a write (``send``) and keep it until its thread is waited for. A checkpoint
        goes behind the thread's previous one where the stream orders them (S5), or once
        that one and the writes before it are durable, raising its error if it failed. The
        answered writes ahead of it are let go (an error among them kept to raise), and the
        oldest is waited for while the thread has more than :data:`MAX_AHEAD`."""
        with self._lock:
            thread = self._threads.thread(thread_id)
            previous = thread.last_checkpoint if checkpoint else None
        write = send(previous) if previous is not None else None
        if write is None and previous is not None:
            self._settle_through(thread, previous)
        if write is None:
            write = send(None)
        assert write is not None
        with self._lock:
            thread = self._threads.thread(thread_id, thread)
            let_go = thread.record(write, checkpoint)
        self._keep(thread, _settle(thread, let_go))

    def wait(self, thread_ids: Iterable[str] | None = None) -> None:
        """Wait until the writes of ``thread_ids`` (every thread's when None) are answered;
        raise the first error among them, once."""
        with self._lock:
            threads, taken = self._threads.taken(thread_ids)
        first: CheckpointdError | None = None
        for thread, sent, kept in taken:
            error = _settle(thread, sent)
            first = first or kept or error
        with self._lock:
            self._threads.forget(threads)
        if first is not None:
            raise first

    def _settle_through(self, thread: _Thread, previous: PendingWrite) -> None:
        """Settle the thread's writes in order up to ``previous``, its newest checkpoint;
        raise that one's error (once: not kept), keep an earlier one's to raise later."""
        with self._lock:
            taken = thread.take_through(previous)
        self._keep(thread, _settle(thread, taken[:-1]))
        _settle(thread, taken[-1:])
        previous.result(resend=False)  # raises its error; settled (or let go) by now

    def _keep(self, thread: _Thread, error: CheckpointdError | None) -> None:
        if error is not None:
            with self._lock:
                thread.keep(error)


def _settle(thread: _Thread, sent: Iterable[_Sent]) -> CheckpointdError | None:
    """Read each write's result in order (waiting where it must); the first error."""
    first: CheckpointdError | None = None
    for item in sent:
        try:
            item.write.result(resend=thread.resends(item))
        except CheckpointdError as exc:
            thread.failed(item)
            first = first or exc
    return first


class AsyncWritesAhead:
    """The unanswered writes of each thread, for the asyncio saver: :class:`WritesAhead`'s
    rules, in one event loop (no lock: the books change only between awaits)."""

    def __init__(self) -> None:
        self._threads = _Threads()

    async def add(self, thread_id: str, send: AsyncSend, *, checkpoint: bool) -> None:
        """As :meth:`WritesAhead.add`."""
        thread = self._threads.thread(thread_id)
        previous = thread.last_checkpoint if checkpoint else None
        write = await send(previous) if previous is not None else None
        if write is None and previous is not None:
            taken = thread.take_through(previous)
            thread.keep(await _asettle(thread, taken[:-1]))
            await _asettle(thread, taken[-1:])
            await previous.result(resend=False)  # raises its error; settled by now
        if write is None:
            write = await send(None)
        assert write is not None
        thread = self._threads.thread(thread_id, thread)
        thread.keep(await _asettle(thread, thread.record(write, checkpoint)))

    def holds(self, thread_ids: Iterable[str] | None) -> bool:
        """Whether a :meth:`wait` for ``thread_ids`` would have anything to wait for."""
        return self._threads.holds(thread_ids)

    async def wait(self, thread_ids: Iterable[str] | None = None) -> None:
        """As :meth:`WritesAhead.wait`."""
        threads, taken = self._threads.taken(thread_ids)
        first: CheckpointdError | None = None
        for thread, sent, kept in taken:
            error = await _asettle(thread, sent)
            first = first or kept or error
        self._threads.forget(threads)
        if first is not None:
            raise first


async def _asettle(thread: _Thread, sent: Iterable[_Sent]) -> CheckpointdError | None:
    """:func:`_settle`, awaited."""
    first: CheckpointdError | None = None
    for item in sent:
        try:
            await item.write.result(resend=thread.resends(item))
        except CheckpointdError as exc:
            thread.failed(item)
            first = first or exc
    return first
