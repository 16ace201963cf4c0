"""The request ids of the graph wing (C9's rule), the same in both backends: the kinds of
call, and their replies as JSON text.

Every graph mutation runs :func:`once` inside its transaction: a request id this namespace
already recorded for the same kind of call is a retry, answered with the recorded reply and
applying nothing; otherwise the call applies and its reply is recorded with it. An id that
another kind of call recorded stays with that call (this one applies and records nothing).
This is the one place that decides it, so request fingerprints can be adopted here alone.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = [
    "COPY_THREAD",
    "DELETE_RUNS",
    "DELETE_THREAD",
    "PRUNE",
    "PUT_CHECKPOINT",
    "PUT_WRITES",
    "once",
]

PUT_CHECKPOINT: Final = "graph_put_checkpoint"
PUT_WRITES: Final = "graph_put_writes"
DELETE_THREAD: Final = "graph_delete_thread"
DELETE_RUNS: Final = "graph_delete_runs"
COPY_THREAD: Final = "graph_copy_thread"
PRUNE: Final = "graph_prune"

#: Looks up a recorded request: its (kind, reply_json), or None.
Lookup = Callable[[], Awaitable[tuple[str, str] | None]]
#: Records the request with its kind and reply_json.
Record = Callable[[str, str], Awaitable[None]]


async def once(
    request_id: str,
    kind: str,
    apply: Callable[[], Awaitable[int]],
    *,
    lookup: Lookup,
    record: Record,
) -> int:
    """Apply a mutation whose reply is a count, at most once per request id (see above)."""
    if request_id:
        earlier = await lookup()
        if earlier is not None:
            earlier_kind, reply_json = earlier
            if earlier_kind == kind:
                return int(json.loads(reply_json)["count"])
            return await apply()
    count = await apply()
    if request_id:
        await record(kind, json.dumps({"count": count}))
    return count
