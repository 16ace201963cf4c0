"""What a checkpoint insert that wrote nothing means (contracts C9 and the request-id
retries): the same decision on both backends, over the backend's own lookups."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from checkpointd.domain import CheckpointRecord
from checkpointd.store.base import CheckpointExists, RequestAppliedThenDeleted

__all__ = ["existing_checkpoint"]


async def existing_checkpoint(
    request_id: str,
    checkpoint_id: str,
    *,
    by_request_id: Callable[[], Awaitable[CheckpointRecord | None]],
    is_tombstone: Callable[[], Awaitable[bool]],
    by_checkpoint_id: Callable[[], Awaitable[bool]],
) -> CheckpointRecord | None:
    """After an insert wrote nothing: the stored row when this is a retry of the call that
    wrote it (found by request id, whatever its checkpoint id);
    :class:`RequestAppliedThenDeleted` when that row was deleted since;
    :class:`CheckpointExists` when another request wrote the checkpoint id; None when no row
    stands in the way any more (a concurrent delete took it)."""
    if request_id:
        stored = await by_request_id()
        if stored is not None:
            return stored
        if await is_tombstone():
            raise RequestAppliedThenDeleted(request_id)
    if await by_checkpoint_id():
        raise CheckpointExists(checkpoint_id)
    return None
