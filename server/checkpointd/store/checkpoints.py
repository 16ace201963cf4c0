"""Checkpoints, what is the same on both backends: the reads of one row, of a listing's
page and of the replication outbox (:class:`CheckpointReads`), the puts' signatures and rules
(:class:`CheckpointWrites`) with the look after an insert that wrote nothing
(:func:`existing_checkpoint`), and DeleteExecution and PruneCheckpoints with the replies they
record under their request ids (:class:`CheckpointRemovals`, C9). The inserts stay with each
backend: SQLite's group commit runs statements in one transaction, Postgres's one multi-row
statement; so do the deletes themselves, which Postgres makes single statements."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    DeleteExecutionResult,
    EventKind,
    Page,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
)
from checkpointd.store import budget, replies, retries, rows
from checkpointd.store.columns import MAX_SEQUENCE
from checkpointd.store.statements import Statements, StatementStore

__all__ = [
    "CheckpointReads",
    "CheckpointRemovals",
    "CheckpointSql",
    "CheckpointWrite",
    "CheckpointWrites",
    "existing_checkpoint",
]


@dataclass(frozen=True, slots=True)
class CheckpointSql:
    """A backend's checkpoint statements that the shared bodies run."""

    #: Parameters: namespace, checkpoint id, execution id.
    get_checkpoint: str
    #: Parameters: namespace, execution id (and the step type to skip).
    latest: str
    latest_skip_step_type: str
    #: Parameters: namespace, checkpoint id.
    checkpoint_by_id: str
    #: Parameters: namespace, request id; the row and its request fingerprint.
    checkpoint_by_request_id: str
    #: Parameters: namespace, request id; the fingerprint of the id's tombstone (C9).
    tombstone_fingerprint: str
    #: Parameters: namespace, execution id, above, below (sequences, exclusive), limit; the
    #: rows of a listing page, and first their sequences and stored sizes (see
    #: :func:`checkpointd.store.budget.read_page`).
    list_ascending: str
    list_descending: str
    list_ascending_sizes: str
    list_descending_sizes: str
    #: Parameters: namespace, after sequence, limit; unsettled rows, oldest first.
    list_unsynced: str
    #: Parameters: namespace, request id; the ``kind``, ``reply_json`` and
    #: ``request_fingerprint`` remembered under the id.
    reply_of_request: str
    #: Parameters: namespace, request id, applied at, kind, reply JSON, fingerprint; changes
    #: no row when the id is remembered already.
    record_reply: str
    #: Parameters: namespace, request id, reply JSON.
    set_reply: str


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    """A checkpoint to insert and the request that sends it: its request id names the call
    (C2, C9), its fingerprint tells a retry from another request under that id (C10)."""

    namespace: str
    request_id: str
    checkpoint: CheckpointRecord
    fingerprint: str


async def existing_checkpoint(
    conn: Statements, sql: CheckpointSql, read_time: rows.TimeReader, write: CheckpointWrite
) -> CheckpointRecord | None:
    """After the insert of ``write`` wrote nothing (a taken id, or a tombstone): see
    :func:`retries.existing_checkpoint` (None: the conflicting row is gone again)."""
    namespace, request_id, checkpoint = write.namespace, write.request_id, write.checkpoint

    async def by_request_id() -> tuple[CheckpointRecord, str | None] | None:
        found = await conn.fetch(sql.checkpoint_by_request_id, (namespace, request_id))
        if not found:
            return None
        return rows.checkpoint_from_row(found[0], read_time), found[0]["request_fingerprint"]

    async def tombstone() -> tuple[str | None] | None:
        found = await conn.fetch(sql.tombstone_fingerprint, (namespace, request_id))
        return (found[0][0],) if found else None

    async def by_checkpoint_id() -> bool:
        cid = checkpoint.checkpoint_id
        return bool(await conn.fetch(sql.checkpoint_by_id, (namespace, cid)))

    return await retries.existing_checkpoint(
        request_id,
        checkpoint.checkpoint_id,
        write.fingerprint,
        by_request_id=by_request_id,
        tombstone=tombstone,
        by_checkpoint_id=by_checkpoint_id,
    )


class CheckpointWrites(StatementStore):
    """The checkpoint puts of :class:`~checkpointd.store.interface.Store`, alone or with a
    pending interrupt: their rules written once, the inserts the backend's."""

    @abc.abstractmethod
    async def _put_checkpoint(self, write: CheckpointWrite) -> CheckpointRecord:
        """Insert the checkpoint of ``write`` (see :meth:`put_checkpoint`)."""

    @abc.abstractmethod
    async def _record_interrupt(
        self, write: CheckpointWrite, pending: PendingRecord
    ) -> RecordInterruptResult:
        """Insert the checkpoint of ``write`` and ``pending``, a pending row of its execution
        (see :meth:`record_interrupt`)."""

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        """Insert one checkpoint and return it with its sequence.

        A non-empty ``request_id`` names the call: when a stored row was written with it,
        that row is returned unchanged (a retry, whatever checkpoint id it carries); when the
        rows it wrote were deleted since (a tombstone in ``applied_requests``),
        :class:`~checkpointd.store.base.RequestAppliedThenDeleted` is raised. Otherwise, if
        ``(namespace, checkpoint_id)`` exists, :class:`~checkpointd.store.base.CheckpointExists`
        is raised. Nothing is written in any of these cases. A put that writes is a single
        insert; the lookups run only when it does not.
        """
        return await self._put_checkpoint(
            CheckpointWrite(namespace, request_id, checkpoint, fingerprint)
        )

    async def record_interrupt(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        pending: PendingRecord,
        *,
        fingerprint: str = "",
    ) -> RecordInterruptResult:
        """Insert the interrupted checkpoint and, unless the execution already has one, the
        pending row plus an ``added`` event, all in one transaction (I1, I2).

        The request-id and checkpoint-exists rules are those of :meth:`put_checkpoint`; a
        retry returns the stored checkpoint and the pending row now in place
        (``pending_created`` true when that row was written by this checkpoint).
        """
        if pending.execution_id != checkpoint.execution_id:
            raise ValueError("the pending row and its checkpoint name different executions")
        write = CheckpointWrite(namespace, request_id, checkpoint, fingerprint)
        return await self._record_interrupt(write, pending)


class CheckpointReads(StatementStore):
    """The checkpoint reads of :class:`~checkpointd.store.interface.Store`, written once."""

    _checkpoint_sql: CheckpointSql

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        params = (namespace, checkpoint_id, execution_id)
        found = await self._point_query(self._checkpoint_sql.get_checkpoint, params)
        return self._checkpoint(found[0]) if found else None

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence.

        With ``skip_run_end`` rows whose step_type is ``run_end`` are passed over.
        """
        sql = self._checkpoint_sql
        if skip_run_end:
            params: tuple[str, ...] = (namespace, execution_id, RUN_END)
            found = await self._point_query(sql.latest_skip_step_type, params)
        else:
            found = await self._point_query(sql.latest, (namespace, execution_id))
        return self._checkpoint(found[0]) if found else None

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
        """Return up to ``limit`` rows of the execution ordered by sequence (keyset paging).

        Ascending: rows with sequence > ``after_sequence``; descending: rows with sequence <
        ``after_sequence``. ``None`` starts at the beginning (or the end, descending).

        Only the leading rows whose stored sizes fit ``max_bytes`` are read (always at least
        one; see :mod:`checkpointd.store.budget`): sizes first, then only the rows that fit,
        so a page of large rows never loads more than its budget; ``more`` says whether rows
        were left for the next page.
        """
        sql = self._checkpoint_sql
        if descending:
            sizes_sql, rows_sql = sql.list_descending_sizes, sql.list_descending
            above, below = 0, MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_sql, rows_sql = sql.list_ascending_sizes, sql.list_ascending
            above, below = 0 if after_sequence is None else after_sequence, MAX_SEQUENCE

        def listing(statement: str) -> budget.Listing:
            return lambda low, high, count: (statement, (namespace, execution_id, low, high, count))

        found, more = await self._listing_page(
            listing(sizes_sql),
            listing(rows_sql),
            above=above,
            below=below,
            limit=limit,
            max_bytes=max_bytes,
        )
        return Page((self._checkpoint(row) for row in found), more=more)

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled checkpoints of the namespace with sequence >
        ``after_sequence`` (from the start when None), ascending by sequence. Changes
        nothing."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        bound = 0 if after_sequence is None else after_sequence
        found = await self._query(self._checkpoint_sql.list_unsynced, (namespace, bound, limit))
        return [self._checkpoint(row) for row in found]


class CheckpointRemovals(StatementStore):
    """DeleteExecution and PruneCheckpoints of :class:`~checkpointd.store.interface.Store`:
    the request-id rules (C9) written once, the deletes the backend's."""

    _checkpoint_sql: CheckpointSql

    @abc.abstractmethod
    async def _delete_execution_rows(
        self, conn: Statements, namespace: str, execution_id: str, applied_at: Any
    ) -> tuple[DeleteExecutionResult, PendingRecord | None]:
        """Delete the execution's checkpoints (their request ids becoming tombstones applied
        at ``applied_at``, stored form), pending interrupt, idempotency results and decisions
        in the caller's transaction; return the counts and the pending row that went."""

    @abc.abstractmethod
    async def _prune_rows(
        self, namespace: str, cutoff: Any, batch_size: int, applied_at: Any
    ) -> PruneResult:
        """Delete the prunable checkpoints (with their tombstones) and idempotency results
        created before ``cutoff`` (stored form), at most ``batch_size`` rows a transaction."""

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

        In the same transaction the request ids of the deleted checkpoints become tombstones
        and, with a non-empty ``request_id``, the reply is recorded (``applied_at = now``,
        the store's clock when None). A retry with that ``request_id`` deletes nothing and
        returns the recorded reply (C9).

        The request id is recorded first: on Postgres a concurrent call with the same id
        waits on that row and, once this one commits, returns its reply."""
        at = datetime.now(UTC) if now is None else now
        applied_at = self._write_time(at)
        sql = self._checkpoint_sql

        async def body(conn: Statements) -> DeleteExecutionResult:
            record = bool(request_id)
            if record:
                claim = (namespace, request_id, applied_at, replies.DELETE_EXECUTION, None)
                if not await conn.run(sql.record_reply, (*claim, fingerprint or None)):
                    earlier = await self._reply(
                        conn, namespace, request_id, fingerprint, replies.DELETE_EXECUTION
                    )
                    if earlier is not None:
                        return replies.decode_delete(earlier)
                    # An id stored without a fingerprint by another kind of call is kept.
                    record = False
            result, removed = await self._delete_execution_rows(
                conn, namespace, execution_id, applied_at
            )
            if record:
                await conn.run(sql.set_reply, (namespace, request_id, replies.encode(result)))
            if removed is not None:
                # The event last: the Postgres outbox wants it at the end of the transaction.
                await self._append_event_at(conn, namespace, EventKind.REMOVED, removed, at)
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
        """Delete completed/failed checkpoints and idempotency results with created_at < cutoff.

        Never an interrupted checkpoint, never a pending interrupt, never the idempotency
        results of an execution that has a pending interrupt. Deletes at most ``batch_size``
        rows per transaction, looping until nothing is left, so other callers never wait
        long; each batch records the request ids of the checkpoints it deleted as tombstones.
        With a non-empty ``request_id`` the reply is recorded once the prune is complete, and
        a retry returns it without pruning (C9).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        applied_at = self._write_time(datetime.now(UTC) if now is None else now)
        sql = self._checkpoint_sql

        async def earlier(conn: Statements) -> PruneResult | None:
            reply = await self._reply(conn, namespace, request_id, fingerprint, replies.PRUNE)
            return None if reply is None else replies.decode_prune(reply)

        if request_id:
            answered = await self._in_read(earlier)
            if answered is not None:
                return answered
        result = await self._prune_rows(namespace, self._write_time(cutoff), batch_size, applied_at)
        if not request_id:
            return result

        async def record(conn: Statements) -> PruneResult:
            reply = (namespace, request_id, applied_at, replies.PRUNE, replies.encode(result))
            if not await conn.run(sql.record_reply, (*reply, fingerprint or None)):
                # A concurrent call with this id finished first: answer like it did.
                return await earlier(conn) or result
            return result

        return await self._in_transaction(record)

    async def _reply(
        self, conn: Statements, namespace: str, request_id: str, fingerprint: str, kind: str
    ) -> str | None:
        """The reply of ``kind`` recorded under ``request_id`` (None: none, or another kind of
        call's id stored without a fingerprint); :class:`RequestIdReused` for another
        request's id."""
        found = await conn.fetch(self._checkpoint_sql.reply_of_request, (namespace, request_id))
        if not found:
            return None
        retries.check_fingerprint(request_id, found[0]["request_fingerprint"], fingerprint)
        return str(found[0]["reply_json"]) if found[0]["kind"] == kind else None
