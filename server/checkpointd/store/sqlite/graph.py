"""The SQLite graph store: the :class:`~checkpointd.graph.store.GraphStore` on the SQLite
store's file, writer and reader.

Puts of checkpoints and writes join the store's group commit (many concurrent puts, one
fsync); deletes, copies and prunes are one ``BEGIN IMMEDIATE`` transaction each. Reads use
the query-only reader: a get is one indexed read of the checkpoint, one primary-key lookup
per channel version it names and one range read of its writes, whatever the thread's
history.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from checkpointd.graph.interrupts import TaskPlace
from checkpointd.graph.put_order import PUT_ORDER
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
from checkpointd.store.sqlite import graph_sql as gsql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.graph_interrupts import PENDING_OPS_SQL
from checkpointd.store.sqlite.graph_retention import SQLiteRetention
from checkpointd.store.sqlite.on_thread import Body, Statements

__all__ = ["SQLiteGraphStore"]


class SQLiteGraphStore(GraphStore):
    """A :class:`~checkpointd.graph.store.GraphStore` sharing a SQLite store's connections."""

    def __init__(self, access: SQLiteAccess) -> None:
        self._access = access
        self._retention = SQLiteRetention(access, self._remove_pauses)
        self._sql = gsql.STORE_SQL
        self._pending_sql = PENDING_OPS_SQL
        self._read_time = times.from_us
        self._write_time = times.to_us
        self._append_event = access.append_event

    async def _write(self, body: Body[int], *, put: bool) -> int:
        """One write transaction of its own (``put``: one write in the next group-commit
        transaction). A checkpoint sent behind another of its thread on a Write stream takes
        its place in the group's queue at once, written only if that one was stored (S5,
        :mod:`checkpointd.graph.put_order`): the queue commits in the order it was filled."""
        async with self._access.call():
            if put:
                order = PUT_ORDER.get()
                if order is not None:
                    PUT_ORDER.set(None)  # this task's one put
                    body = order.wrap(body)
                    order.queue()  # nothing awaited before the group queues it
                changed: int = await self._access.group(body)  # raises the write's own error
                return changed
            return await self._access.write(body)

    async def _read(self, body: Body[Any]) -> Any:
        """On the query-only reader."""
        async with self._access.call():
            return await self._access.read(body)

    async def _read_point(self, body: Body[Any]) -> Any:
        """On the event loop's own connection (:mod:`checkpointd.store.sqlite.on_loop`)."""
        async with self._access.call():
            return await self._access.read_point(body)

    # --- puts --------------------------------------------------------------------------

    async def _store_checkpoint(
        self, conn: Statements, row: tuple[Any, ...], new_values: Sequence[ChannelValue]
    ) -> StoredCheckpoint:
        """Insert the new values, then upsert the checkpoint; what it released and its
        parent's rows are read by the interrupts' own statements."""
        if new_values:
            key = row[:3]  # namespace, thread id, checkpoint_ns
            blobs = [(*key, v.channel, v.version, v.value.type, v.value.data) for v in new_values]
            await conn.run_many(gsql.INSERT_BLOB, blobs)
        await conn.run(gsql.UPSERT_CHECKPOINT, row)
        return StoredCheckpoint()

    async def _store_writes(
        self, conn: Statements, namespace: str, place: TaskPlace, writes: Sequence[GraphWrite]
    ) -> None:
        """Special writes (all idx negative) replace, others keep the first; the task's rows
        are read by the interrupts' own statement."""
        statement = gsql.UPSERT_WRITE if all(w.idx < 0 for w in writes) else gsql.INSERT_WRITE
        key = (namespace, place.thread_id, place.checkpoint_ns, place.checkpoint_id)
        await conn.run_many(statement, [(*key, *row) for row in write_rows(writes)])

    # --- reads -------------------------------------------------------------------------

    async def _tuple(self, conn: Statements, namespace: str, row: sqlite3.Row) -> GraphTuple:
        """The checkpoint with the values of its versions (one primary-key lookup each) and
        its writes (one range read)."""
        checkpoint = checkpoint_from_row(row)
        key = (namespace, checkpoint.thread_id, checkpoint.checkpoint_ns)
        versions = json.dumps(checkpoint.channel_versions)
        blobs = await conn.fetch(gsql.BLOBS_OF, (versions, *key))
        writes = await conn.fetch(gsql.WRITES_OF, (*key, checkpoint.checkpoint_id))
        return tuple_from_rows(checkpoint, blobs, writes)

    def _list_statement(
        self, namespace: str, query: GraphListQuery, after: GraphPosition | None, limit: int
    ) -> tuple[str, list[Any]]:
        sql = [gsql.LIST_HEAD]
        params: list[Any] = [namespace]
        if query.thread_id:
            sql.append("thread_id = ?")
            params.append(query.thread_id)
        if query.checkpoint_ns is not None:
            sql.append("checkpoint_ns = ?")
            params.append(query.checkpoint_ns)
        if query.checkpoint_id:
            sql.append("checkpoint_id = ?")
            params.append(query.checkpoint_id)
        if query.before_checkpoint_id:
            sql.append("checkpoint_id < ?")
            params.append(query.before_checkpoint_id)
        if query.metadata_filter_json:
            sql.append(gsql.METADATA_CONTAINS)
            params.append(query.metadata_filter_json)
        if after is not None:
            sql.append(gsql.AFTER_POSITION)
            params.extend((after.checkpoint_id, after.thread_id, after.checkpoint_ns))
        params.append(limit)
        return " AND ".join(sql) + gsql.LIST_ORDER, params

    # --- whole-thread operations -------------------------------------------------------

    async def _checkpoints_of_runs(
        self, conn: Statements, namespace: str, run_ids: Sequence[str]
    ) -> list[tuple[str, str, str]]:
        found = await conn.fetch(gsql.CHECKPOINTS_OF_RUNS, (namespace, json.dumps(list(run_ids))))
        return [(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]) for r in found]

    async def _delete_checkpoints(
        self, conn: Statements, key: tuple[str, str, str], checkpoint_ids: Sequence[str]
    ) -> int:
        """One checkpoint at a time, by primary key."""
        deleted = 0
        for checkpoint_id in checkpoint_ids:
            await conn.run(gsql.DELETE_WRITES_OF, (*key, checkpoint_id))
            deleted += await conn.run(gsql.DELETE_CHECKPOINT, (*key, checkpoint_id))
        return deleted

    async def _delete_threads(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            found = await conn.fetch(gsql.COUNT_THREAD, (namespace, thread_id))
            deleted += int(found[0][0])
            for statement in gsql.DELETE_THREAD:
                await conn.run(statement, (namespace, thread_id))
        return deleted
