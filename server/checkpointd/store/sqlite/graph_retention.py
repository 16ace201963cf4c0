"""Graph retention on SQLite: the statements and the
:class:`~checkpointd.graph.retention.RetentionBackend` of the SQLite graph store.

Listings run on the query-only reader (they read the ``graph_checkpoints_by_thread_written``
index alone); every deletion is one ``BEGIN IMMEDIATE`` transaction on the store's writer,
which also makes its checks (idle, paused) and its deletes one atomic step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

from checkpointd.graph.retention import (
    INTERRUPT_CHANNEL,
    RetentionCounts,
    RetentionTransaction,
)
from checkpointd.store import times
from checkpointd.store.sqlite import graph_sql as gsql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.on_thread import Statements

__all__ = ["PAUSED", "SQLiteRetention"]

# A thread is paused when the newest checkpoint of its root checkpoint_ns has a pending
# write on LangGraph's interrupt channel. The root, because a subgraph's interrupt is also
# written on the parent's task, while a subgraph's own checkpoint_ns keeps its interrupt
# write for good when the parent moves on without resuming it (new input, update_state).
# A resume write beside it does not mean answered: a node that interrupts again writes its
# earlier answers with the new interrupt, and a resume that has not yet reached a new
# checkpoint is a run still in progress. The one place that says what paused is (named
# parameters :namespace and :thread_id).
PAUSED: Final = f"""EXISTS (
    SELECT 1 FROM graph_writes AS w
    WHERE w.namespace = :namespace AND w.thread_id = :thread_id AND w.checkpoint_ns = ''
      AND w.channel = '{INTERRUPT_CHANNEL}'
      AND w.checkpoint_id = (
        SELECT max(h.checkpoint_id) FROM graph_checkpoints AS h
        WHERE h.namespace = :namespace AND h.thread_id = :thread_id AND h.checkpoint_ns = ''))"""

IS_PAUSED: Final = f"SELECT {PAUSED}"
# Checkpoints stored before schema version 10 have written_at 0: they count as written when
# that version was applied (the migration adds the column without rewriting a row).
_UPGRADED: Final = "(SELECT applied_at FROM schema_migrations WHERE version = 10)"
IS_IDLE: Final = f"""
SELECT EXISTS (
    SELECT 1 FROM graph_checkpoints WHERE namespace = :namespace AND thread_id = :thread_id)
  AND NOT EXISTS (
    SELECT 1 FROM graph_checkpoints
    WHERE namespace = :namespace AND thread_id = :thread_id
      AND (written_at >= :cutoff OR (written_at = 0 AND {_UPGRADED} >= :cutoff)))
"""
IDLE_THREADS: Final = f"""
SELECT thread_id, count(*) FROM graph_checkpoints INDEXED BY graph_checkpoints_by_thread_written
WHERE namespace = :namespace AND thread_id > :after
GROUP BY thread_id
HAVING max(written_at) < :cutoff AND (min(written_at) > 0 OR {_UPGRADED} < :cutoff)
ORDER BY thread_id LIMIT :limit
"""
CROWDED: Final = """
SELECT thread_id, checkpoint_ns, count(*)
FROM graph_checkpoints INDEXED BY graph_checkpoints_by_thread_written
WHERE namespace = ? AND (thread_id, checkpoint_ns) > (?, ?)
GROUP BY thread_id, checkpoint_ns HAVING count(*) > ?
ORDER BY thread_id, checkpoint_ns LIMIT ?
"""
_KEY: Final = "namespace = ? AND thread_id = ? AND checkpoint_ns = ?"
# The K-th newest checkpoint: what is older goes.
KTH_NEWEST: Final = (
    f"SELECT checkpoint_id FROM graph_checkpoints WHERE {_KEY} "
    "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET ?"
)
# Where a step of at most N checkpoints ends: the (N+1)-th oldest, if older than the K-th.
STEP_END: Final = (
    f"SELECT checkpoint_id FROM graph_checkpoints WHERE {_KEY} AND checkpoint_id < ? "
    "ORDER BY checkpoint_id LIMIT 1 OFFSET ?"
)
# Values no remaining checkpoint of their thread and checkpoint_ns names: the names are read
# once (a list the size of the kept checkpoints' versions), not per value.
DELETE_UNNAMED_VALUES: Final = f"""
DELETE FROM graph_blobs WHERE {_KEY} AND (channel, version) NOT IN (
    SELECT v.key, v.value FROM graph_checkpoints AS c, json_each(c.channel_versions) AS v
    WHERE c.namespace = ? AND c.thread_id = ? AND c.checkpoint_ns = ?)
"""
_THREAD: Final = "namespace = ? AND thread_id = ?"
DELETE_THREAD_CHECKPOINTS: Final = f"DELETE FROM graph_checkpoints WHERE {_THREAD}"
DELETE_THREAD_WRITES: Final = f"DELETE FROM graph_writes WHERE {_THREAD}"
DELETE_THREAD_VALUES: Final = f"DELETE FROM graph_blobs WHERE {_THREAD}"
NEXT_NAMESPACE: Final = "SELECT min(namespace) FROM graph_checkpoints WHERE namespace > ?"
RECORD_REQUEST: Final = gsql.RECORD_REQUEST + " ON CONFLICT DO NOTHING"


async def _fetch(conn: Statements, sql: str, params: Any) -> list[sqlite3.Row]:
    return await conn.fetch(sql, params)


async def _run(conn: Statements, sql: str, params: Sequence[Any]) -> int:
    return await conn.run(sql, params)


class _Rollback(Exception):
    """Ends a dry run's transaction without committing it."""


#: What else goes with a deleted thread in its transaction (its graph pauses, G10).
ThreadsRemoved = Callable[[Statements, str, list[str]], Awaitable[None]]


class _Transaction:
    """The retention statements inside one write transaction."""

    def __init__(self, conn: Statements, removed: ThreadsRemoved | None) -> None:
        self._conn = conn
        self._removed = removed

    async def is_paused(self, namespace: str, thread_id: str) -> bool:
        found = await _fetch(
            self._conn, IS_PAUSED, {"namespace": namespace, "thread_id": thread_id}
        )
        return bool(found[0][0])

    async def is_idle(self, namespace: str, thread_id: str, cutoff: datetime) -> bool:
        params = {"namespace": namespace, "thread_id": thread_id, "cutoff": times.to_us(cutoff)}
        return bool((await _fetch(self._conn, IS_IDLE, params))[0][0])

    async def uses_delta_channel(self, namespace: str, thread_id: str) -> bool:
        return bool(await _fetch(self._conn, gsql.USES_DELTA_CHANNEL, (namespace, thread_id)))

    async def delete_idle_thread(
        self, namespace: str, thread_id: str, cutoff: datetime
    ) -> RetentionCounts:
        if not await self.is_idle(namespace, thread_id, cutoff):
            return RetentionCounts()  # written to since it was listed
        key = (namespace, thread_id)
        counts = RetentionCounts(
            threads_deleted=1,
            checkpoints_deleted=await _run(self._conn, DELETE_THREAD_CHECKPOINTS, key),
            writes_deleted=await _run(self._conn, DELETE_THREAD_WRITES, key),
            channel_values_deleted=await _run(self._conn, DELETE_THREAD_VALUES, key),
        )
        if self._removed is not None:
            await self._removed(self._conn, namespace, [thread_id])
        return counts

    async def cut(
        self, namespace: str, thread_id: str, checkpoint_ns: str, keep: int, most: int | None
    ) -> tuple[RetentionCounts, bool]:
        key = (namespace, thread_id, checkpoint_ns)
        kth = await _fetch(self._conn, KTH_NEWEST, (*key, keep - 1))
        if not kth:
            return RetentionCounts(), True
        end: str = kth[0][0]
        done = True
        if most is not None:
            step = await _fetch(self._conn, STEP_END, (*key, end, most))
            if step:
                end, done = step[0][0], False
        writes = await _run(self._conn, gsql.PRUNE_OLDER_WRITES, (*key, end))
        checkpoints = await _run(self._conn, gsql.PRUNE_OLDER_CHECKPOINTS, (*key, end))
        await _run(self._conn, gsql.CLEAR_LOST_PARENTS, key)
        values = await _run(self._conn, DELETE_UNNAMED_VALUES, (*key, *key)) if done else 0
        counts = RetentionCounts(
            checkpoints_deleted=checkpoints, writes_deleted=writes, channel_values_deleted=values
        )
        return counts, done


class SQLiteRetention:
    """The :class:`~checkpointd.graph.retention.RetentionBackend` of SQLite."""

    def __init__(self, access: SQLiteAccess, removed: ThreadsRemoved | None = None) -> None:
        self._access = access
        self._removed = removed

    async def idle_threads(
        self, namespace: str, cutoff: datetime, after: str, limit: int
    ) -> list[tuple[str, int]]:
        async with self._access.call():
            params = {
                "namespace": namespace,
                "after": after,
                "cutoff": times.to_us(cutoff),
                "limit": limit,
            }
            rows = await self._access.read(lambda conn: _fetch(conn, IDLE_THREADS, params))
        return [(row[0], int(row[1])) for row in rows]

    async def crowded(
        self, namespace: str, keep: int, after: tuple[str, str], limit: int
    ) -> list[tuple[str, str, int]]:
        async with self._access.call():
            params = (namespace, *after, keep, limit)
            rows = await self._access.read(lambda conn: _fetch(conn, CROWDED, params))
        return [(row[0], row[1], int(row[2])) for row in rows]

    @asynccontextmanager
    async def transaction(self, *, rollback: bool) -> AsyncIterator[RetentionTransaction]:
        try:
            # Statement by statement: the shared logic decides between them what comes next.
            async with self._access.call(), self._access.write_hops() as conn:
                yield _Transaction(conn, self._removed)
                if rollback:
                    raise _Rollback
        except _Rollback:
            pass

    async def recorded(self, namespace: str, request_id: str) -> tuple[str, str, str] | None:
        async with self._access.call():
            found = await self._access.read(
                lambda conn: _fetch(conn, gsql.REQUEST_REPLY, (namespace, request_id))
            )
        if not found:
            return None
        return (found[0]["kind"], found[0]["fingerprint"], found[0]["reply_json"])

    async def record(
        self, namespace: str, request_id: str, reply: tuple[str, str, str], now: datetime
    ) -> bool:
        params = (namespace, request_id, *reply, times.to_us(now))
        async with self._access.call():
            return await self._access.write(lambda conn: _run(conn, RECORD_REQUEST, params)) == 1

    async def next_namespace(self, after: str) -> str | None:
        async with self._access.call():
            found = await self._access.read(lambda conn: _fetch(conn, NEXT_NAMESPACE, (after,)))
        value: str | None = found[0][0]
        return value
