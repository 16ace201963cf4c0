"""What the parts that share the SQLite store's file borrow from it: its transactions and
connections.

The graph store runs on the store's own writer (its lock, ``BEGIN IMMEDIATE`` and group
commit) and its query-only reader, so the file still has one writer per process. A
transaction or a read is a body of statements run in one call on the connection's thread
(:mod:`checkpointd.store.sqlite.on_thread`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from checkpointd.store.statements import EventWriter, RunsBody, Statements

__all__ = ["SQLiteAccess"]


@dataclass(frozen=True, slots=True)
class SQLiteAccess:
    """The SQLite store's machinery, lent to the parts that share its file."""

    call: Callable[[], AbstractAsyncContextManager[None]]
    """Bounds a call by the store's timeout and turns SQLite errors into store errors."""
    write: RunsBody
    """One ``BEGIN IMMEDIATE`` transaction on the writer, in one call on its thread."""
    write_hops: Callable[[], AbstractAsyncContextManager[Statements]]
    """One ``BEGIN IMMEDIATE`` transaction on the writer, one thread hop per statement, for a
    body that awaits other work between its statements."""
    read: RunsBody
    """Reads on the query-only connection, in one call on its thread."""
    read_point: RunsBody
    """The reads of one checkpoint's rows, on the event loop's own connection (on the
    query-only connection's thread when the file is locked for a moment)."""
    group: Callable[[Callable[[Statements], Awaitable[Any]]], Awaitable[Any]]
    """Runs one write in the next group-commit transaction; returns its outcome."""
    append_event: EventWriter
    """Appends a pending-interrupt event in the writer's transaction (its commit wakes the
    watchers)."""
