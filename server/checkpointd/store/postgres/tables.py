"""A Postgres store as ``store copy`` reads and writes it (:mod:`checkpointd.store.copying`):
its schema's catalog, counts and counters, a read snapshot (repeatable read) and one write
transaction. Identity columns are written with ``OVERRIDING SYSTEM VALUE`` and their
sequences raised afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import asyncpg

from checkpointd.store.copying import (
    Column,
    CopyError,
    already_in_destination,
    column_list,
    quoted,
)
from checkpointd.store.postgres.dsn import describe_target
from checkpointd.store.postgres.sql import quoted_schema

__all__ = ["PostgresTables"]

_KINDS = {
    "timestamp with time zone": "time",
    "boolean": "bool",
    "bytea": "bytes",
    "bigint": "int",
    "integer": "int",
    "smallint": "int",
}
_COLUMNS = (
    "SELECT table_name, column_name, data_type, is_nullable, is_identity "
    "FROM information_schema.columns c WHERE table_schema = $1 AND EXISTS ("
    " SELECT 1 FROM information_schema.tables t WHERE t.table_schema = c.table_schema"
    " AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE') "
    "ORDER BY table_name, ordinal_position"
)


def _where(namespaces: Sequence[str] | None) -> tuple[str, list[Any]]:
    if namespaces is None:
        return "", []
    return " WHERE namespace = ANY($1::text[])", [list(namespaces)]


class _Reader:
    def __init__(self, conn: Any, schema: str) -> None:
        self._conn = conn
        self._schema = schema

    async def rows(
        self, table: str, columns: Sequence[str], namespaces: Sequence[str], batch: int
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        where, params = _where(namespaces)
        query = f"SELECT {column_list(columns)} FROM {self._schema}.{quoted(table)}{where}"
        chunk: list[tuple[Any, ...]] = []
        async for record in self._conn.cursor(query, *params, prefetch=batch):
            chunk.append(tuple(record))
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


class _Writer:
    def __init__(self, conn: Any, schema: str, identity: dict[str, set[str]]) -> None:
        self._conn = conn
        self._schema = schema
        self._identity = identity

    async def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        marks = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
        override = (
            " OVERRIDING SYSTEM VALUE" if self._identity.get(table, set()) & set(columns) else ""
        )
        try:
            await self._conn.executemany(
                f"INSERT INTO {self._schema}.{quoted(table)} "
                f"({column_list(columns)}){override} VALUES ({marks})",
                rows,
            )
        except asyncpg.IntegrityConstraintViolationError as exc:
            raise already_in_destination(table, exc) from None

    async def raise_counter(self, table: str, column: str, at_least: int) -> None:
        sequence = await _sequence_of(self._conn, self._schema, table, column)
        highest = await _issued(self._conn, self._schema, table, column, sequence)
        if max(at_least, highest) > 0:
            await self._conn.execute(
                "SELECT setval($1::regclass, $2::bigint, true)", sequence, max(at_least, highest)
            )

    async def raise_purged_through(self, value: int) -> None:
        await self._conn.execute(
            f"UPDATE {self._schema}.interrupt_events_purged "
            "SET purged_through = greatest(purged_through, $1) WHERE id = 1",
            value,
        )

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        return await _count(self._conn, self._schema, table, namespaces)


async def _sequence_of(conn: Any, schema: str, table: str, column: str) -> str:
    """The identity sequence of a column, as the catalog names it (quoted, qualified)."""
    found = await conn.fetchval(
        "SELECT pg_get_serial_sequence($1, $2)", f"{schema}.{quoted(table)}", column
    )
    if found is None:
        raise CopyError(f"{table}.{column} has no sequence")
    return str(found)


async def _issued(conn: Any, schema: str, table: str, column: str, sequence: str) -> int:
    """The highest number the column's sequence handed out or its rows hold."""
    highest = await conn.fetchval(
        f"SELECT coalesce(max({quoted(column)}), 0) FROM {schema}.{quoted(table)}"
    )
    issued = await conn.fetchval(
        f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {sequence}"
    )
    return max(int(highest), int(issued or 0))


async def _count(conn: Any, schema: str, table: str, namespaces: Sequence[str] | None) -> int:
    where, params = _where(namespaces)
    return int(
        await conn.fetchval(f"SELECT count(*) FROM {schema}.{quoted(table)}{where}", *params)
    )


class PostgresTables:
    """One Postgres store (its schema must exist: the caller migrates a destination first)."""

    backend = "postgres"

    def __init__(self, conn: Any, schema: str) -> None:
        self._conn = conn
        self._raw_schema = schema
        self._schema = quoted_schema(schema)
        self._identity: dict[str, set[str]] = {}

    @classmethod
    async def connect(cls, dsn: str, schema: str) -> PostgresTables:
        """Connect with a connection of its own (no pool, no prepared statements kept)."""
        try:
            conn = await asyncpg.connect(dsn, timeout=30, statement_cache_size=0)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise CopyError(f"cannot connect to {describe_target(dsn)}: {exc}") from None
        return cls(conn, schema)

    async def close(self) -> None:
        """Close the connection."""
        await self._conn.close()

    async def catalog(self) -> dict[str, list[Column]]:
        found: dict[str, list[Column]] = {}
        for row in await self._conn.fetch(_COLUMNS, self._raw_schema):
            table = str(row["table_name"])
            found.setdefault(table, []).append(
                Column(
                    str(row["column_name"]),
                    _KINDS.get(str(row["data_type"]), "text"),
                    row["is_nullable"] == "YES",
                )
            )
            if row["is_identity"] == "YES":
                self._identity.setdefault(table, set()).add(str(row["column_name"]))
        return found

    async def schema_version(self) -> int:
        try:
            found = await self._conn.fetchval(
                f"SELECT max(version) FROM {self._schema}.schema_migrations"
            )
        except asyncpg.UndefinedTableError:
            return 0
        return int(found or 0)

    async def namespaces(self, tables: Iterable[str]) -> list[str]:
        found: set[str] = set()
        for table in tables:
            rows = await self._conn.fetch(
                f"SELECT DISTINCT namespace FROM {self._schema}.{quoted(table)}"
            )
            found.update(str(row[0]) for row in rows)
        return sorted(found)

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        return await _count(self._conn, self._schema, table, namespaces)

    async def counter(self, table: str, column: str) -> int:
        sequence = await _sequence_of(self._conn, self._schema, table, column)
        return await _issued(self._conn, self._schema, table, column, sequence)

    async def purged_through(self) -> int:
        found = await self._conn.fetchval(
            f"SELECT purged_through FROM {self._schema}.interrupt_events_purged WHERE id = 1"
        )
        return int(found or 0)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[_Reader]:
        """One repeatable-read, read-only transaction: every table as of one moment."""
        async with self._conn.transaction(isolation="repeatable_read", readonly=True):
            yield _Reader(self._conn, self._schema)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Writer]:
        """One transaction, committed when the block ends without an error."""
        if not self._identity:
            await self.catalog()
        async with self._conn.transaction():
            yield _Writer(self._conn, self._schema, self._identity)
