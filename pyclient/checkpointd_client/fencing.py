"""Writes made while carrying out a decision carry the lease they are made under (contract K4).

A resume worker holds a lease on the decision it carries out; another worker takes the run
over once that lease runs out. A worker that stalled past its lease (a stopped process, a
starved CPU) must not write after that: so every write it makes under :func:`writes_under`
carries its lease (``fence``), and the server refuses it with ``FAILED_PRECONDITION``
``WRITE_FENCED`` once the lease is no longer the decision's. The application does nothing:
``ResumeWorker`` and ``GraphResumeWorker`` wrap each resume, and every checkpoint, pending
write, interrupt and idempotency result the resumed run writes through a client of this
package (sync or async, unary or stream) in that context carries the fence.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeVar

from checkpointd_client.errors import CheckpointdError, ErrorReason
from checkpointd_client.models import PendingInterrupt
from checkpointd_client.v1 import checkpoint_pb2

__all__ = ["LeaseFence", "current_fence", "fenced", "write_fenced", "writes_under"]


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """The lease a write is made under: the pause's decision, leased with ``lease_token`` at
    its ``attempt``-th lease (``Decision.attempts`` in the lease's reply)."""

    execution_id: str
    checkpoint_id: str
    lease_token: str
    attempt: int
    interrupt_id: str = ""

    @classmethod
    def of(cls, leased: PendingInterrupt, lease_token: str) -> LeaseFence:
        """The fence of a lease: ``leased`` is what ``lease_decision`` returned."""
        if leased.decision is None:
            raise ValueError("a leased pause carries its decision")
        return cls(
            execution_id=leased.execution_id,
            checkpoint_id=leased.checkpoint_id,
            lease_token=lease_token,
            attempt=leased.decision.attempts,
            interrupt_id=leased.interrupt_id,
        )

    def to_proto(self) -> checkpoint_pb2.LeaseFence:
        return checkpoint_pb2.LeaseFence(
            execution_id=self.execution_id,
            checkpoint_id=self.checkpoint_id,
            interrupt_id=self.interrupt_id,
            lease_token=self.lease_token,
            attempt=self.attempt,
        )


_CURRENT: ContextVar[LeaseFence | None] = ContextVar("checkpointd_lease_fence", default=None)


@contextmanager
def writes_under(fence: LeaseFence) -> Iterator[LeaseFence]:
    """Make every write of this context (and of the tasks and threads it starts with a copy of
    it) carry ``fence``."""
    token = _CURRENT.set(fence)
    try:
        yield fence
    finally:
        _CURRENT.reset(token)


def current_fence() -> LeaseFence | None:
    """The fence the writes of this context carry, if any."""
    return _CURRENT.get()


def write_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised from, a write refused ``WRITE_FENCED``: the resume
    it broke belongs to the worker that took the lease over."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CheckpointdError) and current.reason == ErrorReason.WRITE_FENCED:
            return True
        current = current.__cause__ or current.__context__
    return False


class _Fenceable(Protocol):
    @property
    def fence(self) -> checkpoint_pb2.LeaseFence: ...


_Request = TypeVar("_Request", bound=_Fenceable)


def fenced(request: _Request) -> _Request:
    """``request`` (a write) with the fence of this context, if any."""
    fence = _CURRENT.get()
    if fence is not None:
        request.fence.CopyFrom(fence.to_proto())
    return request
