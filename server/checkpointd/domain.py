"""The store's records, independent of protobuf and of any database.

Servicers turn validated requests into these records and hand them to a ``Store``; the
stores return them. JSON fields are kept as the JSON text the caller sent (already
validated), so a round trip preserves the value exactly (contract J1) and nothing is
re-serialized on the hot path.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

__all__ = [
    "RUN_END",
    "CheckpointRecord",
    "CheckpointStatus",
    "DecisionChange",
    "DecisionOutcome",
    "DecisionRecord",
    "DecisionStatus",
    "DeleteExecutionResult",
    "EventKind",
    "EventPage",
    "InterruptEventRecord",
    "LeaseFence",
    "Page",
    "PendingFilter",
    "PendingRecord",
    "PruneResult",
    "RecordInterruptResult",
    "SnapshotPage",
]

_Row = TypeVar("_Row")

#: step_type of the terminal row a run writes when it ends.
RUN_END = "run_end"


class CheckpointStatus(enum.StrEnum):
    """How a step ended; stored as this text in both backends."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class EventKind(enum.StrEnum):
    """What happened to a pending interrupt; stored in the interrupt_events outbox."""

    ADDED = "added"
    CLAIMED = "claimed"
    REMOVED = "removed"
    DECIDED = "decided"
    RESUMED = "resumed"
    RESUME_FAILED = "resume_failed"


class DecisionStatus(enum.StrEnum):
    """How far a decision has been carried out; stored as this text in both backends."""

    DECIDED = "decided"
    RESUMING = "resuming"
    RESUMED = "resumed"
    RESUME_FAILED = "resume_failed"

    @property
    def is_final(self) -> bool:
        """Whether a worker has reported on the decision (nothing more will change)."""
        return self in (DecisionStatus.RESUMED, DecisionStatus.RESUME_FAILED)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """The one decision on a pause (K1) and how far it was carried out (K2)."""

    approved: bool
    metadata_json: str
    decided_by: str
    reason: str | None
    decided_at: datetime
    status: DecisionStatus = DecisionStatus.DECIDED
    attempts: int = 0
    lease_expires_at: datetime | None = None
    error: str | None = None
    reported_at: datetime | None = None
    response_json: str = ""
    """The typed answer the pause asked for (K3), as ``decision_responses`` keeps it; empty
    for the verdict alone."""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint row. ``sequence`` is 0 until the store assigns it at insert."""

    execution_id: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    chain_name: str
    node_id: str
    node_index: int
    step_type: str | None
    status: CheckpointStatus
    state_snapshot_json: str
    node_input_json: str
    node_output_json: str
    iteration: int
    iteration_counters_json: str
    interrupt_reason: str | None
    interrupt_context_json: str
    agent_path: str | None
    created_at: datetime
    """Timezone-aware UTC, microsecond precision."""
    sequence: int = 0

    @property
    def is_run_end(self) -> bool:
        """Whether this row is a run's terminal marker rather than a step."""
        return self.step_type == RUN_END


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """A pending interrupt. ``sequence`` is that of the interrupted checkpoint written with it."""

    execution_id: str
    chain_name: str
    node_id: str
    reason: str
    context_json: str
    agent_path: str | None
    created_at: datetime
    checkpoint_id: str
    sequence: int = 0
    decision: DecisionRecord | None = None
    """The decision on this pause, when there is one (K1)."""
    interrupt_id: str = ""
    """Empty for the one pause of a fastaiagent run; a graph runtime's interrupt id (G8)."""
    checkpoint_ns: str = ""
    """The graph namespace a graph interrupt was recorded in; empty otherwise."""


@dataclass(frozen=True, slots=True)
class PendingFilter:
    """Optional filters of a pending-interrupt listing; None means "any"."""

    chain_name: str | None = None
    reason: str | None = None
    agent_path_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class RecordInterruptResult:
    """What RecordInterrupt stored: the checkpoint, the pending row now in place, and
    whether this call created it (contract I2)."""

    checkpoint: CheckpointRecord
    pending: PendingRecord
    pending_created: bool


@dataclass(frozen=True, slots=True)
class DeleteExecutionResult:
    """Counts of what DeleteExecution removed."""

    checkpoints_deleted: int
    pending_interrupt_deleted: bool
    idempotency_results_deleted: int


@dataclass(frozen=True, slots=True)
class PruneResult:
    """Counts of what PruneCheckpoints removed."""

    checkpoints_deleted: int
    idempotency_results_deleted: int


@dataclass(frozen=True, slots=True)
class InterruptEventRecord:
    """One row of the interrupt_events outbox: a change to a pending interrupt (I5)."""

    cursor: int
    """The event's position in the outbox; monotonic per store."""
    namespace: str
    kind: EventKind
    pending: PendingRecord
    """The pending row as it was when the event was written."""
    event_at: datetime
    """When the change was made, by the clock of the server (or database) that made it."""


@dataclass(frozen=True, slots=True)
class EventPage:
    """Events read from the outbox in one consistent read, with the outbox's bounds then."""

    events: list[InterruptEventRecord]
    """Ascending by cursor."""
    purged_through: int
    """Every event with a cursor at or below this may have been purged (0: none was)."""
    latest_cursor: int
    """The highest cursor the store had handed out to a committed event (0: none)."""
    more: bool = False
    """Whether events after these, up to the requested bound, were left out to keep within
    the row limit or the byte budget."""


class Page(list[_Row]):
    """Rows of a listing read within its row and byte budgets: a list of the rows, and
    ``more``, whether rows beyond them were left for a later page."""

    def __init__(self, rows: Iterable[_Row] = (), *, more: bool = False) -> None:
        super().__init__(rows)
        self.more = more

    def __repr__(self) -> str:
        return f"Page({list.__repr__(self)}, more={self.more})"


@dataclass(frozen=True, slots=True)
class SnapshotPage:
    """Pending rows as they were at a snapshot cursor, read within a row and byte budget."""

    rows: list[PendingRecord]
    """Newest (highest sequence) first."""
    more: bool
    """Whether older rows of the snapshot were left for a later page."""
    purged_through: int
    """The outbox's purged_through when the page was read: above the snapshot cursor, the
    events the page was reconstructed from may be gone, and the page cannot be trusted."""


class DecisionOutcome(enum.Enum):
    """What a store did with a decision, a lease or a report (K1, K2)."""

    APPLIED = "applied"
    """Written now."""
    REPEATED = "repeated"
    """A retry of what is already stored; nothing written."""
    NOT_FOUND = "not_found"
    """No pending interrupt (a decision) or no decision (a lease, a report)."""
    CONFLICT = "conflict"
    """Refused: another decision won, another worker holds the lease, or the decision was
    already reported; ``pending`` shows the stored state."""


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """The lease a write is made under (contract K4): the pause's decision, leased with
    ``lease_token`` at its ``attempt``-th lease. The write goes through only while that lease
    still holds the decision."""

    execution_id: str
    checkpoint_id: str
    interrupt_id: str
    lease_token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class DecisionChange:
    """The result of a decision, lease or report: what happened, and the decided pending
    interrupt as stored now (None when NOT_FOUND)."""

    outcome: DecisionOutcome
    pending: PendingRecord | None
