"""The periodic jobs that forget what is past its retention.

:func:`retention_jobs` starts them once the store is open: the request-id purges (claim
tokens and remembered request ids, the graph store's too, past ``--request-retention``), the
event purge (interrupt events past ``--event-retention``) and, when ``--graph-retention``
is set, the graph threads' retention (:mod:`checkpointd.graph.retention_job`). Each runs a few
times per retention period, at most every 10 minutes and at least a second apart; a store
error skips one round with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from checkpointd.graph.retention_job import (
    GraphRetention,
    RetentionCounter,
    apply_graph_retention_forever,
)
from checkpointd.graph.store import GraphStore
from checkpointd.servicers.common import utc_now
from checkpointd.store.base import StoreError
from checkpointd.store.interface import Store

__all__ = [
    "purge_events_forever",
    "purge_graph_request_ids_forever",
    "purge_request_ids_forever",
    "retention_jobs",
]

log = logging.getLogger("checkpointd")


def _interval(retention: timedelta) -> float:
    """A quarter of the retention, between 1 s and 10 minutes."""
    return max(1.0, min(retention.total_seconds() / 4, 600.0))


async def purge_request_ids_forever(store: Store, retention: timedelta) -> None:
    """Forget claim tokens and remembered request ids (idempotency puts, tombstones of deleted
    checkpoints, delete and prune replies) past the request-id retention."""
    interval = _interval(retention)
    while True:
        await asyncio.sleep(interval)
        try:
            cutoff = utc_now() - retention
            purged = await store.purge_claims(cutoff)
            if purged:
                log.info("purged %d expired claim tokens", purged)
            forgotten = await store.purge_applied_requests(cutoff)
            if forgotten:
                log.info("purged %d expired request ids", forgotten)
        except StoreError as exc:
            log.warning("request id purge skipped: %s", exc)


async def purge_graph_request_ids_forever(graph: GraphStore, retention: timedelta) -> None:
    """Forget the graph store's request ids (G6) past the request-id retention."""
    interval = _interval(retention)
    while True:
        await asyncio.sleep(interval)
        try:
            forgotten = await graph.purge_requests(utc_now() - retention)
            if forgotten:
                log.info("purged %d expired graph request ids", forgotten)
        except StoreError as exc:
            log.warning("graph request id purge skipped: %s", exc)


async def purge_events_forever(store: Store, retention: timedelta, batch_size: int) -> None:
    """Drop interrupt events past their retention time, ``batch_size`` rows per transaction."""
    interval = _interval(retention)
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await store.purge_events(utc_now() - retention, batch_size=batch_size)
            if purged:
                log.info("purged %d interrupt events past their retention", purged)
        except StoreError as exc:
            log.warning("event purge skipped: %s", exc)


def retention_jobs(
    store: Store,
    *,
    request_retention: timedelta,
    event_retention: timedelta,
    batch_size: int,
    graph: GraphStore | None = None,
    graph_retention: GraphRetention | None = None,
    graph_counted: RetentionCounter | None = None,
) -> list[asyncio.Task[None]]:
    """Start every retention job; the caller cancels the tasks at shutdown."""
    jobs = [
        asyncio.create_task(purge_request_ids_forever(store, request_retention)),
        asyncio.create_task(purge_events_forever(store, event_retention, batch_size)),
    ]
    if graph is not None:
        jobs.append(asyncio.create_task(purge_graph_request_ids_forever(graph, request_retention)))
        if graph_retention is not None:
            job = apply_graph_retention_forever(
                graph, graph_retention, batch_size, counted=graph_counted
            )
            jobs.append(asyncio.create_task(job))
    return jobs
