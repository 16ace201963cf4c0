"""The Postgres store's checkpoints: put (group commit: one multi-row insert; a taken id
takes the single-row path), keyset listing in one REPEATABLE READ transaction, the deletes of
DeleteExecution and prune with their tombstones in the same statements (C9; the request-id
rules are :class:`~checkpointd.store.checkpoints.CheckpointRemovals`), and the replication
outbox's settlements (R1-R4)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from checkpointd.domain import (
    CheckpointRecord,
    DeleteExecutionResult,
    PendingRecord,
    PruneResult,
)
from checkpointd.store import times
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.checkpoints import CheckpointWrite, existing_checkpoint
from checkpointd.store.columns import checkpoint_params
from checkpointd.store.postgres.core import (
    RACE_ATTEMPTS,
    ROW_ERRORS,
    CheckpointRow,
    PostgresCore,
)
from checkpointd.store.postgres.statements import Conn, PgStatements
from checkpointd.store.statements import Statements

__all__ = ["PostgresCheckpoints"]

#: Lower bound of the first prune batch (the keyset scan then moves forward).
_BEGINNING_OF_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)


class PostgresCheckpoints(PostgresCore):
    """The checkpoint methods of :class:`~checkpointd.store.postgres.PostgresStore`."""

    async def _put_checkpoint(self, write: CheckpointWrite) -> CheckpointRecord:
        """The row goes into the next group-commit statement; when its id is taken, the
        single-row path below tells a retry (the stored row) from a duplicate. Each is an
        ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit: it cannot fail on a duplicate,
        so no transaction is ever left open or aborted, and an acknowledged row is committed.
        """
        row = self._checkpoint_row(write)
        stored = await self._checkpoint_group.submit(row)
        if stored is not None:
            return stored
        async with self._connection() as conn:
            for _ in range(RACE_ATTEMPTS):
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *row.args)
                if sequence is not None:
                    return row.stored(sequence)
                stored = await self._existing_checkpoint(conn, write)
                if stored is not None:
                    return stored
        raise StoreUnavailable("checkpoint write kept racing with a delete; retry")

    async def _delete_execution_rows(
        self, conn: Statements, namespace: str, execution_id: str, applied_at: Any
    ) -> tuple[DeleteExecutionResult, PendingRecord | None]:
        """The checkpoints and their tombstones in one statement; the pending row the delete
        returns."""
        key = (namespace, execution_id)
        counted = await conn.fetch(self._sql.delete_checkpoints, (*key, applied_at))
        removed = await conn.fetch(self._sql.delete_pending, key)
        results = await conn.run(self._sql.delete_idempotent, key)
        await conn.run(self._sql.delete_decisions, key)
        result = DeleteExecutionResult(
            checkpoints_deleted=int(counted[0][0]),
            pending_interrupt_deleted=bool(removed),
            idempotency_results_deleted=results,
        )
        return result, self._pending(removed[0]) if removed else None

    async def _prune_rows(
        self, namespace: str, cutoff: Any, batch_size: int, applied_at: Any
    ) -> PruneResult:
        """Each batch one statement (its own transaction), the checkpoints' with their
        tombstones."""
        checkpoints = await self._prune_loop(
            self._sql.prune_checkpoints, namespace, cutoff, batch_size, applied_at
        )
        results = await self._prune_loop(self._sql.prune_idempotent, namespace, cutoff, batch_size)
        return PruneResult(checkpoints_deleted=checkpoints, idempotency_results_deleted=results)

    async def _prune_loop(
        self, query: str, namespace: str, cutoff: datetime, batch_size: int, *extra: object
    ) -> int:
        deleted = 0
        resume_at = _BEGINNING_OF_TIME
        while True:
            async with self._connection() as conn:
                row = await conn.fetchrow(query, namespace, resume_at, cutoff, batch_size, *extra)
            if row is None:  # cannot happen: an aggregate query returns one row
                raise StoreError("prune batch returned no counts")
            deleted += int(row["deleted"])
            if row["candidates"] < batch_size:
                return deleted
            resume_at = times.utc_out(row["resume_at"])

    async def _insert_checkpoints(
        self, batch: list[CheckpointRow]
    ) -> list[CheckpointRecord | Exception | None]:
        """Write a group of checkpoint rows in one statement (one round trip); None for a row
        whose id was already taken (nothing of it was written). A group of one uses the
        one-row INSERT. When a row's data fails the statement (a value Postgres refuses),
        nothing of it was written, and each row is written alone: the bad one fails alone."""
        if len(batch) == 1:
            only = batch[0]
            async with self._connection() as conn:
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *only.args)
            return [None if sequence is None else only.stored(sequence)]
        columns = [list(column) for column in zip(*(row.args for row in batch), strict=True)]
        async with self._connection() as conn:
            try:
                written = await conn.fetch(self._sql.insert_checkpoints, *columns)
            except ROW_ERRORS:
                return [await self._insert_alone(conn, row) for row in batch]
        sequences = {(r["namespace"], r["checkpoint_id"]): r["sequence"] for r in written}
        outcomes: list[CheckpointRecord | Exception | None] = []
        for row in batch:
            sequence = sequences.get((row.args[0], row.args[2]))
            outcomes.append(None if sequence is None else row.stored(sequence))
        return outcomes

    async def _insert_alone(
        self, conn: Conn, row: CheckpointRow
    ) -> CheckpointRecord | Exception | None:
        """One row of a group whose statement failed on a row's data: its own outcome."""
        try:
            sequence = await conn.fetchval(self._sql.insert_checkpoint, *row.args)
        except ROW_ERRORS as exc:
            return self._translate(exc) or StoreError("the checkpoint could not be written")
        return None if sequence is None else row.stored(sequence)

    @staticmethod
    def _checkpoint_row(write: CheckpointWrite) -> CheckpointRow:
        """The insert's parameters of ``write`` (an empty request id stored as NULL)."""
        request_id = write.request_id or None
        args = checkpoint_params(
            write.namespace, request_id, write.checkpoint, times.utc_in, write.fingerprint
        )
        return CheckpointRow(args, write.checkpoint)

    async def _existing_checkpoint(
        self, conn: Conn, write: CheckpointWrite
    ) -> CheckpointRecord | None:
        """See :func:`checkpointd.store.checkpoints.existing_checkpoint` (None: the
        conflicting row is gone again, and the caller inserts once more)."""
        statements = PgStatements(conn)
        return await existing_checkpoint(statements, self._sql.checkpoints, times.utc_out, write)

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """One transaction: the re-quarantines of rows already settled, then one statement
        that settles every unsettled row it names."""
        if not settlements:
            return []
        ids = [cid for cid, _ in settlements]
        reasons = [reason for _, reason in settlements]
        async with self._connection() as conn, conn.transaction():
            if any(reason is not None for reason in reasons):
                await conn.execute(self._sql.requarantine, namespace, ids, reasons)
            rows = await conn.fetch(self._sql.settle, namespace, times.utc_in(now), ids, reasons)
        settled = {str(row["checkpoint_id"]) for row in rows}
        return [cid for cid in ids if cid in settled]
