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
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from checkpointd.graph import delta
from checkpointd.graph import interrupts as graph_interrupts
from checkpointd.graph import requests as graph_requests
from checkpointd.graph.interrupts import GraphInterrupt, TaskPlace, send_nodes_column
from checkpointd.graph.pending_ops import StatementPendingOps
from checkpointd.graph.store import (
    ChannelValue,
    GraphCheckpoint,
    GraphListQuery,
    GraphPage,
    GraphPosition,
    GraphStore,
    GraphTuple,
    GraphWrite,
    TypedValue,
    tuple_size,
)
from checkpointd.store import times
from checkpointd.store.sqlite import graph_sql as gsql
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.graph_interrupts import PENDING_OPS_SQL
from checkpointd.store.sqlite.graph_retention import SQLiteRetention
from checkpointd.store.sqlite.on_thread import Statements

__all__ = ["SQLiteGraphStore"]


async def _fetch(conn: Statements, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    return await conn.fetch(sql, params)


async def _run(conn: Statements, sql: str, params: Sequence[Any]) -> int:
    return await conn.run(sql, params)


def _checkpoint_from_row(row: sqlite3.Row) -> GraphCheckpoint:
    return GraphCheckpoint(
        thread_id=row["thread_id"],
        checkpoint_ns=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_checkpoint_id=row["parent_checkpoint_id"],
        body=TypedValue(row["body_type"], bytes(row["body_data"])),
        metadata_json=row["metadata_json"],
        channel_versions=json.loads(row["channel_versions"]),
        run_id=row["run_id"],
    )


def _write_from_row(row: sqlite3.Row) -> GraphWrite:
    return GraphWrite(
        row["task_id"],
        row["task_path"],
        int(row["idx"]),
        row["channel"],
        TypedValue(row["value_type"], bytes(row["value_data"])),
    )


def _link_from_row(row: sqlite3.Row) -> delta.ChainLink:
    return delta.ChainLink(
        row["checkpoint_id"], row["parent_checkpoint_id"], json.loads(row["channel_versions"])
    )


class _DeltaReads(delta.DeltaReads):
    """The DeltaChannel walk's reads in one thread and checkpoint_ns, on one connection."""

    def __init__(self, conn: Statements, key: tuple[str, str, str]) -> None:
        self._conn = conn
        self._key = key

    async def newest(self) -> str | None:
        found = await _fetch(self._conn, gsql.GET_LATEST, self._key)
        return str(found[0]["checkpoint_id"]) if found else None

    async def chain(self, start: str, limit: int) -> list[delta.ChainLink]:
        rows = await _fetch(self._conn, gsql.DELTA_CHAIN, (*self._key, start, limit))
        return [_link_from_row(row) for row in rows]

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
        return [(r["checkpoint_id"], _write_from_row(r)) for r in rows]

    async def links(self) -> list[delta.ChainLink]:
        return [
            _link_from_row(row) for row in await _fetch(self._conn, gsql.DELTA_LINKS, self._key)
        ]

    async def delta_channels(self) -> set[str]:
        return {row[0] for row in await _fetch(self._conn, gsql.DELTA_CHANNELS, self._key)}


class SQLiteGraphStore(GraphStore):
    """A :class:`~checkpointd.graph.store.GraphStore` sharing a SQLite store's connections."""

    def __init__(self, access: SQLiteAccess) -> None:
        self._access = access
        self._retention = SQLiteRetention(access, self._remove_pauses)

    def _pending(self, conn: Statements, namespace: str) -> StatementPendingOps:
        """The graph interrupts' statements on this transaction (G8-G10)."""
        return StatementPendingOps(
            conn,
            PENDING_OPS_SQL,
            namespace,
            read_time=times.from_us,
            write_time=times.to_us,
            append_event=self._access.append_event,
        )

    # --- request ids -------------------------------------------------------------------

    @staticmethod
    async def _once(
        conn: Statements,
        namespace: str,
        request_id: str,
        kind: str,
        fingerprint: str,
        now: datetime,
        apply: Callable[[], Awaitable[int]],
    ) -> int:
        async def lookup() -> tuple[str, str, str] | None:
            found = await _fetch(conn, gsql.REQUEST_REPLY, (namespace, request_id))
            if not found:
                return None
            return (found[0]["kind"], found[0]["fingerprint"], found[0]["reply_json"])

        async def record(kind: str, fingerprint: str, reply_json: str) -> None:
            params = (namespace, request_id, kind, fingerprint, reply_json, times.to_us(now))
            await _run(conn, gsql.RECORD_REQUEST, params)

        return await graph_requests.once(
            request_id, kind, fingerprint, apply, lookup=lookup, record=record
        )

    async def _transaction(
        self,
        namespace: str,
        request_id: str,
        kind: str,
        fingerprint: str,
        now: datetime,
        apply: Callable[[Statements], Awaitable[int]],
        *,
        grouped: bool = False,
    ) -> int:
        """One write transaction of its own (``grouped``: one write in the next group-commit
        transaction, for the puts), applied at most once per request id."""

        async def body(conn: Statements) -> int:
            return await self._once(
                conn, namespace, request_id, kind, fingerprint, now, lambda: apply(conn)
            )

        async with self._access.call():
            if grouped:
                changed: int = await self._access.group(body)  # raises the write's own error
                return changed
            return await self._access.write(body)

    # --- puts --------------------------------------------------------------------------

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: GraphCheckpoint,
        new_values: Sequence[ChannelValue],
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Upsert the checkpoint and insert its new values (group commit)."""
        cp = checkpoint
        row = (
            namespace,
            cp.thread_id,
            cp.checkpoint_ns,
            cp.checkpoint_id,
            cp.parent_checkpoint_id,
            cp.body.type,
            cp.body.data,
            cp.metadata_json,
            json.dumps(cp.channel_versions, sort_keys=True),
            cp.run_id,
            times.to_us(now),
        )
        blobs = [
            (
                namespace,
                cp.thread_id,
                cp.checkpoint_ns,
                v.channel,
                v.version,
                v.value.type,
                v.value.data,
            )
            for v in new_values
        ]

        async def apply(conn: Statements) -> int:
            if blobs:
                await conn.run_many(gsql.INSERT_BLOB, blobs)
            await _run(conn, gsql.UPSERT_CHECKPOINT, row)
            if cp.send_nodes:
                await conn.run(gsql.SET_SEND_NODES, (send_nodes_column(cp.send_nodes), *row[:4]))
            await graph_interrupts.checkpoint_stored(
                self._pending(conn, namespace),
                cp.thread_id,
                cp.checkpoint_ns,
                cp.checkpoint_id,
                cp.parent_checkpoint_id,
                now,
                cp.send_nodes,
            )
            return 0

        await self._transaction(
            namespace,
            request_id,
            graph_requests.PUT_CHECKPOINT,
            fingerprint,
            now,
            apply,
            grouped=True,
        )

    async def put_writes(
        self,
        namespace: str,
        request_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[GraphWrite],
        now: datetime,
        *,
        fingerprint: str = "",
        task_id: str = "",
        interrupts: Sequence[GraphInterrupt] = (),
    ) -> None:
        """Store pending writes: special ones (all idx negative) replace, others keep the
        first (group commit)."""
        statement = gsql.UPSERT_WRITE if all(w.idx < 0 for w in writes) else gsql.INSERT_WRITE
        rows = [
            (
                namespace,
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                w.task_id,
                w.idx,
                w.task_path,
                w.channel,
                w.value.type,
                w.value.data,
            )
            for w in writes
        ]

        task_path = writes[0].task_path if writes else ""

        async def apply(conn: Statements) -> int:
            if rows:
                await conn.run_many(statement, rows)
            place = TaskPlace(thread_id, checkpoint_ns, checkpoint_id, task_id)
            await graph_interrupts.write_task(
                self._pending(conn, namespace), place, interrupts, now, task_path
            )
            return 0

        await self._transaction(
            namespace, request_id, graph_requests.PUT_WRITES, fingerprint, now, apply, grouped=True
        )

    # --- reads -------------------------------------------------------------------------

    @staticmethod
    async def _complete(
        conn: Statements, namespace: str, checkpoint: GraphCheckpoint
    ) -> GraphTuple:
        """The checkpoint with the values of its versions and its writes."""
        key = (namespace, checkpoint.thread_id, checkpoint.checkpoint_ns)
        versions = json.dumps(checkpoint.channel_versions)
        blobs = await _fetch(conn, gsql.BLOBS_OF, (versions, *key))
        writes = await _fetch(conn, gsql.WRITES_OF, (*key, checkpoint.checkpoint_id))
        return GraphTuple(
            checkpoint,
            tuple(
                ChannelValue(
                    r["channel"], r["version"], TypedValue(r["value_type"], bytes(r["value_data"]))
                )
                for r in blobs
            ),
            tuple(_write_from_row(r) for r in writes),
        )

    async def get_tuple(
        self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> GraphTuple | None:
        """The checkpoint (or the newest) with its values and writes."""
        key = (namespace, thread_id, checkpoint_ns)

        async def body(conn: Statements) -> GraphTuple | None:
            if checkpoint_id:
                found = await _fetch(conn, gsql.GET_CHECKPOINT, (*key, checkpoint_id))
            else:
                found = await _fetch(conn, gsql.GET_LATEST, key)
            if not found:
                return None
            return await self._complete(conn, namespace, _checkpoint_from_row(found[0]))

        async with self._access.call():
            return await self._access.read(body)

    async def list_tuples(
        self,
        namespace: str,
        query: GraphListQuery,
        *,
        after: GraphPosition | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> GraphPage:
        """Up to ``limit`` matching tuples after ``after``, newest first, each completed
        (values, writes) only while the page is within ``max_bytes``."""
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
        statement = " AND ".join(sql) + gsql.LIST_ORDER
        params.append(limit)

        async def body(conn: Statements) -> GraphPage:
            found: list[GraphTuple] = []
            size = 0
            rows = await _fetch(conn, statement, params)
            for row in rows:
                if max_bytes is not None and found and size > max_bytes:
                    return GraphPage(found, more=True)
                found.append(await self._complete(conn, namespace, _checkpoint_from_row(row)))
                size += tuple_size(found[-1])
            return GraphPage(found, more=len(rows) == limit)

        async with self._access.call():
            return await self._access.read(body)

    async def delta_history(
        self,
        namespace: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        channels: Sequence[str],
        *,
        cursor: delta.DeltaCursor | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> delta.DeltaPage:
        """One page of the DeltaChannel history walk, in one read on the reader."""

        async def body(conn: Statements) -> delta.DeltaPage:
            reads = _DeltaReads(conn, (namespace, thread_id, checkpoint_ns))
            return await delta.history(
                reads, checkpoint_id, channels, cursor=cursor, limit=limit, max_bytes=max_bytes
            )

        async with self._access.call():
            return await self._access.read(body)

    # --- whole-thread operations -------------------------------------------------------

    async def _delete_runs(self, conn: Statements, namespace: str, run_ids: Sequence[str]) -> int:
        found = await _fetch(conn, gsql.CHECKPOINTS_OF_RUNS, (namespace, json.dumps(list(run_ids))))
        doomed: dict[tuple[str, str], set[str]] = {}
        for row in found:
            doomed.setdefault((row["thread_id"], row["checkpoint_ns"]), set()).add(
                row["checkpoint_id"]
            )
        deleted = 0
        for (thread_id, checkpoint_ns), ids in sorted(doomed.items()):
            if await _fetch(conn, gsql.USES_DELTA_CHANNEL, (namespace, thread_id)):
                reads = _DeltaReads(conn, (namespace, thread_id, checkpoint_ns))
                ids -= await delta.needed_by_survivors(reads, ids)  # G20
            for checkpoint_id in sorted(ids):
                key = (namespace, thread_id, checkpoint_ns, checkpoint_id)
                await _run(conn, gsql.DELETE_WRITES_OF, key)
                deleted += await _run(conn, gsql.DELETE_CHECKPOINT, key)
            await _run(conn, gsql.DELETE_UNNAMED_BLOBS, (namespace, thread_id, checkpoint_ns))
        return deleted

    async def _copy_thread(
        self, conn: Statements, namespace: str, source: str, target: str, now: datetime
    ) -> int:
        params = (target, namespace, source)
        copied = await _run(
            conn, gsql.COPY_CHECKPOINTS, (target, times.to_us(now), namespace, source)
        )
        await _run(conn, gsql.COPY_BLOBS, params)
        await _run(conn, gsql.COPY_WRITES, params)
        return copied

    async def _keep_newest(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            if await _fetch(conn, gsql.USES_DELTA_CHANNEL, (namespace, thread_id)):
                continue  # its channels need the older checkpoints' writes
            heads = await _fetch(conn, gsql.NAMESPACES_OF_THREAD, (namespace, thread_id))
            for checkpoint_ns, newest in heads:
                key = (namespace, thread_id, checkpoint_ns)
                await _run(conn, gsql.PRUNE_OLDER_WRITES, (*key, newest))
                deleted += await _run(conn, gsql.PRUNE_OLDER_CHECKPOINTS, (*key, newest))
                await _run(conn, gsql.CLEAR_LOST_PARENTS, key)
                await _run(conn, gsql.DELETE_UNNAMED_BLOBS, key)
        return deleted

    @staticmethod
    async def _delete_threads(conn: Statements, namespace: str, thread_ids: Sequence[str]) -> int:
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            found = await _fetch(conn, gsql.COUNT_THREAD, (namespace, thread_id))
            deleted += int(found[0][0])
            for statement in gsql.DELETE_THREAD:
                await _run(conn, statement, (namespace, thread_id))
        return deleted

    async def purge_requests(self, applied_before: datetime) -> int:
        """Forget the request ids recorded before ``applied_before``."""
        cutoff = (times.to_us(applied_before),)
        async with self._access.call():
            return await self._access.write(lambda conn: _run(conn, gsql.PURGE_REQUESTS, cutoff))
