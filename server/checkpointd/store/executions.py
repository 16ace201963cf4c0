"""The executions reader: summaries of the runs of a namespace, for operators (contract C11).

It only reads, over the tables of the store it is built on (``checkpoints``,
``pending_interrupts``, ``interrupt_decisions``, ``idempotency_results``), through that
store's connections (``SQLiteStore.graph_access``, ``PostgresStore.graph_access``). Each
backend keeps its SQL in its own ``executions`` module; the status rule is written once, in
:data:`STATUS_CASE`, and both use it.

An execution's status, by its rows:

* ``paused``: it has a pending interrupt (decided or not);
* ``failed``: else, its newest checkpoint (by sequence) has status ``failed``;
* ``ended``: else, its newest checkpoint is a ``run_end`` row;
* ``running``: otherwise (between steps, being resumed, or left without a ``run_end`` row).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Protocol

from checkpointd.domain import Page, PendingRecord

__all__ = [
    "MAX_IDEMPOTENCY_KEYS",
    "STATUS_CASE",
    "ExecutionDetail",
    "ExecutionQuery",
    "ExecutionReader",
    "ExecutionStatus",
    "ExecutionSummary",
]

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


class ExecutionReader(Protocol):
    """Reads execution summaries from a store's tables."""

    async def list_executions(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        before_sequence: int | None,
        limit: int,
    ) -> Page[ExecutionSummary]:
        """Return up to ``limit`` executions whose newest checkpoint's sequence is below
        ``before_sequence`` (all when None), newest first, matching every set filter;
        ``more`` says whether more matched."""
        ...

    async def get_execution(self, namespace: str, execution_id: str) -> ExecutionDetail | None:
        """Return the execution's detail; None when it has no checkpoint."""
        ...
