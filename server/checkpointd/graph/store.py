"""The graph store: ``GraphStore``, the base class both backends' graph stores subclass.

It holds the checkpoints of graph runtimes such as LangGraph, beside (not inside) the
fastaiagent rows. Three tables per backend, all keyed by namespace first:

* ``graph_checkpoints``: primary key ``(namespace, thread_id, checkpoint_ns,
  checkpoint_id)``; the serialized body (type and bytes, never decoded here), the metadata
  as JSON (what lists filter on), the channel versions as a JSON object of strings (what
  joins the values without decoding the body), the parent id, and the metadata's
  ``run_id`` in a column of its own (what DeleteGraphRuns finds rows by).
* ``graph_blobs``: primary key ``(namespace, thread_id, checkpoint_ns, channel, version)``;
  each value stored once, so a put writes only the channels whose version changed.
* ``graph_writes``: primary key ``(namespace, thread_id, checkpoint_ns, checkpoint_id,
  task_id, idx)``: pending writes, with ``task_path``.
* ``graph_requests``: primary key ``(namespace, request_id)``: the request ids of applied
  mutations with their replies (JSON), so a retry is answered like the first call and
  writes nothing, whatever happened since (C9's rule). The purge forgets them after the
  request-id retention.

A backend reuses its store's connections and transactions (``SQLiteStore.access``,
``PostgresStore.access``) and never opens its own. What is the same on both is written here
once, over the statement interface of :mod:`checkpointd.store.statements`: every write (a
delete of runs with what it keeps for a DeltaChannel's history, G20), a get, the paging of a
listing and the DeltaChannel history walk (:mod:`checkpointd.graph.delta`, G19). A backend
gives its SQL text (:class:`~checkpointd.graph.store_sql.GraphStoreSql`,
:class:`~checkpointd.graph.pending_ops.PendingOpsSql`), how it runs a transaction and a read,
and what its algorithm makes its own: the statements of a put (SQLite: several, in a group
commit; Postgres: one, which also reads what the put released), a listing's statement, how
a row becomes a tuple (SQLite reads its values and writes apart; Postgres carries them in the
row), how a delete of runs finds and deletes checkpoints (SQLite: one by one; Postgres: a
thread's at once), and the walk's reads (:class:`~checkpointd.graph.delta.DeltaReads`). The
records are in :mod:`checkpointd.graph.records`.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from checkpointd.domain import PendingRecord
from checkpointd.graph import delta
from checkpointd.graph import interrupts as graph_interrupts
from checkpointd.graph import requests as graph_requests
from checkpointd.graph.interrupts import (
    GraphInterrupt,
    TaskPlace,
    remove_threads,
    send_nodes_column,
)
from checkpointd.graph.pending_ops import PendingOpsSql, StatementPendingOps
from checkpointd.graph.records import (
    ChannelValue,
    DeltaCursor,
    DeltaPage,
    GraphCheckpoint,
    GraphListQuery,
    GraphPage,
    GraphPosition,
    GraphTuple,
    GraphWrite,
    PruneStrategy,
    tuple_size,
)
from checkpointd.graph.retention import RetentionMethods
from checkpointd.graph.store_sql import GraphStoreSql, SqlDeltaReads, checkpoint_key
from checkpointd.store.columns import TimeWriter
from checkpointd.store.rows import TimeReader
from checkpointd.store.statements import Body, EventWriter, Statements

__all__ = ["GraphStore", "StoredCheckpoint"]


class StoredCheckpoint(NamedTuple):
    """What a put's statement read for the interrupts besides writing the checkpoint (None:
    not read, the interrupts' own statements read it): the held descriptions it released,
    and the pending rows of its parent, locked."""

    released: list[list[Any]] | None = None
    parent_rows: list[PendingRecord] | None = None


class GraphStore(RetentionMethods, abc.ABC):
    """Persistence of graph checkpoints, channel values and pending writes: the base class of
    both backends' graph stores. Every write is written here once (puts, delete a thread,
    delete runs, copy a thread, prune, and retention through
    :class:`~checkpointd.graph.retention.RetentionMethods`), each one transaction of the
    backend's (:meth:`_write`) on its :class:`~checkpointd.store.statements.Statements`, and
    so are a get and a listing's paging, over the backend's reads (:meth:`_read`).

    Every mutating method takes a ``request_id``: when it is not empty and was recorded by an
    earlier call of the same namespace, nothing is written and that call's reply is
    returned; otherwise the call applies and records it (with ``now``) in its transaction.
    It also takes the request's ``fingerprint`` (:mod:`checkpointd.fingerprint`; empty: none)
    and records it beside the id: an id recorded with another fingerprint raises
    :class:`~checkpointd.store.base.RequestIdReused` and writes nothing (C10).
    """

    #: The backend's SQL text of what is written here.
    _sql: GraphStoreSql
    #: The backend's SQL text of graph interrupts (G8-G10).
    _pending_sql: PendingOpsSql
    #: Stored time to an aware datetime.
    _read_time: TimeReader
    #: Aware datetime to the stored form.
    _write_time: TimeWriter
    #: The store's outbox event writer, lent through its ``access()``.
    _append_event: EventWriter

    #: Rows per statement of a listing (None: all of a page's rows in one): a page reads at
    #: most this many rows past its budget.
    _list_chunk: int | None = None

    # --- the backend's hooks -----------------------------------------------------------

    @abc.abstractmethod
    async def _read(self, body: Body[Any]) -> Any:
        """Run ``body``'s reads, bounded and with the store's errors."""

    @abc.abstractmethod
    async def _tuple(self, conn: Statements, namespace: str, row: Any) -> GraphTuple:
        """A checkpoint's row (of :attr:`GraphStoreSql.get_checkpoint` or a listing) as a
        tuple with its values and writes."""

    @abc.abstractmethod
    def _list_statement(
        self, namespace: str, query: GraphListQuery, after: GraphPosition | None, limit: int
    ) -> tuple[str, list[Any]]:
        """A listing's statement and parameters: up to ``limit`` rows after ``after``, in
        listing order (newest first)."""

    @abc.abstractmethod
    async def _write(self, body: Body[int], *, put: bool) -> int:
        """Run ``body`` in one write transaction, bounded and with the store's errors
        (``put``: a put of a checkpoint or of writes, which SQLite group-commits)."""

    @abc.abstractmethod
    async def _store_checkpoint(
        self, conn: Statements, row: tuple[Any, ...], new_values: Sequence[ChannelValue]
    ) -> StoredCheckpoint:
        """Upsert the checkpoint (``row``: :meth:`_checkpoint_row`) and insert the values not
        stored yet; return what its statement read for the interrupts besides."""

    @abc.abstractmethod
    async def _store_writes(
        self, conn: Statements, namespace: str, place: TaskPlace, writes: Sequence[GraphWrite]
    ) -> list[PendingRecord] | None:
        """Store the writes: all upserted when every idx is negative, else each inserted
        unless its key is stored; return the task's pending rows when a statement read them
        (None: not read)."""

    @abc.abstractmethod
    async def _delete_threads(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        """Delete the threads' checkpoints, values and writes; return the checkpoints."""

    @abc.abstractmethod
    async def _checkpoints_of_runs(
        self, conn: Statements, namespace: str, run_ids: Sequence[str]
    ) -> list[tuple[str, str, str]]:
        """The thread id, checkpoint_ns and checkpoint id of each checkpoint of these runs."""

    @abc.abstractmethod
    async def _delete_checkpoints(
        self, conn: Statements, key: tuple[str, str, str], checkpoint_ids: Sequence[str]
    ) -> int:
        """Delete these checkpoints of one thread and checkpoint_ns (``key``: namespace,
        thread id, checkpoint_ns) with their writes; return the checkpoints deleted."""

    def _delta_reads(self, conn: Statements, key: tuple[str, str, str]) -> delta.DeltaReads:
        """The DeltaChannel walk's reads on ``conn`` in one thread and checkpoint_ns (``key``:
        namespace, thread id, checkpoint_ns)."""
        return SqlDeltaReads(conn, self._sql, key)

    async def _read_point(self, body: Body[Any]) -> Any:
        """Run the reads of one checkpoint's rows (here: :meth:`_read`; SQLite runs them on
        the event loop's thread, without a hand-off)."""
        return await self._read(body)

    async def _read_snapshot(self, body: Body[Any]) -> Any:
        """Run ``body``'s reads on one snapshot (here: :meth:`_read`, whose reads share one
        where the backend's reader does)."""
        return await self._read(body)

    # --- transactions ------------------------------------------------------------------

    def _pending(
        self,
        conn: Statements,
        namespace: str,
        *,
        task_rows: list[PendingRecord] | None = None,
        checkpoint_rows: list[PendingRecord] | None = None,
        released: list[list[Any]] | None = None,
    ) -> StatementPendingOps:
        """The graph interrupts' statements on this transaction (G8-G10), with the task's rows,
        a put's parent's rows or the released descriptions when a statement of the caller read
        them already."""
        return StatementPendingOps(
            conn,
            self._pending_sql,
            namespace,
            read_time=self._read_time,
            write_time=self._write_time,
            append_event=self._append_event,
            task_rows=task_rows,
            checkpoint_rows=checkpoint_rows,
            released=released,
        )

    def _checkpoint_row(
        self, namespace: str, checkpoint: GraphCheckpoint, now: datetime
    ) -> tuple[Any, ...]:
        """A put's checkpoint as its upsert's parameters: namespace, thread id, checkpoint_ns,
        checkpoint id, parent id, body type, body data, metadata, channel versions (JSON),
        run id, written at."""
        cp = checkpoint
        versions = json.dumps(cp.channel_versions, sort_keys=True)
        row = (namespace, cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id, cp.parent_checkpoint_id)
        return (
            *row,
            cp.body.type,
            cp.body.data,
            cp.metadata_json,
            versions,
            cp.run_id,
            self._write_time(now),
        )

    async def _uses_delta_channel(self, conn: Statements, namespace: str, thread_id: str) -> bool:
        """Whether the thread's graph uses a DeltaChannel: a checkpoint's metadata has
        ``counters_since_delta_snapshot`` or ``delta_writes_versioned`` (see :meth:`prune`)."""
        found = await conn.fetch(self._sql.uses_delta_channel, (namespace, thread_id))
        return bool(found and found[0][0])

    async def _remove_pauses(self, conn: Statements, namespace: str, thread_ids: list[str]) -> None:
        """A deleted thread's pauses and decisions go with it (G10), retention's too."""
        await remove_threads(self._pending(conn, namespace), thread_ids)

    async def _transaction(
        self,
        namespace: str,
        request_id: str,
        kind: str,
        fingerprint: str,
        now: datetime,
        apply: Callable[[Statements], Awaitable[int]],
        *,
        put: bool = False,
        serialized_on: str = "",
    ) -> int:
        """Run ``apply`` in one transaction unless ``request_id`` was applied before; return
        its count (or the recorded one). With ``serialized_on`` (a :func:`checkpoint_key`),
        serialized with the others on that checkpoint (G18). A ``put`` (of a checkpoint or of
        writes) answers 0: where the backend has ``reserve_request``, its request is recorded
        before it writes, in the statement that takes the locks."""
        sql = self._sql

        async def body(conn: Statements) -> int:
            locked = False  # the checkpoint's lock (G18)
            request_locked = False  # the request's lock, taken by a reserve

            async def lookup() -> tuple[str, str, str] | None:
                nonlocal locked
                # Concurrent calls with one id queue here (or at the reserve, which took the
                # same locks), so the second sees the first.
                if not request_locked:
                    if serialized_on and sql.lock_request_and_checkpoint is not None:
                        params = (namespace, request_id, serialized_on)
                        await conn.fetch(sql.lock_request_and_checkpoint, params)
                        locked = True
                    elif sql.lock_request is not None:
                        await conn.fetch(sql.lock_request, (namespace, request_id))
                found = await conn.fetch(sql.request_reply, (namespace, request_id))
                if not found:
                    return None
                return (found[0]["kind"], found[0]["fingerprint"], found[0]["reply_json"])

            async def record(kind: str, fingerprint: str, reply_json: str) -> None:
                at = self._write_time(now)
                params = (namespace, request_id, kind, fingerprint, reply_json, at)
                await conn.run(sql.record_request, params)

            async def reserve(kind: str, fingerprint: str, reply_json: str) -> bool:
                nonlocal locked, request_locked
                at = self._write_time(now)
                params: tuple[Any, ...] = (namespace, request_id, kind, fingerprint, reply_json, at)
                statement = sql.reserve_request
                if serialized_on and sql.reserve_request_and_checkpoint is not None:
                    statement, params = sql.reserve_request_and_checkpoint, (*params, serialized_on)
                    locked = True
                assert statement is not None
                request_locked = True
                return bool(await conn.fetch(statement, params))

            async def applied() -> int:
                if serialized_on and not locked and sql.lock_checkpoint is not None:
                    await conn.fetch(sql.lock_checkpoint, (serialized_on,))
                return await apply(conn)

            if put and sql.reserve_request is not None:
                return await graph_requests.once_recorded_first(
                    request_id, kind, fingerprint, 0, applied, reserve=reserve, lookup=lookup
                )
            return await graph_requests.once(
                request_id, kind, fingerprint, applied, lookup=lookup, record=record
            )

        return await self._write(body, put=put)

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
        """Upsert the checkpoint and insert the values not stored yet, in one transaction,
        which also ends the pending interrupts recorded against its parent (G10)."""
        cp = checkpoint
        key = (namespace, cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id)

        async def apply(conn: Statements) -> int:
            row = self._checkpoint_row(namespace, cp, now)
            stored = await self._store_checkpoint(conn, row, new_values)
            if cp.send_nodes:
                await conn.run(self._sql.set_send_nodes, (*key, send_nodes_column(cp.send_nodes)))
            await graph_interrupts.checkpoint_stored(
                self._pending(
                    conn, namespace, released=stored.released, checkpoint_rows=stored.parent_rows
                ),
                cp.thread_id,
                cp.checkpoint_ns,
                cp.checkpoint_id,
                cp.parent_checkpoint_id,
                now,
                cp.send_nodes,
            )
            return 0

        kind = graph_requests.PUT_CHECKPOINT
        await self._transaction(
            namespace,
            request_id,
            kind,
            fingerprint,
            now,
            apply,
            put=True,
            serialized_on=checkpoint_key(*key),
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
        """Store pending writes: all upserted when every idx is negative, else each inserted
        unless its key is stored. In the same transaction the task's (``task_id``) pending
        interrupts at the checkpoint become the described ``interrupts`` (G8, G10; see
        :mod:`checkpointd.graph.interrupts`)."""
        if all(w.idx < 0 for w in writes):
            # The last write of a key is the one that stands, as when they replaced each
            # other one by one (and one Postgres statement may not update a row twice).
            writes = list({(w.task_id, w.idx): w for w in writes}.values())
        place = TaskPlace(thread_id, checkpoint_ns, checkpoint_id, task_id)
        task_path = writes[0].task_path if writes else ""

        async def apply(conn: Statements) -> int:
            task_rows = await self._store_writes(conn, namespace, place, writes) if writes else None
            ops = self._pending(conn, namespace, task_rows=task_rows)
            await graph_interrupts.write_task(ops, place, interrupts, now, task_path)
            return 0

        # Only a write that describes interrupts may hold them (G18).
        key = checkpoint_key(namespace, thread_id, checkpoint_ns, checkpoint_id)
        kind = graph_requests.PUT_WRITES
        await self._transaction(
            namespace,
            request_id,
            kind,
            fingerprint,
            now,
            apply,
            put=True,
            serialized_on=key if interrupts else "",
        )

    # --- reads -------------------------------------------------------------------------

    async def get_tuple(
        self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> GraphTuple | None:
        """The checkpoint (the newest of the thread's checkpoint_ns when ``checkpoint_id`` is
        empty) with its values and writes; None when there is none."""
        key = (namespace, thread_id, checkpoint_ns)

        async def body(conn: Statements) -> GraphTuple | None:
            if checkpoint_id:
                found = await conn.fetch(self._sql.get_checkpoint, (*key, checkpoint_id))
            else:
                found = await conn.fetch(self._sql.get_latest, key)
            return await self._tuple(conn, namespace, found[0]) if found else None

        found: GraphTuple | None = await self._read_point(body)
        return found

    async def list_tuples(
        self,
        namespace: str,
        query: GraphListQuery,
        *,
        after: GraphPosition | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> GraphPage:
        """Up to ``limit`` matching tuples after ``after``, newest first; the page stops once
        its tuples hold more than ``max_bytes`` (always at least one), so a page of large
        checkpoints never loads much more than one reply's worth (B1)."""

        async def body(conn: Statements) -> GraphPage:
            found: list[GraphTuple] = []
            size = 0
            position = after
            while len(found) < limit:
                chunk = min(self._list_chunk or limit, limit - len(found))
                statement, params = self._list_statement(namespace, query, position, chunk)
                rows = await conn.fetch(statement, params)
                for row in rows:
                    if max_bytes is not None and found and size > max_bytes:
                        return GraphPage(found, more=True)  # the rest of the chunk waits
                    found.append(await self._tuple(conn, namespace, row))
                    size += tuple_size(found[-1])
                if len(rows) < chunk:
                    return GraphPage(found, more=False)
                last = found[-1].checkpoint
                position = GraphPosition(last.checkpoint_id, last.thread_id, last.checkpoint_ns)
            return GraphPage(found, more=True)

        page: GraphPage = await self._read(body)
        return page

    async def delta_history(
        self,
        namespace: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        channels: Sequence[str],
        *,
        cursor: DeltaCursor | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> DeltaPage:
        """One page of the DeltaChannel history walk of the checkpoint (the newest when
        ``checkpoint_id`` is empty) for ``channels``, from its parent or from ``cursor``, in
        one read on one snapshot (:func:`checkpointd.graph.delta.history`, G19)."""

        async def body(conn: Statements) -> DeltaPage:
            reads = self._delta_reads(conn, (namespace, thread_id, checkpoint_ns))
            return await delta.history(
                reads, checkpoint_id, channels, cursor=cursor, limit=limit, max_bytes=max_bytes
            )

        page: DeltaPage = await self._read_snapshot(body)
        return page

    # --- whole-thread writes -----------------------------------------------------------

    async def delete_thread(
        self,
        namespace: str,
        request_id: str,
        thread_id: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Delete the thread's checkpoints, values and writes in one transaction; return the
        checkpoints deleted."""

        async def apply(conn: Statements) -> int:
            deleted = await self._delete_threads(conn, namespace, [thread_id])
            # The pauses' events last: the Postgres outbox wants them at the end.
            await self._remove_pauses(conn, namespace, [thread_id])
            return deleted

        kind = graph_requests.DELETE_THREAD
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def delete_runs(
        self,
        namespace: str,
        request_id: str,
        run_ids: Sequence[str],
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Delete the checkpoints of these runs with their writes and the values no
        remaining checkpoint names, in one transaction; return the checkpoints deleted."""

        async def apply(conn: Statements) -> int:
            return await self._delete_runs(conn, namespace, run_ids) if run_ids else 0

        kind = graph_requests.DELETE_RUNS
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def _delete_runs(self, conn: Statements, namespace: str, run_ids: Sequence[str]) -> int:
        """Delete the runs' checkpoints and writes, one thread and checkpoint_ns at a time, and
        the values left unnamed; in a thread that uses a DeltaChannel, the checkpoints a
        surviving checkpoint's history walks through stay (G20)."""
        doomed: dict[tuple[str, str], set[str]] = {}
        for thread_id, checkpoint_ns, checkpoint_id in await self._checkpoints_of_runs(
            conn, namespace, run_ids
        ):
            doomed.setdefault((thread_id, checkpoint_ns), set()).add(checkpoint_id)
        deleted = 0
        for (thread_id, checkpoint_ns), ids in sorted(doomed.items()):
            key = (namespace, thread_id, checkpoint_ns)
            if await self._uses_delta_channel(conn, namespace, thread_id):
                ids -= await delta.needed_by_survivors(self._delta_reads(conn, key), ids)  # G20
            deleted += await self._delete_checkpoints(conn, key, sorted(ids))
            await conn.run(self._sql.delete_unnamed_blobs, key)
        return deleted

    async def copy_thread(
        self,
        namespace: str,
        request_id: str,
        source: str,
        target: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Copy the source thread's rows to the target, keeping the target's rows with the
        same keys, in one transaction; return the checkpoints copied."""
        sql = self._sql
        threads = (namespace, source, target)

        async def apply(conn: Statements) -> int:
            copied = await conn.run(sql.copy_checkpoints, (*threads, self._write_time(now)))
            await conn.run(sql.copy_blobs, threads)
            await conn.run(sql.copy_writes, threads)
            return copied

        kind = graph_requests.COPY_THREAD
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def prune(
        self,
        namespace: str,
        request_id: str,
        thread_ids: Sequence[str],
        strategy: PruneStrategy,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Keep the newest checkpoint of each checkpoint_ns of each thread, or delete the
        threads, in one transaction; return the checkpoints deleted.

        ``KEEP_LATEST`` leaves whole a thread whose graph uses a DeltaChannel (a checkpoint's
        metadata has ``counters_since_delta_snapshot`` or ``delta_writes_versioned``): its
        channels are rebuilt from the writes of older checkpoints."""

        async def apply(conn: Statements) -> int:
            if strategy is not PruneStrategy.DELETE:
                return await self._keep_newest(conn, namespace, thread_ids)
            deleted = await self._delete_threads(conn, namespace, thread_ids)
            await self._remove_pauses(conn, namespace, list(thread_ids))
            return deleted

        return await self._transaction(
            namespace, request_id, graph_requests.PRUNE, fingerprint, now, apply
        )

    async def _keep_newest(
        self, conn: Statements, namespace: str, thread_ids: Sequence[str]
    ) -> int:
        """Keep the newest checkpoint of each checkpoint_ns of each thread."""
        sql = self._sql
        deleted = 0
        for thread_id in dict.fromkeys(thread_ids):
            if await self._uses_delta_channel(conn, namespace, thread_id):
                continue  # its channels need the older checkpoints' writes
            for checkpoint_ns, newest in await conn.fetch(sql.heads, (namespace, thread_id)):
                key = (namespace, thread_id, checkpoint_ns)
                await conn.run(sql.prune_older_writes, (*key, newest))
                deleted += await conn.run(sql.prune_older_checkpoints, (*key, newest))
                await conn.run(sql.clear_lost_parents, key)
                await conn.run(sql.delete_unnamed_blobs, key)
        return deleted

    async def purge_requests(self, applied_before: datetime) -> int:
        """Forget the request ids recorded before ``applied_before``; return how many."""
        cutoff = (self._write_time(applied_before),)
        return await self._write(lambda conn: conn.run(self._sql.purge_requests, cutoff), put=False)
