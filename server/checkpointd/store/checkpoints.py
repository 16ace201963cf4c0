"""Checkpoint reads, the same on both backends: the reads of one row
(:class:`CheckpointReads`) and the look after an insert that wrote nothing
(:func:`existing_checkpoint`). The writes stay with each backend: SQLite's group commit runs
statements in one transaction, Postgres's one multi-row statement."""

from __future__ import annotations

from dataclasses import dataclass

from checkpointd.domain import RUN_END, CheckpointRecord
from checkpointd.store import retries, rows
from checkpointd.store.statements import Statements, StatementStore

__all__ = ["CheckpointReads", "CheckpointSql", "existing_checkpoint"]


@dataclass(frozen=True, slots=True)
class CheckpointSql:
    """A backend's one-row checkpoint reads."""

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


async def existing_checkpoint(
    conn: Statements,
    sql: CheckpointSql,
    read_time: rows.TimeReader,
    namespace: str,
    request_id: str,
    checkpoint: CheckpointRecord,
    fingerprint: str,
) -> CheckpointRecord | None:
    """After an insert wrote nothing (a taken id, or a tombstone): see
    :func:`retries.existing_checkpoint` (None: the conflicting row is gone again)."""

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
        fingerprint,
        by_request_id=by_request_id,
        tombstone=tombstone,
        by_checkpoint_id=by_checkpoint_id,
    )


class CheckpointReads(StatementStore):
    """The one-row checkpoint reads of the :class:`~checkpointd.store.base.Store` protocol."""

    _checkpoint_sql: CheckpointSql

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        params = (namespace, checkpoint_id, execution_id)
        found = await self._query(self._checkpoint_sql.get_checkpoint, params)
        return self._checkpoint(found[0]) if found else None

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence (optionally not a run_end)."""
        sql = self._checkpoint_sql
        if skip_run_end:
            found = await self._query(sql.latest_skip_step_type, (namespace, execution_id, RUN_END))
        else:
            found = await self._query(sql.latest, (namespace, execution_id))
        return self._checkpoint(found[0]) if found else None
