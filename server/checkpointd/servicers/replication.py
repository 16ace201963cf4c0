"""ReplicationService: the outbox of checkpoints a replicator copies elsewhere (R1-R4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from checkpointd import validation as v
from checkpointd.convert import checkpoint_to_proto
from checkpointd.errors import InvalidField
from checkpointd.paging import decode_token
from checkpointd.servicers.common import StoreServicer, shielded
from checkpointd.servicers.scope import namespaced
from checkpointd_client.v1 import replication_service_pb2 as svc
from checkpointd_client.v1 import replication_service_pb2_grpc as svc_grpc

__all__ = ["MAX_SETTLE_IDS", "QUARANTINE_REASON_MAX", "ReplicationServicer"]

#: Most checkpoints one Mark/Quarantine call may name (one transaction each).
MAX_SETTLE_IDS: Final = 1000
#: Longest quarantine reason, in characters.
QUARANTINE_REASON_MAX: Final = 1024


def _distinct_ids(ids: Iterable[str]) -> list[str]:
    """Validated ids, first occurrence kept: naming an id twice is naming it once."""
    seen: dict[str, None] = {}
    for cid in ids:
        seen.setdefault(v.identifier("checkpoint_ids", cid, v.CHECKPOINT_ID_MAX), None)
    return list(seen)


class ReplicationServicer(StoreServicer, svc_grpc.ReplicationServiceServicer):
    """Serves checkpointd.v1.ReplicationService over a Store."""

    @namespaced
    async def ListUnsyncedCheckpoints(
        self, request: svc.ListUnsyncedCheckpointsRequest, namespace: str
    ) -> svc.ListUnsyncedCheckpointsResponse:
        limit = v.page_size("page_size", request.page_size)
        scope = ("unsynced", namespace)
        after = decode_token(request.page_token, scope)
        # One extra row tells whether another page follows without a second query.
        rows = await shielded(
            self._store.list_unsynced(namespace, after_sequence=after, limit=limit + 1)
        )
        response = svc.ListUnsyncedCheckpointsResponse()
        response.next_page_token = self._fill_page(
            response.checkpoints, rows[:limit], checkpoint_to_proto, scope, more=len(rows) > limit
        )
        return response

    @namespaced
    async def MarkCheckpointsSynced(
        self, request: svc.MarkCheckpointsSyncedRequest, namespace: str
    ) -> svc.MarkCheckpointsSyncedResponse:
        v.at_most("checkpoint_ids", len(request.checkpoint_ids), MAX_SETTLE_IDS, "checkpoints")
        ids = _distinct_ids(request.checkpoint_ids)
        settled = await self._settle(namespace, [(cid, None) for cid in ids])
        return svc.MarkCheckpointsSyncedResponse(settled_checkpoint_ids=settled)

    @namespaced
    async def QuarantineCheckpoints(
        self, request: svc.QuarantineCheckpointsRequest, namespace: str
    ) -> svc.QuarantineCheckpointsResponse:
        v.at_most("quarantines", len(request.quarantines), MAX_SETTLE_IDS, "checkpoints")
        reasons: dict[str, str] = {}
        # Fields are named by their path without an index (as everywhere in E2's table).
        for entry in request.quarantines:
            cid = v.identifier(
                "quarantines.checkpoint_id", entry.checkpoint_id, v.CHECKPOINT_ID_MAX
            )
            if not entry.reason:
                raise InvalidField("quarantines.reason", "is required")
            reason = v.text("quarantines.reason", entry.reason, QUARANTINE_REASON_MAX)
            if reasons.setdefault(cid, reason) != reason:
                raise InvalidField(
                    "quarantines.checkpoint_id",
                    f"names {cid!r} twice with different reasons",
                )
        settled = await self._settle(namespace, list(reasons.items()))
        return svc.QuarantineCheckpointsResponse(settled_checkpoint_ids=settled)

    async def _settle(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]]
    ) -> list[str]:
        """Settle each ``(checkpoint_id, reason)`` (synced without a reason, else quarantined)
        and return the ids settled now; naming none settles none without a store call."""
        if not settlements:
            return []
        return await shielded(
            self._store.settle_checkpoints(namespace, settlements, self._deps.clock())
        )
