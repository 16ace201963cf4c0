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
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from checkpointd_client.errors import CheckpointdError

__all__ = ["MAX_AHEAD", "PendingWrite", "WritesAhead"]

#: Unanswered writes of one thread before the next one waits for the oldest.
MAX_AHEAD = 64


class PendingWrite(Protocol):
    """A write sent ahead: the blocking client's ``GraphWrite``."""

    def done(self) -> bool:
        """Whether its answer is in."""

    def result(self, *, resend: bool = True) -> Any:
        """Its response once durable, waiting if it must (sent again where the stream lost
        it, with ``resend``); its error raised, every time."""


#: Sends a write: behind the given unanswered checkpoint of its thread (None when it cannot
#: be, S5), or, given None, on its own.
Send = Callable[[PendingWrite | None], PendingWrite | None]


class _Sent:
    __slots__ = ("checkpoint", "write")

    def __init__(self, write: PendingWrite, checkpoint: bool) -> None:
        self.write = write
        self.checkpoint = checkpoint


class _Thread:
    """One thread's writes ahead, oldest first; the first error among those let go; whether
    a checkpoint of it failed (those after it are then never sent again)."""

    __slots__ = ("checkpoint_failed", "error", "last_checkpoint", "sent")

    def __init__(self) -> None:
        self.sent: deque[_Sent] = deque()
        self.error: CheckpointdError | None = None
        self.last_checkpoint: PendingWrite | None = None
        self.checkpoint_failed = False

    def settle(self, sent: Iterable[_Sent]) -> CheckpointdError | None:
        """Read each write's result in order (waiting where it must); the first error."""
        first: CheckpointdError | None = None
        for item in sent:
            try:
                item.write.result(resend=not (item.checkpoint and self.checkpoint_failed))
            except CheckpointdError as exc:
                self.checkpoint_failed = self.checkpoint_failed or item.checkpoint
                first = first or exc
        return first


class WritesAhead:
    """The unanswered writes of each thread. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, _Thread] = {}

    def add(self, thread_id: str, send: Send, *, checkpoint: bool) -> None:
        """Send a write (``send``) and keep it until its thread is waited for. A checkpoint
        goes behind the thread's previous one where the stream orders them (S5), or once
        that one and the writes before it are durable, raising its error if it failed. The
        answered writes ahead of it are let go (an error among them kept to raise), and the
        oldest is waited for while the thread has more than :data:`MAX_AHEAD`."""
        with self._lock:
            thread = self._threads.setdefault(thread_id, _Thread())
            previous = thread.last_checkpoint if checkpoint else None
        write = send(previous) if previous is not None else None
        if write is None and previous is not None:
            self._settle_through(thread, previous)
        if write is None:
            write = send(None)
        assert write is not None
        with self._lock:
            # The same thread, put back if a wait let it go meanwhile (all it held settled).
            thread = self._threads.setdefault(thread_id, thread)
            thread.sent.append(_Sent(write, checkpoint))
            if checkpoint:
                thread.last_checkpoint = write
            let_go = _answered_prefix(thread.sent, len(thread.sent) > MAX_AHEAD)
        self._keep(thread, thread.settle(let_go))

    def wait(self, thread_ids: Iterable[str] | None = None) -> None:
        """Wait until the writes of ``thread_ids`` (every thread's when None) are answered;
        raise the first error among them, once."""
        with self._lock:
            if thread_ids is None:
                threads = dict(self._threads)
            else:
                found = ((thread_id, self._threads.get(thread_id)) for thread_id in thread_ids)
                threads = {thread_id: thread for thread_id, thread in found if thread is not None}
            taken = [(thread, list(thread.sent), thread.error) for thread in threads.values()]
            for thread in threads.values():
                thread.sent.clear()
                thread.error = None
        first: CheckpointdError | None = None
        for thread, sent, kept in taken:
            error = thread.settle(sent)
            first = first or kept or error
        # Forgotten only now: a checkpoint sent meanwhile went behind the last one (S5).
        with self._lock:
            for thread_id, thread in threads.items():
                if not thread.sent and self._threads.get(thread_id) is thread:
                    del self._threads[thread_id]
        if first is not None:
            raise first

    def _settle_through(self, thread: _Thread, previous: PendingWrite) -> None:
        """Settle the thread's writes in order up to ``previous``, its newest checkpoint;
        raise that one's error (once: not kept), keep an earlier one's to raise later."""
        with self._lock:
            found = (i for i, item in enumerate(thread.sent) if item.write is previous)
            through = next(found, -1)  # -1: let go already, nothing before it left
            taken = [thread.sent.popleft() for _ in range(through + 1)]
        self._keep(thread, thread.settle(taken[:-1]))
        thread.settle(taken[-1:])
        previous.result(resend=False)  # raises its error; settled (or let go) by now

    def _keep(self, thread: _Thread, error: CheckpointdError | None) -> None:
        if error is not None:
            with self._lock:
                thread.error = thread.error or error


def _answered_prefix(sent: deque[_Sent], one_more: bool) -> list[_Sent]:
    """Take the answered writes off the front of ``sent`` (and the oldest, answered or not,
    when ``one_more``): their results are read outside the lock."""
    taken: list[_Sent] = []
    while sent and (sent[0].write.done() or (one_more and not taken)):
        taken.append(sent.popleft())
    return taken
