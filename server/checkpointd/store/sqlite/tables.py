"""An SQLite store as ``store copy`` reads and writes it (:mod:`checkpointd.store.copying`):
its catalog, counts and counters, a read snapshot and one write transaction, in plain
``sqlite3`` (the command runs alone, not in the server's event loop)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from checkpointd.store.copying import (
    Column,
    CopyError,
    already_in_destination,
    column_list,
    quoted,
)

__all__ = ["SQLiteTables"]


def _kind(declared: str) -> str:
    declared = declared.upper()
    if "INT" in declared:
        return "int"
    if "BLOB" in declared:
        return "bytes"
    return "text"


def _where(namespaces: Sequence[str] | None) -> tuple[str, list[Any]]:
    if namespaces is None:
        return "", []
    return f" WHERE namespace IN ({', '.join('?' * len(namespaces))})", list(namespaces)


class _Reader:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def rows(
        self, table: str, columns: Sequence[str], namespaces: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        where, params = _where(namespaces)
        cursor = self._conn.execute(
            f"SELECT {column_list(columns)} FROM {quoted(table)}{where}", params
        )
        while chunk := cursor.fetchmany(batch):
            yield [tuple(row) for row in chunk]


class _Writer:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        marks = ", ".join("?" * len(columns))
        try:
            self._conn.executemany(
                f"INSERT INTO {quoted(table)} ({column_list(columns)}) VALUES ({marks})",
                rows,
            )
        except sqlite3.IntegrityError as exc:
            raise already_in_destination(table, exc) from None

    async def raise_counter(self, table: str, column: str, at_least: int) -> None:
        # AUTOINCREMENT keeps its high-water mark in sqlite_sequence; an explicit insert
        # already raised it to the highest row, this keeps numbers the source handed out and
        # deleted from being handed out again.
        updated = self._conn.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (at_least, table)
        ).rowcount
        if not updated and at_least:
            self._conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, at_least)
            )

    async def raise_purged_through(self, value: int) -> None:
        self._conn.execute(
            "UPDATE interrupt_events_purged SET purged_through = max(purged_through, ?) "
            "WHERE id = 1",
            (value,),
        )

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        return _count(self._conn, table, namespaces)


def _count(conn: sqlite3.Connection, table: str, namespaces: Sequence[str] | None) -> int:
    where, params = _where(namespaces)
    return int(conn.execute(f"SELECT count(*) FROM {quoted(table)}{where}", params).fetchone()[0])


class SQLiteTables:
    """One SQLite store file (it must exist: the caller migrates a destination first)."""

    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise CopyError(f"{path} is not a file")
        try:
            self._conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 5000")
        except sqlite3.Error as exc:
            raise CopyError(f"cannot open {path}: {exc}") from None
        self.path = path

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    async def catalog(self) -> dict[str, list[Column]]:
        names = [
            str(row[0])
            for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {
            name: [
                Column(str(row[1]), _kind(str(row[2])), not row[3])
                for row in self._conn.execute(f"PRAGMA table_info({quoted(name)})")
            ]
            for name in names
        }

    async def schema_version(self) -> int:
        try:
            found = self._conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        except sqlite3.OperationalError:
            return 0
        return int(found[0] or 0)

    async def namespaces(self, tables: Iterable[str]) -> list[str]:
        found: set[str] = set()
        for table in tables:
            found.update(
                str(row[0])
                for row in self._conn.execute(f"SELECT DISTINCT namespace FROM {quoted(table)}")
            )
        return sorted(found)

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        return _count(self._conn, table, namespaces)

    async def counter(self, table: str, column: str) -> int:
        seq = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,))
        row = seq.fetchone()
        highest = self._conn.execute(
            f"SELECT coalesce(max({quoted(column)}), 0) FROM {quoted(table)}"
        ).fetchone()[0]
        return max(int(row[0]) if row else 0, int(highest))

    async def purged_through(self) -> int:
        row = self._conn.execute(
            "SELECT purged_through FROM interrupt_events_purged WHERE id = 1"
        ).fetchone()
        return int(row[0]) if row else 0

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[_Reader]:
        """One read transaction: every table read as of one moment."""
        self._conn.execute("BEGIN")
        try:
            yield _Reader(self._conn)
        finally:
            self._conn.execute("COMMIT")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Writer]:
        """One write transaction, committed when the block ends without an error."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield _Writer(self._conn)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
