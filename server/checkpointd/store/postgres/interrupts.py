"""The Postgres store's interrupts: record (the checkpoint, then the pending row and its event
in one statement: I1, I2), claim (one statement in autocommit: I3), the purges, and the
idempotency put's group commit (D1)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Final

import asyncpg
import asyncpg.exceptions

from checkpointd.domain import (
    CheckpointRecord,
    EventKind,
    PendingRecord,
    RecordInterruptResult,
)
from checkpointd.store import times
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.checkpoints import CheckpointWrite
from checkpointd.store.columns import pending_params
from checkpointd.store.idempotency import IdempotentPut, refuse_reused_request_id
from checkpointd.store.postgres.checkpoints import PostgresCheckpoints
from checkpointd.store.postgres.core import RACE_ATTEMPTS, ROW_ERRORS
from checkpointd.store.postgres.statements import Conn

__all__ = ["PostgresInterrupts"]

#: Rows per transaction when purging expired claims and applied request ids.
_PURGE_BATCH: Final = 1000


class PostgresInterrupts(PostgresCheckpoints):
    """The interrupt and idempotency methods of
    :class:`~checkpointd.store.postgres.PostgresStore`."""

    async def _record_interrupt(
        self, write: CheckpointWrite, pending: PendingRecord
    ) -> RecordInterruptResult:
        """One transaction on one connection; the insert is tried again while it races with a
        delete (:data:`RACE_ATTEMPTS`)."""
        namespace = write.namespace
        checkpoint_row = self._checkpoint_row(write)
        async with self._connection() as conn, conn.transaction():
            stored: CheckpointRecord | None = None
            for _ in range(RACE_ATTEMPTS):
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *checkpoint_row.args)
                if sequence is not None:
                    stored = checkpoint_row.stored(sequence)
                    break
                retried = await self._existing_checkpoint(conn, write)
                if retried is not None:
                    return await self._retried_interrupt(conn, namespace, retried, pending)
            if stored is None:
                raise StoreUnavailable("interrupt write kept racing with a delete; retry")

            proposed = replace(
                pending, checkpoint_id=stored.checkpoint_id, sequence=stored.sequence
            )
            new_row = pending_params(proposed, times.utc_in)
            event = (self._event_lock, EventKind.ADDED.value, self._channel)
            for _ in range(RACE_ATTEMPTS):
                # The row and its ``added`` event in one statement.
                row = await conn.fetchrow(
                    self._sql.insert_pending_with_event, namespace, *new_row, *event
                )
                if row is not None:
                    added = self._pending(row)
                    return RecordInterruptResult(stored, added, pending_created=True)
                # I2: the execution already has a pending row; it stays, the checkpoint too.
                row = await conn.fetchrow(
                    self._sql.pending_by_execution, namespace, pending.execution_id
                )
                if row is not None:
                    return RecordInterruptResult(stored, self._pending(row), pending_created=False)
                # It was claimed between our insert and our read: insert again.
        raise StoreUnavailable("interrupt write kept racing with claims; retry")

    async def _retried_interrupt(
        self, conn: Conn, namespace: str, stored: CheckpointRecord, pending: PendingRecord
    ) -> RecordInterruptResult:
        """Answer a retried record_interrupt: the stored checkpoint and the pending row now in
        place. When none is (it was claimed since), the row the first call wrote is rebuilt
        from the request."""
        row = await conn.fetchrow(self._sql.pending_by_execution, namespace, stored.execution_id)
        if row is not None:
            in_place = self._pending(row)
            created = in_place.checkpoint_id == stored.checkpoint_id
            return RecordInterruptResult(stored, in_place, pending_created=created)
        rebuilt = replace(
            pending,
            created_at=times.utc_in(pending.created_at),
            checkpoint_id=stored.checkpoint_id,
            sequence=stored.sequence,
        )
        return RecordInterruptResult(stored, rebuilt, pending_created=True)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """The look for the token's earlier claim, the claim and its ``claimed`` event are one
        statement (one transaction, one round trip); only a claim that takes nothing looks
        again."""
        now = times.utc_in(now)
        async with self._connection() as conn:
            # The claim and its event (and, with a token, the look for the token's earlier
            # claim) are one statement, so one transaction in autocommit.
            event = (self._event_lock, EventKind.CLAIMED.value, self._channel)
            try:
                if claim_token:
                    row = await conn.fetchrow(
                        self._sql.claim_with_token_and_event,
                        namespace,
                        execution_id,
                        claim_token,
                        now,
                        *event,
                    )
                else:
                    row = await conn.fetchrow(
                        self._sql.claim_with_event, namespace, execution_id, *event
                    )
                if row is not None:
                    return self._pending(row)
            except asyncpg.exceptions.UniqueViolationError:
                # This token already holds an earlier claim of this execution, filed by a
                # concurrent retry after the statement's snapshot: everything rolled back, and
                # the look below returns that claim.
                pass
            if not claim_token:
                return None
            row = await conn.fetchrow(
                self._sql.claim_by_token, namespace, execution_id, claim_token
            )
        return None if row is None else self._pending(row)

    async def purge_claims(self, claimed_before: datetime) -> int:
        """In batches (:meth:`_purge`)."""
        return await self._purge(self._sql.purge_claims, claimed_before, "claim")

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """In batches (:meth:`_purge`)."""
        return await self._purge(
            self._sql.purge_applied_requests, applied_before, "applied request"
        )

    async def _purge(self, batch: str, before: datetime, what: str) -> int:
        """Run a purge ``batch`` statement (each its own transaction) until one finds less
        than a batch to delete, so no purge holds its rows long."""
        before = times.utc_in(before)
        purged = 0
        while True:
            async with self._connection() as conn:
                row = await conn.fetchrow(batch, before, _PURGE_BATCH)
            if row is None:  # cannot happen: an aggregate query returns one row
                raise StoreError(f"{what} purge returned no counts")
            purged += int(row["deleted"])
            if row["candidates"] < _PURGE_BATCH:
                return purged

    async def _put_idempotent(self, put: IdempotentPut) -> None:
        """A row of the next group-commit statement (:meth:`_put_idempotents`), which records
        the request id with the upsert."""
        cached = (put.namespace, put.execution_id, put.key, put.result_json, times.utc_in(put.now))
        fresh = await self._idempotent_group.submit(
            (*cached, put.request_id, put.fingerprint or None)
        )
        if put.request_id and not fresh:
            refused = self._sql.fingerprint_of_applied
            await self._in_read(lambda conn: refuse_reused_request_id(conn, refused, put))

    async def _put_idempotents(self, batch: list[tuple[object, ...]]) -> list[bool | Exception]:
        """Upsert a group of idempotency results in one statement (one row: the one-row
        upsert); for each, whether its request id was recorded by this statement (True
        without one). A later row of the group with the request id of an earlier one is left
        out (a retry of it, or another request: its caller compares the fingerprints)."""
        rows: list[tuple[object, ...]] = []
        seen: set[tuple[object, object]] = set()
        for args in batch:
            request = (args[0], args[5])
            if args[5]:
                if request in seen:
                    continue
                seen.add(request)
            rows.append(args)
        fresh: set[tuple[object, object]] = set()
        failed: dict[int, Exception] = {}
        async with self._connection() as conn:
            if len(rows) > 1:
                columns = [list(column) for column in zip(*rows, strict=True)]
                try:
                    recorded = await conn.fetch(self._sql.put_idempotents, *columns)
                    fresh = {(row["namespace"], row["request_id"]) for row in recorded}
                except ROW_ERRORS:
                    # A row Postgres refuses failed the statement (nothing was written): each
                    # row alone, so that one fails alone.
                    for args in rows:
                        try:
                            if await self._put_idempotent_alone(conn, args):
                                fresh.add((args[0], args[5]))
                        except ROW_ERRORS as exc:
                            failed[id(args)] = self._translate(exc) or StoreError(
                                "the idempotency result could not be written"
                            )
            elif await self._put_idempotent_alone(conn, rows[0]):
                fresh = {(rows[0][0], rows[0][5])}
        kept = {id(args) for args in rows}
        return [
            failed.get(id(args))
            or (not args[5] or (id(args) in kept and (args[0], args[5]) in fresh))
            for args in batch
        ]

    async def _put_idempotent_alone(self, conn: Conn, args: tuple[object, ...]) -> bool:
        """One idempotency row by the one-row upsert; whether its request id was recorded by
        it (False without one)."""
        if args[5]:
            return bool(await conn.fetchval(self._sql.put_idempotent_once, *args))
        await conn.execute(self._sql.put_idempotent, *args[:5])
        return False
