"""The standard ``grpc.health.v1`` service.

The health status of the whole server (service ``""``, which Kubernetes' gRPC probes ask for)
and of each checkpointd service is ``SERVING`` only while the store answers
(:class:`checkpointd.readiness.StoreMonitor` sets it); ``NOT_SERVING`` while it is
unreachable and, for good, once shutdown begins.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd.edge import abort_with_error
from checkpointd.errors import TooManyWatchStreams, echo

__all__ = ["HEALTH_SERVICE", "HealthService"]

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
_HEALTH_WATCH = f"/{HEALTH_SERVICE}/Watch"

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
ServingStatus = health_pb2.HealthCheckResponse.ServingStatus


class HealthService(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1.Health`` for ``""`` and each named service, all with one status.

    ``Watch`` sends the current status, then every change; once shutdown has begun it sends
    ``NOT_SERVING`` and ends the stream with OK, so a watcher never holds the drain open.
    Health answers without a token, so at most ``max_watch_streams`` Watch streams are open
    at once (0: no limit); one more is refused ``RESOURCE_EXHAUSTED``
    (``TOO_MANY_WATCH_STREAMS``, scope ``health``).
    """

    def __init__(self, services: Sequence[str], *, max_watch_streams: int = 0) -> None:
        if max_watch_streams < 0:
            raise ValueError("max_watch_streams must be zero (no limit) or positive")
        self._status: dict[str, ServingStatus] = dict.fromkeys(("", *services), NOT_SERVING)
        self._changed = asyncio.Condition()
        self._closing = False
        self._max_watch_streams = max_watch_streams
        self._watch_streams = 0

    @property
    def serving(self) -> bool:
        """Whether the server answers SERVING now."""
        return bool(self._status[""] == SERVING)

    async def set_serving(self, serving: bool) -> None:
        """Set every service SERVING or NOT_SERVING; ignored once shutdown has begun."""
        if not self._closing:
            await self._set_all(SERVING if serving else NOT_SERVING)

    async def enter_shutdown(self) -> None:
        """NOT_SERVING for good, and end every Watch stream."""
        self._closing = True
        await self._set_all(NOT_SERVING)

    async def _set_all(self, status: ServingStatus) -> None:
        async with self._changed:
            for name in self._status:
                self._status[name] = status
            self._changed.notify_all()

    def _moved(self, service: str, last: ServingStatus | None) -> bool:
        return self._closing or self._status.get(service) != last

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        """Return the status of ``request.service``; NOT_FOUND for an unknown name."""
        status = self._status.get(request.service)
        if status is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown service {echo(request.service)!r}"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Send the current status, then each change, until shutdown or the caller leaves."""
        if self._max_watch_streams and self._watch_streams >= self._max_watch_streams:
            await abort_with_error(
                context,
                TooManyWatchStreams(self._max_watch_streams, "health"),
                method=_HEALTH_WATCH,
            )
        self._watch_streams += 1
        try:
            last: ServingStatus | None = None
            while True:
                async with self._changed:
                    await self._changed.wait_for(
                        functools.partial(self._moved, request.service, last)
                    )
                    status = self._status.get(request.service, SERVICE_UNKNOWN)
                    closing = self._closing
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                if closing:
                    return
        finally:
            self._watch_streams -= 1
