"""The Postgres connection behind the small statement interface the SQLite side has
(:class:`~checkpointd.store.statements.Statements`), so the transactions written once for
both backends run here too. Each call is one round trip, as the asyncpg call it wraps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import asyncpg
import asyncpg.pool

__all__ = ["Conn", "PgStatements", "row_count"]

Conn: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"


def row_count(status: str) -> int:
    """Return the row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


class PgStatements:
    """:class:`~checkpointd.store.statements.Statements` on a pooled connection, in the
    caller's transaction (or in autocommit outside one). Statements use ``$n``
    placeholders; parameters are positional."""

    __slots__ = ("callbacks", "connection")

    def __init__(self, connection: Conn) -> None:
        self.connection = connection
        self.callbacks: dict[Callable[[], None], None] = {}

    async def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return await self.connection.fetch(sql, *_positional(params))

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        return row_count(await self.connection.execute(sql, *_positional(params)))

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.connection.executemany(sql, rows)

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks[callback] = None


def _positional(params: Sequence[Any] | dict[str, Any]) -> Sequence[Any]:
    if isinstance(params, dict):
        raise TypeError("Postgres statements take positional ($n) parameters")
    return params
