"""What a request id found already stored means (contracts C9, C10): the same decisions on
both backends, over the backend's own lookups."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from checkpointd.domain import CheckpointRecord
from checkpointd.fingerprint import method_of
from checkpointd.store.base import CheckpointExists, RequestAppliedThenDeleted, RequestIdReused

__all__ = ["check_fingerprint", "existing_checkpoint"]


def check_fingerprint(request_id: str, stored: str | None, given: str) -> None:
    """Raise :class:`RequestIdReused` unless the request that stored ``request_id`` (its
    fingerprint ``stored``) is the one that came again (``given``). An empty side matches:
    ids stored before schema version 7 have no fingerprint, and answer retries as before."""
    if stored and given and stored != given:
        raise RequestIdReused(request_id, method_of(stored))


async def existing_checkpoint(
    request_id: str,
    checkpoint_id: str,
    fingerprint: str,
    *,
    by_request_id: Callable[[], Awaitable[tuple[CheckpointRecord, str | None] | None]],
    tombstone: Callable[[], Awaitable[tuple[str | None] | None]],
    by_checkpoint_id: Callable[[], Awaitable[bool]],
) -> CheckpointRecord | None:
    """After an insert wrote nothing: the stored row when this is a retry of the call that
    wrote it (found by request id, whatever its checkpoint id, with the same fingerprint);
    :class:`RequestIdReused` when another request wrote (or left a tombstone under) the id;
    :class:`RequestAppliedThenDeleted` when the retried row was deleted since;
    :class:`CheckpointExists` when another request wrote the checkpoint id; None when no row
    stands in the way any more (a concurrent delete took it).

    ``by_request_id`` returns the row with its stored fingerprint; ``tombstone`` the
    fingerprint of the id's tombstone, in a 1-tuple (None: no tombstone)."""
    if request_id:
        stored = await by_request_id()
        if stored is not None:
            row, first = stored
            check_fingerprint(request_id, first, fingerprint)
            return row
        deleted = await tombstone()
        if deleted is not None:
            check_fingerprint(request_id, deleted[0], fingerprint)
            raise RequestAppliedThenDeleted(request_id)
    if await by_checkpoint_id():
        raise CheckpointExists(checkpoint_id)
    return None
