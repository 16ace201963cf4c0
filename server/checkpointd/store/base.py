"""The ``Store`` protocol every backend implements, and the errors a store may raise.

A store receives records that the servicers have already validated and completed
(checkpoint_id and created_at filled, namespace resolved), so a backend only persists and
queries. Every method is a coroutine. A backend maps its driver's connection failures to
:class:`StoreUnavailable` (retriable) and never lets SQL text escape in an exception message.

Tables, the same in both backends (names may carry a schema prefix on Postgres):

* ``checkpoints``: one row per checkpoint; ``sequence`` is assigned at insert and is
  monotonic per store; unique ``(namespace, checkpoint_id)``; ``request_id`` of the write
  that created it, unique per namespace when not empty: a retry with the same request id
  returns the stored row, whatever filled its checkpoint id (contracts C2, C9), and
  ``request_fingerprint`` of that write (C10). Also the
  replication outbox: ``synced_at`` (null while unsettled) and ``sync_error`` (the reason of
  a quarantined row), settled once, first-wins (contracts R1-R4).
* ``pending_interrupts``: primary key ``(namespace, execution_id)``; carries the sequence
  and id of the interrupted checkpoint written with it.
* ``interrupt_claims``: ``(namespace, execution_id, claim_token)`` with the claimed row and
  ``claimed_at``, so a retried claim returns the same row (contract I3).
* ``idempotency_results``: primary key ``(namespace, execution_id, key)``.
* ``applied_requests``: primary key ``(namespace, request_id)``; request ids remembered
  apart from the rows they wrote, with ``applied_at`` and a ``kind``: applied idempotency
  puts (contract D1); the puts and records whose checkpoints a delete or a prune removed
  (tombstones, so their late retry writes nothing: C9); and the replies of DeleteExecution
  and PruneCheckpoints (``reply_json``), so a retry is answered like the first call; each
  with the ``request_fingerprint`` of the request that left it (a tombstone: that of the
  deleted row's write). The purge forgets them after the request-id retention.
* ``interrupt_events``: the outbox; one row per added/claimed/removed/decided pending
  interrupt and per resume report, written in the same transaction as the change (contract
  I1), with a monotonic ``cursor``; decision events carry the decision (``decision_json``).
* ``interrupt_decisions``: primary key ``(namespace, execution_id, checkpoint_id)``: the one
  decision on a pause (K1), its request id (unique per namespace when not empty) and
  ``request_fingerprint``, a copy of
  the pending row as decided, and how it is being carried out: status, the worker's lease
  (``lease_token``, ``lease_expires_at``), attempts, error (K2). It outlives the pending row,
  which the resume claims; DeleteExecution removes it.

Request fingerprints (contract C10). Every method that remembers a request id takes the
request's ``fingerprint`` (:mod:`checkpointd.fingerprint`; empty: none) and stores it beside
the id. When the id is found, the fingerprints are compared: equal (or either empty: an id
stored before schema version 7 has none) is a retry and answered as before; different is
:class:`RequestIdReused`, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from checkpointd.domain import (
    CheckpointRecord,
    DecisionChange,
    DecisionRecord,
    DecisionStatus,
    DeleteExecutionResult,
    EventPage,
    LeaseFence,
    Page,
    PendingFilter,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
    SnapshotPage,
)

if TYPE_CHECKING:
    from checkpointd.store.postgres.access import PostgresAccess
    from checkpointd.store.sqlite.access import SQLiteAccess

__all__ = [
    "CheckpointExists",
    "EventNotifier",
    "PoolState",
    "RequestAppliedThenDeleted",
    "RequestIdReused",
    "Store",
    "StoreError",
    "StoreUnavailable",
]


class StoreError(Exception):
    """Base of the errors a store raises on purpose."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or is busy past its timeout; the call may be retried."""


class CheckpointExists(StoreError):
    """A checkpoint with this id is already stored, written by a different request."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id!r} already exists")
        self.checkpoint_id = checkpoint_id


class RequestAppliedThenDeleted(StoreError):
    """A retry of a put or a record that was applied, and whose rows a delete or a prune has
    removed since; nothing is written (contract C9)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"request {request_id!r} was applied and the rows it wrote have since been deleted"
        )
        self.request_id = request_id


class RequestIdReused(StoreError):
    """A request id already remembered for another request (another method, or the same
    method with other content: its fingerprint differs); nothing is written (contract C10)."""

    def __init__(self, request_id: str, method: str) -> None:
        super().__init__(f"request id {request_id!r} was already used for another {method} request")
        self.request_id = request_id
        self.method = method


@dataclass(frozen=True, slots=True)
class PoolState:
    """How many database connections a pooled backend holds."""

    size: int
    """Connections open now, busy or idle."""
    idle: int
    """Open connections waiting for work."""
    max_size: int
    """The most the pool will open."""


class EventNotifier(Protocol):
    """Tells a reader of the outbox when new events may be there (contract I5).

    Postgres: ``LISTEN`` on one dedicated connection, with the writers' ``NOTIFY``; SQLite:
    ``PRAGMA data_version`` on a dedicated connection (it changes when another connection
    commits), plus an immediate wake-up on this process's own writes.
    """

    async def wait(self, max_wait: float) -> None:
        """Return when events may have been committed (by any process sharing the store)
        since the previous call returned, or after ``max_wait`` seconds, whichever is first.

        The first call returns at once. Spurious returns are allowed; a missed change is
        not, except that a lost notification may delay a return until ``max_wait``.
        """
        ...

    async def close(self) -> None:
        """Release the notifier's connection. Safe to call twice."""
        ...


@runtime_checkable
class Store(Protocol):
    """Persistence of checkpoints, pending interrupts, claims, idempotency results and events."""

    async def open(self) -> None:
        """Connect and apply the schema migrations (idempotent, safe when replicas race)."""
        ...

    async def close(self) -> None:
        """Release every connection. Safe to call twice."""
        ...

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database answers a trivial query."""
        ...

    def pool_state(self) -> PoolState | None:
        """The connection pool's state, or None for a backend without a pool."""
        ...

    def access(self) -> SQLiteAccess | PostgresAccess:
        """The store's transactions and connections, lent to the parts that share its database
        (the graph store, the execution reader): one pool or writer, one error translation."""
        ...

    async def count_pending_by_namespace(self) -> dict[str, int]:
        """Return the number of pending interrupts in each namespace that has any."""
        ...

    # --- checkpoints ---------------------------------------------------------------------

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
        :class:`RequestAppliedThenDeleted` is raised. Otherwise, if ``(namespace,
        checkpoint_id)`` exists, :class:`CheckpointExists` is raised. Nothing is written in
        any of these cases. A put that writes is a single insert; the lookups run only when
        it does not.
        """
        ...

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        ...

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence.

        With ``skip_run_end`` rows whose step_type is ``run_end`` are passed over.
        """
        ...

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
        """Return up to ``limit`` rows of the execution ordered by sequence.

        Ascending: rows with sequence > ``after_sequence``; descending: rows with sequence <
        ``after_sequence``. ``None`` starts at the beginning (or the end, descending).

        Only the leading rows whose stored sizes fit ``max_bytes`` are read (always at least
        one; see :mod:`checkpointd.store.budget`), so a page of large rows never loads more
        than its budget; ``more`` says whether rows were left for the next page.
        """
        ...

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
        returns the recorded reply.
        """
        ...

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
        rows per transaction, looping until nothing is left; each batch records the request
        ids of the checkpoints it deleted as tombstones. With a non-empty ``request_id`` the
        reply is recorded once the prune is complete, and a retry returns it without pruning.
        """
        ...

    # --- interrupts ----------------------------------------------------------------------

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
        pending row plus an ``added`` event, all in one transaction.

        The request-id and checkpoint-exists rules are those of :meth:`put_checkpoint`; a
        retry returns the stored checkpoint and the pending row now in place
        (``pending_created`` true when that row was written by this checkpoint).
        """
        ...

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Atomically take the execution's pending row; exactly one caller gets it.

        With a non-empty ``claim_token``: first return the row an earlier claim with this
        token got (a retry); otherwise delete the pending row, remember it under the token with
        ``claimed_at = now``, write a ``claimed`` event, and return it; if there is no row, look
        the token up once more (a concurrent retry may have just won). None when nobody's.
        """
        ...

    # --- decisions -----------------------------------------------------------------------

    async def submit_decision(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        decision: DecisionRecord,
        *,
        fingerprint: str = "",
        interrupt_id: str = "",
    ) -> DecisionChange:
        """Store ``decision`` on the execution's pending interrupt with a ``decided`` event,
        in one transaction, unless that pause already has one (K1). ``interrupt_id`` names
        one of a graph thread's pauses (G8); empty is the fastaiagent run's one pause.

        REPEATED with the stored decision when a decision was stored under this non-empty
        ``request_id`` (whatever happened since); CONFLICT with the winner when the pending
        pause is decided, or when nothing is pending and the execution's newest decided pause
        was resumed since; NOT_FOUND when nothing is pending and nothing was decided; APPLIED
        otherwise. Decided rows come back
        with ``decision`` set.
        """
        ...

    async def lease_decision(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        *,
        interrupt_id: str = "",
    ) -> DecisionChange:
        """Take or renew the lease on the decision of a pause (K2).

        APPLIED when the decision is ``decided``, or ``resuming`` under this token (a renewal,
        attempts unchanged) or under a lease that ran out before ``now`` (a takeover,
        attempts + 1, as for a first lease); the lease then runs until ``lease_until``.
        CONFLICT when another token's lease runs, or a worker already reported; NOT_FOUND
        when the pause has no decision.
        """
        ...

    def fenced(self, namespace: str, fence: LeaseFence) -> AbstractAsyncContextManager[bool]:
        """Hold ``fence`` for the length of a write made under it (K4): enter with whether its
        lease still holds the pause's decision (the decision is ``resuming`` under its token
        and attempt). While held, no lease on that pause is taken (``lease_decision`` waits),
        so a takeover never starts while a write of the old holder is in flight."""
        ...

    async def report_resume(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        status: DecisionStatus,
        error: str | None,
        now: datetime,
        *,
        interrupt_id: str = "",
    ) -> DecisionChange:
        """Record the outcome (``resumed`` or ``resume_failed``) of the lease holder, with
        its event, in one transaction (K2).

        Only the token that holds the lease, expired or not, may report. REPEATED for the same
        report again; CONFLICT for another token, a decision never leased, or a different
        outcome after the first; NOT_FOUND when the pause has no decision.
        """
        ...

    async def list_decisions(
        self, namespace: str, *, after_sequence: int, limit: int, open_only: bool
    ) -> list[PendingRecord]:
        """Return up to ``limit`` decided pauses with sequence > ``after_sequence``, oldest
        first, each with its decision; with ``open_only`` only those not reported yet."""
        ...

    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims older than the retention time; return how many went."""
        ...

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """Forget the ``applied_requests`` rows (idempotency puts, tombstones, delete and
        prune replies) recorded before ``applied_before`` (the request-id retention: a retry
        arriving later is a new call); return how many went."""
        ...

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        """Return up to ``limit`` pending rows with sequence < ``before_sequence`` (all when
        None), newest (highest sequence) first, matching every set filter, within
        ``max_bytes`` as :meth:`list_checkpoints` reads them."""
        ...

    # --- idempotency ---------------------------------------------------------------------

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Insert or replace the cached result, with created_at = ``now``.

        With a non-empty ``request_id`` the id is recorded in ``applied_requests`` (with
        ``applied_at = now``) in the same transaction; when it was already recorded nothing
        is written: a retry is answered like the first call, so a late retry never undoes a
        newer put. An empty ``request_id`` is a plain upsert.
        """
        ...

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        ...

    # --- interrupt events (the watch outbox) ---------------------------------------------

    async def snapshot_pending(
        self,
        namespace: str,
        filters: PendingFilter,
        *,
        as_of_cursor: int,
        before_sequence: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> SnapshotPage:
        """Return a page of the pending rows matching the filters as they were when the
        outbox's latest cursor was ``as_of_cursor``: those with sequence < ``before_sequence``
        (all when None), newest first, at most ``limit`` of them and within ``max_bytes``.

        Paged this way, a snapshot read in many pages at different times is still the pending
        set at one cursor, so the events with a higher cursor are exactly the changes made
        after it. Each page is one consistent read: rows pending now whose ``added`` event has
        a cursor above ``as_of_cursor`` are left out (they were added later), and rows whose
        ``claimed``/``removed`` event is above it, and whose ``added`` event is not, are put
        back from that event (which carries the whole row). Every change of the pending set
        writes its event in the same transaction (I1), so nothing else can differ. A page is
        only right while those events are kept: when the result's ``purged_through`` is above
        ``as_of_cursor`` the caller must start a new snapshot.
        """
        ...

    async def read_events(
        self,
        *,
        after_cursor: int,
        up_to_cursor: int | None,
        limit: int,
        namespace: str | None,
        max_bytes: int | None = None,
    ) -> EventPage:
        """Return up to ``limit`` events with ``after_cursor < cursor <= up_to_cursor`` (no
        upper bound when None), ascending, of one namespace (every namespace when None),
        together with the outbox's bounds, all read in one consistent snapshot. ``limit`` 0
        reads only the bounds. Only the leading events whose sizes fit ``max_bytes`` are read
        (at least one), as :meth:`list_checkpoints` reads rows; ``more`` says whether events
        up to ``up_to_cursor`` were left out.

        Events commit in cursor order, so once a reader has seen cursor N no event with a
        smaller cursor can appear later.
        """
        ...

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events, in cursor order, up to the first one written at or after
        ``written_before``; record the highest deleted cursor as ``purged_through``. Deletes at
        most ``batch_size`` rows per transaction; returns how many went."""
        ...

    def event_notifier(self) -> EventNotifier:
        """A new notifier of outbox changes; the caller closes it."""
        ...

    # --- replication outbox --------------------------------------------------------------

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled checkpoints of the namespace with sequence >
        ``after_sequence`` (from the start when None), ascending by sequence. Changes
        nothing."""
        ...

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle checkpoints, each ``(checkpoint_id, reason)``: synced when ``reason`` is
        None, quarantined with ``reason`` otherwise; ``synced_at = now``. Only unsettled rows
        are settled (first wins, also against concurrent callers); a quarantine of a row already
        quarantined replaces its reason without settling it again; unknown ids are ignored. Ids
        must be distinct. Returns the ids this call settled, in the given order."""
        ...
