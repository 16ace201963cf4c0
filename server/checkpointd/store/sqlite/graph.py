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

from checkpointd.graph import delta
from checkpointd.graph.interrupts import TaskPlace
from checkpointd.graph.records import (
    ChainLink,
    ChannelValue,
    GraphListQuery,
    GraphPosition,
    GraphTuple,
    GraphWrite,
    TypedValue,
)
from checkpointd.graph.store import GraphStore
from checkpointd.graph.store_sql import (
    checkpoint_from_row,
    link_from_row,
    tuple_from_rows,
    write_from_row,
    write_rows,
)
from checkpointd.store import times
from checkpointd.store.sqlite import graph_sql as gsql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.graph_interrupts import PENDING_OPS_SQL
from checkpointd.store.sqlite.graph_retention import SQLiteRetention
from checkpointd.store.sqlite.on_thread import Body, Statements

__all__ = ["SQLiteGraphStore"]


async def _fetch(conn: Statements, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    return await conn.fetch(sql, params)


async def _run(conn: Statements, sql: str, params: Sequence[Any]) -> int:
    return await conn.run(sql, params)


class _DeltaReads(delta.DeltaReads):
    """The DeltaChannel walk's reads in one thread and checkpoint_ns, on one connection (its
    lists bound as JSON arrays)."""

    def __init__(self, conn: Statements, key: tuple[str, str, str]) -> None:
        self._conn = conn
        self._key = key

    async def newest(self) -> str | None:
        found = await _fetch(self._conn, gsql.GET_LATEST, self._key)
        return str(found[0]["checkpoint_id"]) if found else None

    async def chain(self, start: str, limit: int) -> list[ChainLink]:
        rows = await _fetch(self._conn, gsql.DELTA_CHAIN, (*self._key, start, limit))
        return [link_from_row(row) for row in rows]

    async def stored_types(self, keys: Sequence[delta.ChannelKey]) -> dict[delta.ChannelKey, str]:
        rows = await _fetch(self._conn, gsql.DELTA_TYPES, (*self._key, json.dumps(keys)))
        return {(r["channel"], r["version"]): r["value_type"] for r in rows}

    async def values(self, keys: Sequence[delta.ChannelKey]) -> dict[delta.ChannelKey, TypedValue]:
        rows = await _fetch(self._conn, gsql.DELTA_VALUES, (*self._key, json.dumps(keys)))
        return {
            (r["channel"], r["version"]): TypedValue(r["value_type"], bytes(r["value_data"]))
            for r in rows
        }

    async def writes(
        self, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[tuple[str, GraphWrite]]:
        params = (*self._key, json.dumps(list(checkpoint_ids)), json.dumps(list(channels)))
        rows = await _fetch(self._conn, gsql.DELTA_WRITES, params)
        return [(r["checkpoint_id"], write_from_row(tuple(r)[1:])) for r in rows]

    async def links(self) -> list[ChainLink]:
        return [link_from_row(row) for row in await _fetch(self._conn, gsql.DELTA_LINKS, self._key)]

    async def delta_channels(self) -> set[str]:
        return {row[0] for row in await _fetch(self._conn, gsql.DELTA_CHANNELS, self._key)}


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
        transaction)."""
        async with self._access.call():
            if put:
                changed: int = await self._access.group(body)  # raises the write's own error
                return changed
            return await self._access.write(body)

    async def _read(self, body: Body[Any]) -> Any:
        """On the query-only reader."""
        async with self._access.call():
            return await self._access.read(body)

    # --- puts --------------------------------------------------------------------------

    async def _store_checkpoint(
        self, conn: Statements, row: tuple[Any, ...], new_values: Sequence[ChannelValue]
    ) -> None:
        """Insert the new values, then upsert the checkpoint; what it released is read by
        the interrupts' own statement."""
        if new_values:
            key = row[:3]  # namespace, thread id, checkpoint_ns
            blobs = [(*key, v.channel, v.version, v.value.type, v.value.data) for v in new_values]
            await conn.run_many(gsql.INSERT_BLOB, blobs)
        await conn.run(gsql.UPSERT_CHECKPOINT, row)

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
        blobs = await _fetch(conn, gsql.BLOBS_OF, (versions, *key))
        writes = await _fetch(conn, gsql.WRITES_OF, (*key, checkpoint.checkpoint_id))
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

    def _delta_reads(self, conn: Statements, key: tuple[str, str, str]) -> delta.DeltaReads:
        return _DeltaReads(conn, key)

    # --- whole-thread operations -------------------------------------------------------

    async def _checkpoints_of_runs(
        self, conn: Statements, namespace: str, run_ids: Sequence[str]
    ) -> list[tuple[str, str, str]]:
        found = await _fetch(conn, gsql.CHECKPOINTS_OF_RUNS, (namespace, json.dumps(list(run_ids))))
        return [(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]) for r in found]

    async def _delete_checkpoints(
        self, conn: Statements, key: tuple[str, str, str], checkpoint_ids: Sequence[str]
    ) -> int:
        """One checkpoint at a time, by primary key."""
        deleted = 0
        for checkpoint_id in checkpoint_ids:
            await _run(conn, gsql.DELETE_WRITES_OF, (*key, checkpoint_id))
            deleted += await _run(conn, gsql.DELETE_CHECKPOINT, (*key, checkpoint_id))
        return deleted

    async def _delete_threads(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            found = await _fetch(conn, gsql.COUNT_THREAD, (namespace, thread_id))
            deleted += int(found[0][0])
            for statement in gsql.DELETE_THREAD:
                await _run(conn, statement, (namespace, thread_id))
        return deleted
