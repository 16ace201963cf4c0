"""The listing commands (``interrupts list``, ``runs list``): connect, read the first
``--limit`` rows page by page, and print them as a table (or, with ``--json``, one object per
row), saying on stderr when there are none or more than shown; with ``--all-namespaces``
(``-A``), of each namespace the server lists for the command's token (ListNamespaces,
contract N2: those that hold a run, a pause or a LangGraph thread), merged newest first."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from checkpointd.cli.connection import connect
from checkpointd.cli.output import fail, print_json
from checkpointd_client import CheckpointdClient, CheckpointdError

__all__ = ["PAGE_CAP", "print_listing", "read_pages"]

#: The most rows a listing asks for per page (the server's cap).
PAGE_CAP = 1000
#: The most namespaces ``-A`` reads: each is a listing of its own.
MAX_NAMESPACES = 10_000


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
    newest: Callable[[T], datetime | None],
    as_json: Callable[[T], dict[str, Any]] | None = None,
) -> int:
    """Print the first ``--limit`` rows of ``listing(client)`` (the list call with its
    filters, given ``page_size`` and ``page_token`` here) as ``table``'s lines, or as JSON
    lines when ``as_json`` is given and ``--json`` asked; ``what`` names the rows in the
    "none" note. With ``--all-namespaces``, the rows of every namespace the server lists
    for the token, merged by ``newest`` (newest first), with the namespace of each. 1 when
    the server answers an error, else 0."""
    every = bool(getattr(args, "all_namespaces", False))
    try:
        namespaces = _readable_namespaces(args) if every else [args.namespace]
        found: list[tuple[str, T]] = []
        more = False
        for namespace in namespaces:
            rows, more_here = _read(args, namespace, listing, rows_of)
            found.extend((namespace, row) for row in rows)
            more = more or more_here
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    if every:
        found.sort(key=lambda pair: newest(pair[1]) or _NEVER, reverse=True)
        more = more or len(found) > args.limit
    found = found[: args.limit]
    if as_json is not None and args.json:
        for namespace, row in found:
            print_json({**as_json(row), "namespace": namespace} if every else as_json(row))
        return 0
    if not found:
        where = "any namespace the token may read" if every else f"namespace {args.namespace!r}"
        print(f"no {what} in {where}", file=sys.stderr)
        return 0
    lines = table([row for _, row in found])
    if every:
        lines = _with_namespaces(lines, [namespace for namespace, _ in found])
    for line in lines:
        print(line)
    if more:
        print(f"(showing the newest {args.limit}; raise --limit for more)", file=sys.stderr)
    return 0


_NEVER = datetime.min.replace(tzinfo=UTC)


def _readable_namespaces(args: argparse.Namespace) -> list[str]:
    """The namespaces that hold a run and that the token may read, in the server's order of
    names (ListNamespaces)."""
    with connect(args) as client:
        names, _ = read_pages(
            lambda size, token: client.list_namespaces(page_size=size, page_token=token),
            lambda page: page.namespaces,
            MAX_NAMESPACES,
        )
    return names


def _read(
    args: argparse.Namespace,
    namespace: str,
    listing: Callable[[CheckpointdClient], Callable[..., P]],
    rows_of: Callable[[P], Sequence[T]],
) -> tuple[list[T], bool]:
    """The first ``--limit`` rows of ``namespace``, and whether it has more."""
    with connect(argparse.Namespace(**{**vars(args), "namespace": namespace})) as client:
        call = listing(client)
        return read_pages(
            lambda size, token: call(page_size=size, page_token=token), rows_of, args.limit
        )


def _with_namespaces(lines: list[str], namespaces: list[str]) -> list[str]:
    """``lines`` (a header, then a line per row) with a NAMESPACE column first."""
    width = max(len(name) for name in ["NAMESPACE", *namespaces])
    cells = ["NAMESPACE", *namespaces]
    return [
        f"{cell.ljust(width)}  {line}".rstrip() for cell, line in zip(cells, lines, strict=True)
    ]
