"""Progress of long commands on a terminal: one line redrawn in place on stderr with what is
being done, how much of how much, the rate and the time left.

Nothing is drawn when stderr is not a terminal (piped, logged, in CI) or with ``--quiet``;
the one summary line each command prints at the end is its own. Neither ``rich`` nor
``tqdm`` is a dependency of the server (whose image stays small); a single redrawn line needs
neither.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressLine", "format_duration"]

#: The least time between two redraws, so a fast loop does not spend its time drawing.
REDRAW_SECONDS = 0.1


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h01m``."""
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class ProgressLine:
    """``update(what, done, total)`` as often as you like; ``close()`` at the end."""

    def __init__(self, unit: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._unit = unit
        self._enabled = not quiet and self._stream.isatty()
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._width = 0
        self._what = ""
        self._what_started = self._started

    @property
    def enabled(self) -> bool:
        """Whether anything is drawn."""
        return self._enabled

    def update(self, what: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` units of ``what`` (redrawn at most every 0.1 s, and
        always when ``done`` reaches ``total``)."""
        if not self._enabled:
            return
        now = time.monotonic()
        if what != self._what:
            self._what, self._what_started = what, now
        if now - self._drawn_at < REDRAW_SECONDS and done < total:
            return
        self._drawn_at = now
        elapsed = now - self._what_started
        rate = done / elapsed if elapsed > 0 else 0.0
        parts = [f"{what}: {done}/{total} {self._unit}"]
        if total:
            parts.append(f"{100 * done // total}%")
        if rate > 0:
            parts.append(f"{rate:,.0f} {self._unit}/s")
            if done < total:
                parts.append(f"{format_duration((total - done) / rate)} left")
        line = "  ".join(parts)
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
        self._width = len(line)

    def close(self) -> None:
        """End the line, so the summary starts on a fresh one."""
        if self._enabled and self._width:
            self._stream.write("\n")
            self._stream.flush()
            self._width = 0
