"""What a store raises (:class:`StoreError` and its kinds) and the small types its
operations return besides the domain records (:class:`PoolState`, :class:`EventNotifier`).
The operations themselves are :class:`checkpointd.store.interface.Store`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "CheckpointExists",
    "EventNotifier",
    "PoolState",
    "RequestAppliedThenDeleted",
    "RequestIdReused",
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
