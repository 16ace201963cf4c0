"""The SQLite executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the SQLite store's query-only connection (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``, and its graph checkpoints by thread on the index
``(namespace, thread_id, checkpoint_ns, written_at)``, so a page costs one pass over each:
fine for an operator's command, not meant for a hot path. A thread's newest root
checkpoint, its writes and its pauses are each found by their primary keys.
"""

from __future__ import annotations

from typing import Final, TypeVar

from checkpointd.store import times
from checkpointd.store.executions import ERROR_CHANNEL, ExecutionReader, ExecutionSql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.statements import Body

__all__ = ["SQLiteExecutionReader"]

T = TypeVar("T")

# Checkpoints stored before schema version 10 have written_at 0: they count as written when
# that version was applied (as graph retention reads them).
_UPGRADED: Final = "(SELECT applied_at FROM schema_migrations WHERE version = 10)"
_PAUSES: Final = (
    "FROM pending_interrupts AS p WHERE p.namespace = t.namespace "
    "AND p.execution_id = t.thread_id AND p.interrupt_id <> ''"
)
_WRITES: Final = (
    "SELECT 1 FROM graph_writes AS w WHERE w.namespace = t.namespace "
    "AND w.thread_id = t.thread_id AND w.checkpoint_ns = '' "
    "AND w.checkpoint_id = t.last_checkpoint_id"
)
#: Each thread of a namespace with its summary's columns (contract C12).
THREADS: Final = f"""
WITH threads AS (
    SELECT namespace, thread_id, count(*) AS checkpoint_count, max(written_at) AS written,
        coalesce((SELECT max(h.checkpoint_id) FROM graph_checkpoints AS h
            WHERE h.namespace = g.namespace AND h.thread_id = g.thread_id
              AND h.checkpoint_ns = ''), '') AS last_checkpoint_id
    FROM graph_checkpoints AS g
    WHERE namespace = ?{{threads_where}}
    GROUP BY namespace, thread_id
), described AS (
    SELECT t.thread_id AS execution_id, t.checkpoint_count,
        CASE WHEN t.written = 0 THEN {_UPGRADED} ELSE t.written END AS last_activity_at,
        t.last_checkpoint_id, 0 AS last_sequence,
        coalesce((SELECT min(p.node_id) {_PAUSES}), '') AS last_node_id,
        coalesce(
            nullif((SELECT min(p.chain_name) {_PAUSES}), ''),
            nullif((SELECT d.chain_name FROM interrupt_decisions AS d
                WHERE d.namespace = t.namespace AND d.execution_id = t.thread_id
                  AND d.interrupt_id <> '' ORDER BY d.sequence DESC LIMIT 1), ''),
            nullif(CAST(json_extract(c.metadata_json, '$.graph_name') AS TEXT), ''),
            nullif(CAST(json_extract(c.metadata_json, '$.graph_id') AS TEXT), ''),
            '') AS chain_name,
        CASE
            WHEN EXISTS (SELECT 1 {_PAUSES}) THEN 'paused'
            WHEN EXISTS ({_WRITES} AND w.channel = '{ERROR_CHANNEL}') THEN 'failed'
            WHEN EXISTS ({_WRITES}) OR json_extract(c.metadata_json, '$.source') = 'input'
                OR c.send_nodes <> '' THEN 'running'
            ELSE 'ended' END AS run_status
    FROM threads AS t
    LEFT JOIN graph_checkpoints AS c
        ON c.namespace = t.namespace AND c.thread_id = t.thread_id AND c.checkpoint_ns = ''
        AND c.checkpoint_id = t.last_checkpoint_id
) SELECT * FROM described"""

_SQL: Final = ExecutionSql(tables="", number=lambda sql: sql, threads=THREADS)


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
