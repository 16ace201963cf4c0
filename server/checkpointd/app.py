"""Build the gRPC server, wire the services, run until a signal, shut down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from datetime import timedelta

import grpc

from checkpointd.config import Settings, redact_dsn
from checkpointd.interceptors import RequestGuardInterceptor
from checkpointd.listeners import Listener, ListenerError, parse_listen
from checkpointd.servicers import (
    CheckpointServicer,
    IdempotencyServicer,
    InterruptServicer,
    ServiceDeps,
)
from checkpointd.servicers.common import utc_now
from checkpointd.store.base import Store, StoreError
from checkpointd_client._proto.checkpointd.v1 import (
    checkpoint_service_pb2_grpc,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2_grpc,
)

__all__ = ["StartupError", "build_store", "serve"]

log = logging.getLogger("checkpointd")

# The transport refuses requests far above the configured limit before parsing them; between
# the two, the guard answers with a message that names the setting to raise.
_TRANSPORT_SLACK_BYTES = 16 * 1024 * 1024


class StartupError(Exception):
    """The server cannot start; the message is one line saying what to fix."""


def build_store(settings: Settings) -> Store:
    """The backend named by the store URL."""
    if settings.is_postgres:
        from checkpointd.store.postgres import PostgresStore

        return PostgresStore(
            settings.store,
            schema=settings.pg_schema,
            min_pool_size=settings.pg_pool_min,
            max_pool_size=settings.pg_pool_max,
            timeout=settings.store_timeout,
        )
    from checkpointd.store.sqlite import SQLiteStore

    path = settings.sqlite_path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create the directory for {path}: {exc.strerror}") from None
    return SQLiteStore(
        path, busy_timeout_ms=settings.sqlite_busy_timeout_ms, timeout=settings.store_timeout
    )


def _build_server(settings: Settings, deps: ServiceDeps) -> grpc.aio.Server:
    transport_limit = settings.max_message_bytes + _TRANSPORT_SLACK_BYTES
    server = grpc.aio.server(
        interceptors=[RequestGuardInterceptor(max_message_bytes=settings.max_message_bytes)],
        options=[
            ("grpc.max_receive_message_length", transport_limit),
            ("grpc.max_send_message_length", transport_limit),
            ("grpc.so_reuseport", 0),
            # Clients ping idle connections every 30 s to notice a dead server; accept that
            # instead of answering GOAWAY "too_many_pings" (gRPC's default wants 5 minutes).
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
            ("grpc.http2.max_ping_strikes", 0),
            # Ping our side too, so a client that vanished without a FIN is noticed.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
        ],
    )
    checkpoint_service_pb2_grpc.add_CheckpointServiceServicer_to_server(
        CheckpointServicer(deps), server
    )
    interrupt_service_pb2_grpc.add_InterruptServiceServicer_to_server(
        InterruptServicer(deps), server
    )
    idempotency_service_pb2_grpc.add_IdempotencyServiceServicer_to_server(
        IdempotencyServicer(deps), server
    )
    return server


def _bind(server: grpc.aio.Server, listeners: list[Listener], owned: list[Listener]) -> list[str]:
    """Bind every listener; ``owned`` collects those whose socket files are ours to remove."""
    bound: list[str] = []
    for listener in listeners:
        listener.prepare()
        try:
            port = server.add_insecure_port(listener.address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {listener.address}: {exc}") from None
        owned.append(listener)
        if listener.unix_path is None:
            host = listener.address.rpartition(":")[0]
            bound.append(f"{host}:{port}")
        else:
            bound.append(listener.address)
    return bound


async def _purge_claims_forever(store: Store, retention: timedelta) -> None:
    """Forget claim tokens past their retention time, a few times per retention period."""
    interval = max(1.0, min(retention.total_seconds() / 4, 600.0))
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await store.purge_claims(utc_now() - retention)
            if purged:
                log.info("purged %d expired claim tokens", purged)
        except StoreError as exc:
            log.warning("claim purge skipped: %s", exc)


async def serve(settings: Settings) -> None:
    """Open the store, serve until SIGTERM/SIGINT, then drain and close."""
    try:
        listeners = [parse_listen(address) for address in settings.listen]
    except ListenerError as exc:
        raise StartupError(str(exc)) from None
    store = build_store(settings)
    try:
        await store.open()
    except StoreError as exc:
        raise StartupError(f"cannot open the store {redact_dsn(settings.store)}: {exc}") from None
    retention = timedelta(seconds=settings.claim_retention_seconds)
    deps = ServiceDeps(
        store=store,
        max_message_bytes=settings.max_message_bytes,
        claim_retention=retention,
        prune_batch_size=settings.prune_batch_size,
    )
    server = _build_server(settings, deps)
    janitor: asyncio.Task[None] | None = None
    owned: list[Listener] = []
    try:
        try:
            bound = _bind(server, listeners, owned)
        except ListenerError as exc:
            raise StartupError(str(exc)) from None
        await server.start()
        log.info(
            "serving on %s (store %s, max message %d bytes)",
            ", ".join(bound),
            redact_dsn(settings.store),
            settings.max_message_bytes,
        )
        janitor = asyncio.create_task(_purge_claims_forever(store, retention))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info(
            "shutting down: finishing in-flight calls for up to %.1fs", settings.shutdown_grace
        )
    finally:
        if janitor is not None:
            janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await janitor
        await server.stop(settings.shutdown_grace)
        await store.close()
        for listener in owned:
            listener.cleanup()
        log.info("stopped")
