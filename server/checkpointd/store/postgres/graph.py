"""The Postgres graph store: the :class:`~checkpointd.graph.store.GraphStore` on the Postgres
store's pool and schema.

Each mutation is one transaction on a pooled connection; nothing outlives it (no session
state, no named statements unless the store's pool caches them), so it holds through
PgBouncer's transaction pooling. A get or a list is one statement: each row carries the
values of the versions it names and its pending writes as arrays, so a get touches only the
checkpoint's own rows, whatever the thread's history. Metadata filters are ``@>`` on JSONB.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from checkpointd.domain import PendingRecord
from checkpointd.graph.interrupts import TaskPlace
from checkpointd.graph.records import (
    ChannelValue,
    GraphListQuery,
    GraphPosition,
    GraphTuple,
    GraphWrite,
)
from checkpointd.graph.store import GraphStore, StoredCheckpoint
from checkpointd.graph.store_sql import checkpoint_from_row, tuple_from_rows, write_rows
from checkpointd.store import times
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.graph_interrupts import pending_ops_sql
from checkpointd.store.postgres.graph_retention import PostgresRetention
from checkpointd.store.postgres.graph_sql import GraphSql
from checkpointd.store.rows import pending_from_row
from checkpointd.store.statements import Body, Statements

__all__ = ["PostgresGraphStore"]


class PostgresGraphStore(GraphStore):
    """A :class:`~checkpointd.graph.store.GraphStore` sharing a Postgres store's pool."""

    _sql: GraphSql
    #: Rows per statement of a listing: a page reads at most this many rows past its budget.
    _list_chunk = 16

    def __init__(self, access: PostgresAccess) -> None:
        self._access = access
        self._sql = sql = GraphSql(access.quoted_schema)
        self._retention = PostgresRetention(access, sql, self._remove_pauses)
        self._pending_sql = pending_ops_sql(access.quoted_schema)
        self._read_time = times.utc_out
        self._write_time = times.utc_in
        self._append_event = access.append_event
        # put_writes: its writes (replacing or keeping the first) with the task's rows.
        self._writes_then_task_rows = {
            replace: f"WITH written AS ({writes}) {self._pending_sql.of_task}"
            for replace, writes in ((True, sql.upsert_writes), (False, sql.insert_writes))
        }

    async def _write(self, body: Body[int], *, put: bool) -> int:
        """One transaction on a pooled connection (a put's too: no group commit here)."""
        return await self._access.transaction(body)

    async def _read(self, body: Body[Any]) -> Any:
        return await self._access.read(body)

    async def _read_snapshot(self, body: Body[Any]) -> Any:
        """In one read-only REPEATABLE READ transaction."""
        return await self._access.snapshot(body)

    # --- puts --------------------------------------------------------------------------

    async def _store_checkpoint(
        self, conn: Statements, row: tuple[Any, ...], new_values: Sequence[ChannelValue]
    ) -> StoredCheckpoint:
        """Upsert the checkpoint with its new values, release what was held for it and read
        (locked) its parent's pending rows, in one statement: a row per parent row, or one
        with none, each with what was released."""
        statement, params = self._sql.upsert_checkpoint, row
        if new_values:
            statement = self._sql.upsert_checkpoint_with_blobs
            params += (
                [v.channel for v in new_values],
                [v.version for v in new_values],
                [v.value.type for v in new_values],
                [v.value.data for v in new_values],
            )
        found = await conn.fetch(statement, params)
        released = found[0]["released"]
        parent_rows = [
            pending_from_row(r, times.utc_out) for r in found if r["execution_id"] is not None
        ]
        return StoredCheckpoint(json.loads(released) if released else [], parent_rows)

    async def _store_writes(
        self, conn: Statements, namespace: str, place: TaskPlace, writes: Sequence[GraphWrite]
    ) -> list[PendingRecord]:
        """The writes (special ones, all idx negative, replace; others keep the first) and
        the task's pending rows (locked) in one statement."""
        statement = self._writes_then_task_rows[all(w.idx < 0 for w in writes)]
        key = (namespace, place.thread_id, place.checkpoint_ns, place.checkpoint_id, place.task_id)
        columns = [list(column) for column in zip(*write_rows(writes), strict=True)]
        found = await conn.fetch(statement, (*key, *columns))
        return [pending_from_row(row, times.utc_out) for row in found]

    # --- reads -------------------------------------------------------------------------

    async def _tuple(self, conn: Statements, namespace: str, row: asyncpg.Record) -> GraphTuple:
        """The row carries the checkpoint's values and writes."""
        return tuple_from_rows(checkpoint_from_row(row), row["blobs"], row["writes"])

    def _list_statement(
        self, namespace: str, query: GraphListQuery, after: GraphPosition | None, limit: int
    ) -> tuple[str, list[Any]]:
        sql = [self._sql.list_head]
        params: list[Any] = [namespace]

        def param(value: object, cast: str = "") -> str:
            params.append(value)
            return f"${len(params)}{cast}"

        if query.thread_id:
            sql.append(f"c.thread_id = {param(query.thread_id)}")
        if query.checkpoint_ns is not None:
            sql.append(f"c.checkpoint_ns = {param(query.checkpoint_ns)}")
        if query.checkpoint_id:
            sql.append(f"c.checkpoint_id = {param(query.checkpoint_id)}")
        if query.before_checkpoint_id:
            sql.append(f"c.checkpoint_id < {param(query.before_checkpoint_id)}")
        if query.metadata_filter_json:
            sql.append(f"c.metadata @> {param(query.metadata_filter_json, '::jsonb')}")
        if after is not None:
            position = (after.checkpoint_id, after.thread_id, after.checkpoint_ns)
            placeholders = ", ".join(param(value) for value in position)
            sql.append(f"(c.checkpoint_id, c.thread_id, c.checkpoint_ns) < ({placeholders})")
        statement = " AND ".join(sql) + self._sql.list_order + f" LIMIT {param(limit)}"
        return statement, params

    # --- whole-thread operations -------------------------------------------------------

    async def _delete_threads(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        ids = list(dict.fromkeys(thread_ids))
        for statement in self._sql.delete_threads:
            await conn.run(statement, (namespace, ids))
        return await conn.run(self._sql.delete_thread_checkpoints, (namespace, ids))

    async def _checkpoints_of_runs(
        self, conn: Statements, namespace: str, run_ids: Sequence[str]
    ) -> list[tuple[str, str, str]]:
        found = await conn.fetch(self._sql.checkpoints_of_runs, (namespace, list(run_ids)))
        return [(r[0], r[1], r[2]) for r in found]

    async def _delete_checkpoints(
        self, conn: Statements, key: tuple[str, str, str], checkpoint_ids: Sequence[str]
    ) -> int:
        """A thread's checkpoints and their writes at once (two statements)."""
        ids = list(checkpoint_ids)
        await conn.run(self._sql.delete_writes_at, (*key, ids))
        return await conn.run(self._sql.delete_checkpoints, (*key, ids))
