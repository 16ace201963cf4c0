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
* ``checkpointd_graph_retention_deleted_total`` per kind (threads, checkpoints, writes,
  channel_values) and ``checkpointd_graph_retention_kept_threads_total`` per reason (paused,
  delta): what the ``--graph-retention`` job deleted and left whole;
* ``checkpointd_pending_interrupts`` per namespace and ``checkpointd_store_pool_connections``
  (Postgres: ``size``, ``idle``, ``max``), both read from the store when scraped.

The RPC families are counted by :func:`checkpointd.edge.metrics_layer`, the store timings by
:class:`checkpointd.metrics_store.InstrumentedStore`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

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
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from checkpointd.graph.retention import RetentionCounts
from checkpointd.store.base import PoolState
from checkpointd.store.interface import Store

__all__ = ["WATCH_METHOD", "LabelCache", "Metrics", "MetricsServer"]

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


M = TypeVar("M", bound=MetricWrapperBase)


class LabelCache(Generic[M]):
    """A labelled metric's series, each looked up once: ``labels()`` checks, joins and locks
    on every call (about 0.8 µs, against 0.3 µs for the dict lookup here), which every RPC
    and store call paid four or five times. A series appears when first used, as before."""

    __slots__ = ("_metric", "_series")

    def __init__(self, metric: M) -> None:
        self._metric = metric
        self._series: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = self._metric.labels(*values)
        return series


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
        self.graph_retention_deleted = Counter(
            "checkpointd_graph_retention_deleted",
            "Graph rows the --graph-retention job deleted: threads, checkpoints, writes, "
            "channel_values.",
            ("kind",),
            registry=self.registry,
        )
        self.graph_retention_kept = Counter(
            "checkpointd_graph_retention_kept_threads",
            "Threads the --graph-retention job left whole that a rule reached, by reason "
            "(paused on an interrupt, delta: a DeltaChannel graph under keep).",
            ("reason",),
            registry=self.registry,
        )
        self.store_up = Gauge(
            "checkpointd_store_up",
            "1 while the store answers the health pings, 0 otherwise.",
            registry=self.registry,
        )

    def count_graph_retention(self, counts: RetentionCounts) -> None:
        """Add one round of the graph retention job."""
        deleted = self.graph_retention_deleted
        deleted.labels("threads").inc(counts.threads_deleted)
        deleted.labels("checkpoints").inc(counts.checkpoints_deleted)
        deleted.labels("writes").inc(counts.writes_deleted)
        deleted.labels("channel_values").inc(counts.channel_values_deleted)
        self.graph_retention_kept.labels("paused").inc(counts.paused_threads_kept)
        self.graph_retention_kept.labels("delta").inc(counts.delta_threads_kept)

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
