"""What a Postgres store holds: its schema version and every table's rows (``store check``).

The tables are found in the catalog of the store's schema, not from a list here, so a table
a later migration adds is counted without a change to this module.
"""

from __future__ import annotations

import asyncpg

from checkpointd.store.postgres.dsn import describe_target
from checkpointd.store.postgres.sql import quoted_schema

__all__ = ["InventoryError", "inventory"]

#: How long the connection may take to open.
CONNECT_SECONDS = 30.0

_TABLES = (
    "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name"
)


class InventoryError(Exception):
    """The store cannot be read; the message says why (without the URL's secrets)."""


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def inventory(dsn: str, schema: str) -> tuple[int, dict[str, int]]:
    """Return (schema version, rows per table) of the store in ``schema``, read in one
    repeatable-read snapshot."""
    qschema = quoted_schema(schema)
    try:
        conn = await asyncpg.connect(dsn, timeout=CONNECT_SECONDS, statement_cache_size=0)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise InventoryError(f"cannot connect to {describe_target(dsn)}: {exc}") from None
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            names = [str(row[0]) for row in await conn.fetch(_TABLES, schema)]
            tables = {
                name: int(await conn.fetchval(f"SELECT count(*) FROM {qschema}.{_quoted(name)}"))
                for name in names
            }
            version = 0
            if "schema_migrations" in tables:
                found = await conn.fetchval(f"SELECT max(version) FROM {qschema}.schema_migrations")
                version = int(found or 0)
    except asyncpg.PostgresError as exc:
        raise InventoryError(f"cannot read schema {schema!r}: {exc}") from None
    finally:
        await conn.close()
    return version, tables
