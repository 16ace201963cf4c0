"""Readiness: the standard ``grpc.health.v1`` service, driven by whether the store answers.

:class:`StoreMonitor` opens the store (retrying with backoff while the database is not there
yet), then pings it every few seconds; a ping not answered within the ping timeout (the
health interval, at least 1 s, at most the store timeout) counts as the store lost. The
health status of the whole server (service ``""``, which Kubernetes' gRPC probes ask for)
and of each checkpointd service is ``SERVING`` only while the store answers; ``NOT_SERVING``
while it is unreachable and, for good, once shutdown begins. Until the store has been opened,
:class:`StoreGateInterceptor` answers every checkpointd call ``UNAVAILABLE`` (reason
``STORE_UNAVAILABLE``), as for any store outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd.errors import TooManyWatchStreams, echo
from checkpointd.interceptors import Context, LayerInterceptor, abort_with_error, behaviour
from checkpointd.logging_setup import event
from checkpointd.store.base import Store, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from checkpointd.interceptors import MethodHandler

__all__ = [
    "HEALTH_SERVICE",
    "HealthService",
    "StoreGateInterceptor",
    "StoreMonitor",
    "StoreNeverCameUp",
    "cancel_and_wait",
]

log = logging.getLogger("checkpointd")

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
_HEALTH_WATCH = f"/{HEALTH_SERVICE}/Watch"

ServingStatus = health_pb2.HealthCheckResponse.ServingStatus
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN

# Waiting for the store: the first retry comes quickly, later ones at most this far apart.
_FIRST_RETRY_S = 0.25
_MAX_RETRY_S = 5.0
# While waiting, the same failure is logged again at most this often.
_REPEAT_LOG_S = 30.0


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
        self, request: health_pb2.HealthCheckRequest, context: Context
    ) -> health_pb2.HealthCheckResponse:
        """Return the status of ``request.service``; NOT_FOUND for an unknown name."""
        status = self._status.get(request.service)
        if status is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown service {echo(request.service)!r}"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Context) -> None:
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


class StoreNeverCameUp(Exception):
    """The store could not be opened within ``--store-wait``, or cannot be opened at all."""


class StoreMonitor:
    """Opens the store, waiting for it, then watches it and drives the health status."""

    def __init__(
        self,
        store: Store,
        health: HealthService,
        *,
        description: str,
        interval: float,
        wait: float | None,
        ping_timeout: float | None = None,
        on_first_open: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._health = health
        self._description = description
        self._interval = interval
        self._ping_timeout = interval if ping_timeout is None else ping_timeout
        self._ping: asyncio.Task[None] | None = None
        self._wait = wait
        self._on_first_open = on_first_open
        self.opened = False
        """True once :meth:`Store.open` has succeeded; calls are refused before."""
        self.up = False
        """True while the last open or ping succeeded."""

    async def run(self) -> None:
        """Open the store (waiting as configured), then ping it forever."""
        await self._open()
        try:
            while True:
                await asyncio.sleep(self._interval)
                await self._check()
        finally:
            if self._ping is not None:
                self._ping.cancel()

    async def _check(self) -> None:
        """One ping, answered within the ping timeout or counted as the store lost.

        A database that stops answering without closing its connections (a network
        partition) would hold a ping until the store timeout; the ping runs on by itself
        instead, and the next check waits on it again rather than piling up another."""
        ping = self._ping
        if ping is None:
            ping = self._ping = asyncio.create_task(self._store.ping())
            ping.add_done_callback(_consume_outcome)
        done, _ = await asyncio.wait({ping}, timeout=self._ping_timeout)
        if not done:
            await self._mark_down(
                StoreUnavailable(f"the store did not answer a ping within {self._ping_timeout:g}s")
            )
            return
        self._ping = None
        failure = ping.exception()
        if failure is None:
            await self._mark_up()
        elif isinstance(failure, StoreError):
            await self._mark_down(failure)
        else:
            raise failure

    async def _open(self) -> None:
        started = time.monotonic()
        delay = _FIRST_RETRY_S
        last_logged: tuple[str, float] | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._store.open()
                break
            except StoreUnavailable as exc:
                waited = time.monotonic() - started
                if self._wait is not None and waited + delay > self._wait:
                    raise StoreNeverCameUp(
                        f"cannot open the store {self._description}: {exc}"
                        + (f" (gave up after {waited:.1f}s)" if self._wait else "")
                    ) from None
                message = str(exc)
                now = time.monotonic()
                if (
                    last_logged is None
                    or last_logged[0] != message
                    or now - last_logged[1] >= _REPEAT_LOG_S
                ):
                    event(
                        log,
                        logging.WARNING,
                        "store_waiting",
                        f"waiting for the store {self._description}: {message}; "
                        f"retrying (attempt {attempt}, {waited:.1f}s so far)",
                        store=self._description,
                        error=message,
                        attempt=attempt,
                        waited_s=round(waited, 1),
                    )
                    last_logged = (message, now)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, _MAX_RETRY_S)
            except StoreError as exc:
                raise StoreNeverCameUp(
                    f"cannot open the store {self._description}: {exc}"
                ) from None
        waited = time.monotonic() - started
        event(
            log,
            logging.INFO,
            "store_connected",
            f"store connected: {self._description} (after {attempt} attempt(s), {waited:.2f}s)",
            store=self._description,
            attempts=attempt,
            waited_s=round(waited, 3),
        )
        self.opened = True
        self.up = True
        await self._health.set_serving(True)
        if self._on_first_open is not None:
            await self._on_first_open()

    async def _mark_down(self, exc: StoreError) -> None:
        if self.up:
            event(
                log,
                logging.WARNING,
                "store_lost",
                f"store lost: {exc}; answering NOT_SERVING until it answers again",
                store=self._description,
                error=str(exc),
            )
        self.up = False
        await self._health.set_serving(False)

    async def _mark_up(self) -> None:
        if not self.up:
            event(
                log,
                logging.INFO,
                "store_recovered",
                f"store recovered: {self._description}",
                store=self._description,
            )
        self.up = True
        await self._health.set_serving(True)


Handler = Callable[[Any, Context], Any]


class StoreGateInterceptor(LayerInterceptor):
    """Answers checkpointd calls ``UNAVAILABLE`` until the store has been opened.

    Health and reflection calls always pass. A unary call raises :class:`StoreUnavailable`
    for the error guard (a layer outside this one) to map; a streaming call is answered
    here.
    """

    def __init__(self, monitor: StoreMonitor, *, exempt_prefixes: Sequence[str]) -> None:
        self._monitor = monitor
        self._exempt = tuple(exempt_prefixes)

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler:
        """Gate a checkpointd handler on the store having been opened."""
        if method.startswith(self._exempt):
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._gate_unary(behaviour(handler.unary_unary)),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._gate_stream(method, behaviour(handler.unary_stream)),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # checkpointd has no client-streaming RPCs

    def _refusal(self) -> StoreUnavailable:
        return StoreUnavailable("the server is still waiting for its database to come up")

    def _gate_unary(self, inner: Handler) -> Handler:
        async def gated(request: Any, context: Context) -> Any:
            if not self._monitor.opened:
                raise self._refusal()
            return await inner(request, context)

        return gated

    def _gate_stream(self, method: str, inner: Handler) -> Handler:
        async def refuse(context: Context) -> None:
            await abort_with_error(context, self._refusal(), method=method)

        if inspect.isasyncgenfunction(inner):

            async def gated_generator(request: Any, context: Context) -> AsyncIterator[Any]:
                if not self._monitor.opened:
                    await refuse(context)
                async for response in inner(request, context):
                    yield response

            return gated_generator

        async def gated(request: Any, context: Context) -> None:
            if not self._monitor.opened:
                await refuse(context)
            await inner(request, context)

        return gated


def _consume_outcome(task: asyncio.Task[None]) -> None:
    """Mark a ping's failure as seen: a ping abandoned at shutdown must not be reported as
    an exception nobody retrieved."""
    if not task.cancelled():
        task.exception()


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has ended (its own failure is its
    owner's to report)."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
