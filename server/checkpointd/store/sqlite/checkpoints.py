"""The SQLite store's checkpoints: the insert behind put and record (one statement when the
row is written), keyset listing, delete and prune with their tombstones (C9), and the
replication outbox's settlements (R1-R4). Each write is one ``BEGIN IMMEDIATE`` transaction
(puts join the group commit); writers are serialized, so what a transaction reads is what it
then changes."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from checkpointd.domain import (
    CheckpointRecord,
    DeleteExecutionResult,
    EventKind,
    Page,
    PruneResult,
)
from checkpointd.store import budget, replies, retries, times
from checkpointd.store.base import StoreError
from checkpointd.store.checkpoints import existing_checkpoint
from checkpointd.store.columns import MAX_SEQUENCE, checkpoint_params
from checkpointd.store.sqlite import sql
from checkpointd.store.sqlite.core import SQLiteCore
from checkpointd.store.statements import Statements

__all__ = ["SQLiteCheckpoints"]


class SQLiteCheckpoints(SQLiteCore):
    """The checkpoint methods of :class:`~checkpointd.store.sqlite.SQLiteStore`."""

    async def _insert_checkpoint(
        self,
        conn: Statements,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> tuple[CheckpointRecord, bool]:
        """Insert inside the caller's transaction; return the stored row and whether this call
        wrote it (False: a retry of the same request). Raise :class:`CheckpointExists`,
        :class:`RequestAppliedThenDeleted` or :class:`RequestIdReused`. One statement when the
        row is written."""
        params = checkpoint_params(namespace, request_id, checkpoint, times.to_us, fingerprint)
        created_at_us = params[-2]
        try:
            written = await conn.fetch(sql.INSERT_CHECKPOINT, (*params, namespace, request_id))
        except sqlite3.IntegrityError:
            written = []
        if written:
            stored = dataclasses.replace(
                checkpoint, sequence=int(written[0][0]), created_at=times.from_us(created_at_us)
            )
            return stored, True

        # Nothing written: a taken id, or a tombstone. Writers are serialized, so what these
        # lookups see is what stopped the insert.
        stored_before = await existing_checkpoint(
            conn, sql.CHECKPOINTS, times.from_us, namespace, request_id, checkpoint, fingerprint
        )
        if stored_before is not None:
            return stored_before, False  # a retry, whatever its id
        raise StoreError(f"SQLite database {self._path}: a checkpoint insert failed a constraint")

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        """Insert one checkpoint (group commit); a retry with the same request id returns the
        stored row."""
        times.to_us(checkpoint.created_at)  # a naive time fails here, not inside the group

        async def write(conn: Statements) -> CheckpointRecord:
            stored, _ = await self._insert_checkpoint(
                conn, namespace, request_id, checkpoint, fingerprint
            )
            return stored

        result: CheckpointRecord = await self._grouped(write)
        return result

    async def list_checkpoints(
        self,
        namespace: str,
        execution_id: str,
        *,
        after_sequence: int | None,
        descending: bool,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page[CheckpointRecord]:
        """Up to ``limit`` rows ordered by sequence, after ``after_sequence`` in the direction
        of travel, within ``max_bytes`` (sizes first, then only the rows that fit)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        if descending:
            sizes_sql, rows_sql = sql.LIST_CHECKPOINT_SIZES_DESC, sql.LIST_CHECKPOINTS_DESC
            low, high = 0, MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_sql, rows_sql = sql.LIST_CHECKPOINT_SIZES_ASC, sql.LIST_CHECKPOINTS_ASC
            low, high = 0 if after_sequence is None else after_sequence, MAX_SEQUENCE

        async def page(conn: Statements) -> Page[CheckpointRecord] | None:
            sizes = await conn.fetch(sizes_sql, (namespace, execution_id, low, high, limit + 1))
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            chosen = [int(row[0]) for row in sizes[:taken]]
            # No new row can fall inside the chosen range (SQLite hands out sequences in
            # commit order), so this reads the chosen rows, less any deleted meanwhile.
            found = await conn.fetch(
                rows_sql,
                (namespace, execution_id, min(chosen) - 1, max(chosen) + 1, taken),
            )
            if found:
                return Page((self._checkpoint(row) for row in found), more=len(sizes) > taken)
            return None  # every chosen row was deleted meanwhile: read on from there

        while True:
            result = await self._in_read(page)
            if result is not None:
                return result

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> DeleteExecutionResult:
        """Delete the execution's checkpoints, pending interrupt and idempotency results in one
        transaction, with a ``removed`` event when a pending interrupt went away, tombstones
        for the request ids of the deleted checkpoints, and the reply under ``request_id``
        (a retry returns that reply and deletes nothing: C9)."""
        key = (namespace, execution_id)
        now_us = times.now_us() if now is None else times.to_us(now)

        async def body(conn: Statements) -> DeleteExecutionResult:
            record = bool(request_id)
            if request_id:
                earlier = await conn.fetch(sql.REPLY_OF_REQUEST, (namespace, request_id))
                if earlier:
                    first = earlier[0]["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if earlier and earlier[0]["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(earlier[0]["reply_json"])
                # An id stored without a fingerprint by another kind of call is kept.
                record = not earlier
            pending_rows = await conn.fetch(sql.PENDING_OF_EXECUTION, key)
            await conn.run(sql.TOMBSTONE_EXECUTION, (now_us, *key))
            checkpoints = await conn.run(sql.DELETE_CHECKPOINTS_OF_EXECUTION, key)
            pending_deleted = await conn.run(sql.DELETE_PENDING_OF_EXECUTION, key) > 0
            idempotency = await conn.run(sql.DELETE_IDEMPOTENT_OF_EXECUTION, key)
            await conn.run(sql.DELETE_DECISIONS_OF_EXECUTION, key)
            if pending_rows:
                pending = self._pending(pending_rows[0])
                await self._append_event(conn, namespace, EventKind.REMOVED, pending, now_us)
            result = DeleteExecutionResult(
                checkpoints_deleted=checkpoints,
                pending_interrupt_deleted=pending_deleted,
                idempotency_results_deleted=idempotency,
            )
            if record:
                reply = (namespace, request_id, now_us, replies.DELETE_EXECUTION)
                encoded = replies.encode(result)
                await conn.run(sql.RECORD_REPLY, (*reply, encoded, fingerprint or None))
            return result

        return await self._in_transaction(body)

    async def prune(
        self,
        namespace: str,
        cutoff: datetime,
        *,
        batch_size: int,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> PruneResult:
        """Delete completed/failed checkpoints and unprotected idempotency results older than
        ``cutoff``, at most ``batch_size`` rows per transaction; the request ids of the deleted
        checkpoints become tombstones in their batch's transaction. The reply is recorded
        under ``request_id`` once the prune is complete, and a retry returns it (C9)."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        now_us = times.now_us() if now is None else times.to_us(now)
        if request_id:
            earlier = await self._query(sql.REPLY_OF_REQUEST, (namespace, request_id))
            if earlier:
                first = earlier[0]["request_fingerprint"]
                retries.check_fingerprint(request_id, first, fingerprint)
            if earlier and earlier[0]["kind"] == replies.PRUNE:
                return replies.decode_prune(earlier[0]["reply_json"])
        params = (namespace, times.to_us(cutoff), batch_size)
        checkpoints = await self._delete_in_batches(
            sql.PRUNE_CHECKPOINTS_BATCH, params, tombstones_at=now_us
        )
        idempotency = await self._delete_in_batches(sql.PRUNE_IDEMPOTENT_BATCH, params)
        result = PruneResult(
            checkpoints_deleted=checkpoints, idempotency_results_deleted=idempotency
        )
        if not request_id:
            return result

        async def record(conn: Statements) -> PruneResult:
            reply = (namespace, request_id, now_us, replies.PRUNE, replies.encode(result))
            if not await conn.run(sql.RECORD_REPLY, (*reply, fingerprint or None)):
                # A concurrent call with this id finished first: answer like it did.
                earlier = await conn.fetch(sql.REPLY_OF_REQUEST, (namespace, request_id))
                if earlier:
                    first = earlier[0]["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if earlier and earlier[0]["kind"] == replies.PRUNE:
                    return replies.decode_prune(earlier[0]["reply_json"])
            return result

        return await self._in_transaction(record)

    async def _delete_in_batches(
        self, statement: str, params: tuple[str, int, int], *, tombstones_at: int | None = None
    ) -> int:
        """Run a batch DELETE in its own transaction until it deletes less than a batch;
        the writer is free for other callers between batches. With ``tombstones_at`` the
        statement returns the deleted rows' request ids, recorded as tombstones in the same
        transaction."""
        total = 0
        namespace, _, batch_size = params

        async def batch(conn: Statements) -> int:
            if tombstones_at is None:
                return await conn.run(statement, params)
            gone = await conn.fetch(statement, params)
            ids = [(namespace, row[0], tombstones_at, row[1]) for row in gone if row[0]]
            if ids:
                await conn.run_many(sql.TOMBSTONE, ids)
            return len(gone)

        while True:
            deleted = await self._in_transaction(batch)
            total += deleted
            if deleted < batch_size:
                return total

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled rows with sequence > ``after_sequence``, oldest
        first."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        bound = 0 if after_sequence is None else after_sequence
        rows = await self._query(sql.LIST_UNSYNCED, (namespace, bound, limit))
        return [self._checkpoint(row) for row in rows]

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle unsettled rows, first-wins, in one transaction; return the ids settled."""
        now_us = times.to_us(now)
        settled: set[str] = set()

        async def body(conn: Statements) -> None:
            synced = [cid for cid, reason in settlements if reason is None]
            for start in range(0, len(synced), sql.SETTLE_CHUNK):
                chunk = synced[start : start + sql.SETTLE_CHUNK]
                query = sql.MARK_SYNCED.format(ids=",".join("?" * len(chunk)))
                for row in await conn.fetch(query, (now_us, namespace, *chunk)):
                    settled.add(str(row["checkpoint_id"]))
            for cid, reason in settlements:
                if reason is not None:
                    hit = await conn.fetch(sql.QUARANTINE, (now_us, reason, namespace, cid))
                    if hit:
                        settled.add(cid)
                    else:
                        await conn.run(sql.REQUARANTINE, (reason, namespace, cid))

        await self._in_transaction(body)
        return [cid for cid, _ in settlements if cid in settled]
