"""File-system faults under a running SQLite server: a full disk and a read-only file.

Each fault can be reached more than one way (a *route*), because each way needs something
the machine may not allow:

* full disk, ``tmpfs``: the database on a small tmpfs filled by another file, so the kernel
  answers ENOSPC (SQLite: "database or disk is full"). Needs the right to mount.
* full disk, ``rlimit``: the server's own RLIMIT_FSIZE lowered (prlimit) to the size its files
  have, so growing them fails with EFBIG (SQLite: "disk I/O error"). Needs nothing: a process
  may lower, and raise again up to the hard limit, the limits of its own children.
* read-only file, ``chattr``: the immutable flag on the database and its WAL, in the test's
  own directory; where that file system has no such flag, on a loop-mounted ext4 image.
  Needs CAP_LINUX_IMMUTABLE (and, for the image, the right to mount).
* read-only file, ``loop-ext4``: the same on a loop-mounted ext4 image always, so the route
  taken elsewhere is known to work here too.

Where a route's capability is missing the test is skipped, except under
``CHECKPOINTD_REQUIRE_FAULTS=1`` (CI, which runs as root), where that is a failure: a fault
suite must never pass green by not running.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.sidecar import Sidecar

__all__ = ["FULL_DISK_ROUTES", "READ_ONLY_ROUTES", "StoreFault", "full_disk", "read_only_file"]

REQUIRE_FAULTS_ENV = "CHECKPOINTD_REQUIRE_FAULTS"
FULL_DISK_ROUTES = ["tmpfs", "rlimit"]
READ_ONLY_ROUTES = ["chattr", "loop-ext4"]
_DISK_KIB = 2048


def capability_missing(reason: str) -> NoReturn:
    """Skip, or under CHECKPOINTD_REQUIRE_FAULTS=1 fail: this fault cannot be staged here."""
    if os.environ.get(REQUIRE_FAULTS_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_FAULTS_ENV}=1 requires every fault suite to run")
    pytest.skip(reason)


@dataclass
class StoreFault:
    """Where the SQLite file must live, how to begin and end the fault under a running
    server, and what the UNAVAILABLE message must then say."""

    directory: Path
    expect: str
    begin: Callable[[Sidecar], None]
    end: Callable[[Sidecar], None]

    @property
    def db(self) -> Path:
        return self.directory / "store.db"


def _run(*command: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, capture_output=True, check=False)


@contextlib.contextmanager
def _mounted(where: Path, *mount_args: str) -> Iterator[Path]:
    where.mkdir(exist_ok=True)
    done = _run("mount", *mount_args, str(where))
    if done.returncode != 0:
        capability_missing(f"cannot mount here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        _run("umount", "-l", str(where))


@contextlib.contextmanager
def _loop_ext4(where: Path) -> Iterator[Path]:
    """A small ext4 file system in an image file, loop-mounted at ``where``."""
    image = where.with_name(where.name + ".img")
    with image.open("wb") as f:
        f.truncate(16 * 1024 * 1024)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        capability_missing(f"cannot make an ext4 image: {made.stderr.decode().strip()}")
    with _mounted(where, "-o", "loop", str(image)) as mounted:
        yield mounted


def _pid(server: Sidecar) -> int:
    assert server.process is not None
    return server.process.pid


@contextlib.contextmanager
def full_disk(route: str, where: Path) -> Iterator[StoreFault]:
    """A store directory whose file system fills up (``tmpfs``), or whose server may not grow
    its files any more (``rlimit``), between ``begin`` and ``end``."""
    if route == "tmpfs":
        with _mounted(where, "-t", "tmpfs", "-o", f"size={_DISK_KIB}k", "tmpfs") as disk:
            filler = disk / "filler"
            yield StoreFault(
                disk, "full", lambda _server: _fill(filler), lambda _server: filler.unlink()
            )
        return
    assert route == "rlimit", route
    where.mkdir()
    before: dict[int, tuple[int, int]] = {}

    def begin(server: Sidecar) -> None:
        pid = _pid(server)
        _, hard = before[pid] = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        files = [p for p in where.iterdir() if p.name.startswith("store.db")]
        grown_to = max(p.stat().st_size for p in files)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (grown_to, hard))

    def end(server: Sidecar) -> None:
        pid = _pid(server)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, before.pop(pid))

    yield StoreFault(where, "disk I/O error", begin, end)


def _fill(path: Path) -> None:
    """Write ``path`` until the file system says it is full."""
    chunk = b"\0" * 4096
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return


def _chattr(flag: str, *paths: Path) -> subprocess.CompletedProcess[bytes]:
    return _run("chattr", flag, *map(str, paths))


def _immutable(directory: Path) -> StoreFault:
    def files() -> list[Path]:
        db = directory / "store.db"
        return [db, db.with_name(db.name + "-wal")]

    def begin(_server: Sidecar) -> None:
        done = _chattr("+i", *files())
        assert done.returncode == 0, done.stderr.decode()

    def end(_server: Sidecar) -> None:
        done = _chattr("-i", *files())
        assert done.returncode == 0, done.stderr.decode()

    return StoreFault(directory, "disk I/O error", begin, end)


@contextlib.contextmanager
def read_only_file(route: str, where: Path) -> Iterator[StoreFault]:
    """A store directory whose database and WAL can be made immutable (``chattr +i``: read
    only even for root and for descriptors already open)."""
    if route == "loop-ext4":
        with _loop_ext4(where) as mounted:
            try:
                yield _immutable(mounted)
            finally:
                _chattr("-i", *(mounted / n for n in ("store.db", "store.db-wal")))
        return
    assert route == "chattr", route
    where.mkdir()
    probe = where / "probe"
    probe.touch()
    tried = _chattr("+i", probe)
    if tried.returncode == 0:
        _chattr("-i", probe)
        probe.unlink()
        fault = _immutable(where)
        try:
            yield fault
        finally:
            _chattr("-i", *(where / n for n in ("store.db", "store.db-wal")))
        return
    message = tried.stderr.decode().strip()
    probe.unlink()
    if "not permitted" in message:
        capability_missing(f"chattr +i is not allowed here (CAP_LINUX_IMMUTABLE): {message}")
    # This file system has no immutable flag: put the store on one that has.
    with _loop_ext4(where.with_name(where.name + "-ext4")) as mounted:
        fault = _immutable(mounted)
        try:
            yield fault
        finally:
            _chattr("-i", *(mounted / n for n in ("store.db", "store.db-wal")))
