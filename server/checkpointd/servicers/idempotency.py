"""IdempotencyService: the cache that lets a re-executed step skip its side effects (D1)."""

from __future__ import annotations

import grpc

from checkpointd import validation as v
from checkpointd.fencing import fence_of, fenced_write
from checkpointd.fingerprint import fingerprint
from checkpointd.servicers.common import ServiceDeps, shielded
from checkpointd_client.v1 import idempotency_service_pb2 as svc
from checkpointd_client.v1 import idempotency_service_pb2_grpc as svc_grpc

__all__ = ["IdempotencyServicer"]


class IdempotencyServicer(svc_grpc.IdempotencyServiceServicer):
    """Serves checkpointd.v1.IdempotencyService over a Store."""

    def __init__(self, deps: ServiceDeps) -> None:
        self._deps = deps
        self._store = deps.store

    async def PutIdempotencyResult(
        self,
        request: svc.PutIdempotencyResultRequest,
        context: grpc.aio.ServicerContext[
            svc.PutIdempotencyResultRequest, svc.PutIdempotencyResultResponse
        ],
    ) -> svc.PutIdempotencyResultResponse:
        namespace = v.namespace(request.namespace)
        request_id = v.optional_identifier("request_id", request.request_id, v.REQUEST_ID_MAX)
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        key = v.identifier("key", request.key, v.IDEMPOTENCY_KEY_MAX)
        result_json = v.json_value("result_json", request.result_json)
        fence = fence_of(request)
        # A retry of an applied request id writes nothing (contract D1).
        await shielded(
            fenced_write(
                self._store,
                namespace,
                fence,
                lambda: self._store.put_idempotent(
                    namespace,
                    request_id,
                    execution_id,
                    key,
                    result_json,
                    self._deps.clock(),
                    fingerprint=fingerprint("PutIdempotencyResult", request),
                ),
            )
        )
        return svc.PutIdempotencyResultResponse()

    async def GetIdempotencyResult(
        self,
        request: svc.GetIdempotencyResultRequest,
        context: grpc.aio.ServicerContext[
            svc.GetIdempotencyResultRequest, svc.GetIdempotencyResultResponse
        ],
    ) -> svc.GetIdempotencyResultResponse:
        namespace = v.namespace(request.namespace)
        execution_id = v.identifier("execution_id", request.execution_id, v.EXECUTION_ID_MAX)
        key = v.identifier("key", request.key, v.IDEMPOTENCY_KEY_MAX)
        found = await shielded(self._store.get_idempotent(namespace, execution_id, key))
        if found is None:
            return svc.GetIdempotencyResultResponse(found=False)
        return svc.GetIdempotencyResultResponse(found=True, result_json=found)
