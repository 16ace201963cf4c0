"""What another wing of the SQLite store borrows from it: its transactions and connections.

The graph wing runs on the store's own writer (its lock, ``BEGIN IMMEDIATE`` and group
commit) and its query-only reader, so the file still has one writer per process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import aiosqlite

from checkpointd.domain import EventKind, PendingRecord

__all__ = ["SQLiteAccess"]


@dataclass(frozen=True, slots=True)
class SQLiteAccess:
    """The SQLite store's machinery, lent to a wing that shares its file."""

    call: Callable[[], AbstractAsyncContextManager[None]]
    """Bounds a call by the store's timeout and turns SQLite errors into store errors."""
    write: Callable[[], AbstractAsyncContextManager[aiosqlite.Connection]]
    """One ``BEGIN IMMEDIATE`` transaction on the writer."""
    reader: Callable[[], aiosqlite.Connection]
    """The query-only connection."""
    group: Callable[[Callable[[aiosqlite.Connection], Awaitable[Any]]], Awaitable[Any]]
    """Runs one write in the next group-commit transaction; returns its outcome."""
    append_event: Callable[
        [aiosqlite.Connection, str, EventKind, PendingRecord, int], Awaitable[None]
    ]
    """Appends a pending-interrupt event in the writer's transaction (its commit wakes the
    watchers)."""
