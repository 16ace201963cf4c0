"""IdempotencyService: the cache that lets a re-executed step skip its side effects (D1)."""

from __future__ import annotations

from checkpointd import validation as v
from checkpointd.servicers.common import StoreServicer, shielded
from checkpointd.servicers.scope import WriteKey, namespaced, retriable
from checkpointd_client.v1 import idempotency_service_pb2 as svc
from checkpointd_client.v1 import idempotency_service_pb2_grpc as svc_grpc

__all__ = ["IdempotencyServicer"]


def _entry(
    request: svc.PutIdempotencyResultRequest | svc.GetIdempotencyResultRequest,
) -> tuple[str, str]:
    """The cache entry a put or a get names: its execution and its key."""
    execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
    return execution_id, v.identifier("key", request.key, v.IDEMPOTENCY_KEY_MAX)


class IdempotencyServicer(StoreServicer, svc_grpc.IdempotencyServiceServicer):
    """Serves checkpointd.v1.IdempotencyService over a Store."""

    @retriable
    async def PutIdempotencyResult(
        self, request: svc.PutIdempotencyResultRequest, write: WriteKey
    ) -> svc.PutIdempotencyResultResponse:
        execution_id, key = _entry(request)
        result_json = v.json_value("result_json", request.result_json)
        # A retry of an applied request id writes nothing (contract D1).
        await self._fenced(
            request,
            write,
            lambda: self._store.put_idempotent(
                execution_id=execution_id,
                key=key,
                result_json=result_json,
                now=self._deps.clock(),
                **write.args,
            ),
        )
        return svc.PutIdempotencyResultResponse()

    @namespaced
    async def GetIdempotencyResult(
        self, request: svc.GetIdempotencyResultRequest, namespace: str
    ) -> svc.GetIdempotencyResultResponse:
        execution_id, key = _entry(request)
        found = await shielded(self._store.get_idempotent(namespace, execution_id, key))
        if found is None:
            return svc.GetIdempotencyResultResponse(found=False)
        return svc.GetIdempotencyResultResponse(found=True, result_json=found)
