"""The SQLite store's interrupts: record (the checkpoint, the pending row and its event in
one transaction: I1, I2), claim (exactly once across every process sharing the file: I3), and
the idempotency put with its applied request ids (D1). ``BEGIN IMMEDIATE`` takes the write
lock before the first read, so each read-then-write is atomic."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from checkpointd.domain import EventKind, PendingRecord, RecordInterruptResult
from checkpointd.store import times
from checkpointd.store.checkpoints import CheckpointWrite
from checkpointd.store.columns import pending_params
from checkpointd.store.idempotency import IdempotentPut, refuse_reused_request_id
from checkpointd.store.sqlite import sql
from checkpointd.store.sqlite.checkpoints import SQLiteCheckpoints
from checkpointd.store.statements import Statements

__all__ = ["SQLiteInterrupts"]


class SQLiteInterrupts(SQLiteCheckpoints):
    """The interrupt and idempotency methods of :class:`~checkpointd.store.sqlite.SQLiteStore`."""

    async def _record_interrupt(
        self, write: CheckpointWrite, pending: PendingRecord
    ) -> RecordInterruptResult:
        """One transaction: :meth:`_insert_checkpoint`, then the pending row and its event."""
        namespace = write.namespace
        key = (namespace, write.checkpoint.execution_id)

        async def body(conn: Statements) -> RecordInterruptResult:
            stored, written = await self._insert_checkpoint(conn, write)
            proposed = dataclasses.replace(
                pending,
                checkpoint_id=stored.checkpoint_id,
                sequence=stored.sequence,
                created_at=times.from_us(times.to_us(pending.created_at)),
            )
            rows = await conn.fetch(sql.PENDING_OF_EXECUTION, key)
            if rows:
                in_place = self._pending(rows[0])
                created = in_place.checkpoint_id == stored.checkpoint_id
                return RecordInterruptResult(stored, in_place, pending_created=created)
            if not written:
                # A retry after the pending row went away (claimed, most likely): report the
                # row as it was claimed when this checkpoint created it.
                claimed = await conn.fetch(sql.CLAIM_BY_CHECKPOINT, (*key, stored.checkpoint_id))
                if claimed:
                    return RecordInterruptResult(
                        stored, self._pending(claimed[0]), pending_created=True
                    )
                return RecordInterruptResult(stored, proposed, pending_created=False)
            await conn.run(sql.INSERT_PENDING, (namespace, *pending_params(proposed, times.to_us)))
            at = datetime.now(UTC)
            await self._append_event_at(conn, namespace, EventKind.ADDED, proposed, at)
            return RecordInterruptResult(stored, proposed, pending_created=True)

        return await self._in_transaction(body)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """One transaction (one thread hop), which looks for the token's earlier claim first:
        writers are serialized, so it sees any concurrent retry's claim."""
        now_us = times.to_us(now)
        by_token = (namespace, execution_id, claim_token)

        async def claim(conn: Statements) -> PendingRecord | None:
            if claim_token:
                earlier = await conn.fetch(sql.CLAIM_BY_TOKEN, by_token)
                if earlier:
                    return self._pending(earlier[0])
            rows = await conn.fetch(sql.PENDING_OF_EXECUTION, (namespace, execution_id))
            if not rows:
                return None
            pending = self._pending(rows[0])
            await conn.run(sql.DELETE_PENDING_OF_EXECUTION, (namespace, execution_id))
            if claim_token:
                await conn.run(
                    sql.INSERT_CLAIM,
                    (namespace, claim_token, now_us, *pending_params(pending, times.to_us)),
                )
            await self._append_event_at(conn, namespace, EventKind.CLAIMED, pending, now)
            return pending

        return await self._in_transaction(claim)

    async def purge_claims(self, claimed_before: datetime) -> int:
        """One statement in one transaction."""

        async def body(conn: Statements) -> int:
            return await conn.run(sql.PURGE_CLAIMS, (times.to_us(claimed_before),))

        return await self._in_transaction(body)

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """One statement in one transaction."""

        async def body(conn: Statements) -> int:
            return await conn.run(sql.PURGE_APPLIED_REQUESTS, (times.to_us(applied_before),))

        return await self._in_transaction(body)

    async def _put_idempotent(self, put: IdempotentPut) -> None:
        """One write of the group commit: the request id recorded, then the upsert."""
        now_us = times.to_us(put.now)
        cached = (put.namespace, put.execution_id, put.key, put.result_json, now_us)
        applied = (put.namespace, put.request_id, now_us, put.fingerprint or None)

        async def write(conn: Statements) -> None:
            if put.request_id and not await conn.run(sql.RECORD_APPLIED_REQUEST, applied):
                await refuse_reused_request_id(conn, sql.FINGERPRINT_OF_APPLIED, put)
                return
            await conn.fetch(sql.PUT_IDEMPOTENT, cached)

        await self._grouped(write)
