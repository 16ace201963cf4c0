"""The Postgres executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the Postgres store's pool and schema (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``; an execution's detail is read in one read-only
repeatable-read transaction, so its parts agree with each other. Statements are unprepared
text, so they pass through PgBouncer in transaction mode as the store's own do.
"""

from __future__ import annotations

from typing import Any, Final

from checkpointd.domain import Page, PendingRecord
from checkpointd.paging import MAX_SEQUENCE
from checkpointd.store import rows, times
from checkpointd.store.columns import DECIDED_PENDING_COLUMNS, DECISION_ROW_COLUMNS
from checkpointd.store.executions import (
    MAX_IDEMPOTENCY_KEYS,
    STATUS_CASE,
    ExecutionDetail,
    ExecutionQuery,
    ExecutionStatus,
    ExecutionSummary,
)
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.sql import numbered

__all__ = ["PostgresExecutionReader"]

# Each execution's newest checkpoint (by sequence) and count, with its status; {s} is the
# quoted schema, {runs_where} narrows to one execution. The outer WHERE is appended.
_SUMMARIES: Final = (
    "WITH runs AS ("
    " SELECT execution_id, max(sequence) AS last_sequence, count(*) AS checkpoint_count"
    " FROM {s}.checkpoints WHERE namespace = ?{runs_where} GROUP BY execution_id"
    "), described AS ("
    " SELECT r.execution_id, r.last_sequence, r.checkpoint_count, c.chain_name,"
    " c.node_id AS last_node_id, c.checkpoint_id AS last_checkpoint_id,"
    f" c.created_at AS last_activity_at, {STATUS_CASE} AS run_status"
    " FROM runs AS r JOIN {s}.checkpoints AS c ON c.sequence = r.last_sequence"
    " LEFT JOIN {s}.pending_interrupts AS p"
    " ON p.namespace = ? AND p.execution_id = r.execution_id"
    ") SELECT * FROM described WHERE last_sequence < ?"
)
_ORDER: Final = " ORDER BY last_sequence DESC LIMIT ?"

_PENDING_OF_EXECUTION: Final = (
    f"SELECT {DECIDED_PENDING_COLUMNS} FROM {{s}}.pending_interrupts AS p "
    "LEFT JOIN {s}.interrupt_decisions AS d ON d.namespace = p.namespace "
    "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id "
    "WHERE p.namespace = $1 AND p.execution_id = $2"
)
_NEWEST_DECISION: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM {{s}}.interrupt_decisions "
    "WHERE namespace = $1 AND execution_id = $2 ORDER BY sequence DESC LIMIT 1"
)
_KEYS: Final = (
    "SELECT key FROM {s}.idempotency_results WHERE namespace = $1 AND execution_id = $2 "
    "ORDER BY key LIMIT $3"
)
_KEY_COUNT: Final = (
    "SELECT count(*) FROM {s}.idempotency_results WHERE namespace = $1 AND execution_id = $2"
)


def _summary(row: Any) -> ExecutionSummary:
    return ExecutionSummary(
        execution_id=row["execution_id"],
        chain_name=row["chain_name"],
        status=ExecutionStatus(row["run_status"]),
        checkpoint_count=int(row["checkpoint_count"]),
        last_activity_at=times.utc_out(row["last_activity_at"]),
        last_checkpoint_id=row["last_checkpoint_id"],
        last_node_id=row["last_node_id"],
        last_sequence=int(row["last_sequence"]),
    )


def _decided(row: Any) -> PendingRecord:
    return rows.pending_from_row(row, times.utc_out, with_decision=True)


class PostgresExecutionReader:
    """An :class:`~checkpointd.store.executions.ExecutionReader` on a Postgres store."""

    def __init__(self, access: PostgresAccess) -> None:
        self._access = access
        schema = access.quoted_schema
        self._pending = _PENDING_OF_EXECUTION.format(s=schema)
        self._decision = _NEWEST_DECISION.format(s=schema)
        self._keys = _KEYS.format(s=schema)
        self._key_count = _KEY_COUNT.format(s=schema)

    def _summaries(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        before_sequence: int | None,
        limit: int,
        execution_id: str | None = None,
    ) -> tuple[str, list[Any]]:
        runs_where = " AND execution_id = ?" if execution_id is not None else ""
        params: list[Any] = [namespace]
        if execution_id is not None:
            params.append(execution_id)
        params += [namespace, MAX_SEQUENCE if before_sequence is None else before_sequence]
        sql = _SUMMARIES.format(s=self._access.quoted_schema, runs_where=runs_where)
        if query.chain_name is not None:
            sql += " AND chain_name = ?"
            params.append(query.chain_name)
        if query.status is not None:
            sql += " AND run_status = ?"
            params.append(query.status.value)
        if query.active_since is not None:
            sql += " AND last_activity_at >= ?"
            params.append(times.utc_in(query.active_since))
        return numbered(sql + _ORDER), [*params, limit]

    async def list_executions(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        before_sequence: int | None,
        limit: int,
    ) -> Page[ExecutionSummary]:
        """Executions below ``before_sequence``, newest activity first (one more is read to
        tell whether the page is the last)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        sql, params = self._summaries(
            namespace, query, before_sequence=before_sequence, limit=limit + 1
        )
        async with self._access.connection() as conn:
            found = await conn.fetch(sql, *params)
        return Page((_summary(row) for row in found[:limit]), more=len(found) > limit)

    async def get_execution(self, namespace: str, execution_id: str) -> ExecutionDetail | None:
        """The execution's summary, pending interrupt, newest decision and idempotency keys,
        read in one snapshot."""
        sql, params = self._summaries(
            namespace, ExecutionQuery(), before_sequence=None, limit=1, execution_id=execution_id
        )
        async with (
            self._access.connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            found = await conn.fetch(sql, *params)
            if not found:
                return None
            pending = await conn.fetchrow(self._pending, namespace, execution_id)
            decided = await conn.fetchrow(self._decision, namespace, execution_id)
            keys = await conn.fetch(self._keys, namespace, execution_id, MAX_IDEMPOTENCY_KEYS)
            count = await conn.fetchval(self._key_count, namespace, execution_id)
        return ExecutionDetail(
            summary=_summary(found[0]),
            pending=None if pending is None else _decided(pending),
            last_decided=None if decided is None else _decided(decided),
            idempotency_keys=[row["key"] for row in keys],
            idempotency_key_count=int(count),
        )
