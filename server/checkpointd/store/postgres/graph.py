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
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from checkpointd.domain import PendingRecord
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
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.graph_interrupts import pending_ops_sql
from checkpointd.store.postgres.graph_retention import PostgresRetention
from checkpointd.store.postgres.graph_sql import GraphSql
from checkpointd.store.postgres.statements import PgStatements
from checkpointd.store.rows import pending_from_row

__all__ = ["PostgresGraphStore"]

#: Rows per statement of a listing: a page reads at most this many rows past its budget.
_LIST_CHUNK = 16


def _tuple_from_row(row: asyncpg.Record) -> GraphTuple:
    checkpoint = GraphCheckpoint(
        thread_id=row["thread_id"],
        checkpoint_ns=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_checkpoint_id=row["parent_checkpoint_id"],
        body=TypedValue(row["body_type"], bytes(row["body_data"])),
        metadata_json=row["metadata_json"],
        channel_versions=json.loads(row["versions"]),
        run_id=row["run_id"],
    )
    values = tuple(
        ChannelValue(channel, version, TypedValue(kind, bytes(data)))
        for channel, version, kind, data in row["blobs"]
    )
    writes = tuple(
        GraphWrite(task_id, task_path, int(idx), channel, TypedValue(kind, bytes(data)))
        for task_id, task_path, idx, channel, kind, data in row["writes"]
    )
    return GraphTuple(checkpoint, values, writes)


def _link_from_row(row: asyncpg.Record) -> delta.ChainLink:
    return delta.ChainLink(
        row["checkpoint_id"], row["parent_checkpoint_id"], json.loads(row["versions"])
    )


class _DeltaReads(delta.DeltaReads):
    """The DeltaChannel walk's reads in one thread and checkpoint_ns, on one connection."""

    def __init__(self, conn: Any, sql: GraphSql, key: tuple[str, str, str]) -> None:
        self._conn = conn
        self._sql = sql
        self._key = key

    async def newest(self) -> str | None:
        row = await self._conn.fetchrow(self._sql.delta_newest, *self._key)
        return None if row is None else str(row["checkpoint_id"])

    async def chain(self, start: str, limit: int) -> list[delta.ChainLink]:
        rows = await self._conn.fetch(self._sql.delta_chain, *self._key, start, limit)
        return [_link_from_row(row) for row in rows]

    async def stored_types(self, keys: Sequence[delta.ChannelKey]) -> dict[delta.ChannelKey, str]:
        channels, versions = [k[0] for k in keys], [k[1] for k in keys]
        rows = await self._conn.fetch(self._sql.delta_types, *self._key, channels, versions)
        return {(r["channel"], r["version"]): r["value_type"] for r in rows}

    async def values(self, keys: Sequence[delta.ChannelKey]) -> dict[delta.ChannelKey, TypedValue]:
        channels, versions = [k[0] for k in keys], [k[1] for k in keys]
        rows = await self._conn.fetch(self._sql.delta_values, *self._key, channels, versions)
        return {
            (r["channel"], r["version"]): TypedValue(r["value_type"], bytes(r["value_data"]))
            for r in rows
        }

    async def writes(
        self, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[tuple[str, GraphWrite]]:
        rows = await self._conn.fetch(
            self._sql.delta_writes, *self._key, list(checkpoint_ids), list(channels)
        )
        return [
            (
                r["checkpoint_id"],
                GraphWrite(
                    r["task_id"],
                    r["task_path"],
                    int(r["idx"]),
                    r["channel"],
                    TypedValue(r["value_type"], bytes(r["value_data"])),
                ),
            )
            for r in rows
        ]

    async def links(self) -> list[delta.ChainLink]:
        return [
            _link_from_row(r) for r in await self._conn.fetch(self._sql.delta_links, *self._key)
        ]

    async def delta_channels(self) -> set[str]:
        return {r[0] for r in await self._conn.fetch(self._sql.delta_channels, *self._key)}


class PostgresGraphStore(GraphStore):
    """A :class:`~checkpointd.graph.store.GraphStore` sharing a Postgres store's pool."""

    def __init__(self, access: PostgresAccess) -> None:
        self._access = access
        self._sql = GraphSql(access.quoted_schema)
        self._retention = PostgresRetention(access, self._sql, self._remove_pauses)
        self._pending_sql = pending_ops_sql(access.quoted_schema)
        # put_writes: its writes (replacing or keeping the first) with the task's rows.
        self._writes_then_task_rows = {
            replace: f"WITH written AS ({writes}) {self._pending_sql.of_task}"
            for replace, writes in (
                (True, self._sql.upsert_writes),
                (False, self._sql.insert_writes),
            )
        }

    def _pending(
        self,
        conn: Any,
        namespace: str,
        *,
        task_rows: list[PendingRecord] | None = None,
        released: list[list[Any]] | None = None,
    ) -> StatementPendingOps:
        """The graph interrupts' statements on this transaction (G8-G10), with the task's rows
        or the released descriptions when a statement of the caller read them already."""
        return StatementPendingOps(
            PgStatements(conn),
            self._pending_sql,
            namespace,
            read_time=times.utc_out,
            write_time=times.utc_in,
            append_event=self._access.append_event,
            task_rows=task_rows,
            released=released,
        )

    async def _transaction(
        self,
        namespace: str,
        request_id: str,
        kind: str,
        fingerprint: str,
        now: datetime,
        apply: Callable[[Any], Awaitable[int]],
        *,
        checkpoint_key: str = "",
    ) -> int:
        """One transaction, applied at most once per request id; with ``checkpoint_key``,
        serialized with the others on that checkpoint (G18)."""
        sql = self._sql
        async with self._access.connection() as conn, conn.transaction():
            locked = False

            async def lookup() -> tuple[str, str, str] | None:
                nonlocal locked
                # Concurrent calls with one id queue here, so the second sees the first.
                if checkpoint_key:
                    await conn.execute(
                        sql.lock_request_and_checkpoint, namespace, request_id, checkpoint_key
                    )
                    locked = True
                else:
                    await conn.execute(sql.lock_request, namespace, request_id)
                row = await conn.fetchrow(sql.request_reply, namespace, request_id)
                if row is None:
                    return None
                return (row["kind"], row["fingerprint"], row["reply_json"])

            async def record(kind: str, fingerprint: str, reply_json: str) -> None:
                await conn.execute(
                    sql.record_request,
                    namespace,
                    request_id,
                    kind,
                    fingerprint,
                    reply_json,
                    times.utc_in(now),
                )

            async def applied() -> int:
                if checkpoint_key and not locked:
                    await conn.execute(sql.lock_checkpoint, checkpoint_key)
                return await apply(conn)

            return await graph_requests.once(
                request_id, kind, fingerprint, applied, lookup=lookup, record=record
            )

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
        """Upsert the checkpoint and insert its new values (one statement), in one
        transaction."""
        cp = checkpoint
        blobs: tuple[list[Any], ...] = ()
        if new_values:
            blobs = (
                [v.channel for v in new_values],
                [v.version for v in new_values],
                [v.value.type for v in new_values],
                [v.value.data for v in new_values],
            )

        async def apply(conn: Any) -> int:
            released = await conn.fetchval(
                self._sql.upsert_checkpoint_with_blobs if blobs else self._sql.upsert_checkpoint,
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
                times.utc_in(now),
                *blobs,
            )
            if cp.send_nodes:
                await conn.execute(
                    self._sql.set_send_nodes,
                    namespace,
                    cp.thread_id,
                    cp.checkpoint_ns,
                    cp.checkpoint_id,
                    send_nodes_column(cp.send_nodes),
                )
            ops = self._pending(conn, namespace, released=json.loads(released) if released else [])
            await graph_interrupts.checkpoint_stored(
                ops,
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
            checkpoint_key=_checkpoint_key(
                namespace, cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id
            ),
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
        first."""
        replace = all(w.idx < 0 for w in writes)
        if replace:
            # One statement may not update a row twice: the last write of a key is the one
            # that stands, as when they replaced each other one by one.
            writes = list({(w.task_id, w.idx): w for w in writes}.values())
        place = TaskPlace(thread_id, checkpoint_ns, checkpoint_id, task_id)
        key = (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id)
        columns = (
            [w.task_id for w in writes],
            [w.idx for w in writes],
            [w.task_path for w in writes],
            [w.channel for w in writes],
            [w.value.type for w in writes],
            [w.value.data for w in writes],
        )
        statement = self._writes_then_task_rows[replace]
        task_path = writes[0].task_path if writes else ""

        async def apply(conn: Any) -> int:
            task_rows = None
            if writes:
                # The writes and the task's pending rows (locked) in one statement.
                found = await conn.fetch(statement, *key, *columns)
                task_rows = [pending_from_row(row, times.utc_out) for row in found]
            ops = self._pending(conn, namespace, task_rows=task_rows)
            await graph_interrupts.write_task(ops, place, interrupts, now, task_path)
            return 0

        await self._transaction(
            namespace,
            request_id,
            graph_requests.PUT_WRITES,
            fingerprint,
            now,
            apply,
            # Only a write that describes interrupts may hold them (G18).
            checkpoint_key=(
                _checkpoint_key(namespace, thread_id, checkpoint_ns, checkpoint_id)
                if interrupts
                else ""
            ),
        )

    # --- reads -------------------------------------------------------------------------

    async def get_tuple(
        self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> GraphTuple | None:
        """The checkpoint (or the newest) with its values and writes, in one statement."""
        async with self._access.connection() as conn:
            if checkpoint_id:
                row = await conn.fetchrow(
                    self._sql.get_checkpoint, namespace, thread_id, checkpoint_ns, checkpoint_id
                )
            else:
                row = await conn.fetchrow(self._sql.get_latest, namespace, thread_id, checkpoint_ns)
        return None if row is None else _tuple_from_row(row)

    async def list_tuples(
        self,
        namespace: str,
        query: GraphListQuery,
        *,
        after: GraphPosition | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> GraphPage:
        """Up to ``limit`` matching tuples after ``after``, newest first, read in statements
        of a few rows each (values and writes included) while the page is within
        ``max_bytes``."""
        found: list[GraphTuple] = []
        size = 0
        async with self._access.connection() as conn:
            while len(found) < limit:
                chunk = min(_LIST_CHUNK, limit - len(found))
                statement, params = self._list_statement(namespace, query, after, chunk)
                rows = await conn.fetch(statement, *params)
                for row in rows:
                    if max_bytes is not None and found and size > max_bytes:
                        return GraphPage(found, more=True)  # the rest of the chunk waits
                    found.append(_tuple_from_row(row))
                    size += tuple_size(found[-1])
                if len(rows) < chunk:
                    return GraphPage(found, more=False)
                last = found[-1].checkpoint
                after = GraphPosition(last.checkpoint_id, last.thread_id, last.checkpoint_ns)
        return GraphPage(found, more=True)

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
        """One page of the DeltaChannel history walk, its statements on one snapshot (a
        read-only repeatable-read transaction)."""
        async with (
            self._access.connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            reads = _DeltaReads(conn, self._sql, (namespace, thread_id, checkpoint_ns))
            return await delta.history(
                reads, checkpoint_id, channels, cursor=cursor, limit=limit, max_bytes=max_bytes
            )

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

    async def _delete_threads(self, conn: Any, namespace: str, thread_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(thread_ids))
        for statement in self._sql.delete_threads:
            await conn.execute(statement, namespace, ids)
        status: str = await conn.execute(self._sql.delete_thread_checkpoints, namespace, ids)
        return int(status.rsplit(" ", 1)[-1])

    async def _delete_runs(self, conn: Any, namespace: str, run_ids: Sequence[str]) -> int:
        sql = self._sql
        doomed: dict[tuple[str, str], set[str]] = {}
        for row in await conn.fetch(sql.checkpoints_of_runs, namespace, list(run_ids)):
            doomed.setdefault((row[0], row[1]), set()).add(row[2])
        deleted = 0
        for (thread_id, checkpoint_ns), ids in sorted(doomed.items()):
            key = (namespace, thread_id, checkpoint_ns)
            if await conn.fetchval(sql.uses_delta_channel, namespace, thread_id):
                ids -= await delta.needed_by_survivors(_DeltaReads(conn, sql, key), ids)  # G20
            await conn.execute(sql.delete_writes_at, *key, sorted(ids))
            status: str = await conn.execute(sql.delete_checkpoints, *key, sorted(ids))
            deleted += int(status.rsplit(" ", 1)[-1])
            await conn.execute(sql.delete_unnamed_blobs, *key)
        return deleted

    async def _copy_thread(
        self, conn: Any, namespace: str, source: str, target: str, now: datetime
    ) -> int:
        sql = self._sql
        status: str = await conn.execute(
            sql.copy_checkpoints, namespace, source, target, times.utc_in(now)
        )
        await conn.execute(sql.copy_blobs, namespace, source, target)
        await conn.execute(sql.copy_writes, namespace, source, target)
        return int(status.rsplit(" ", 1)[-1])

    async def _keep_newest(self, conn: Any, namespace: str, thread_ids: Sequence[str]) -> int:
        sql = self._sql
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            if await conn.fetchval(sql.uses_delta_channel, namespace, thread_id):
                continue  # its channels need the older checkpoints' writes
            for head in await conn.fetch(sql.heads, namespace, thread_id):
                key = (namespace, thread_id, head["checkpoint_ns"])
                await conn.execute(sql.prune_older_writes, *key, head["newest"])
                status: str = await conn.execute(sql.prune_older_checkpoints, *key, head["newest"])
                deleted += int(status.rsplit(" ", 1)[-1])
                await conn.execute(sql.clear_lost_parents, *key)
                await conn.execute(sql.delete_unnamed_blobs, *key)
        return deleted

    async def purge_requests(self, applied_before: datetime) -> int:
        """Forget the request ids recorded before ``applied_before``."""
        async with self._access.connection() as conn:
            status: str = await conn.execute(self._sql.purge_requests, times.utc_in(applied_before))
        return int(status.rsplit(" ", 1)[-1])


def _checkpoint_key(namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """What a checkpoint's lock is taken on (each part's length first: no two keys collide)."""
    parts = (namespace, thread_id, checkpoint_ns, checkpoint_id)
    return "/".join(f"{len(part)}:{part}" for part in parts)
