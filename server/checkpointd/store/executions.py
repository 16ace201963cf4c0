"""The executions reader: summaries of the runs of a namespace, for operators (contract C11).

It only reads, over the tables of the store it is built on (``checkpoints``,
``pending_interrupts``, ``interrupt_decisions``, ``idempotency_results``), through that
store's connections (``SQLiteStore.access``, ``PostgresStore.access``). The
statements (:class:`ExecutionSql`) and the reads (:class:`ExecutionReader`) are
written once; each backend's ``executions`` module says where its tables are, how its
placeholders and times are written and which connection reads.

An execution's status, by its rows:

* ``paused``: it has a pending interrupt (decided or not);
* ``failed``: else, its newest checkpoint (by sequence) has status ``failed``;
* ``ended``: else, its newest checkpoint is a ``run_end`` row;
* ``running``: otherwise (between steps, being resumed, or left without a ``run_end`` row).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar

from checkpointd.domain import Page, PendingRecord
from checkpointd.paging import MAX_SEQUENCE
from checkpointd.store import rows
from checkpointd.store.columns import DECIDED_PENDING_COLUMNS, DECISION_ROW_COLUMNS, TimeWriter
from checkpointd.store.statements import Body, Statements

__all__ = [
    "MAX_IDEMPOTENCY_KEYS",
    "STATUS_CASE",
    "ExecutionDetail",
    "ExecutionQuery",
    "ExecutionReader",
    "ExecutionSql",
    "ExecutionStatus",
    "ExecutionSummary",
]

T = TypeVar("T")

#: The most idempotency keys an execution's detail lists (the count is always complete).
MAX_IDEMPOTENCY_KEYS: Final = 1000

#: The status of a run, in SQL both backends understand: ``c`` is its newest checkpoint,
#: ``p`` its pending interrupt (LEFT JOIN, so NULL when none).
STATUS_CASE: Final = (
    "CASE WHEN p.execution_id IS NOT NULL THEN 'paused' "
    "WHEN c.status = 'failed' THEN 'failed' "
    "WHEN c.step_type = 'run_end' THEN 'ended' "
    "ELSE 'running' END"
)


class ExecutionStatus(enum.StrEnum):
    """Where a run stands; the text :data:`STATUS_CASE` computes."""

    RUNNING = "running"
    PAUSED = "paused"
    ENDED = "ended"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ExecutionSummary:
    """One run, as its newest checkpoint and pending interrupt tell."""

    execution_id: str
    chain_name: str
    """Of the newest checkpoint."""
    status: ExecutionStatus
    checkpoint_count: int
    last_activity_at: datetime
    """The newest checkpoint's created_at."""
    last_checkpoint_id: str
    last_node_id: str
    last_sequence: int
    """The newest checkpoint's sequence: what the listing is ordered and paged by."""


@dataclass(frozen=True, slots=True)
class ExecutionQuery:
    """The filters of a listing; None means "any"."""

    chain_name: str | None = None
    status: ExecutionStatus | None = None
    active_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class ExecutionDetail:
    """One run, with what an operator looks at when it seems stuck."""

    summary: ExecutionSummary
    pending: PendingRecord | None
    """Its pending interrupt with the decision on it, if paused."""
    last_decided: PendingRecord | None
    """Its newest decided pause with the decision, even once resumed."""
    idempotency_keys: list[str] = field(default_factory=list)
    """In key order, at most :data:`MAX_IDEMPOTENCY_KEYS`."""
    idempotency_key_count: int = 0


class ExecutionSql:
    """The reader's statements on a backend: ``tables`` is the prefix of its table names
    (Postgres: the quoted schema and a dot), ``number`` turns ``?`` into its placeholders."""

    def __init__(self, *, tables: str, number: Callable[[str], str]) -> None:
        t = tables
        self.number = number
        # Each execution's newest checkpoint (by sequence) and count, with its status.
        # {runs_where} narrows to one execution; the outer WHERE is appended by the caller.
        self.summaries = (
            "WITH runs AS ("
            " SELECT execution_id, max(sequence) AS last_sequence, count(*) AS checkpoint_count"
            f" FROM {t}checkpoints WHERE namespace = ?{{runs_where}} GROUP BY execution_id"
            "), described AS ("
            " SELECT r.execution_id, r.last_sequence, r.checkpoint_count, c.chain_name,"
            " c.node_id AS last_node_id, c.checkpoint_id AS last_checkpoint_id,"
            f" c.created_at AS last_activity_at, {STATUS_CASE} AS run_status"
            f" FROM runs AS r JOIN {t}checkpoints AS c ON c.sequence = r.last_sequence"
            f" LEFT JOIN {t}pending_interrupts AS p"
            " ON p.namespace = ? AND p.execution_id = r.execution_id"
            ") SELECT * FROM described WHERE last_sequence < ?"
        )
        self.order = " ORDER BY last_sequence DESC LIMIT ?"
        self.pending_of_execution = number(
            f"SELECT {DECIDED_PENDING_COLUMNS} FROM {t}pending_interrupts AS p "
            f"LEFT JOIN {t}interrupt_decisions AS d ON d.namespace = p.namespace "
            "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id "
            "WHERE p.namespace = ? AND p.execution_id = ?"
        )
        self.newest_decision = number(
            f"SELECT {DECISION_ROW_COLUMNS} FROM {t}interrupt_decisions "
            "WHERE namespace = ? AND execution_id = ? ORDER BY sequence DESC LIMIT 1"
        )
        self.keys = number(
            f"SELECT key FROM {t}idempotency_results WHERE namespace = ? AND execution_id = ? "
            "ORDER BY key LIMIT ?"
        )
        self.key_count = number(
            f"SELECT count(*) FROM {t}idempotency_results WHERE namespace = ? AND execution_id = ?"
        )


class ExecutionReader(abc.ABC):
    """Reads execution summaries from a store's tables, over the backend's statements: the
    listing is one read, an execution's detail one snapshot (its parts agree with each
    other)."""

    def __init__(
        self, sql: ExecutionSql, read_time: rows.TimeReader, write_time: TimeWriter
    ) -> None:
        self._sql = sql
        self._read_time = read_time
        self._write_time = write_time

    @abc.abstractmethod
    async def _in_read(self, body: Body[T]) -> T:
        """Run ``body``'s reads."""

    @abc.abstractmethod
    async def _in_snapshot(self, body: Body[T]) -> T:
        """Run ``body``'s reads so that they see one state."""

    def _summaries(
        self,
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
        sql = self._sql.summaries.format(runs_where=runs_where)
        if query.chain_name is not None:
            sql += " AND chain_name = ?"
            params.append(query.chain_name)
        if query.status is not None:
            sql += " AND run_status = ?"
            params.append(query.status.value)
        if query.active_since is not None:
            sql += " AND last_activity_at >= ?"
            params.append(self._write_time(query.active_since))
        return self._sql.number(sql + self._sql.order), [*params, limit]

    def _summary(self, row: Any) -> ExecutionSummary:
        return ExecutionSummary(
            execution_id=row["execution_id"],
            chain_name=row["chain_name"],
            status=ExecutionStatus(row["run_status"]),
            checkpoint_count=int(row["checkpoint_count"]),
            last_activity_at=self._read_time(row["last_activity_at"]),
            last_checkpoint_id=row["last_checkpoint_id"],
            last_node_id=row["last_node_id"],
            last_sequence=int(row["last_sequence"]),
        )

    def _decided(self, found: list[Any]) -> PendingRecord | None:
        if not found:
            return None
        return rows.pending_from_row(found[0], self._read_time, with_decision=True)

    async def list_executions(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        before_sequence: int | None,
        limit: int,
    ) -> Page[ExecutionSummary]:
        """Up to ``limit`` executions whose newest checkpoint's sequence is below
        ``before_sequence`` (all when None), newest first, matching every set filter; ``more``
        says whether more matched (one more is read to tell)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        sql, params = self._summaries(
            namespace, query, before_sequence=before_sequence, limit=limit + 1
        )
        found = await self._in_read(lambda conn: conn.fetch(sql, params))
        return Page((self._summary(row) for row in found[:limit]), more=len(found) > limit)

    async def get_execution(self, namespace: str, execution_id: str) -> ExecutionDetail | None:
        """The execution's summary, pending interrupt, newest decision and idempotency keys,
        read in one snapshot; None when it has no checkpoint."""
        sql, params = self._summaries(
            namespace, ExecutionQuery(), before_sequence=None, limit=1, execution_id=execution_id
        )
        key = (namespace, execution_id)

        async def body(conn: Statements) -> ExecutionDetail | None:
            found = await conn.fetch(sql, params)
            if not found:
                return None
            pending = await conn.fetch(self._sql.pending_of_execution, key)
            decided = await conn.fetch(self._sql.newest_decision, key)
            keys = await conn.fetch(self._sql.keys, (*key, MAX_IDEMPOTENCY_KEYS))
            count = await conn.fetch(self._sql.key_count, key)
            return ExecutionDetail(
                summary=self._summary(found[0]),
                pending=self._decided(pending),
                last_decided=self._decided(decided),
                idempotency_keys=[row["key"] for row in keys],
                idempotency_key_count=int(count[0][0]),
            )

        return await self._in_snapshot(body)
