"""Graph retention on Postgres: the statements and the
:class:`~checkpointd.graph.retention.RetentionBackend` of the Postgres graph store.

Listings are one statement each on a pooled connection (they read the
``graph_checkpoints_by_thread_written`` index); every deletion is one transaction. A thread's
deletion checks in its own statement that the thread is still idle and not paused, so a run
that wrote to it after it was listed keeps it. Nothing outlives a transaction: it holds
through PgBouncer's transaction pooling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

from checkpointd.graph.retention import (
    INTERRUPT_CHANNEL,
    RetentionCounts,
    RetentionTransaction,
)
from checkpointd.store import times
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.graph_sql import GraphSql
from checkpointd.store.postgres.statements import PgStatements
from checkpointd.store.statements import Statements

__all__ = ["PAUSED", "PostgresRetention"]

# A thread is paused when the newest checkpoint of its root checkpoint_ns has a pending
# write on LangGraph's interrupt channel (checkpointd.store.sqlite.graph_retention.PAUSED
# says why the root and why a resume write beside it does not count). The one place that
# says what paused is, with {s} the schema, $1 the namespace and $2 the thread.
PAUSED: Final = f"""EXISTS (
    SELECT 1 FROM {{s}}.graph_writes AS w
    WHERE w.namespace = $1 AND w.thread_id = $2 AND w.checkpoint_ns = ''
      AND w.channel = '{INTERRUPT_CHANNEL}'
      AND w.checkpoint_id = (
        SELECT max(h.checkpoint_id) FROM {{s}}.graph_checkpoints AS h
        WHERE h.namespace = $1 AND h.thread_id = $2 AND h.checkpoint_ns = ''))"""


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


class RetentionSql:
    """The retention statements for one schema."""

    def __init__(self, quoted_schema: str) -> None:
        s = quoted_schema
        paused = PAUSED.replace("{s}", s)
        has_newer = (
            f"EXISTS (SELECT 1 FROM {s}.graph_checkpoints AS n "
            "WHERE n.namespace = $1 AND n.thread_id = $2 AND n.written_at >= $3)"
        )
        self.is_paused = f"SELECT {paused}"
        self.is_idle = (
            f"SELECT EXISTS (SELECT 1 FROM {s}.graph_checkpoints "
            f"WHERE namespace = $1 AND thread_id = $2) AND NOT {has_newer}"
        )
        self.idle_threads = f"""
            SELECT thread_id, count(*) AS checkpoints FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND thread_id > $2
            GROUP BY thread_id HAVING max(written_at) < $3
            ORDER BY thread_id LIMIT $4"""
        self.crowded = f"""
            SELECT thread_id, checkpoint_ns, count(*) AS checkpoints FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND (thread_id, checkpoint_ns) > ($2, $3)
            GROUP BY thread_id, checkpoint_ns HAVING count(*) > $4
            ORDER BY thread_id, checkpoint_ns LIMIT $5"""
        # The checks and the delete in one statement (one snapshot).
        self.delete_idle_checkpoints = f"""
            DELETE FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND thread_id = $2 AND NOT {has_newer} AND NOT {paused}"""
        self.delete_thread_writes = (
            f"DELETE FROM {s}.graph_writes WHERE namespace = $1 AND thread_id = $2"
        )
        self.delete_thread_values = (
            f"DELETE FROM {s}.graph_blobs WHERE namespace = $1 AND thread_id = $2"
        )
        key = "namespace = $1 AND thread_id = $2 AND checkpoint_ns = $3"
        self.kth_newest = (
            f"SELECT checkpoint_id FROM {s}.graph_checkpoints WHERE {key} "
            "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET $4"
        )
        self.step_end = (
            f"SELECT checkpoint_id FROM {s}.graph_checkpoints WHERE {key} AND checkpoint_id < $4 "
            "ORDER BY checkpoint_id LIMIT 1 OFFSET $5"
        )
        # Values no remaining checkpoint of their thread and checkpoint_ns names: the names
        # are read once (a hashed list), not per value.
        self.delete_unnamed_values = f"""
            DELETE FROM {s}.graph_blobs
            WHERE {key} AND (channel, version) NOT IN (
                SELECT v.key, v.value
                FROM {s}.graph_checkpoints AS c, jsonb_each_text(c.channel_versions) AS v
                WHERE c.namespace = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3)"""
        self.next_namespace = (
            f"SELECT min(namespace) FROM {s}.graph_checkpoints WHERE namespace > $1"
        )


class _Rollback(Exception):
    """Ends a dry run's transaction without committing it."""


#: What else goes with a deleted thread in its transaction (its graph pauses, G10).
ThreadsRemoved = Callable[[Statements, str, list[str]], Awaitable[None]]


class _Transaction:
    """The retention statements inside one transaction."""

    def __init__(
        self, conn: Any, sql: RetentionSql, graph: GraphSql, removed: ThreadsRemoved | None
    ) -> None:
        self._conn = conn
        self._sql = sql
        self._graph = graph
        self._removed = removed

    async def is_paused(self, namespace: str, thread_id: str) -> bool:
        return bool(await self._conn.fetchval(self._sql.is_paused, namespace, thread_id))

    async def is_idle(self, namespace: str, thread_id: str, cutoff: datetime) -> bool:
        found = await self._conn.fetchval(
            self._sql.is_idle, namespace, thread_id, times.utc_in(cutoff)
        )
        return bool(found)

    async def uses_delta_channel(self, namespace: str, thread_id: str) -> bool:
        return bool(await self._conn.fetchval(self._graph.uses_delta_channel, namespace, thread_id))

    async def delete_idle_thread(
        self, namespace: str, thread_id: str, cutoff: datetime
    ) -> RetentionCounts:
        conn, sql = self._conn, self._sql
        checkpoints = _count(
            await conn.execute(
                sql.delete_idle_checkpoints, namespace, thread_id, times.utc_in(cutoff)
            )
        )
        if not checkpoints:
            return RetentionCounts()  # written to, or paused, since it was listed
        counts = RetentionCounts(
            threads_deleted=1,
            checkpoints_deleted=checkpoints,
            writes_deleted=_count(
                await conn.execute(sql.delete_thread_writes, namespace, thread_id)
            ),
            channel_values_deleted=_count(
                await conn.execute(sql.delete_thread_values, namespace, thread_id)
            ),
        )
        if self._removed is not None:
            await self._removed(PgStatements(conn), namespace, [thread_id])
        return counts

    async def cut(
        self, namespace: str, thread_id: str, checkpoint_ns: str, keep: int, most: int | None
    ) -> tuple[RetentionCounts, bool]:
        conn, sql, graph = self._conn, self._sql, self._graph
        key = (namespace, thread_id, checkpoint_ns)
        end: str | None = await conn.fetchval(sql.kth_newest, *key, keep - 1)
        if end is None:
            return RetentionCounts(), True
        done = True
        if most is not None:
            step: str | None = await conn.fetchval(sql.step_end, *key, end, most)
            if step is not None:
                end, done = step, False
        writes = _count(await conn.execute(graph.prune_older_writes, *key, end))
        checkpoints = _count(await conn.execute(graph.prune_older_checkpoints, *key, end))
        await conn.execute(graph.clear_lost_parents, *key)
        values = _count(await conn.execute(sql.delete_unnamed_values, *key)) if done else 0
        counts = RetentionCounts(
            checkpoints_deleted=checkpoints, writes_deleted=writes, channel_values_deleted=values
        )
        return counts, done


class PostgresRetention:
    """The :class:`~checkpointd.graph.retention.RetentionBackend` of Postgres."""

    def __init__(
        self, access: PostgresAccess, graph: GraphSql, removed: ThreadsRemoved | None = None
    ) -> None:
        self._access = access
        self._removed = removed
        self._graph = graph
        self._sql = RetentionSql(access.quoted_schema)

    async def idle_threads(
        self, namespace: str, cutoff: datetime, after: str, limit: int
    ) -> list[tuple[str, int]]:
        async with self._access.connection() as conn:
            rows = await conn.fetch(
                self._sql.idle_threads, namespace, after, times.utc_in(cutoff), limit
            )
        return [(row[0], int(row[1])) for row in rows]

    async def crowded(
        self, namespace: str, keep: int, after: tuple[str, str], limit: int
    ) -> list[tuple[str, str, int]]:
        async with self._access.connection() as conn:
            rows = await conn.fetch(self._sql.crowded, namespace, *after, keep, limit)
        return [(row[0], row[1], int(row[2])) for row in rows]

    @asynccontextmanager
    async def transaction(self, *, rollback: bool) -> AsyncIterator[RetentionTransaction]:
        try:
            async with self._access.connection() as conn, conn.transaction():
                yield _Transaction(conn, self._sql, self._graph, self._removed)
                if rollback:
                    raise _Rollback
        except _Rollback:
            pass

    async def recorded(self, namespace: str, request_id: str) -> tuple[str, str, str] | None:
        async with self._access.connection() as conn:
            row = await conn.fetchrow(self._graph.request_reply, namespace, request_id)
        if row is None:
            return None
        return (row["kind"], row["fingerprint"], row["reply_json"])

    async def record(
        self, namespace: str, request_id: str, reply: tuple[str, str, str], now: datetime
    ) -> bool:
        async with self._access.connection() as conn:
            status: str = await conn.execute(
                self._graph.record_request + " ON CONFLICT DO NOTHING",
                namespace,
                request_id,
                *reply,
                times.utc_in(now),
            )
        return _count(status) == 1

    async def next_namespace(self, after: str) -> str | None:
        async with self._access.connection() as conn:
            found: str | None = await conn.fetchval(self._sql.next_namespace, after)
        return found
