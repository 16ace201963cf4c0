"""How every command prints: an error as one line on stderr, a JSON object as one line, rows
as an aligned table. It imports nothing of the client, so ``serve`` and ``store`` print
through it too."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["aligned", "fail", "print_json", "record_json", "when", "words"]


def fail(problem: Exception | str) -> int:
    """Report ``problem`` on stderr as ``checkpointd: error: ...``; the exit status, 1."""
    print(f"checkpointd: error: {problem}", file=sys.stderr)
    return 1


def print_json(value: Mapping[str, Any], *, flush: bool = False) -> None:
    """One JSON object on one line, keys sorted, text as it is (not escaped to ASCII);
    ``flush`` for a stream read line by line as it comes."""
    print(json.dumps(value, ensure_ascii=False, sort_keys=True), flush=flush)


def record_json(record: object, names: Iterable[str]) -> dict[str, Any]:
    """The attributes ``names`` of ``record`` as JSON values, times as ISO 8601 text: the
    attributes a command shows are listed once, not spelled out key by key."""
    values = {name: getattr(record, name) for name in names}
    return {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in values.items()
    }


def when(value: datetime | None) -> str:
    """A time as the tables show it, to the second in UTC (``-`` when unknown)."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def words(*parts: str | None) -> str:
    """The parts of a one-line description, space-separated; None for one that a record
    leaves out (``reason=...`` only when it has a reason)."""
    return " ".join(part for part in parts if part is not None)


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and one line per row, each column as wide as its widest cell, columns two
    spaces apart, no trailing blanks."""
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
