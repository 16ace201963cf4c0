"""The SQLite store's checkpoints: the insert behind put and record (one statement when the
row is written), keyset listing, the deletes of DeleteExecution and prune with their
tombstones (C9; the request-id rules are
:class:`~checkpointd.store.checkpoints.CheckpointRemovals`), and the replication outbox's
settlements (R1-R4). Each write is one ``BEGIN IMMEDIATE`` transaction (puts join the group
commit); writers are serialized, so what a transaction reads is what it then changes."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from checkpointd.domain import (
    CheckpointRecord,
    DeleteExecutionResult,
    PendingRecord,
    PruneResult,
)
from checkpointd.store import times
from checkpointd.store.base import StoreError
from checkpointd.store.checkpoints import CheckpointWrite, existing_checkpoint
from checkpointd.store.columns import checkpoint_params
from checkpointd.store.sqlite import sql
from checkpointd.store.sqlite.core import SQLiteCore
from checkpointd.store.statements import Statements

__all__ = ["SQLiteCheckpoints"]


class SQLiteCheckpoints(SQLiteCore):
    """The checkpoint methods of :class:`~checkpointd.store.sqlite.SQLiteStore`."""

    async def _insert_checkpoint(
        self, conn: Statements, write: CheckpointWrite
    ) -> tuple[CheckpointRecord, bool]:
        """Insert inside the caller's transaction; return the stored row and whether this call
        wrote it (False: a retry of the same request). Raise :class:`CheckpointExists`,
        :class:`RequestAppliedThenDeleted` or :class:`RequestIdReused`. One statement when the
        row is written."""
        namespace, request_id, checkpoint = write.namespace, write.request_id, write.checkpoint
        params = checkpoint_params(
            namespace, request_id, checkpoint, times.to_us, write.fingerprint
        )
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
        stored_before = await existing_checkpoint(conn, sql.CHECKPOINTS, times.from_us, write)
        if stored_before is not None:
            return stored_before, False  # a retry, whatever its id
        raise StoreError(f"SQLite database {self._path}: a checkpoint insert failed a constraint")

    async def _put_checkpoint(self, write: CheckpointWrite) -> CheckpointRecord:
        """One write of the group commit: :meth:`_insert_checkpoint` in the group's
        transaction."""
        times.to_us(write.checkpoint.created_at)  # a naive time fails here, not inside the group

        async def insert(conn: Statements) -> CheckpointRecord:
            stored, _ = await self._insert_checkpoint(conn, write)
            return stored

        result: CheckpointRecord = await self._grouped(insert)
        return result

    async def _delete_execution_rows(
        self, conn: Statements, namespace: str, execution_id: str, applied_at: Any
    ) -> tuple[DeleteExecutionResult, PendingRecord | None]:
        key = (namespace, execution_id)
        pending_rows = await conn.fetch(sql.PENDING_OF_EXECUTION, key)
        await conn.run(sql.TOMBSTONE_EXECUTION, (applied_at, *key))
        checkpoints = await conn.run(sql.DELETE_CHECKPOINTS_OF_EXECUTION, key)
        pending_deleted = await conn.run(sql.DELETE_PENDING_OF_EXECUTION, key) > 0
        idempotency = await conn.run(sql.DELETE_IDEMPOTENT_OF_EXECUTION, key)
        await conn.run(sql.DELETE_DECISIONS_OF_EXECUTION, key)
        result = DeleteExecutionResult(
            checkpoints_deleted=checkpoints,
            pending_interrupt_deleted=pending_deleted,
            idempotency_results_deleted=idempotency,
        )
        return result, self._pending(pending_rows[0]) if pending_rows else None

    async def _prune_rows(
        self, namespace: str, cutoff: Any, batch_size: int, applied_at: Any
    ) -> PruneResult:
        params = (namespace, cutoff, batch_size)
        checkpoints = await self._delete_in_batches(
            sql.PRUNE_CHECKPOINTS_BATCH, params, tombstones_at=applied_at
        )
        idempotency = await self._delete_in_batches(sql.PRUNE_IDEMPOTENT_BATCH, params)
        return PruneResult(checkpoints_deleted=checkpoints, idempotency_results_deleted=idempotency)

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

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """One transaction: the synced ids in chunks of ``SETTLE_CHUNK``, then each
        quarantine (a row already settled has its reason replaced)."""
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
