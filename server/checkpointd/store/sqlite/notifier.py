"""Wakes the SQLite outbox reader when the database file may hold new events."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["DataVersion", "SQLiteEventNotifier"]

#: How often the notifier looks at ``PRAGMA data_version`` for other processes' commits.
_DATA_VERSION_POLL_SECONDS: Final = 0.05


class DataVersion:
    """``PRAGMA data_version`` of a plain ``sqlite3`` connection of its own, read on the
    event loop's thread: it changes whenever another connection (this process's writer, or
    any other process) commits. In WAL mode the pragma reads the WAL index in shared memory
    and no page of the file, so a poll costs microseconds; reading it on an aiosqlite
    connection's thread instead cost a queue put, a thread wake and a ``call_soon_threadsafe``
    back, 20 times a second while the sidecar was idle. The busy timeout is 0: the loop
    never waits for a lock, and :meth:`read` raises instead (the caller reads then)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def read(self) -> int:
        """The current value; raises :class:`sqlite3.Error` when it cannot be read (and
        opens a new connection on the next call)."""
        if self._closed:
            raise sqlite3.ProgrammingError("the store is closed")
        conn = self._conn
        if conn is None:
            # mode=rw: never create the file (a poll after the file was removed fails instead).
            uri = f"{Path(self._path).absolute().as_uri()}?mode=rw"
            conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            self._conn = conn
        try:
            # fetchall steps the statement to its end: no read transaction stays open to
            # hold back the WAL checkpoint.
            rows = conn.execute("PRAGMA data_version").fetchall()
        except sqlite3.Error:
            self._conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            raise
        return int(rows[0][0])

    def close(self) -> None:
        """Close the connection; later reads raise. Safe to call twice."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class SQLiteEventNotifier:
    """Wakes the outbox reader when the file changed: ``data_version`` (a
    :class:`DataVersion` read) every 50 ms while the reader waits, and at once when this
    process commits an event (the store sets every event of ``wakeups`` then). A read that
    fails (the file busy or locked, the store closed) counts as a change, so no commit goes
    unnoticed.

    Each poll is a plain timer callback (``call_later``), not a coroutine woken under a
    timeout: an idle sidecar polls 20 times a second, and a timeout that expires raises and
    cancels on every round, which cost more than the read itself."""

    def __init__(self, data_version: Callable[[], int], wakeups: set[asyncio.Event]) -> None:
        self._data_version = data_version
        self._wakeups = wakeups
        self._local = asyncio.Event()
        self._local.set()  # the first wait returns at once
        self._version: int | None = None
        self._poll: asyncio.TimerHandle | None = None
        wakeups.add(self._local)

    def _changed(self) -> bool | None:
        """Whether ``data_version`` moved since the last look; None when it cannot be read."""
        try:
            version = self._data_version()
        except sqlite3.Error:
            self._version = None  # the next good read is a new baseline, and a change
            return None
        changed = version != self._version
        self._version = version
        return changed

    def _tick(self) -> None:
        """One poll of a wait: wake it on a change (or an unreadable file), else poll again."""
        if self._changed() is False:
            self._poll = asyncio.get_running_loop().call_later(
                _DATA_VERSION_POLL_SECONDS, self._tick
            )
        else:
            self._poll = None
            self._local.set()

    async def wait(self, max_wait: float) -> None:
        """Return when the file may hold new events, or after ``max_wait`` seconds."""
        if self._version is None and self._changed() is not None:
            # The first wait, or the last read failed: a new baseline, and return at once,
            # so the caller's read covers every commit that the next wait would not notice.
            self._local.set()
        try:
            if not self._local.is_set():
                if self._version is None:
                    # Still unreadable: "may have changed", after one poll interval (a
                    # lasting failure never spins the reader).
                    max_wait = min(max_wait, _DATA_VERSION_POLL_SECONDS)
                else:
                    self._tick()  # a look at once, then every poll interval
                if not self._local.is_set() and max_wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max_wait):
                            await self._local.wait()
        finally:
            if self._poll is not None:
                self._poll.cancel()
                self._poll = None
            self._local.clear()

    async def close(self) -> None:
        """Stop listening to this process's writes."""
        self._wakeups.discard(self._local)
