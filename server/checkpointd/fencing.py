"""Writes made under a decision's lease (contract K4): what a request's ``fence`` says, and
the store call it guards.

A worker carrying out a decision sends each of its writes with the lease it holds. The store
lets the write through only while that lease still holds the pause's decision, and keeps a
takeover from starting while such a write is in flight (``Store.fenced``), so a worker that
stalled past its lease cannot write after another worker took the run over.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar

from checkpointd import validation as v
from checkpointd.domain import LeaseFence
from checkpointd.errors import InvalidField, WriteFenced
from checkpointd.store.interface import Store
from checkpointd_client.v1 import checkpoint_pb2 as pb

__all__ = ["Fenceable", "fence_of", "fenced_write"]

T = TypeVar("T")


class Fenceable(Protocol):
    """A write request with a ``fence`` field."""

    @property
    def fence(self) -> pb.LeaseFence: ...

    def HasField(self, field_name: Literal["fence"]) -> bool: ...


def fence_of(request: Fenceable) -> LeaseFence | None:
    """The request's validated fence, or None when it has none."""
    if not request.HasField("fence"):
        return None
    fence = request.fence
    if fence.attempt < 1:
        raise InvalidField("fence.attempt", "must be 1 or more (the lease's Decision.attempts)")
    return LeaseFence(
        execution_id=v.identifier("fence.execution_id", fence.execution_id, v.EXECUTION_ID_MAX),
        checkpoint_id=v.identifier("fence.checkpoint_id", fence.checkpoint_id, v.CHECKPOINT_ID_MAX),
        interrupt_id=v.optional_identifier(
            "fence.interrupt_id", fence.interrupt_id, v.INTERRUPT_ID_MAX
        ),
        lease_token=v.identifier("fence.lease_token", fence.lease_token, v.REQUEST_ID_MAX),
        attempt=fence.attempt,
    )


async def fenced_write(
    store: Store, namespace: str, fence: LeaseFence | None, write: Callable[[], Awaitable[T]]
) -> T:
    """Run ``write`` (a store call), under ``fence`` when there is one: refused with
    WriteFenced, and not started, when the lease no longer holds the decision."""
    if fence is None:
        return await write()
    async with store.fenced(namespace, fence) as holds:
        if not holds:
            raise WriteFenced(fence.execution_id, fence.checkpoint_id, fence.interrupt_id)
        return await write()
