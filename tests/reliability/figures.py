"""The size of a fault-suite run and the figures each suite reports at the end of it."""

from __future__ import annotations

import os
import threading

__all__ = ["FIGURES", "FULL", "record", "render", "size"]

#: Whether this is the full-size run (``CHECKPOINTD_RELIABILITY=full``).
FULL = os.environ.get("CHECKPOINTD_RELIABILITY", "reduced").strip().lower() == "full"

_lock = threading.Lock()
#: suite name -> figure name -> value, in the order they were recorded.
FIGURES: dict[str, dict[str, int | str]] = {}


def size(reduced: int, full: int) -> int:
    """``full`` in the full-size run, else ``reduced``."""
    return full if FULL else reduced


def record(suite: str, **figures: int | str) -> None:
    """Add to a suite's figures: integers are summed, other values replaced."""
    with _lock:
        entry = FIGURES.setdefault(suite, {})
        for name, value in figures.items():
            previous = entry.get(name)
            if isinstance(value, int) and isinstance(previous, int):
                entry[name] = previous + value
            else:
                entry[name] = value


def render() -> str:
    """The figures as aligned text, one suite per block."""
    lines = [f"size: {'full' if FULL else 'reduced'} (CHECKPOINTD_RELIABILITY)"]
    with _lock:
        for suite, figures in FIGURES.items():
            lines.append(f"{suite}:")
            width = max(len(name) for name in figures)
            lines.extend(f"  {name:<{width}}  {value}" for name, value in figures.items())
    return "\n".join(lines) + "\n"
