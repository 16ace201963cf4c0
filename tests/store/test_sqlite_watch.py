"""The SQLite event notifier's inotify watch (I5): another connection's or process's commit
wakes a waiting outbox reader without a poll, other files in the directory do not, a burst
of commits wakes it at most once per 50 ms, it polls when no watch can be set up, and it
leaves no descriptor behind."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from checkpointd.store.sqlite import SQLiteStore
from checkpointd.store.sqlite.notifier import DataVersion, FileWatch, SQLiteEventNotifier
from tests.support.records import NS, interrupt
from tests.support.records import checkpoint as record

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")

PATIENCE = 10.0  # seconds before a wait that should have ended fails the test


class CountedReads:
    """``DataVersion.read`` that counts its calls: each is one look at the file."""

    def __init__(self, versions: DataVersion) -> None:
        self._versions = versions
        self.count = 0
        self.last: int | None = None
        """The value the notifier saw last."""

    def __call__(self) -> int:
        self.count += 1
        self.last = self._versions.read()
        return self.last

    def current(self) -> int:
        """The value now, not counted as a look (the same connection, so comparable)."""
        return self._versions.read()


def commit(path: Path, rows: int = 1, pause: float = 0.0) -> None:
    """``rows`` commits through a plain connection of this process (not the store's),
    ``pause`` seconds apart."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("CREATE TABLE IF NOT EXISTS scratch (n INTEGER)")
        for n in range(rows):
            conn.execute("INSERT INTO scratch (n) VALUES (?)", (n,))
            if pause:
                time.sleep(pause)
    finally:
        conn.close()


@pytest.fixture
async def db_path(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "checkpoints.db"
    store = SQLiteStore(path)  # the file in WAL mode, with the store's tables
    await store.open()
    await asyncio.to_thread(commit, path)  # the scratch table
    try:
        yield path
    finally:
        await store.close()


@pytest.fixture
async def watched(db_path: Path) -> AsyncIterator[tuple[SQLiteEventNotifier, CountedReads]]:
    """A notifier whose safety poll never runs within a test: only the watch wakes it."""
    versions = DataVersion(str(db_path))
    reads = CountedReads(versions)
    notifier = SQLiteEventNotifier(reads, set(), path=str(db_path), safety_poll=3600)
    try:
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)  # the first wait returns at once
        yield notifier, reads
    finally:
        await notifier.close()
        versions.close()


async def wait_started(notifier: SQLiteEventNotifier) -> asyncio.Task[None]:
    waiting = asyncio.create_task(notifier.wait(3600))
    await asyncio.sleep(0.3)  # six polls' time, were it polling
    assert not waiting.done()
    return waiting


async def test_i5_another_connections_commit_wakes_the_watch_with_no_poll(
    watched: tuple[SQLiteEventNotifier, CountedReads], db_path: Path
) -> None:
    notifier, reads = watched
    before = reads.count
    waiting = await wait_started(notifier)
    assert notifier.watching
    assert reads.count == before + 1  # the look when the wait began, and no poll since
    await asyncio.to_thread(commit, db_path)
    await asyncio.wait_for(waiting, PATIENCE)
    # Looks after the write until its commit shows (1, 2, 4 ... ms later): no poll.
    assert reads.count - before <= 10


async def test_i5_this_processs_own_commit_wakes_the_reader_once(db_path: Path) -> None:
    """A commit of this process's store wakes the reader at once through the store's wake-up,
    and only once: the same commit's change to the file is not taken for another's (it cost
    the reader a second read of the outbox per commit); another's commit still wakes it."""
    versions = DataVersion(str(db_path))
    reads = CountedReads(versions)
    wakeups: set[asyncio.Event] = set()
    notifier = SQLiteEventNotifier(reads, wakeups, path=str(db_path), safety_poll=3600)
    try:
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)  # the first wait returns at once
        # The store's commit while the reader reads (between two waits)...
        await asyncio.to_thread(commit, db_path)
        for wakeup in wakeups:  # ...and its wake-up, as the store sets it after committing
            wakeup.set()
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)  # at once: the wake-up
        again = await wait_started(notifier)  # the same commit does not wake it again
        await asyncio.to_thread(commit, db_path)  # another connection's commit does
        await asyncio.wait_for(again, PATIENCE)
    finally:
        await notifier.close()
        versions.close()


async def test_i5_commits_without_an_event_do_not_wake_the_reader(tmp_path: Path) -> None:
    """This process's puts (and any commit that writes no event) change the file but not the
    outbox: the store's notifier does not wake its reader for them, however many; an event
    committed by another connection (another store on the same file, with wake-ups of its
    own) still wakes it."""
    path = tmp_path / "checkpoints.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    await store.open()
    await other.open()
    notifier = store.event_notifier()
    try:
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)  # the first wait returns at once
        waiting = asyncio.create_task(notifier.wait(3600))
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n in range(50):
            await store.put_checkpoint(NS, f"put-{n}", record(f"exec-{n}"))
        await asyncio.to_thread(commit, path)  # another connection's commit without an event
        await asyncio.sleep(0.2)  # four looks' time after the last of them
        assert not waiting.done()
        await interrupt(other, "exec-paused")
        await asyncio.wait_for(waiting, PATIENCE)
        assert loop.time() - started > 0.2
    finally:
        await notifier.close()
        await other.close()
        await store.close()


async def test_i5_another_processs_commit_wakes_the_watch(
    watched: tuple[SQLiteEventNotifier, CountedReads], db_path: Path
) -> None:
    notifier, reads = watched
    before = reads.count
    waiting = await wait_started(notifier)
    assert reads.count == before + 1
    script = (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('INSERT INTO scratch (n) VALUES (1)')\n"
        "conn.close()\n"
    )
    await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script, str(db_path)], check=True, timeout=60
    )
    await asyncio.wait_for(waiting, PATIENCE)
    assert reads.count - before <= 10  # looks after the process's writes, no poll


async def test_i5_other_files_in_the_directory_do_not_wake_the_watch(
    watched: tuple[SQLiteEventNotifier, CountedReads], db_path: Path
) -> None:
    notifier, reads = watched
    before = reads.count
    waiting = await wait_started(notifier)
    neighbours = ["notes.txt", f"{db_path.name}.bak", f"{db_path.name}-walrus", "x-wal"]

    def scribble() -> None:
        for _ in range(20):
            for name in neighbours:
                with open(db_path.parent / name, "a") as f:
                    f.write("x")
        os.replace(db_path.parent / "notes.txt", db_path.parent / "moved.txt")

    await asyncio.to_thread(scribble)
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert reads.count == before + 1  # not one look for the other files
    await asyncio.to_thread(commit, db_path)
    await asyncio.wait_for(waiting, PATIENCE)


async def test_i5_a_burst_of_commits_wakes_at_most_once_per_50_ms(
    watched: tuple[SQLiteEventNotifier, CountedReads], db_path: Path
) -> None:
    """250 commits by another connection in about half a second: the reader is woken (and
    looks at data_version) at most about once per 50 ms, not once per commit, and the
    wait after the burst still sees its last commit."""
    notifier, reads = watched
    before = reads.count
    loop = asyncio.get_running_loop()
    started = loop.time()
    writer = asyncio.ensure_future(asyncio.to_thread(commit, db_path, 250, 0.002))
    wakes = 0
    while not writer.done():
        waiting = asyncio.ensure_future(notifier.wait(3600))
        await asyncio.wait({waiting, writer}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            # The writer is done. Its last commits wake this wait, unless the wake before
            # already saw them (the writer's future resolves a moment after its last commit).
            if reads.current() == reads.last:
                waiting.cancel()
                break
            await asyncio.wait_for(waiting, PATIENCE)
        wakes += 1
    await writer
    elapsed = loop.time() - started
    assert 1 <= wakes <= elapsed / 0.05 + 3, (wakes, elapsed)
    # Besides a look per wake, a write event is followed by the settle looks (1, 2, 4 ... ms
    # after it, capped at 50 ms: at most 7 in a 50 ms window), however many commits it saw.
    assert reads.count - before <= 8 * (elapsed / 0.05 + 3), (reads.count - before, elapsed)
    # Every commit was seen: the next wait waits for a new one.
    waiting = await wait_started(notifier)
    await asyncio.to_thread(commit, db_path)
    await asyncio.wait_for(waiting, PATIENCE)


async def test_i5_notifier_polls_every_50_ms_when_no_watch_can_be_set_up(db_path: Path) -> None:
    def no_watches_left(path: str) -> FileWatch:
        raise OSError(errno.ENOSPC, "inotify watch limit reached", path)

    versions = DataVersion(str(db_path))
    reads = CountedReads(versions)
    notifier = SQLiteEventNotifier(
        reads, set(), path=str(db_path), safety_poll=3600, open_watch=no_watches_left
    )
    try:
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)
        before = reads.count
        waiting = await wait_started(notifier)
        assert not notifier.watching
        assert reads.count - before >= 3  # polling: a look at once, then every 50 ms
        await asyncio.to_thread(commit, db_path)
        await asyncio.wait_for(waiting, PATIENCE)
    finally:
        await notifier.close()
        versions.close()


def test_i5_watch_of_a_missing_directory_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="inotify_add_watch"):
        FileWatch(str(tmp_path / "missing" / "checkpoints.db"))


def inotify_fds() -> tuple[int, int]:
    """(descriptors, of which inotify instances) open in this process."""
    fds = os.listdir("/proc/self/fd")
    kinds: list[str] = []
    for fd in fds:
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            kinds.append(os.readlink(f"/proc/self/fd/{fd}"))
    return len(kinds), sum(1 for kind in kinds if "inotify" in kind)


async def test_i5_stores_and_notifiers_leave_no_descriptor_open(tmp_path: Path) -> None:
    """Open and close stores, each with a notifier that watched: closing the notifier (or
    the store first) closes the watch's descriptor."""
    path = tmp_path / "checkpoints.db"
    first = SQLiteStore(path)
    await first.open()  # the file exists before the count
    await first.close()
    before = inotify_fds()
    for n in range(20):
        store = SQLiteStore(path)
        await store.open()
        notifier = store.event_notifier()
        await asyncio.wait_for(notifier.wait(3600), PATIENCE)
        await notifier.wait(0.01)  # the watch is set up by a wait that waits
        assert notifier.watching
        assert inotify_fds()[1] == before[1] + 1
        if n % 2:
            await store.close()
            await notifier.close()
        else:
            await notifier.close()
            await store.close()
        assert not notifier.watching
    assert inotify_fds() == before
