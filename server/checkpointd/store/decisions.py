"""The rules of a decision's lease and its report (contract K2), the same on both backends:
each backend reads the pause's decision row under its own lock and asks these."""

from __future__ import annotations

from datetime import datetime

from checkpointd.domain import (
    DecisionChange,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    EventKind,
    LeaseFence,
    PendingRecord,
)

__all__ = [
    "fence_holds",
    "lease_refusal",
    "renews_lease",
    "replaces",
    "report_refusal",
    "resume_event_kind",
]


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
