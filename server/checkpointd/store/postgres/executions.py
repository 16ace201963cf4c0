"""The Postgres executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the Postgres store's pool and schema (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``; an execution's detail is read in one read-only
repeatable-read transaction, so its parts agree with each other.
"""

from __future__ import annotations

from typing import TypeVar

from checkpointd.store import times
from checkpointd.store.executions import ExecutionReader, ExecutionSql
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.sql import numbered
from checkpointd.store.postgres.statements import PgStatements
from checkpointd.store.statements import Body

__all__ = ["PostgresExecutionReader"]

T = TypeVar("T")


class PostgresExecutionReader(ExecutionReader):
    """An :class:`~checkpointd.store.executions.ExecutionReader` on a Postgres store."""

    def __init__(self, access: PostgresAccess) -> None:
        sql = ExecutionSql(tables=f"{access.quoted_schema}.", number=numbered)
        super().__init__(sql, times.utc_out, times.utc_in)
        self._access = access

    async def _in_read(self, body: Body[T]) -> T:
        async with self._access.connection() as conn:
            return await body(PgStatements(conn))

    async def _in_snapshot(self, body: Body[T]) -> T:
        async with (
            self._access.connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            return await body(PgStatements(conn))
