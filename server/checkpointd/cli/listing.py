"""The listing commands (``interrupts list``, ``runs list``): connect, read the first
``--limit`` rows page by page, and print them as a table (or, with ``--json``, one object per
row), saying on stderr when there are none or more than shown."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from checkpointd.cli.connection import connect
from checkpointd.cli.output import fail, print_json
from checkpointd_client import CheckpointdClient, CheckpointdError

__all__ = ["PAGE_CAP", "print_listing", "read_pages"]

#: The most rows a listing asks for per page (the server's cap).
PAGE_CAP = 1000


class _Page(Protocol):
    @property
    def next_page_token(self) -> str: ...


P = TypeVar("P", bound=_Page)
T = TypeVar("T")


def read_pages(
    fetch: Callable[[int, str], P], rows_of: Callable[[P], Sequence[T]], limit: int
) -> tuple[list[T], bool]:
    """The first ``limit`` rows of a listing, read with ``fetch(page_size, page_token)`` page
    after page, each asking only for the rows still wanted; and whether the server has more
    (for the "raise --limit" hint)."""
    rows: list[T] = []
    token = ""
    while len(rows) < limit:
        page = fetch(min(limit - len(rows), PAGE_CAP), token)
        rows.extend(rows_of(page))
        token = page.next_page_token
        if not token:
            break
    return rows, bool(token)


def print_listing(
    args: argparse.Namespace,
    listing: Callable[[CheckpointdClient], Callable[..., P]],
    rows_of: Callable[[P], Sequence[T]],
    table: Callable[[Sequence[T]], list[str]],
    *,
    what: str,
    as_json: Callable[[T], dict[str, Any]] | None = None,
) -> int:
    """Print the first ``--limit`` rows of ``listing(client)`` (the list call with its
    filters, given ``page_size`` and ``page_token`` here) as ``table``'s lines, or as JSON
    lines when ``as_json`` is given and ``--json`` asked; ``what`` names the rows in the
    "none" note. 1 when the server answers an error, else 0."""
    try:
        with connect(args) as client:
            call = listing(client)
            rows, more = read_pages(
                lambda size, token: call(page_size=size, page_token=token), rows_of, args.limit
            )
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    rows = rows[: args.limit]
    if as_json is not None and args.json:
        for row in rows:
            print_json(as_json(row))
        return 0
    if not rows:
        print(f"no {what} in namespace {args.namespace!r}", file=sys.stderr)
        return 0
    for line in table(rows):
        print(line)
    if more:
        print(f"(showing the newest {args.limit}; raise --limit for more)", file=sys.stderr)
    return 0
