"""Decisions (contracts K1-K4), the same on both backends: the rules of a decision's lease and
its report, and the transactions that decide, lease and report (:class:`DecisionTransactions`).
Each backend reads the pause's rows under its own lock (SQLite's ``BEGIN IMMEDIATE`` takes the
write lock first; Postgres reads them ``FOR UPDATE``), which its :class:`DecisionSql` says."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checkpointd import decision_responses
from checkpointd.domain import (
    DecisionChange,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    EventKind,
    LeaseFence,
    PendingRecord,
)
from checkpointd.store import retries
from checkpointd.store.base import StoreUnavailable
from checkpointd.store.columns import decision_params
from checkpointd.store.statements import Body, Statements, StatementStore

__all__ = [
    "DecisionSql",
    "DecisionTransactions",
    "fence_holds",
    "lease_refusal",
    "renews_lease",
    "replaces",
    "report_refusal",
    "resume_event_kind",
]

#: What a lease or a report does with a pause's locked decision and its lease holder.
DecisionStep = Callable[[Statements, PendingRecord, str | None], Awaitable[DecisionChange]]


def _decision(current: PendingRecord) -> DecisionRecord:
    decision = current.decision
    assert decision is not None  # read from the decisions table
    return decision


def renews_lease(current: PendingRecord, held_by: str | None, lease_token: str) -> bool:
    """Whether taking the lease with ``lease_token`` renews the holder's own lease."""
    return _decision(current).status is DecisionStatus.RESUMING and held_by == lease_token


def lease_refusal(current: PendingRecord, *, renew: bool, now: datetime) -> DecisionChange | None:
    """Why the lease cannot be taken now (a CONFLICT: the decision was carried out, or
    another holder's lease runs past ``now``), or None when it can."""
    decision = _decision(current)
    if decision.status.is_final:
        return DecisionChange(DecisionOutcome.CONFLICT, current)
    expires = decision.lease_expires_at
    if (
        decision.status is DecisionStatus.RESUMING
        and not renew
        and expires is not None
        and expires > now
    ):
        return DecisionChange(DecisionOutcome.CONFLICT, current)
    return None


def fence_holds(current: PendingRecord | None, held_by: str | None, fence: LeaseFence) -> bool:
    """Whether a write under ``fence`` may go through (K4): the pause's decision is still being
    carried out under the fence's lease (its token, and the attempt the lease counted)."""
    if current is None or current.decision is None:
        return False
    decision = current.decision
    return (
        decision.status is DecisionStatus.RESUMING
        and held_by == fence.lease_token
        and decision.attempts == fence.attempt
    )


def report_refusal(
    current: PendingRecord, held_by: str | None, lease_token: str, status: DecisionStatus
) -> DecisionChange | None:
    """Why the report cannot be recorded (not the lease holder, nothing leased, or already
    reported: the same report REPEATED, another one a CONFLICT), or None when it can."""
    decision = _decision(current)
    if held_by != lease_token or decision.status is DecisionStatus.DECIDED:
        return DecisionChange(DecisionOutcome.CONFLICT, current)
    if decision.status.is_final:
        outcome = (
            DecisionOutcome.REPEATED if decision.status is status else DecisionOutcome.CONFLICT
        )
        return DecisionChange(outcome, current)
    return None


def replaces(winner: PendingRecord, request_id: str, held_request_id: str) -> bool:
    """Whether a new decision takes the place of the pause's stored one (K3): a resume that
    failed leaves the pause waiting, so a person may decide it again; a retry of the failed
    decision's own request is answered with it, not stored again."""
    same_request = bool(request_id) and held_request_id == request_id
    return _decision(winner).status is DecisionStatus.RESUME_FAILED and not same_request


def resume_event_kind(status: DecisionStatus) -> EventKind:
    """The outbox event of a report."""
    return EventKind.RESUMED if status is DecisionStatus.RESUMED else EventKind.RESUME_FAILED


#: A pause: namespace, execution id, checkpoint id, interrupt id.
Pause = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class DecisionSql:
    """A backend's decision statements. The ``_locked`` reads lock what they read until the
    transaction ends (Postgres ``FOR UPDATE``; on SQLite the plain read, under ``BEGIN
    IMMEDIATE``); the writes return the changed decision row."""

    #: Parameters: namespace, request id.
    decision_by_request_id: str
    #: Parameters: namespace, execution id, interrupt id.
    pending_of_pause_locked: str
    newest_decision_of_execution: str
    #: Parameters: the pause.
    decision_of_pause: str
    decision_of_pause_locked: str
    delete_decision_of_pause: str
    #: Parameters: :func:`~checkpointd.store.columns.decision_params`.
    insert_decision: str
    #: Parameters: lease token, lease until, attempts added (0 or 1), then the pause.
    take_lease: str
    #: Parameters: status, error, reported at, then the pause.
    report_decision: str
    #: Parameters: namespace, after sequence, limit.
    list_decisions: str
    list_open_decisions: str


class DecisionTransactions(StatementStore):
    """The decision methods of :class:`~checkpointd.store.interface.Store`, each one
    transaction of the backend's :class:`DecisionSql`."""

    _decision_sql: DecisionSql

    def _holding_pause(self, pause: Pause) -> AbstractAsyncContextManager[object]:
        """What a lease holds besides its transaction (SQLite: the pause's in-process lock,
        which :meth:`fenced` shares; Postgres: nothing, the row lock does it)."""
        return contextlib.nullcontext()

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
        otherwise. Decided rows come back with ``decision`` set. Concurrent deciders queue on
        the pending row's lock; each later one then finds the winner.
        """
        sql = self._decision_sql

        async def body(conn: Statements) -> DecisionChange:
            if request_id:
                earlier = await conn.fetch(sql.decision_by_request_id, (namespace, request_id))
                if earlier:
                    first = earlier[0]["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                    return DecisionChange(DecisionOutcome.REPEATED, self._decided(earlier[0]))
            by_pause = (namespace, execution_id, interrupt_id)
            found = await conn.fetch(sql.pending_of_pause_locked, by_pause)
            if not found:
                # Resumed since (its pending row claimed): the run's last decision stands.
                last = await conn.fetch(sql.newest_decision_of_execution, by_pause)
                if last:
                    return DecisionChange(DecisionOutcome.CONFLICT, self._decided(last[0]))
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            pending = self._pending(found[0])
            decision_responses.check_fits(pending, decision.response_json)
            pause = (namespace, execution_id, pending.checkpoint_id, interrupt_id)
            winner = await conn.fetch(sql.decision_of_pause, pause)
            held = winner[0]["request_id"] if winner else ""
            if winner and replaces(self._decided(winner[0]), request_id, held):
                await conn.run(sql.delete_decision_of_pause, pause)
            elif winner:
                same = bool(request_id) and held == request_id
                outcome = DecisionOutcome.REPEATED if same else DecisionOutcome.CONFLICT
                return DecisionChange(outcome, self._decided(winner[0]))
            params = decision_params(
                namespace, request_id, decision, pending, self._write_time, fingerprint
            )
            inserted = await conn.fetch(sql.insert_decision, params)
            if not inserted:
                # Only a concurrent call with this request id, on another pause, can get here.
                raise StoreUnavailable("the decision raced with another; retry")
            decided = self._decided(inserted[0])
            kind = EventKind.DECIDED
            await self._append_event_at(conn, namespace, kind, decided, decision.decided_at)
            return DecisionChange(DecisionOutcome.APPLIED, decided)

        return await self._in_transaction(body)

    def _on_locked_decision(
        self, pause: tuple[str, str, str, str], change: DecisionStep
    ) -> Body[DecisionChange]:
        """A transaction body that locks the pause's decision for the rest of the transaction
        and hands it, with its lease holder, to ``change``; NOT_FOUND when the pause has no
        decision. A lease and a report both decide on these two."""

        async def body(conn: Statements) -> DecisionChange:
            found = await conn.fetch(self._decision_sql.decision_of_pause_locked, pause)
            if not found:
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            return await change(conn, self._decided(found[0]), found[0]["lease_token"])

        return body

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
        pause = (namespace, execution_id, checkpoint_id, interrupt_id)

        async def take(
            conn: Statements, current: PendingRecord, holder: str | None
        ) -> DecisionChange:
            renew = renews_lease(current, holder, lease_token)
            refusal = lease_refusal(current, renew=renew, now=now)
            if refusal is not None:
                return refusal
            lease = (lease_token, self._write_time(lease_until), 0 if renew else 1)
            taken = await conn.fetch(self._decision_sql.take_lease, (*lease, *pause))
            return DecisionChange(DecisionOutcome.APPLIED, self._decided(taken[0]))

        async with self._holding_pause(pause):
            return await self._in_transaction(self._on_locked_decision(pause, take))

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
        pause = (namespace, execution_id, checkpoint_id, interrupt_id)

        async def record(
            conn: Statements, current: PendingRecord, holder: str | None
        ) -> DecisionChange:
            refusal = report_refusal(current, holder, lease_token, status)
            if refusal is not None:
                return refusal
            report = (status.value, error, self._write_time(now))
            changed = await conn.fetch(self._decision_sql.report_decision, (*report, *pause))
            reported = self._decided(changed[0])
            kind = resume_event_kind(status)
            await self._append_event_at(conn, namespace, kind, reported, now)
            return DecisionChange(DecisionOutcome.APPLIED, reported)

        return await self._in_transaction(self._on_locked_decision(pause, record))

    async def list_decisions(
        self, namespace: str, *, after_sequence: int, limit: int, open_only: bool
    ) -> list[PendingRecord]:
        """Return up to ``limit`` decided pauses with sequence > ``after_sequence``, oldest
        first, each with its decision; with ``open_only`` only those not reported yet."""
        sql = self._decision_sql
        query = sql.list_open_decisions if open_only else sql.list_decisions
        found: Sequence[Any] = await self._query(query, (namespace, after_sequence, limit))
        return [self._decided(row) for row in found]
