"""The Postgres executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the Postgres store's pool and schema (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``, and its graph checkpoints by thread on the index
``(namespace, thread_id, checkpoint_ns, written_at)``; a thread's newest root checkpoint,
its writes and its pauses are each found by their primary keys. An execution's detail is
read in one read-only repeatable-read transaction, so its parts agree with each other.
"""

from __future__ import annotations

from typing import TypeVar

from checkpointd.store import times
from checkpointd.store.executions import ERROR_CHANNEL, ExecutionReader, ExecutionSql
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.sql import numbered
from checkpointd.store.postgres.statements import PgStatements
from checkpointd.store.statements import Body

__all__ = ["PostgresExecutionReader"]

T = TypeVar("T")


def threads_sql(t: str) -> str:
    """Each thread of a namespace with its summary's columns (contract C12), in the tables
    prefixed by ``t``; ``?`` placeholders."""
    pauses = (
        f"FROM {t}pending_interrupts AS p WHERE p.namespace = t.namespace "
        "AND p.execution_id = t.thread_id AND p.interrupt_id <> ''"
    )
    writes = (
        f"SELECT 1 FROM {t}graph_writes AS w WHERE w.namespace = t.namespace "
        "AND w.thread_id = t.thread_id AND w.checkpoint_ns = '' "
        "AND w.checkpoint_id = t.last_checkpoint_id"
    )
    return f"""
WITH threads AS (
    SELECT namespace, thread_id, count(*) AS checkpoint_count,
        max(written_at) AS last_activity_at,
        coalesce((SELECT max(h.checkpoint_id) FROM {t}graph_checkpoints AS h
            WHERE h.namespace = g.namespace AND h.thread_id = g.thread_id
              AND h.checkpoint_ns = ''), '') AS last_checkpoint_id
    FROM {t}graph_checkpoints AS g
    WHERE namespace = ?{{threads_where}}
    GROUP BY namespace, thread_id
), described AS (
    SELECT t.thread_id AS execution_id, t.checkpoint_count, t.last_activity_at,
        t.last_checkpoint_id, 0 AS last_sequence,
        coalesce((SELECT min(p.node_id) {pauses}), '') AS last_node_id,
        coalesce(
            nullif((SELECT min(p.chain_name) {pauses}), ''),
            nullif((SELECT d.chain_name FROM {t}interrupt_decisions AS d
                WHERE d.namespace = t.namespace AND d.execution_id = t.thread_id
                  AND d.interrupt_id <> '' ORDER BY d.sequence DESC LIMIT 1), ''),
            nullif(c.metadata ->> 'graph_name', ''),
            nullif(c.metadata ->> 'graph_id', ''),
            '') AS chain_name,
        CASE
            WHEN EXISTS (SELECT 1 {pauses}) THEN 'paused'
            WHEN EXISTS ({writes} AND w.channel = '{ERROR_CHANNEL}') THEN 'failed'
            WHEN EXISTS ({writes}) OR c.metadata ->> 'source' = 'input' OR c.send_nodes <> ''
                THEN 'running'
            ELSE 'ended' END AS run_status
    FROM threads AS t
    LEFT JOIN {t}graph_checkpoints AS c
        ON c.namespace = t.namespace AND c.thread_id = t.thread_id AND c.checkpoint_ns = ''
        AND c.checkpoint_id = t.last_checkpoint_id
) SELECT * FROM described"""


class PostgresExecutionReader(ExecutionReader):
    """An :class:`~checkpointd.store.executions.ExecutionReader` on a Postgres store."""

    def __init__(self, access: PostgresAccess) -> None:
        tables = f"{access.quoted_schema}."
        sql = ExecutionSql(tables=tables, number=numbered, threads=threads_sql(tables))
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
