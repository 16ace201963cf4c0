"""The SQLite executions reader: :class:`~checkpointd.store.executions.ExecutionReader` on
the SQLite store's query-only connection (contract C11).

A listing groups the namespace's checkpoints by execution on the index
``(namespace, execution_id, sequence)``, so a page costs one pass over that index: fine for
an operator's command, not meant for a hot path.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
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
from checkpointd.store.sqlite.access import SQLiteAccess
from checkpointd.store.sqlite.on_thread import Statements

__all__ = ["SQLiteExecutionReader"]

# Each execution's newest checkpoint (by sequence) and count, with its status. The outer
# WHERE is appended by the caller; ``?`` 1-2: namespace, namespace.
_SUMMARIES: Final = (
    "WITH runs AS ("
    " SELECT execution_id, max(sequence) AS last_sequence, count(*) AS checkpoint_count"
    " FROM checkpoints WHERE namespace = ?{runs_where} GROUP BY execution_id"
    "), described AS ("
    " SELECT r.execution_id, r.last_sequence, r.checkpoint_count, c.chain_name,"
    " c.node_id AS last_node_id, c.checkpoint_id AS last_checkpoint_id,"
    f" c.created_at AS last_activity_at, {STATUS_CASE} AS run_status"
    " FROM runs AS r JOIN checkpoints AS c ON c.sequence = r.last_sequence"
    " LEFT JOIN pending_interrupts AS p"
    " ON p.namespace = ? AND p.execution_id = r.execution_id"
    ") SELECT * FROM described WHERE last_sequence < ?"
)
_ORDER: Final = " ORDER BY last_sequence DESC LIMIT ?"

_PENDING_OF_EXECUTION: Final = (
    f"SELECT {DECIDED_PENDING_COLUMNS} FROM pending_interrupts AS p "
    "LEFT JOIN interrupt_decisions AS d ON d.namespace = p.namespace "
    "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id "
    "WHERE p.namespace = ? AND p.execution_id = ?"
)
_NEWEST_DECISION: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? ORDER BY sequence DESC LIMIT 1"
)
_KEYS: Final = (
    "SELECT key FROM idempotency_results WHERE namespace = ? AND execution_id = ? "
    "ORDER BY key LIMIT ?"
)
_KEY_COUNT: Final = (
    "SELECT count(*) FROM idempotency_results WHERE namespace = ? AND execution_id = ?"
)


def summaries_query(
    namespace: str,
    query: ExecutionQuery,
    *,
    before_sequence: int | None,
    limit: int,
    execution_id: str | None = None,
) -> tuple[str, list[Any]]:
    """The listing's SQL and parameters (one execution's summary with ``execution_id``)."""
    runs_where = " AND execution_id = ?" if execution_id is not None else ""
    params: list[Any] = [namespace]
    if execution_id is not None:
        params.append(execution_id)
    params += [namespace, MAX_SEQUENCE if before_sequence is None else before_sequence]
    sql = _SUMMARIES.format(runs_where=runs_where)
    if query.chain_name is not None:
        sql += " AND chain_name = ?"
        params.append(query.chain_name)
    if query.status is not None:
        sql += " AND run_status = ?"
        params.append(query.status.value)
    if query.active_since is not None:
        sql += " AND last_activity_at >= ?"
        params.append(times.to_us(query.active_since))
    return sql + _ORDER, [*params, limit]


def _summary(row: sqlite3.Row) -> ExecutionSummary:
    return ExecutionSummary(
        execution_id=row["execution_id"],
        chain_name=row["chain_name"],
        status=ExecutionStatus(row["run_status"]),
        checkpoint_count=int(row["checkpoint_count"]),
        last_activity_at=times.from_us(row["last_activity_at"]),
        last_checkpoint_id=row["last_checkpoint_id"],
        last_node_id=row["last_node_id"],
        last_sequence=int(row["last_sequence"]),
    )


def _decided(row: sqlite3.Row) -> PendingRecord:
    return rows.pending_from_row(row, times.from_us, with_decision=True)


async def _fetch(conn: Statements, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    return await conn.fetch(sql, params)


class SQLiteExecutionReader:
    """An :class:`~checkpointd.store.executions.ExecutionReader` on a SQLite store."""

    def __init__(self, access: SQLiteAccess) -> None:
        self._access = access

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
        sql, params = summaries_query(
            namespace, query, before_sequence=before_sequence, limit=limit + 1
        )
        async with self._access.call():
            found = await self._access.read(lambda conn: _fetch(conn, sql, params))
        return Page((_summary(row) for row in found[:limit]), more=len(found) > limit)

    async def get_execution(self, namespace: str, execution_id: str) -> ExecutionDetail | None:
        """The execution's summary, pending interrupt, newest decision and idempotency keys."""
        sql, params = summaries_query(
            namespace, ExecutionQuery(), before_sequence=None, limit=1, execution_id=execution_id
        )
        key = (namespace, execution_id)

        async def body(conn: Statements) -> ExecutionDetail | None:
            found = await _fetch(conn, sql, params)
            if not found:
                return None
            pending = await _fetch(conn, _PENDING_OF_EXECUTION, key)
            decided = await _fetch(conn, _NEWEST_DECISION, key)
            keys = await _fetch(conn, _KEYS, (*key, MAX_IDEMPOTENCY_KEYS))
            count = await _fetch(conn, _KEY_COUNT, key)
            return ExecutionDetail(
                summary=_summary(found[0]),
                pending=_decided(pending[0]) if pending else None,
                last_decided=_decided(decided[0]) if decided else None,
                idempotency_keys=[row["key"] for row in keys],
                idempotency_key_count=int(count[0][0]),
            )

        async with self._access.call():
            return await self._access.read(body)
