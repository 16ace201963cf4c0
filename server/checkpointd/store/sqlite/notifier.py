"""Wakes the SQLite outbox reader when the database file may hold new events."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import sqlite3
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["DataVersion", "FileWatch", "SQLiteEventNotifier"]

log = logging.getLogger(__name__)

#: How often the notifier looks at ``PRAGMA data_version`` for other processes' commits
#: when it cannot watch the directory; with a watch, the shortest time between two wakes
#: that the file's changes report (so a busy file costs no more reads than this poll).
_DATA_VERSION_POLL_SECONDS: Final = 0.05

#: With a watch, a look at ``data_version`` this often anyway: a file system that sends no
#: inotify events for other processes' writes (a network mount, a writer on another host,
#: a container sharing the file through an overlay) still wakes the reader within a second.
SAFETY_POLL_SECONDS: Final = 1.0

#: After a write to the file, looks at ``data_version`` this long, the first after 1 ms and
#: then twice as long each time up to 50 ms: a commit writes its frames to the ``-wal``
#: (the inotify event) before it publishes them in the WAL index that ``data_version``
#: reads, an fsync later with ``synchronous=FULL``, and that step sends no event.
_SETTLE_SECONDS: Final = 1.0
_FIRST_RELOOK_SECONDS: Final = 0.001

# <linux/inotify.h>
_IN_MODIFY: Final = 0x00000002
_IN_MOVED_TO: Final = 0x00000080
_IN_Q_OVERFLOW: Final = 0x00004000
_IN_IGNORED: Final = 0x00008000
_IN_ONLYDIR: Final = 0x01000000
#: IN_MODIFY: every commit writes the ``-wal`` file (in WAL mode, the only mode the store
#: opens), whichever process or connection made it, and a checkpoint or a restart of the
#: WAL writes too. IN_MOVED_TO: a file renamed over the database changes it without a
#: write. IN_CREATE and IN_CLOSE_WRITE add nothing: a new file holds no commit before its
#: first write, and a close after writes follows their IN_MODIFY (every close of a
#: writable descriptor would wake the reader for nothing).
_WATCH_MASK: Final = _IN_MODIFY | _IN_MOVED_TO | _IN_ONLYDIR
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

_fallback_logged = False


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "inotify needs Linux")
    return ctypes.CDLL(None, use_errno=True)


class FileWatch:
    """An inotify watch on the directory of a database file, reporting writes to the file
    and to its ``-wal``. The directory, not the files: the ``-wal`` file is removed when the
    last connection closes and created again by the next one, which a watch on the file
    itself would not survive. Raises :class:`OSError` when the watch cannot be set up (not
    Linux, the per-user limit of watches or instances reached, no permission)."""

    def __init__(self, path: str) -> None:
        real = os.path.realpath(path)  # SQLite follows a symlink and puts -wal beside the target
        directory, name = os.path.split(real)
        self._names = frozenset({os.fsencode(name), os.fsencode(name + "-wal")})
        libc = _libc()
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        wd = int(libc.inotify_add_watch(fd, os.fsencode(directory or "."), _WATCH_MASK))
        if wd < 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, f"inotify_add_watch {directory}: {os.strerror(code)}", directory)
        self._fd: int | None = fd
        #: False once the kernel dropped the watch (the directory removed or unmounted).
        self.alive = True

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError("the watch is closed")
        return self._fd

    def drain(self) -> bool:
        """Read every queued event; whether one may mean a change of the database (a write
        to it or its ``-wal``, a lost event, the watch dropped)."""
        fd = self.fd
        relevant = False
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return relevant
            except InterruptedError:
                continue
            if not data:
                return relevant
            offset = 0
            while offset + _EVENT.size <= len(data):
                _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + length].rstrip(b"\0")
                offset += length
                if mask & (_IN_Q_OVERFLOW | _IN_IGNORED):
                    relevant = True
                    if mask & _IN_IGNORED:
                        self.alive = False
                elif name in self._names:
                    relevant = True

    def close(self) -> None:
        """Close the descriptor (the kernel drops the watch). Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class DataVersion:
    """``PRAGMA data_version`` of a plain ``sqlite3`` connection of its own, read on the
    event loop's thread: it changes whenever another connection (this process's writer, or
    any other process) commits. In WAL mode the pragma reads the WAL index in shared memory
    and no page of the file, so a look costs microseconds; reading it on an aiosqlite
    connection's thread instead cost a queue put, a thread wake and a ``call_soon_threadsafe``
    back. The busy timeout is 0: the loop never waits for a lock, and :meth:`read` raises
    instead (the caller reads then)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def read(self) -> int:
        """The current value; raises :class:`sqlite3.Error` when it cannot be read (and
        opens a new connection on the next call)."""
        (version,) = self.row("PRAGMA data_version")
        assert isinstance(version, int)
        return version

    def row(self, query: str) -> tuple[object, ...]:
        """The first row of ``query`` on this connection (in autocommit: no read transaction
        stays open); raises :class:`sqlite3.Error` as :meth:`read` does."""
        if self._closed:
            raise sqlite3.ProgrammingError("the store is closed")
        conn = self._conn
        if conn is None:
            # mode=rw: never create the file (a look after the file was removed fails instead).
            uri = f"{Path(self._path).absolute().as_uri()}?mode=rw"
            conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            self._conn = conn
        try:
            # fetchall steps the statement to its end: no read transaction stays open to
            # hold back the WAL checkpoint.
            rows = conn.execute(query).fetchall()
        except sqlite3.Error:
            self._conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            raise
        return tuple(rows[0])

    def close(self) -> None:
        """Close the connection; later reads raise. Safe to call twice."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class SQLiteEventNotifier:
    """Wakes the outbox reader when the file changed, confirmed by ``data_version`` (a
    :class:`DataVersion` read), and at once when this process commits an event (the store
    sets every event of ``wakeups`` then); each wait ends with a new look, so this
    process's own commits wake the reader once, not again through the file. A read that
    fails (the file busy or locked, the store closed) counts as a change, so no commit goes
    unnoticed.

    With ``path``, an inotify watch (:class:`FileWatch`) on the file's directory tells a
    waiting reader of another connection's or process's commit: an idle file costs no
    wake-up but a look every ``safety_poll`` seconds. Wakes that ``data_version`` reports
    are at least 50 ms apart: under load inotify fires on every commit, and one outbox read
    per commit would cost more than the poll it replaces; the first commit after a quiet
    spell wakes the reader at once. Without a watch (not Linux, no inotify left, no
    ``path``), ``data_version`` is polled every 50 ms while the reader waits.

    With ``outbox_bounds`` (the outbox's purge mark and newest cursor, read on the same
    connection as ``data_version``), a change that leaves them as they were when the reader
    last read does not wake it: the commits of checkpoints and other rows that write no
    event (this process's puts above all, which it makes itself and need no outbox read)
    cost a look, at most one per 50 ms, and no read of the outbox. An event committed by
    another connection moves the newest cursor and wakes the reader as before; a bounds
    read that fails counts as a change.

    Each look is a plain callback (``call_later``, ``add_reader``), not a coroutine woken
    under a timeout: a timeout that expires raises and cancels on every round, which cost
    more than the read itself."""

    def __init__(
        self,
        data_version: Callable[[], int],
        wakeups: set[asyncio.Event],
        *,
        path: str | None = None,
        safety_poll: float = SAFETY_POLL_SECONDS,
        open_watch: Callable[[str], FileWatch] = FileWatch,
        outbox_bounds: Callable[[], object] | None = None,
    ) -> None:
        self._data_version = data_version
        self._outbox_bounds = outbox_bounds
        self._bounds: object = None  # the outbox's bounds when the reader last read
        self._wakeups = wakeups
        self._local = asyncio.Event()
        self._local.set()  # the first wait returns at once
        self._version: int | None = None
        self._poll: asyncio.TimerHandle | None = None
        self._path = path
        self._safety_poll = safety_poll
        self._open_watch = open_watch
        self._watch: FileWatch | None = None
        self._watch_failed = path is None
        self._reading = False  # the watch's descriptor is registered with the loop
        self._last_wake = -_DATA_VERSION_POLL_SECONDS  # loop time of the last data_version wake
        self._settling_until = -1.0  # loop time until which writes are followed by looks
        self._relook = _FIRST_RELOOK_SECONDS
        wakeups.add(self._local)

    @property
    def watching(self) -> bool:
        """Whether an inotify watch wakes this notifier (False: it polls every 50 ms)."""
        return self._watch is not None

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

    def _quiet(self) -> bool:
        """After a change of ``data_version``: whether the outbox's bounds are those the
        reader last read (the change wrote no event); False when they cannot be read."""
        if self._outbox_bounds is None or self._bounds is None:
            return False
        try:
            return bool(self._outbox_bounds() == self._bounds)
        except sqlite3.Error:
            return False

    def _read_bounds(self) -> None:
        """The outbox's bounds now, as the reader is about to read (None: unknown)."""
        if self._outbox_bounds is None:
            return
        try:
            self._bounds = self._outbox_bounds()
        except sqlite3.Error:
            self._bounds = None

    def _ensure_watch(self) -> FileWatch | None:
        if self._watch is None and not self._watch_failed and self._path is not None:
            try:
                self._watch = self._open_watch(self._path)
            except OSError as exc:
                self._watch_failed = True
                global _fallback_logged
                if not _fallback_logged:
                    _fallback_logged = True
                    log.info(
                        "cannot watch %s for changes (%s); polling it every %g s",
                        self._path,
                        exc,
                        _DATA_VERSION_POLL_SECONDS,
                    )
        return self._watch

    def _drop_watch(self) -> None:
        self._stop_reading()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()

    def _stop_reading(self) -> None:
        if self._reading and self._watch is not None:
            self._reading = False
            with contextlib.suppress(Exception):  # the loop may be closing
                asyncio.get_running_loop().remove_reader(self._watch.fd)

    def _wake(self) -> None:
        self._cancel_poll()
        self._stop_reading()
        self._local.set()

    def _cancel_poll(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None

    # --- polling (no watch) --------------------------------------------------------------

    def _tick(self) -> None:
        """One poll of a wait: wake it on a change (or an unreadable file), else poll again."""
        changed = self._changed()
        if changed is False or (changed and self._quiet()):
            self._poll = asyncio.get_running_loop().call_later(
                _DATA_VERSION_POLL_SECONDS, self._tick
            )
        else:
            self._poll = None
            self._local.set()

    # --- watching ------------------------------------------------------------------------

    def _look(self) -> None:
        """A look at ``data_version`` of a watched wait: wake on a change, else listen to the
        directory and look again (soon while settling after a write, else after the safety
        interval). Events queued before the look are drained first: a commit after the
        drain either shows in this look or queues a new event."""
        self._poll = None
        watch = self._watch
        if watch is None:
            self._tick()
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if watch.drain():
            if not watch.alive:
                self._drop_watch()  # the directory went away: poll from now on
                self._tick()
                return
            self._settle(now)
        changed = self._changed()
        if changed is not False:
            self._last_wake = now
            if changed and self._quiet():
                # Commits without an event: look again no sooner than a wake would, with
                # the directory's events left queued until then.
                self._stop_reading()
                self._poll = loop.call_later(_DATA_VERSION_POLL_SECONDS, self._look)
                return
            self._wake()
            return
        if not self._reading:
            loop.add_reader(watch.fd, self._on_event)
            self._reading = True
        if now < self._settling_until:
            delay = self._relook
            self._relook = min(delay * 2, _DATA_VERSION_POLL_SECONDS)
        else:
            delay = self._safety_poll
        self._poll = loop.call_later(delay, self._look)

    def _settle(self, now: float) -> None:
        """A write to the file: look again soon, as its commit may not show yet."""
        self._settling_until = now + _SETTLE_SECONDS
        self._relook = _FIRST_RELOOK_SECONDS

    def _on_event(self) -> None:
        """The directory's descriptor is readable: look at ``data_version`` when the events
        concern the database, no sooner than 50 ms after the last wake it reported."""
        watch = self._watch
        if watch is None:
            return
        if not watch.drain():
            return
        self._cancel_poll()
        if not watch.alive:
            self._drop_watch()
            self._tick()
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._settle(now)
        due = self._last_wake + _DATA_VERSION_POLL_SECONDS - now
        if due > 0:
            self._stop_reading()  # until the look: later events wait in the kernel's queue
            self._poll = loop.call_later(due, self._look)
        else:
            self._look()

    # --- waiting ---------------------------------------------------------------------------

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
                elif self._ensure_watch() is None:
                    self._tick()  # a look at once, then every poll interval
                else:
                    loop = asyncio.get_running_loop()
                    due = self._last_wake + _DATA_VERSION_POLL_SECONDS - loop.time()
                    if due > 0:
                        self._poll = loop.call_later(due, self._look)
                    else:
                        self._look()
                if not self._local.is_set() and max_wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max_wait):
                            await self._local.wait()
        finally:
            self._cancel_poll()
            self._stop_reading()
            self._local.clear()
            # The caller reads the outbox next, so every commit the file holds now is read:
            # a new baseline, so that a commit of this process (it woke the caller through
            # ``wakeups``) does not wake it a second time through the file.
            if self._version is not None:
                self._changed()
                self._read_bounds()

    def detach(self) -> None:
        """Close the watch's descriptor (the store closes); a later wait polls, and fails
        its reads as the store is closed. Safe to call twice."""
        self._drop_watch()
        self._watch_failed = True

    async def close(self) -> None:
        """Stop listening to this process's writes and close the watch."""
        self._wakeups.discard(self._local)
        self.detach()
