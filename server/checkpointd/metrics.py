"""Prometheus metrics, served as text on their own HTTP port (off unless ``--metrics-listen``).

Families (besides the client library's ``process_*`` and ``python_*``):

* ``grpc_server_started_total``, ``grpc_server_handled_total`` (with ``grpc_code``) and the
  ``grpc_server_handling_seconds`` histogram, labelled ``grpc_service``, ``grpc_method`` and
  ``grpc_type`` as go-grpc-prometheus names them, so existing dashboards work;
* ``checkpointd_rpcs_in_flight`` per method, and ``checkpointd_watch_streams`` (open
  ``WatchInterrupts`` streams);
* ``checkpointd_store_operation_seconds`` per store operation and outcome (``ok``,
  ``unavailable``, ``error``);
* ``checkpointd_store_up`` (1 while the store answers the health pings);
* ``checkpointd_pending_interrupts`` per namespace and ``checkpointd_store_pool_connections``
  (Postgres: ``size``, ``idle``, ``max``), both read from the store when scraped.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from checkpointd.interceptors import Context, LayerInterceptor
from checkpointd.store.base import PoolState, Store, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from checkpointd.interceptors import MethodHandler

__all__ = ["Metrics", "MetricsInterceptor", "MetricsServer", "instrument_store"]

log = logging.getLogger("checkpointd")

WATCH_METHOD = "/checkpointd.v1.InterruptService/WatchInterrupts"

# Store calls and RPCs take from well under a millisecond (SQLite reads) to seconds (a
# prune, a page near the size limit, or a call waiting out a lock).
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# How long a scrape waits for the store's counts before leaving them out.
_SCRAPE_STORE_TIMEOUT_S = 5.0


class Metrics:
    """Every metric of one server, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        rpc_labels = ("grpc_service", "grpc_method", "grpc_type")
        self.rpc_started = Counter(
            "grpc_server_started",
            "RPCs started on the server.",
            rpc_labels,
            registry=self.registry,
        )
        self.rpc_handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, by status code.",
            (*rpc_labels, "grpc_code"),
            registry=self.registry,
        )
        self.rpc_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its status (whole stream for streaming RPCs).",
            rpc_labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rpcs_in_flight = Gauge(
            "checkpointd_rpcs_in_flight",
            "RPCs being handled now.",
            ("grpc_service", "grpc_method"),
            registry=self.registry,
        )
        self.watch_streams = Gauge(
            "checkpointd_watch_streams",
            "Open WatchInterrupts streams.",
            registry=self.registry,
        )
        self.store_seconds = Histogram(
            "checkpointd_store_operation_seconds",
            "Time a store operation took, by operation and outcome (ok, unavailable, error).",
            ("operation", "outcome"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.store_up = Gauge(
            "checkpointd_store_up",
            "1 while the store answers the health pings, 0 otherwise.",
            registry=self.registry,
        )

    def watch_store(
        self, store: Store, loop: asyncio.AbstractEventLoop, *, is_open: Callable[[], bool]
    ) -> None:
        """Report pending interrupts and pool state, read from ``store`` at each scrape."""
        self.registry.register(_StoreCollector(store, loop, is_open))


class _StoreCollector(Collector):
    """Reads counts from the store on the server's event loop when Prometheus scrapes."""

    def __init__(
        self, store: Store, loop: asyncio.AbstractEventLoop, is_open: Callable[[], bool]
    ) -> None:
        self._store = store
        self._loop = loop
        self._is_open = is_open

    async def _sample(self) -> tuple[dict[str, int], PoolState | None]:
        return await self._store.count_pending_by_namespace(), self._store.pool_state()

    def collect(self) -> Iterable[Metric]:
        """Yield the pending-interrupt and pool families (empty while the store is away)."""
        pending = GaugeMetricFamily(
            "checkpointd_pending_interrupts",
            "Pending (unclaimed) interrupts, per namespace.",
            labels=("namespace",),
        )
        pool = GaugeMetricFamily(
            "checkpointd_store_pool_connections",
            "Database connections of the store's pool, by state (Postgres only).",
            labels=("state",),
        )
        if self._is_open():
            future = asyncio.run_coroutine_threadsafe(self._sample(), self._loop)
            try:
                counts, state = future.result(timeout=_SCRAPE_STORE_TIMEOUT_S)
            except Exception as exc:  # the store is away or the loop is closing
                future.cancel()
                log.debug("metrics scrape left out the store counts: %s", exc)
            else:
                for namespace, count in sorted(counts.items()):
                    pending.add_metric((namespace,), count)
                if state is not None:
                    pool.add_metric(("size",), state.size)
                    pool.add_metric(("idle",), state.idle)
                    pool.add_metric(("max",), state.max_size)
        yield pending
        yield pool


def instrument_store(store: Store, metrics: Metrics) -> None:
    """Time every store operation of ``store`` (its coroutine methods named in :class:`Store`).

    The methods are wrapped on the instance, so the object keeps its type and every caller
    that holds it is measured.
    """
    for name, member in vars(Store).items():
        if (
            name.startswith("_")
            or name in ("open", "close")
            or not inspect.iscoroutinefunction(member)
        ):
            continue
        original = getattr(store, name, None)
        if original is None:
            continue
        setattr(store, name, _timed(name, original, metrics.store_seconds))


def _timed(
    name: str, original: Callable[..., Awaitable[Any]], histogram: Histogram
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await original(*args, **kwargs)
            outcome = "ok"
            return result
        except StoreUnavailable:
            outcome = "unavailable"
            raise
        except StoreError:
            outcome = "error"
            raise
        finally:
            histogram.labels(name, outcome).observe(time.perf_counter() - started)

    return timed


def _split_method(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}


def _code_name(context: Context, exc: BaseException | None) -> str:
    """The status an RPC ended with: set by abort or set_code, else OK or UNKNOWN."""
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED"
    if exc is not None and not isinstance(exc, grpc.aio.AbortError):
        return "UNKNOWN"
    code: object = context.code()  # the stubs say StatusCode; grpc.aio may give an int
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):
        return _CODE_NAMES.get(code, "UNKNOWN")
    return "OK" if exc is None else "UNKNOWN"


Handler = Callable[[Any, Context], Any]


class MetricsInterceptor(LayerInterceptor):
    """Counts and times every RPC by method and final status code; unary and streaming."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def wrap(self, method: str, handler: MethodHandler) -> MethodHandler:
        """Measure the handler of ``method``, whatever its kind."""
        kinds: tuple[tuple[str, Any, Callable[..., MethodHandler]], ...] = (
            ("unary", handler.unary_unary, grpc.unary_unary_rpc_method_handler),
            ("server_stream", handler.unary_stream, grpc.unary_stream_rpc_method_handler),
            ("client_stream", handler.stream_unary, grpc.stream_unary_rpc_method_handler),
            ("bidi_stream", handler.stream_stream, grpc.stream_stream_rpc_method_handler),
        )
        for kind, inner, make in kinds:
            if inner is not None:
                return make(
                    self._measured(method, kind, inner),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _measured(self, method: str, kind: str, inner: Handler) -> Handler:
        service, name = _split_method(method)
        labels = (service, name, kind)
        metrics = self._metrics
        is_watch = method == WATCH_METHOD

        def begin() -> float:
            metrics.rpc_started.labels(*labels).inc()
            metrics.rpcs_in_flight.labels(service, name).inc()
            if is_watch:
                metrics.watch_streams.inc()
            return time.perf_counter()

        def end(started: float, context: Context, exc: BaseException | None) -> None:
            metrics.rpc_seconds.labels(*labels).observe(time.perf_counter() - started)
            metrics.rpc_handled.labels(*labels, _code_name(context, exc)).inc()
            metrics.rpcs_in_flight.labels(service, name).dec()
            if is_watch:
                metrics.watch_streams.dec()

        if inspect.isasyncgenfunction(inner):

            async def measured_generator(request: Any, context: Context) -> AsyncIterator[Any]:
                started = begin()
                failure: BaseException | None = None
                try:
                    async for response in inner(request, context):
                        yield response
                except BaseException as exc:
                    failure = exc
                    raise
                finally:
                    end(started, context, failure)

            return measured_generator

        async def measured(request: Any, context: Context) -> Any:
            started = begin()
            failure: BaseException | None = None
            try:
                return await inner(request, context)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                end(started, context, failure)

        return measured


class MetricsServer:
    """The HTTP endpoint that serves ``/metrics`` from a thread of its own."""

    def __init__(self, httpd: WSGIServer, address: str) -> None:
        self._httpd = httpd
        self.address = address
        """``host:port`` actually bound (the port filled in when 0 was asked for)."""

    @classmethod
    def start(cls, metrics: Metrics, host: str, port: int) -> MetricsServer:
        """Listen on ``host:port``; OSError when the address cannot be bound."""
        httpd, _thread = start_http_server(port, addr=host, registry=metrics.registry)
        bound_port = httpd.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return cls(httpd, f"{shown}:{bound_port}")

    async def stop(self) -> None:
        """Stop serving and close the socket."""
        await asyncio.to_thread(self._httpd.shutdown)
        self._httpd.server_close()
