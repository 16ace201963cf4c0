"""The SQLite executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the SQLite store's query-only connection (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``, so a page costs one pass over that index: fine for
an operator's command, not meant for a hot path.
"""

from __future__ import annotations

from typing import Final, TypeVar

from checkpointd.store import times
from checkpointd.store.executions import ExecutionReader, ExecutionSql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.statements import Body

__all__ = ["SQLiteExecutionReader"]

T = TypeVar("T")

_SQL: Final = ExecutionSql(tables="", number=lambda sql: sql)


class SQLiteExecutionReader(ExecutionReader):
    """An :class:`~checkpointd.store.executions.ExecutionReader` on a SQLite store."""

    def __init__(self, access: SQLiteAccess) -> None:
        super().__init__(_SQL, times.from_us, times.to_us)
        self._access = access

    async def _in_read(self, body: Body[T]) -> T:
        async with self._access.call():
            return await self._access.read(body)

    # Each read sees the last committed state; the reader takes no snapshot.
    _in_snapshot = _in_read
