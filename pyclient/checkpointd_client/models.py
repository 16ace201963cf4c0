"""The records the client sends and returns: plain, immutable dataclasses.

They mirror the ``checkpointd.v1`` messages with Python types: JSON fields are Python
values (``dict`` for objects), times are aware UTC :class:`~datetime.datetime`\\ s, and a
checkpoint's status is one of ``"completed"``, ``"interrupted"``, ``"failed"``. Field names
and defaults follow fastaiagent's ``Checkpoint`` and ``PendingInterrupt`` models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeAlias

__all__ = [
    "ACTION_DECISION_TYPES",
    "CHECKPOINT_STATUSES",
    "DECISION_STATUSES",
    "EXECUTION_STATUSES",
    "FRAMEWORKS",
    "INTERRUPT_EVENT_TYPES",
    "ActionDecision",
    "ActionDecisionType",
    "Checkpoint",
    "CheckpointPage",
    "Decision",
    "DecisionResponse",
    "DecisionStatus",
    "DeleteExecutionResult",
    "Execution",
    "ExecutionDetail",
    "ExecutionPage",
    "ExecutionStatus",
    "Framework",
    "GraphRetentionResult",
    "IdempotencyResult",
    "InterruptEvent",
    "InterruptEventType",
    "NamespacePage",
    "PendingInterrupt",
    "PendingInterruptPage",
    "PruneResult",
    "RecordInterruptResult",
    "SnapshotComplete",
    "SnapshotItem",
    "WatchItem",
    "WatchProgress",
]

#: The values :attr:`Checkpoint.status` may take.
CHECKPOINT_STATUSES: tuple[str, ...] = ("completed", "interrupted", "failed")

#: How much of the stored row a write returns: ``"full"``, or ``"basic"``: everything but the
#: JSON payloads (state_snapshot, node_input, node_output, iteration_counters and
#: interrupt_context come back empty), for a writer that already has them.
CheckpointView: TypeAlias = Literal["full", "basic"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """The state of one run at one step boundary."""

    execution_id: str
    """The run this checkpoint belongs to. Required; 1 to 256 characters."""
    checkpoint_id: str = ""
    """Unique within the namespace. When empty the client generates a UUID before sending."""
    parent_checkpoint_id: str | None = None
    """The checkpoint this run was forked from, if any."""
    chain_name: str = ""
    """The name of the chain or agent that wrote the row."""
    node_id: str = ""
    """The re-entry address of the step (``"review"``, ``"turn:3/tool:charge"``, ``"run_end"``)."""
    node_index: int = 0
    """The position of the step in topological or turn order."""
    step_type: str | None = None
    """The kind of boundary (``"llm_call"``, ``"tool_call"``, ``"node"``, ``"run_end"``, ...)."""
    status: str = "completed"
    """How the step ended: ``"completed"``, ``"interrupted"`` or ``"failed"``."""
    state_snapshot: dict[str, Any] = field(default_factory=dict)
    """The full run state at this point (a JSON object)."""
    node_input: dict[str, Any] = field(default_factory=dict)
    """The step's input (a JSON object)."""
    node_output: dict[str, Any] = field(default_factory=dict)
    """The step's output (a JSON object)."""
    iteration: int = 0
    """The loop iteration of the step."""
    iteration_counters: dict[str, int] = field(default_factory=dict)
    """Cycle counts by name."""
    interrupt_reason: str | None = None
    """Why the run paused, for an interrupted row."""
    interrupt_context: dict[str, Any] = field(default_factory=dict)
    """The frozen context a human approves (a JSON object)."""
    agent_path: str | None = None
    """Where in a multi-agent topology the row was written (``"swarm:s/agent:a"``)."""
    created_at: datetime | None = None
    """When the row was written (UTC, microseconds). ``None`` lets the server fill it."""
    sequence: int = 0
    """Output only: the store's insertion sequence that orders an execution's history."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingInterrupt:
    """A run that paused on ``interrupt()`` and waits for a human to resume it."""

    execution_id: str
    """The paused run. On a write it may be empty: the checkpoint's is used."""
    chain_name: str = ""
    """The name of the chain or agent that paused."""
    node_id: str = ""
    """The node the run paused in."""
    reason: str = ""
    """Why the run paused (``"manager_approval"``)."""
    context: dict[str, Any] = field(default_factory=dict)
    """The frozen context a human approves (a JSON object)."""
    agent_path: str | None = None
    """Where in a multi-agent topology the run paused."""
    created_at: datetime | None = None
    """When the run paused (UTC). ``None`` on a write means the checkpoint's ``created_at``."""
    checkpoint_id: str = ""
    """Output only: the id of the interrupted checkpoint written with this row."""
    decision: Decision | None = None
    """Output only: the one decision taken on this pause (K1), when there is one."""
    interrupt_id: str = ""
    """Output only: names one pause of a graph thread (a LangGraph interrupt id; G8). Empty for
    the one pause of a fastaiagent run. Pass it to ``submit_decision`` to decide this pause."""
    checkpoint_ns: str = ""
    """Output only: the graph namespace a graph pause was recorded in (empty: the root)."""


#: How far a decision has been carried out: ``"decided"`` (waiting for a worker, or its
#: worker's lease ran out), ``"resuming"`` (a worker holds a lease), ``"resumed"`` or
#: ``"resume_failed"`` (a worker reported; final).
DecisionStatus: TypeAlias = Literal["decided", "resuming", "resumed", "resume_failed"]
#: The values :attr:`Decision.status` may take.
DECISION_STATUSES: tuple[DecisionStatus, ...] = ("decided", "resuming", "resumed", "resume_failed")


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The answer given to a pause (approve or reject), and how it was carried out."""

    approved: bool
    """Whether the run may go on (fastaiagent's ``Resume.approved``)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Handed to the run as fastaiagent's ``Resume.metadata``."""
    decided_by: str = ""
    """Who decided."""
    reason: str | None = None
    """Why, in the decider's words."""
    decided_at: datetime | None = None
    """When the decision was stored (UTC)."""
    status: DecisionStatus = "decided"
    """How far the decision has been carried out."""
    attempts: int = 0
    """How many leases workers have taken on it (1 after a clean resume)."""
    lease_expires_at: datetime | None = None
    """When the current worker's lease runs out (status ``"resuming"`` only)."""
    error: str = ""
    """What the worker reported (status ``"resume_failed"`` only)."""
    reported_at: datetime | None = None
    """When a worker reported (status ``"resumed"`` or ``"resume_failed"``)."""
    response: DecisionResponse | None = None
    """The typed answer the pause asked for (K3); ``None`` for the verdict alone."""


ActionDecisionType: TypeAlias = Literal["approve", "edit", "reject", "respond"]
#: What a person may decide on one action of LangChain's ``HumanInTheLoopMiddleware``.
ACTION_DECISION_TYPES: tuple[ActionDecisionType, ...] = ("approve", "edit", "reject", "respond")


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionDecision:
    """The answer to one action of a LangChain ``HumanInTheLoopMiddleware`` pause (K3)."""

    type: ActionDecisionType
    """``"approve"``, ``"edit"`` (run it with :attr:`args`), ``"reject"`` (do not run it;
    :attr:`message` tells the model why) or ``"respond"`` (do not run it; :attr:`message` is
    the tool's answer)."""
    args: dict[str, Any] | None = None
    """The action's arguments as edited (``"edit"`` only, where they are required)."""
    message: str | None = None
    """Why (``"reject"``, optional) or the tool's answer (``"respond"``, required)."""

    @classmethod
    def approve(cls) -> ActionDecision:
        """Run the action as the model asked."""
        return cls(type="approve")

    @classmethod
    def edit(cls, args: dict[str, Any]) -> ActionDecision:
        """Run the action with ``args`` instead of the model's arguments."""
        return cls(type="edit", args=args)

    @classmethod
    def reject(cls, message: str | None = None) -> ActionDecision:
        """Do not run the action; ``message`` tells the model why."""
        return cls(type="reject", message=message)

    @classmethod
    def respond(cls, message: str) -> ActionDecision:
        """Do not run the action; ``message`` is returned to the model as its result."""
        return cls(type="respond", message=message)


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionResponse:
    """The typed answer a graph pause asks for, beside the verdict (K3): one
    :class:`ActionDecision` per action of a middleware pause, in order, or the value
    ``interrupt()`` returns for any other pause (:meth:`resume`)."""

    actions: tuple[ActionDecision, ...] = ()
    """One answer per action of a ``HumanInTheLoopMiddleware`` pause, in order."""
    resume_json: str = ""
    """The value ``interrupt()`` returns, as JSON text (any other graph pause)."""

    @classmethod
    def resume(cls, value: Any) -> DecisionResponse:
        """The value ``interrupt()`` returns in the node (any JSON value)."""
        return cls(resume_json=json.dumps(value, separators=(",", ":"), allow_nan=False))

    @property
    def has_resume(self) -> bool:
        """Whether this response carries a resume value (rather than actions)."""
        return bool(self.resume_json)

    @property
    def resume_value(self) -> Any:
        """The resume value (``None`` when the response carries actions)."""
        return json.loads(self.resume_json) if self.resume_json else None

    @property
    def rejects(self) -> bool:
        """Whether an action is rejected: the decision's verdict is then "not approved"."""
        return any(action.type == "reject" for action in self.actions)


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointPage:
    """One page of an execution's history."""

    checkpoints: list[Checkpoint]
    """The rows of this page, in the requested order."""
    next_page_token: str
    """The token for the next page; ``""`` when this page is the last."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingInterruptPage:
    """One page of pending interrupts, newest first."""

    pending_interrupts: list[PendingInterrupt]
    """The rows of this page, newest first."""
    next_page_token: str
    """The token for the next page; ``""`` when this page is the last."""


ExecutionStatus: TypeAlias = Literal["running", "paused", "ended", "failed"]
"""Where a run stands: ``"paused"`` with a pending interrupt; else ``"failed"`` when its
newest checkpoint failed; ``"ended"`` when that is a ``run_end`` row; ``"running"`` otherwise."""

#: The values :attr:`Execution.status` may take.
EXECUTION_STATUSES: tuple[ExecutionStatus, ...] = ("running", "paused", "ended", "failed")
Framework: TypeAlias = Literal["fastaiagent", "langgraph"]
#: The frameworks whose runs ListExecutions lists (contract C12).
FRAMEWORKS: tuple[Framework, ...] = ("fastaiagent", "langgraph")


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    """The summary of one run (contract C11): a fastaiagent run or a LangGraph thread (C12)."""

    execution_id: str
    """The run (a thread's thread id)."""
    chain_name: str
    """The chain name of its newest checkpoint (a thread's graph name, where known)."""
    status: ExecutionStatus
    """Where it stands."""
    checkpoint_count: int
    """How many checkpoints it has."""
    last_activity_at: datetime | None
    """The created_at of its newest checkpoint."""
    last_checkpoint_id: str
    """The id of its newest checkpoint."""
    last_node_id: str
    """The node of its newest checkpoint."""
    last_sequence: int
    """The sequence of its newest checkpoint (0 for a thread)."""
    framework: Framework = "fastaiagent"
    """Which framework wrote it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionPage:
    """One page of a namespace's executions, newest activity first."""

    executions: list[Execution]
    """The rows of this page."""
    next_page_token: str
    """The token for the next page; ``""`` when this page is the last."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NamespacePage:
    """One page of the namespaces that hold a run, in name order (contract N2)."""

    namespaces: list[str]
    """The names of this page's namespaces."""
    next_page_token: str
    """The token for the next page; ``""`` when this page is the last."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionDetail:
    """One run with its pause, its newest decision and its idempotency keys (contract C11)."""

    execution: Execution
    """Its summary."""
    pending: PendingInterrupt | None
    """Its pending interrupt (with the decision on it), when paused."""
    last_decided: PendingInterrupt | None
    """Its newest decided pause with the decision, even once resumed; None if never decided."""
    idempotency_keys: list[str]
    """The keys of its idempotency results, in key order (at most 1000)."""
    idempotency_key_count: int
    """How many idempotency results it has."""
    pauses: list[PendingInterrupt] = field(default_factory=list)
    """Every pending pause with its decision, in record order: a LangGraph thread may wait on
    several at once; ``pending`` is the first."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordInterruptResult:
    """What :meth:`~checkpointd_client.CheckpointdClient.record_interrupt` stored."""

    checkpoint: Checkpoint
    """The stored interrupted checkpoint, with its id, created_at and sequence."""
    pending: PendingInterrupt
    """The execution's pending row: the new one, or the one that was already there."""
    pending_created: bool
    """Whether this call created the pending row (``False``: one already existed, I2)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteExecutionResult:
    """What :meth:`~checkpointd_client.CheckpointdClient.delete_execution` removed."""

    checkpoints_deleted: int
    """How many checkpoints were deleted."""
    pending_interrupt_deleted: bool
    """Whether a pending interrupt was deleted."""
    idempotency_results_deleted: int
    """How many idempotency results were deleted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PruneResult:
    """What :meth:`~checkpointd_client.CheckpointdClient.prune` removed."""

    checkpoints_deleted: int
    """How many checkpoints were deleted."""
    idempotency_results_deleted: int
    """How many idempotency results were deleted."""

    @property
    def total(self) -> int:
        """Return all rows deleted, as fastaiagent's ``Checkpointer.prune`` counts them."""
        return self.checkpoints_deleted + self.idempotency_results_deleted


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphRetentionResult:
    """What :meth:`~checkpointd_client.CheckpointdClient.apply_graph_retention` deleted (with
    ``dry_run``: would delete)."""

    threads_deleted: int
    """How many threads the idle rule deleted whole."""
    checkpoints_deleted: int
    """How many graph checkpoints were deleted, by either rule."""
    writes_deleted: int
    """How many pending writes were deleted."""
    channel_values_deleted: int
    """How many channel values were deleted (those no kept checkpoint names)."""
    paused_threads_kept: int
    """How many threads a rule would have cut but that are paused on an interrupt."""
    delta_threads_kept: int
    """How many threads ``keep_newest`` would have cut but whose graph uses a DeltaChannel."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyResult:
    """A lookup in the idempotency cache."""

    found: bool
    """Whether a result is cached. A cached JSON ``null`` is found with ``value`` ``None``."""
    value: Any = None
    """The cached result, when found."""


# --- the interrupt watch (contract I5, P4) ---------------------------------------------------

#: What happened to a pending interrupt.
InterruptEventType: TypeAlias = Literal[
    "added", "claimed", "removed", "decided", "resumed", "resume_failed"
]
#: The values :attr:`InterruptEvent.type` may take.
INTERRUPT_EVENT_TYPES: tuple[InterruptEventType, ...] = (
    "added",
    "claimed",
    "removed",
    "decided",
    "resumed",
    "resume_failed",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotItem:
    """One pending interrupt that existed when the watch took its snapshot."""

    pending: PendingInterrupt
    """The pending interrupt."""
    resnapshot: bool = False
    """``True`` when this snapshot replaces what the watch delivered before (its cursor had
    expired, or the connection broke mid-snapshot): forget the pending set you built and
    rebuild it from this snapshot."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotComplete:
    """The snapshot is complete: every pending interrupt matching the filters was delivered."""

    cursor: int
    """The cursor the snapshot was taken at; live events follow with cursors above it."""
    resnapshot: bool = False
    """``True`` when the snapshot just completed replaced an earlier one (see
    :attr:`SnapshotItem.resnapshot`): pending interrupts not in it are gone."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InterruptEvent:
    """One change to a pending interrupt, in cursor order."""

    cursor: int
    """The position of the event in the store's outbox; monotonic per store."""
    type: InterruptEventType
    """``"added"`` (a run paused), ``"claimed"`` (a resumer won it), ``"removed"`` (its
    execution was deleted), ``"decided"`` (a decision was stored: ``pending.decision``),
    ``"resumed"`` or ``"resume_failed"`` (a worker reported on the decision)."""
    pending: PendingInterrupt
    """The pending interrupt the event is about, as it was when the event was written."""
    event_time: datetime
    """When the change was committed, by the clock of the server that made it (UTC)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WatchProgress:
    """The server has read up to ``cursor`` without an event matching the watch's filters."""

    cursor: int
    """Every event up to this cursor has been considered for this watch."""


#: One item of an interrupt watch; match on the class::
#:
#:     match item:
#:         case SnapshotItem(pending=p) | InterruptEvent(type="added", pending=p): ...
#:         case InterruptEvent(type="decided", pending=p): ...  # p.decision is set
#:         case InterruptEvent(type="claimed" | "removed", pending=p): ...
#:         case SnapshotComplete() | WatchProgress(): ...
WatchItem: TypeAlias = SnapshotItem | SnapshotComplete | InterruptEvent | WatchProgress
