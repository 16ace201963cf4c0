"""The request ids of the graph store (C9's and C10's rules), the same in both backends: the
kinds of call, the requests' fingerprints (:mod:`checkpointd.fingerprint`) and their replies
as JSON text.

Every graph mutation runs :func:`once` inside its transaction, before it writes anything: a
request id this namespace already recorded with the same fingerprint is a retry, answered
with the recorded reply and applying nothing; with another fingerprint (another method, or
other content) it is :class:`~checkpointd.store.base.RequestIdReused`, raised before the
call applies, so its transaction writes nothing (C10); an unrecorded id applies and records
the call's reply with it. When either fingerprint is empty (a store caller that gives none)
the kinds decide as before C10: the same kind is a retry, another kind applies and records
nothing. This is the one place that decides it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Final

from checkpointd.fingerprint import method_of
from checkpointd.store.base import RequestIdReused

__all__ = [
    "APPLY_RETENTION",
    "COPY_THREAD",
    "DELETE_RUNS",
    "DELETE_THREAD",
    "PRUNE",
    "PUT_CHECKPOINT",
    "PUT_WRITES",
    "once",
    "once_recorded_first",
    "recorded_reply",
]

PUT_CHECKPOINT: Final = "graph_put_checkpoint"
PUT_WRITES: Final = "graph_put_writes"
DELETE_THREAD: Final = "graph_delete_thread"
DELETE_RUNS: Final = "graph_delete_runs"
COPY_THREAD: Final = "graph_copy_thread"
PRUNE: Final = "graph_prune"
APPLY_RETENTION: Final = "graph_apply_retention"

#: Looks up a recorded request: its (kind, fingerprint, reply_json), or None.
Lookup = Callable[[], Awaitable[tuple[str, str, str] | None]]
#: Records the request with its kind, fingerprint and reply_json.
Record = Callable[[str, str, str], Awaitable[None]]
#: Records the request with its kind, fingerprint and reply_json unless its id is recorded:
#: whether it recorded.
Reserve = Callable[[str, str, str], Awaitable[bool]]


async def once(
    request_id: str,
    kind: str,
    fingerprint: str,
    apply: Callable[[], Awaitable[int]],
    *,
    lookup: Lookup,
    record: Record,
) -> int:
    """Apply a mutation whose reply is a count, at most once per request id (see above);
    raise :class:`RequestIdReused` for an id recorded with another fingerprint."""
    if request_id:
        earlier = await lookup()
        if earlier is not None:
            reply_json = recorded_reply(request_id, kind, fingerprint, earlier)
            if reply_json is not None:
                return int(json.loads(reply_json)["count"])
            return await apply()
    count = await apply()
    if request_id:
        await record(kind, fingerprint, json.dumps({"count": count}))
    return count


async def once_recorded_first(
    request_id: str,
    kind: str,
    fingerprint: str,
    count: int,
    apply: Callable[[], Awaitable[object]],
    *,
    reserve: Reserve,
    lookup: Lookup,
) -> int:
    """:func:`once` for a mutation whose reply (``count``) is known before it applies, in a
    transaction that a failed write undoes whole: the request is recorded first, in one
    statement that finds no earlier record (the common case) or records nothing; only then is
    the earlier record looked up, and decides as in :func:`once`. Same outcome, one statement
    instead of a lookup and a record."""
    if request_id:
        reply_json = json.dumps({"count": count})
        while not await reserve(kind, fingerprint, reply_json):
            earlier = await lookup()
            if earlier is not None:
                recorded = recorded_reply(request_id, kind, fingerprint, earlier)
                if recorded is not None:
                    return int(json.loads(recorded)["count"])
                break  # another kind, no fingerprints: applies and records nothing, as once
            # Purged between the two statements: reserve again. The reserve holds the
            # request's lock, so no other call can record this id meanwhile.
    await apply()
    return count


def recorded_reply(
    request_id: str, kind: str, fingerprint: str, earlier: tuple[str, str, str]
) -> str | None:
    """What an earlier call recorded under this request id, ``(kind, fingerprint,
    reply_json)``, means for this call: its reply_json when this call is its retry, None when
    this call applies (records nothing); :class:`RequestIdReused` when the id belongs to
    another request. A mutation spread over several transactions (ApplyGraphRetention)
    decides with this before its first one."""
    earlier_kind, earlier_fingerprint, reply_json = earlier
    if fingerprint and earlier_fingerprint:
        if earlier_fingerprint != fingerprint:
            raise RequestIdReused(request_id, method_of(earlier_fingerprint))
        return reply_json
    return reply_json if earlier_kind == kind else None
