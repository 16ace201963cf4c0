"""The graph writes a pipelining saver sent ahead of their answers, per thread (contract G22).

A write sent ahead is durable once its answer is in; the saver waits for a thread's writes
(:meth:`WritesAhead.wait`) before it reads or changes that thread, so a reader of the thread
through this saver sees them, and raises the first that failed there. Answers already in are
let go as writes are added, so a long run holds only what is still unanswered, at most
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

    def result(self) -> Any:
        """Its response once durable, waiting if it must; its error raised, every time."""


class _Thread:
    """One thread's writes ahead, oldest first, and the first error among those let go."""

    __slots__ = ("error", "last_put", "writes")

    def __init__(self) -> None:
        self.writes: deque[PendingWrite] = deque()
        self.error: CheckpointdError | None = None
        self.last_put: PendingWrite | None = None


class WritesAhead:
    """The unanswered writes of each thread. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, _Thread] = {}

    def add(self, thread_id: str, send: Callable[[], PendingWrite], *, checkpoint: bool) -> None:
        """Send a write (``send()``) and keep it until its thread is waited for. A checkpoint
        is sent only once the thread's previous checkpoint is durable, its error raised
        otherwise: a stored checkpoint's parent, and the channel values it shares with it,
        are never missing (G22). The answered writes ahead of it are let go (an error among
        them kept to raise), and the oldest is waited for while the thread has more than
        :data:`MAX_AHEAD` unanswered."""
        with self._lock:
            thread = self._threads.setdefault(thread_id, _Thread())
            previous = thread.last_put if checkpoint else None
        if previous is not None:
            previous.result()
        write = send()
        with self._lock:
            thread = self._threads.setdefault(thread_id, _Thread())
            thread.writes.append(write)
            if checkpoint:
                thread.last_put = write
            settled = _answered_prefix(thread.writes, len(thread.writes) > MAX_AHEAD)
        error = _settle(settled)
        if error is not None:
            with self._lock:
                thread = self._threads.setdefault(thread_id, _Thread())
                thread.error = thread.error or error

    def wait(self, thread_ids: Iterable[str] | None = None) -> None:
        """Wait until the writes of ``thread_ids`` (every thread's when None) are answered;
        raise the first error among them, once."""
        with self._lock:
            if thread_ids is None:
                taken = list(self._threads.values())
                self._threads.clear()
            else:
                found = (self._threads.pop(thread_id, None) for thread_id in thread_ids)
                taken = [thread for thread in found if thread is not None]
        first: CheckpointdError | None = None
        for thread in taken:
            error = _settle(list(thread.writes))
            first = first or thread.error or error
        if first is not None:
            raise first


def _answered_prefix(writes: deque[PendingWrite], one_more: bool) -> list[PendingWrite]:
    """Take the answered writes off the front of ``writes`` (and the oldest, answered or
    not, when ``one_more``): their results are read outside the lock."""
    taken: list[PendingWrite] = []
    while writes and (writes[0].done() or (one_more and not taken)):
        taken.append(writes.popleft())
    return taken


def _settle(writes: list[PendingWrite]) -> CheckpointdError | None:
    """Read each write's result (waiting where it must); the first error, or None."""
    first: CheckpointdError | None = None
    for write in writes:
        try:
            write.result()
        except CheckpointdError as exc:
            first = first or exc
    return first
