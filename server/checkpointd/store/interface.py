"""The :class:`Store` every backend implements: an abstract class made of the operations
both backends share (written once over the statement interface of
:mod:`~checkpointd.store.statements`) and abstract declarations of those each backend writes.

A store receives records that the servicers have already validated and completed
(checkpoint_id and created_at filled, namespace resolved), so a backend only persists and
queries. Every method is a coroutine. A backend maps its driver's connection failures to
:class:`~checkpointd.store.base.StoreUnavailable` (retriable) and never lets SQL text escape
in an exception message.

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
:class:`~checkpointd.store.base.RequestIdReused`, and nothing is written.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING

from checkpointd.domain import LeaseFence, PendingRecord
from checkpointd.store.base import EventNotifier, PoolState
from checkpointd.store.checkpoints import CheckpointReads, CheckpointRemovals, CheckpointWrites
from checkpointd.store.decisions import DecisionTransactions
from checkpointd.store.idempotency import IdempotencyResults
from checkpointd.store.outbox import OutboxReads

if TYPE_CHECKING:
    from checkpointd.store.postgres.access import PostgresAccess
    from checkpointd.store.sqlite.access import SQLiteAccess

__all__ = ["Store"]


class Store(
    DecisionTransactions,
    OutboxReads,
    CheckpointReads,
    CheckpointWrites,
    CheckpointRemovals,
    IdempotencyResults,
):
    """Persistence of checkpoints, pending interrupts, claims, idempotency results and events.

    Each operation is declared once, with its signature and its docstring, where it is
    written: the operations that are the same on both backends are those of the classes this
    one is made of (:class:`~checkpointd.store.checkpoints.CheckpointReads`,
    :class:`~checkpointd.store.checkpoints.CheckpointWrites` and
    :class:`~checkpointd.store.checkpoints.CheckpointRemovals`,
    :class:`~checkpointd.store.decisions.DecisionTransactions`,
    :class:`~checkpointd.store.outbox.OutboxReads`,
    :class:`~checkpointd.store.idempotency.IdempotencyResults`), which run the backend's
    statements through the hooks of :class:`~checkpointd.store.statements.StatementStore`;
    the operations whose algorithm is the backend's are the abstract methods below. A
    backend subclasses this class, gives the hooks and its statements, and implements the
    abstract methods (its docstrings say only how). The operations are this class's public
    methods, its bases' included; :mod:`checkpointd.metrics_store` times each of them.
    """

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply the schema migrations (idempotent, safe when replicas race)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release every connection. Safe to call twice."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise :class:`~checkpointd.store.base.StoreUnavailable` unless the database answers
        a trivial query."""

    @abc.abstractmethod
    def pool_state(self) -> PoolState | None:
        """The connection pool's state, or None for a backend without a pool."""

    @abc.abstractmethod
    def access(self) -> SQLiteAccess | PostgresAccess:
        """The store's transactions and connections, lent to the parts that share its database
        (the graph store, the execution reader): one pool or writer, one error translation."""

    @abc.abstractmethod
    async def count_pending_by_namespace(self) -> dict[str, int]:
        """Return the number of pending interrupts in each namespace that has any."""

    # --- checkpoints ---------------------------------------------------------------------

    @abc.abstractmethod
    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle checkpoints, each ``(checkpoint_id, reason)``: synced when ``reason`` is
        None, quarantined with ``reason`` otherwise; ``synced_at = now``. Only unsettled rows
        are settled (first wins, also against concurrent callers); a quarantine of a row already
        quarantined replaces its reason without settling it again; unknown ids are ignored. Ids
        must be distinct. Returns the ids this call settled, in the given order."""

    # --- interrupts ----------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Atomically take the execution's pending row; exactly one caller gets it (I3).

        With a non-empty ``claim_token``: first return the row an earlier claim with this
        token got (a retry); otherwise delete the pending row, remember it under the token with
        ``claimed_at = now``, write a ``claimed`` event, and return it; if there is no row, look
        the token up once more (a concurrent retry may have just won). None when nobody's.
        """

    @abc.abstractmethod
    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims older than the retention time; return how many went."""

    # --- decisions -----------------------------------------------------------------------

    @abc.abstractmethod
    def fenced(self, namespace: str, fence: LeaseFence) -> AbstractAsyncContextManager[bool]:
        """Hold ``fence`` for the length of a write made under it (K4): enter with whether its
        lease still holds the pause's decision (the decision is ``resuming`` under its token
        and attempt). While held, no lease on that pause is taken (``lease_decision`` waits),
        so a takeover never starts while a write of the old holder is in flight."""

    # --- idempotency ---------------------------------------------------------------------

    @abc.abstractmethod
    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """Forget the ``applied_requests`` rows (idempotency puts, tombstones, delete and
        prune replies) recorded before ``applied_before`` (the request-id retention: a retry
        arriving later is a new call); return how many went."""

    # --- interrupt events (the watch outbox) ---------------------------------------------

    @abc.abstractmethod
    def event_notifier(self) -> EventNotifier:
        """A new notifier of outbox changes; the caller closes it."""
