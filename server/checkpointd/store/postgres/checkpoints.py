"""The Postgres store's checkpoints: put (group commit: one multi-row insert; a taken id
takes the single-row path), keyset listing in one REPEATABLE READ transaction, delete and
prune with their tombstones in the same statements (C9), and the replication outbox's
settlements (R1-R4)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from checkpointd.domain import (
    CheckpointRecord,
    DeleteExecutionResult,
    EventKind,
    Page,
    PruneResult,
)
from checkpointd.store import budget, replies, retries, times
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.checkpoints import existing_checkpoint
from checkpointd.store.columns import MAX_SEQUENCE, checkpoint_params
from checkpointd.store.postgres.core import (
    RACE_ATTEMPTS,
    ROW_ERRORS,
    CheckpointRow,
    PostgresCore,
)
from checkpointd.store.postgres.statements import Conn, PgStatements, row_count

__all__ = ["PostgresCheckpoints"]

#: Lower bound of the first prune batch (the keyset scan then moves forward).
_BEGINNING_OF_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)


class PostgresCheckpoints(PostgresCore):
    """The checkpoint methods of :class:`~checkpointd.store.postgres.PostgresStore`."""

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        """Insert one checkpoint and return it with its sequence (see the Store protocol).

        The row goes into the next group-commit statement; when its id is taken, the
        single-row path below tells a retry (the stored row) from a duplicate. Each is an
        ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit: it cannot fail on a duplicate,
        so no transaction is ever left open or aborted, and an acknowledged row is committed.
        """
        row = CheckpointRow(
            self._checkpoint_args(namespace, request_id, checkpoint, fingerprint), checkpoint
        )
        stored = await self._checkpoint_group.submit(row)
        if stored is not None:
            return stored
        async with self._connection() as conn:
            for _ in range(RACE_ATTEMPTS):
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *row.args)
                if sequence is not None:
                    return row.stored(sequence)
                stored = await self._existing_checkpoint(
                    conn, namespace, request_id, checkpoint, fingerprint
                )
                if stored is not None:
                    return stored
        raise StoreUnavailable("checkpoint write kept racing with a delete; retry")

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
        """Up to ``limit`` rows of the execution ordered by sequence (keyset paging), within
        ``max_bytes``: sizes first, then only the rows that fit, in one REPEATABLE READ
        transaction (so the second read returns exactly the rows the first one sized)."""
        if limit <= 0:
            return Page()
        if descending:
            sizes_query, query = self._sql.list_descending_sizes, self._sql.list_descending
            bound = MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_query, query = self._sql.list_ascending_sizes, self._sql.list_ascending
            bound = 0 if after_sequence is None else after_sequence
        async with self._read_snapshot() as conn:
            sizes = await conn.fetch(sizes_query, namespace, execution_id, bound, limit + 1)
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            found = await conn.fetch(query, namespace, execution_id, bound, taken)
        return Page((self._checkpoint(row) for row in found), more=len(sizes) > taken)

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
        transaction; write a ``removed`` event when a pending interrupt went away.

        The request ids of the deleted checkpoints become tombstones in the same statement.
        A non-empty ``request_id`` is recorded first: a concurrent call with the same id
        waits on that row and, once this one commits, returns its reply (C9).
        """
        applied_at = times.utc_in(datetime.now(UTC) if now is None else now)
        async with self._connection() as conn, conn.transaction():
            record = bool(request_id)
            if request_id and not await conn.fetchval(
                self._sql.record_reply,
                namespace,
                request_id,
                applied_at,
                replies.DELETE_EXECUTION,
                None,
                fingerprint or None,
            ):
                row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
                if row is not None:
                    first = row["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if row is not None and row["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(row["reply_json"])
                # An id stored without a fingerprint by another kind of call is kept.
                record = False
            checkpoints = int(
                await conn.fetchval(
                    self._sql.delete_checkpoints, namespace, execution_id, applied_at
                )
            )
            removed = await conn.fetchrow(self._sql.delete_pending, namespace, execution_id)
            results = row_count(
                await conn.execute(self._sql.delete_idempotent, namespace, execution_id)
            )
            await conn.execute(self._sql.delete_decisions, namespace, execution_id)
            result = DeleteExecutionResult(
                checkpoints_deleted=checkpoints,
                pending_interrupt_deleted=removed is not None,
                idempotency_results_deleted=results,
            )
            if record:
                await conn.execute(
                    self._sql.set_reply, namespace, request_id, replies.encode(result)
                )
            if removed is not None:
                await self._append_event(conn, namespace, EventKind.REMOVED, self._pending(removed))
        return result

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
        """Delete completed/failed checkpoints and idempotency results older than ``cutoff``.

        Each batch is one statement (its own transaction) of at most ``batch_size`` rows, so
        other callers never wait long; batches repeat until nothing old is left. Each batch
        records the request ids of the checkpoints it deleted as tombstones; the reply is
        recorded under ``request_id`` once the prune is complete, and a retry returns it (C9).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        cutoff = times.utc_in(cutoff)
        applied_at = times.utc_in(datetime.now(UTC) if now is None else now)
        if request_id:
            earlier = await self._prune_reply(namespace, request_id, fingerprint)
            if earlier is not None:
                return earlier
        checkpoints = await self._prune_loop(
            self._sql.prune_checkpoints, namespace, cutoff, batch_size, applied_at
        )
        results = await self._prune_loop(self._sql.prune_idempotent, namespace, cutoff, batch_size)
        result = PruneResult(checkpoints_deleted=checkpoints, idempotency_results_deleted=results)
        if request_id:
            async with self._connection() as conn:
                recorded = await conn.fetchval(
                    self._sql.record_reply,
                    namespace,
                    request_id,
                    applied_at,
                    replies.PRUNE,
                    replies.encode(result),
                    fingerprint or None,
                )
            if not recorded:
                # A concurrent call with this id finished first: answer like it did.
                return await self._prune_reply(namespace, request_id, fingerprint) or result
        return result

    async def _prune_reply(
        self, namespace: str, request_id: str, fingerprint: str
    ) -> PruneResult | None:
        """The reply recorded under ``request_id`` (None: none, or another kind of call's id
        stored without a fingerprint); :class:`RequestIdReused` for another request's id."""
        async with self._connection() as conn:
            row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
        if row is not None:
            retries.check_fingerprint(request_id, row["request_fingerprint"], fingerprint)
        if row is None or row["kind"] != replies.PRUNE:
            return None
        return replies.decode_prune(row["reply_json"])

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
    def _checkpoint_args(
        namespace: str, request_id: str, checkpoint: CheckpointRecord, fingerprint: str
    ) -> tuple[object, ...]:
        return checkpoint_params(
            namespace, request_id or None, checkpoint, times.utc_in, fingerprint
        )

    async def _existing_checkpoint(
        self,
        conn: Conn,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> CheckpointRecord | None:
        """See :func:`checkpointd.store.checkpoints.existing_checkpoint` (None: the
        conflicting row is gone again, and the caller inserts once more)."""
        return await existing_checkpoint(
            PgStatements(conn),
            self._sql.checkpoints,
            times.utc_out,
            namespace,
            request_id,
            checkpoint,
            fingerprint,
        )

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled rows with sequence > ``after_sequence``, oldest
        first."""
        if limit <= 0:
            return []
        bound = 0 if after_sequence is None else after_sequence
        async with self._connection() as conn:
            rows = await conn.fetch(self._sql.list_unsynced, namespace, bound, limit)
        return [self._checkpoint(row) for row in rows]

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle unsettled rows, first-wins, in one transaction; return the ids settled."""
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
