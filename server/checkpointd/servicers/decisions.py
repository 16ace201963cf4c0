"""The decision RPCs of InterruptService: one decision per pause (K1), carried out once by a
worker holding a lease (K2)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from checkpointd import decision_responses
from checkpointd import validation as v
from checkpointd.convert import pending_to_proto
from checkpointd.domain import (
    DecisionChange,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    PendingRecord,
)
from checkpointd.errors import (
    AlreadyDecided,
    DecisionClosed,
    InvalidField,
    LeaseHeld,
    LeaseLost,
    NoDecision,
    NoPendingInterrupt,
)
from checkpointd.paging import decode_token
from checkpointd.servicers.common import StoreServicer, shielded
from checkpointd.servicers.scope import WriteKey, namespaced, retriable
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import interrupt_service_pb2 as svc

__all__ = ["DecisionMethods"]

DECIDED_BY_MAX: Final = 256
DECISION_REASON_MAX: Final = 1024
#: A reported error is cut, not refused: a worker's traceback must never lose the report.
RESUME_ERROR_MAX: Final = 4096
LEASE_SECONDS_DEFAULT: Final = 30
LEASE_SECONDS_MAX: Final = 3600

_OUTCOMES: Final = {
    svc.RESUME_OUTCOME_RESUMED: DecisionStatus.RESUMED,
    svc.RESUME_OUTCOME_RESUME_FAILED: DecisionStatus.RESUME_FAILED,
}


def _decision_of(pending: PendingRecord | None) -> DecisionRecord:
    assert pending is not None
    assert pending.decision is not None
    return pending.decision


def _pending_after(change: DecisionChange) -> pb.PendingInterrupt:
    """The pending row as a change that went through left it (every decision RPC's answer)."""
    assert change.pending is not None
    return pending_to_proto(change.pending)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class _Leased:
    """The decision a lease holder's call (LeaseDecision, ReportResume) names, with its token."""

    namespace: str
    execution_id: str
    checkpoint_id: str
    interrupt_id: str
    lease_token: str


def _leased(request: svc.LeaseDecisionRequest | svc.ReportResumeRequest, namespace: str) -> _Leased:
    """The fields a lease holder's two calls share, checked in one order after the namespace
    (the first bad one is the one refused); the request id is checked, though neither call
    uses it."""
    v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
    return _Leased(
        namespace=namespace,
        execution_id=v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX),
        checkpoint_id=v.identifier("checkpoint_id", request.checkpoint_id, v.CHECKPOINT_ID_MAX),
        interrupt_id=v.optional_identifier(
            "interrupt_id", request.interrupt_id, v.INTERRUPT_ID_MAX
        ),
        lease_token=v.identifier("lease_token", request.lease_token, v.REQUEST_ID_MAX),
    )


def _refuse_missing_or_closed(change: DecisionChange, leased: _Leased) -> None:
    """The refusals a lease and a report share: no such decision, or one already carried out
    (K2); any other conflict is the caller's to name."""
    if change.outcome is DecisionOutcome.NOT_FOUND:
        raise NoDecision(leased.execution_id, leased.checkpoint_id, leased.interrupt_id)
    if change.outcome is DecisionOutcome.CONFLICT:
        current = _decision_of(change.pending)
        if current.status.is_final:
            raise DecisionClosed(leased.execution_id, current.status.value)


class DecisionMethods(StoreServicer):
    """SubmitDecision, LeaseDecision and ReportResume, mixed into the InterruptService."""

    @retriable
    async def SubmitDecision(
        self, request: svc.SubmitDecisionRequest, write: WriteKey
    ) -> svc.SubmitDecisionResponse:
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        interrupt_id = v.optional_identifier(
            "interrupt_id", request.interrupt_id, v.INTERRUPT_ID_MAX
        )
        decided_by = v.text("decided_by", request.decided_by, DECIDED_BY_MAX)
        if not decided_by:
            raise InvalidField("decided_by", "is required")
        decision = DecisionRecord(
            approved=request.approved,
            metadata_json=v.json_object("metadata_json", request.metadata_json),
            decided_by=decided_by,
            reason=v.optional_text(
                "reason",
                request.reason if request.HasField("reason") else None,
                DECISION_REASON_MAX,
            ),
            decided_at=self._deps.clock(),
            response_json=decision_responses.response_json(
                request.HasField("response"), request.response, request.approved
            ),
        )
        change = await shielded(
            self._store.submit_decision(
                execution_id=execution_id,
                decision=decision,
                interrupt_id=interrupt_id,
                **write.args,
            )
        )
        if change.outcome is DecisionOutcome.NOT_FOUND:
            raise NoPendingInterrupt(execution_id, interrupt_id)
        if change.outcome is DecisionOutcome.CONFLICT:
            winner = _decision_of(change.pending)
            raise AlreadyDecided(
                execution_id,
                winner.decided_by,
                winner.approved,
                winner.decided_at,
            )
        return svc.SubmitDecisionResponse(pending=_pending_after(change))

    @namespaced
    async def LeaseDecision(
        self, request: svc.LeaseDecisionRequest, namespace: str
    ) -> svc.LeaseDecisionResponse:
        leased = _leased(request, namespace)
        seconds = request.lease_seconds or LEASE_SECONDS_DEFAULT
        if not 1 <= seconds <= LEASE_SECONDS_MAX:
            raise InvalidField(
                "lease_seconds", f"must be 0 (30) or 1 to {LEASE_SECONDS_MAX} (got {seconds})"
            )
        now = self._deps.clock()
        change = await shielded(
            self._store.lease_decision(
                leased.namespace,
                leased.execution_id,
                leased.checkpoint_id,
                leased.lease_token,
                now + timedelta(seconds=seconds),
                now,
                interrupt_id=leased.interrupt_id,
            )
        )
        _refuse_missing_or_closed(change, leased)
        if change.outcome is DecisionOutcome.CONFLICT:
            expires = _decision_of(change.pending).lease_expires_at
            # Short of a closed decision, the store refuses a lease only while another runs on.
            assert expires is not None
            raise LeaseHeld(leased.execution_id, expires)
        return svc.LeaseDecisionResponse(pending=_pending_after(change))

    @namespaced
    async def ReportResume(
        self, request: svc.ReportResumeRequest, namespace: str
    ) -> svc.ReportResumeResponse:
        leased = _leased(request, namespace)
        status = _OUTCOMES.get(request.outcome)
        if status is None:
            raise InvalidField(
                "outcome", "must be RESUME_OUTCOME_RESUMED or RESUME_OUTCOME_RESUME_FAILED"
            )
        error = _cut(request.error.replace("\x00", ""), RESUME_ERROR_MAX) or None
        if status is DecisionStatus.RESUMED:
            error = None
        change = await shielded(
            self._store.report_resume(
                leased.namespace,
                leased.execution_id,
                leased.checkpoint_id,
                leased.lease_token,
                status,
                error,
                self._deps.clock(),
                interrupt_id=leased.interrupt_id,
            )
        )
        _refuse_missing_or_closed(change, leased)
        if change.outcome is DecisionOutcome.CONFLICT:
            raise LeaseLost(leased.execution_id)
        return svc.ReportResumeResponse(pending=_pending_after(change))

    @namespaced
    async def ListDecisions(
        self, request: svc.ListDecisionsRequest, namespace: str
    ) -> svc.ListDecisionsResponse:
        limit = v.page_size("page_size", request.page_size)
        scope = ("decisions", namespace, request.open_only)
        after = decode_token(request.page_token, scope) or 0
        rows = await shielded(
            self._store.list_decisions(
                namespace, after_sequence=after, limit=limit + 1, open_only=request.open_only
            )
        )
        response = svc.ListDecisionsResponse()
        response.next_page_token = self._fill_page(
            response.decided, rows[:limit], pending_to_proto, scope, more=len(rows) > limit
        )
        return response
