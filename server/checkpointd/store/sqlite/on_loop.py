"""A point read (one checkpoint, a graph one with its values) on the event loop's thread,
without the hand-off to a connection's thread.

A read on the query-only reader's thread costs a queue put, a thread wake, a
``call_soon_threadsafe`` back and the GIL passed to and fro around each statement: about
230 us of CPU beside the 50 us of the statements of a graph ``get_tuple`` at turn 200. In
WAL mode a read takes no lock that a writer holds and never waits for an fsync, so the loop
can run it at once. Its only wait is on the pages it reads, the same bytes the reply that
carries them is built from on the loop anyway.

The connection is a plain ``sqlite3`` one of the loop's own, query-only, with a busy timeout
of 0: the loop never waits for a lock. A read that meets one (a WAL index being rebuilt after
a crash, say) raises :class:`LoopReadBusy`, and the caller reads on the thread instead, as
:class:`~checkpointd.store.sqlite.notifier.DataVersion` does for its looks.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TypeVar

from checkpointd.store.sqlite import errors
from checkpointd.store.sqlite.on_thread import Body, Direct, drive

__all__ = ["LoopReadBusy", "LoopReader"]

T = TypeVar("T")


class LoopReadBusy(Exception):
    """The file was locked for a moment: read on the connection's thread instead."""


class LoopReader:
    """Reads on a ``sqlite3`` connection of the event loop's thread, each statement in
    autocommit, as the threaded reader's."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def read(self, body: Body[T]) -> T:
        """Run the body's statements now, on this thread. Raises :class:`LoopReadBusy` when
        the file was locked, :class:`sqlite3.Error` otherwise (the next read opens a new
        connection)."""
        conn = self._connection()
        try:
            return drive(body(Direct(conn)))
        except sqlite3.Error as exc:
            self._conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            if isinstance(exc, sqlite3.OperationalError) and (
                errors.primary_code(exc) in errors.BUSY_CODES
            ):
                raise LoopReadBusy from exc
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise sqlite3.ProgrammingError("the store is closed")
        if self._conn is None:
            # mode=rw: never create the file (a read after it was removed fails instead);
            # query_only, as the threaded reader. Any thread may read (a store driven from
            # another loop): each read is one synchronous call, and SQLite serializes a
            # connection's calls.
            uri = f"{Path(self._path).absolute().as_uri()}?mode=rw"
            conn = sqlite3.connect(
                uri, uri=True, timeout=0, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA query_only = ON")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Close the connection; later reads raise. Safe to call twice."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
