"""Read a store's tables directly, bypassing the server: the ground truth the fault suites
compare the server's answers with (the outbox a watcher must have seen, the state a rejected
request must not have changed, the file's integrity after a fault). Both backends: an SQLite
file, or the Postgres schema a test's server uses."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import asyncpg

from tests.support.sidecar import StoreSpec

__all__ = ["StoreReader", "dump_store"]

_SKIPPED_TABLES = frozenset({"schema_migrations"})


class StoreReader:
    """Reads every table of an SQLite file or a Postgres schema; close() when done."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self._sqlite: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pg: Any = None
        if spec.backend == "sqlite":
            self.path = spec.url.removeprefix("sqlite://")
            self._sqlite = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        else:
            self._loop = asyncio.new_event_loop()
            self._pg = self._loop.run_until_complete(asyncpg.connect(spec.url, timeout=10))

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one read-only statement and return its rows as tuples."""
        if self._sqlite is not None:
            return [tuple(row) for row in self._sqlite.execute(sql).fetchall()]
        assert self._loop is not None
        rows = self._loop.run_until_complete(self._pg.fetch(sql, timeout=30))
        return [tuple(row) for row in rows]

    def table(self, name: str) -> str:
        """The qualified name of a table."""
        return name if self._sqlite is not None else f'"{self.spec.pg_schema}".{name}'

    def tables(self) -> list[str]:
        """The data tables of the store (the migrations table left out)."""
        if self._sqlite is not None:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        else:
            sql = (
                "SELECT table_name FROM information_schema.tables "
                f"WHERE table_schema = '{self.spec.pg_schema}'"
            )
        return sorted(str(r[0]) for r in self.query(sql) if r[0] not in _SKIPPED_TABLES)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every data table, sorted, so two dumps compare equal iff the data is."""
        return {
            t: sorted(self.query(f"SELECT * FROM {self.table(t)}"), key=repr) for t in self.tables()
        }

    def outbox(self) -> list[tuple[int, str, str, str]]:
        """The interrupt events: (cursor, namespace, kind, execution_id), in cursor order."""
        return [
            (int(c), str(ns), str(kind), str(ex))
            for c, ns, kind, ex in self.query(
                "SELECT cursor, namespace, kind, execution_id "
                f"FROM {self.table('interrupt_events')} ORDER BY cursor"
            )
        ]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result (``"ok"`` for a sound file)."""
        assert self._sqlite is not None, "integrity_check is an SQLite check"
        return "; ".join(str(r[0]) for r in self.query("PRAGMA integrity_check"))

    def close(self) -> None:
        """Close the connection."""
        if self._sqlite is not None:
            self._sqlite.close()
        if self._loop is not None:
            self._loop.run_until_complete(self._pg.close())
            self._loop.close()


def dump_store(spec: StoreSpec) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every data table of the store, read on a connection of its own: compare
    a dump taken before a request with one taken after to show the request wrote nothing."""
    reader = StoreReader(spec)
    try:
        return reader.dump()
    finally:
        reader.close()
