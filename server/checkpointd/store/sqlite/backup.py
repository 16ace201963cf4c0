"""A consistent copy of a live SQLite store, and the check of a store file.

:func:`backup` copies the file with SQLite's online backup API, page by page, from a
connection that first opens a read transaction. In WAL mode that transaction pins one
snapshot: every write committed before it began is in the copy, none that commits later is,
and the writers (this server's or any other process's) go on meanwhile, since WAL readers
never block writers. Without the pinned snapshot the backup API starts over whenever another
connection writes, so under a steady write load it would never finish. The price is that
the WAL cannot be checkpointed past the snapshot while the copy runs; it is truncated as
usual afterwards.

The copy is written to a temporary file beside the destination, checked (``PRAGMA
quick_check``), flushed to disk and only then given its name, so a copy that fails or is
killed midway never leaves a file that looks like a backup.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from checkpointd.store.copying import quoted

__all__ = ["BackupError", "BackupResult", "CheckResult", "backup", "check"]

#: Pages copied per step: small enough for a lively progress line, large enough to be fast.
PAGES_PER_STEP: Final = 256

Progress = Callable[[int, int], None]
"""Called after each step with (pages done, pages in total)."""


class BackupError(Exception):
    """The backup or the check cannot be done; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class BackupResult:
    """What :func:`backup` wrote."""

    path: Path
    pages: int
    bytes: int
    seconds: float


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What :func:`check` found in a store file."""

    integrity: str
    """``ok``, or the first problem ``PRAGMA integrity_check`` reports."""
    schema_version: int
    """The highest migration applied (0 when the file is no checkpointd store)."""
    tables: dict[str, int] = field(default_factory=dict)
    """Every table with its row count, by name."""


def _open_existing(path: Path) -> sqlite3.Connection:
    """Open a store file read-write without ever creating one (a typo must not produce an
    empty "backup")."""
    if not path.is_file():
        raise BackupError(f"{path} is not a file: name the store's database file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open {path}: {exc}") from None


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _removed_on_error(partial: Path) -> Iterator[None]:
    """Remove the partial copy when the block fails, however it fails: a failed backup
    leaves no file of its own beside the destination."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def backup(
    source: Path,
    destination: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    pages_per_step: int = PAGES_PER_STEP,
) -> BackupResult:
    """Copy the store file ``source`` to ``destination`` as one consistent snapshot, while
    servers keep writing to it. An existing ``destination`` is refused unless ``force``."""
    if destination.exists() and not force:
        raise BackupError(f"{destination} exists: pass --force to replace it")
    if destination.exists() and destination.resolve() == source.resolve():
        raise BackupError("the backup cannot replace the store it copies")
    if not destination.parent.is_dir():
        raise BackupError(f"{destination.parent} is not a directory")
    started = time.monotonic()
    partial = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        # Made here, so a destination that cannot be written is named as such, not
        # reported later as SQLite's "unable to open database file" about the copy.
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise BackupError(f"cannot write to {destination.parent}: {exc.strerror}") from None
    with _removed_on_error(partial):
        src = _open_existing(source)
        try:
            # The snapshot: the read transaction begins at the first read, not at BEGIN.
            src.execute("BEGIN")
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()
            dst = sqlite3.connect(partial, isolation_level=None)
            try:
                src.backup(
                    dst,
                    pages=pages_per_step,
                    progress=None
                    if progress is None
                    else lambda _s, left, all_: progress(all_ - left, all_),
                )
                # One self-contained file, whatever mode the store is in (a server opening it
                # switches it to WAL again).
                dst.execute("PRAGMA journal_mode = DELETE").fetchone()
                found = dst.execute("PRAGMA quick_check").fetchone()[0]
                if found != "ok":
                    raise BackupError(f"the copy fails its check ({found}); the store is untouched")
                pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
            finally:
                dst.close()
            src.execute("COMMIT")
        except sqlite3.Error as exc:
            raise BackupError(f"cannot copy {source} to {destination}: {exc}") from None
        finally:
            src.close()
        try:
            # The copy holds what the store holds: it gets the store file's permissions.
            partial.chmod(source.stat().st_mode & 0o777)
            with partial.open("rb+") as file:
                os.fsync(file.fileno())
            if force:
                os.replace(partial, destination)
            else:
                # A link never replaces: a file that appeared meanwhile is not overwritten.
                os.link(partial, destination)
                partial.unlink()
            _fsync_directory(destination.parent)
        except FileExistsError:
            raise BackupError(f"{destination} exists: pass --force to replace it") from None
    size = destination.stat().st_size
    return BackupResult(destination, pages, size, time.monotonic() - started)


def check(path: Path) -> CheckResult:
    """Check a store file: its integrity, its schema version and every table's rows."""
    conn = _open_existing(path)
    try:
        conn.execute("PRAGMA query_only = ON")
        integrity = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        # Table names come from the file's own catalog, quoted as identifiers.
        tables = {
            name: int(conn.execute(f"SELECT count(*) FROM {quoted(name)}").fetchone()[0])
            for name in names
        }
        version = 0
        if "schema_migrations" in tables:
            found = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
            version = int(found or 0)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot read {path}: {exc}") from None
    finally:
        conn.close()
    return CheckResult(integrity, version, tables)
