"""When a client may open its next Write stream, after streams that stopped answering
(contract S2).

A stream "stops answering" when an item's deadline passes and the stream answered nothing
since that item was sent: a wedged server stream, or a proxy that black-holes one HTTP/2
stream while the connection and its pings stay alive. The first such stream is replaced at
once; each further one in a row waits longer before the next stream is opened (doubling,
capped), and after :data:`UNARY_AFTER` in a row the client sends its writes unary for
:data:`UNARY_HOLD_SECONDS` before it tries a stream again. Writes are never held back: while
no stream may be opened they go as unary calls. Any answer on a stream ends the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = [
    "PAUSE_CAP_SECONDS",
    "PAUSE_INITIAL_SECONDS",
    "UNARY_AFTER",
    "UNARY_HOLD_SECONDS",
    "StreamHealth",
]

#: The pause after the second stream in a row that stopped answering; it doubles after each.
PAUSE_INITIAL_SECONDS: Final = 0.5
#: The longest pause between two streams before the client settles on unary calls.
PAUSE_CAP_SECONDS: Final = 8.0
#: Streams in a row that stopped answering after which the client goes unary for a while.
UNARY_AFTER: Final = 4
#: How long the client then sends its writes unary before it tries a stream again.
UNARY_HOLD_SECONDS: Final = 60.0


class StreamHealth:
    """The run of Write streams that stopped answering, and when the next may open.
    Thread-safe: the blocking client's threads and its reader threads share one."""

    def __init__(
        self,
        *,
        pause_initial: float = PAUSE_INITIAL_SECONDS,
        pause_cap: float = PAUSE_CAP_SECONDS,
        unary_after: int = UNARY_AFTER,
        unary_hold: float = UNARY_HOLD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if unary_after < 2:
            raise ValueError(f"unary_after must be >= 2, got {unary_after}")
        self._pause_initial = pause_initial
        self._pause_cap = pause_cap
        self._unary_after = unary_after
        self._unary_hold = unary_hold
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._not_before = 0.0

    @property
    def failures(self) -> int:
        """Streams in a row that stopped answering (0 once one answers)."""
        return self._failures

    def pause(self, failures: int) -> float:
        """The seconds without a stream after ``failures`` streams in a row stopped answering:
        none after the first, then doubling from ``pause_initial`` up to ``pause_cap``, and
        ``unary_hold`` from the ``unary_after``-th on."""
        if failures <= 1:
            return 0.0
        if failures >= self._unary_after:
            return self._unary_hold
        return float(min(self._pause_cap, self._pause_initial * 2 ** (failures - 2)))

    def may_open(self) -> bool:
        """Whether a new stream may be opened now; if not, writes go unary."""
        return self._clock() >= self._not_before

    def answered(self) -> None:
        """A stream answered an item: it is alive, and the run of failures is over."""
        if self._failures:  # no lock on the hot path of a healthy stream
            with self._lock:
                self._failures = 0
                self._not_before = 0.0

    def stopped_answering(self) -> None:
        """A stream stopped answering: count it and set when the next one may open."""
        with self._lock:
            self._failures += 1
            self._not_before = self._clock() + self.pause(self._failures)
