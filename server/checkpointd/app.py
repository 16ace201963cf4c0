"""Build the gRPC server, wire the services, run until a signal, shut down cleanly.

Start: bind every listener and answer at once (health ``NOT_SERVING``, checkpointd calls
``UNAVAILABLE``) while the store is opened, retrying until the database is there or
``--store-wait`` runs out; then ``SERVING``. Shutdown on SIGTERM/SIGINT: health goes
``NOT_SERVING``, new calls are refused, in-flight calls get ``--shutdown-grace`` seconds,
then the store is closed and the socket files removed. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from checkpointd import __version__
from checkpointd.auth import (
    Authenticator,
    Grant,
    TokenFileError,
    env_grant,
    load_tokens_file,
)
from checkpointd.config import Settings, redact_dsn
from checkpointd.edge import ComposingRegistrar, server_layers
from checkpointd.graph.store import GraphStore
from checkpointd.health import HEALTH_SERVICE, HealthService
from checkpointd.listeners import Listener, ListenerError, parse_listen, private_files
from checkpointd.logging_setup import event
from checkpointd.readiness import StoreMonitor, StoreNeverCameUp, cancel_and_wait
from checkpointd.retention import retention_jobs
from checkpointd.security import ExposureError, TlsError, TlsFiles, check_exposure
from checkpointd.servicers import (
    CheckpointServicer,
    GraphServicer,
    IdempotencyServicer,
    InterruptServicer,
    ReplicationServicer,
    ServiceDeps,
    WriteServicer,
)
from checkpointd.store.executions import ExecutionReader
from checkpointd.store.interface import Store
from checkpointd.watch import WatchHub, connection_age_options
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    graph_service_pb2,
    graph_service_pb2_grpc,
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
    replication_service_pb2,
    replication_service_pb2_grpc,
    write_service_pb2,
    write_service_pb2_grpc,
)

if TYPE_CHECKING:
    from checkpointd.console import Console
    from checkpointd.metrics import Metrics, MetricsServer

__all__ = [
    "KEEPALIVE_OPTIONS",
    "SERVICE_NAMES",
    "StartupError",
    "build_execution_reader",
    "build_graph_store",
    "build_store",
    "serve",
]

log = logging.getLogger("checkpointd")

# The transport refuses requests far above the configured limit before parsing them; between
# the two, the guard answers with a message that names the setting to raise.
_TRANSPORT_SLACK_BYTES = 16 * 1024 * 1024

#: The checkpointd services, by full name (each has its own health status).
SERVICE_NAMES: tuple[str, ...] = tuple(
    service.full_name
    for module in (
        checkpoint_service_pb2,
        interrupt_service_pb2,
        idempotency_service_pb2,
        replication_service_pb2,
        write_service_pb2,
        graph_service_pb2,
    )
    for service in module.DESCRIPTOR.services_by_name.values()
)
# Calls that answer whether or not the store is there.
_ALWAYS_ANSWERED = ("/grpc.health.v1.", "/grpc.reflection.")

#: The server's keepalive policy, published in docs/protocol.md ("Keepalive") and on
#: WatchInterrupts (tests/test_keepalive_policy.py keeps the three in step).
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    # Clients ping every 10 s to notice a dead server or a silent path; accept that
    # instead of answering GOAWAY "too_many_pings" (gRPC's default wants 5 minutes).
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
    # Ping our side too, so a client that vanished without a FIN is noticed.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
)


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
            pooled=settings.pg_pooler == "transaction",
            statement_cache_size=settings.pg_statement_cache_size,
            listen_dsn=settings.pg_listen_dsn,
            poll_interval=settings.pg_poll_interval,
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


#: What is built on a store's connections, per backend: the class (``module:Class``) for an
#: SQLite store and the one for a Postgres store, each given the store's ``access()``.
_ON_ACCESS = {
    "graph store": (
        "checkpointd.store.sqlite.graph:SQLiteGraphStore",
        "checkpointd.store.postgres.graph:PostgresGraphStore",
    ),
    "executions reader": (
        "checkpointd.store.sqlite.executions:SQLiteExecutionReader",
        "checkpointd.store.postgres.executions:PostgresExecutionReader",
    ),
}


def _on_access(store: Store, what: str) -> object:
    """``what`` (a key of ``_ON_ACCESS``) for ``store``'s backend, on that store's
    connections. Only that backend's modules are imported (asyncpg only for a Postgres
    store)."""
    from checkpointd.store.sqlite.access import SQLiteAccess

    sqlite, postgres = _ON_ACCESS[what]
    access = store.access()
    if isinstance(access, SQLiteAccess):
        target = sqlite
    else:
        from checkpointd.store.postgres.access import PostgresAccess

        if not isinstance(access, PostgresAccess):
            raise TypeError(f"no {what} for {type(store).__name__}")
        target = postgres
    module, name = target.split(":")
    built: object = getattr(importlib.import_module(module), name)(access)
    return built


def build_graph_store(store: Store) -> GraphStore:
    """The graph store of ``store``'s backend, on that store's connections."""
    return cast(GraphStore, _on_access(store, "graph store"))


def build_execution_reader(store: Store) -> ExecutionReader:
    """The execution summaries of ``store``'s backend, on that store's connections."""
    return cast(ExecutionReader, _on_access(store, "executions reader"))


def _build_server(
    settings: Settings,
    deps: ServiceDeps,
    *,
    health: HealthService,
    monitor: StoreMonitor,
    metrics: Metrics | None,
    authenticator: Authenticator | None = None,
) -> tuple[grpc.aio.Server, WriteServicer]:
    """The server with every service registered, and its WriteService (closed at shutdown)."""
    transport_limit = settings.max_message_bytes + _TRANSPORT_SLACK_BYTES
    layers = server_layers(
        max_message_bytes=settings.max_message_bytes,
        store_is_open=lambda: monitor.opened,
        exempt_prefixes=_ALWAYS_ANSWERED,
        authenticator=authenticator,
        metrics=metrics,
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", transport_limit),
            ("grpc.max_send_message_length", transport_limit),
            ("grpc.so_reuseport", 0),
            *KEEPALIVE_OPTIONS,
            # What really ends a watch stream stuck on a client that stopped reading (B2).
            *connection_age_options(settings.watch_max_lifetime),
        ],
    )
    # The layers are composed with each method's handler here, once, not run as interceptors
    # on every call (checkpointd.edge explains why).
    registrar: Any = ComposingRegistrar(server, layers)
    checkpoints = CheckpointServicer(deps)
    interrupts = InterruptServicer(deps)
    idempotency = IdempotencyServicer(deps)
    checkpoint_service_pb2_grpc.add_CheckpointServiceServicer_to_server(checkpoints, registrar)
    interrupt_service_pb2_grpc.add_InterruptServiceServicer_to_server(interrupts, registrar)
    idempotency_service_pb2_grpc.add_IdempotencyServiceServicer_to_server(idempotency, registrar)
    graph = GraphServicer(deps, deps.graph_store) if deps.graph_store is not None else None
    if graph is not None:
        graph_service_pb2_grpc.add_GraphServiceServicer_to_server(graph, registrar)
    # The Write stream runs its items through the unary servicers above (contracts S1, S4).
    writes = WriteServicer(
        checkpoints, idempotency, interrupts, graph, max_message_bytes=deps.max_message_bytes
    )
    write_service_pb2_grpc.add_WriteServiceServicer_to_server(writes, registrar)
    replication_service_pb2_grpc.add_ReplicationServiceServicer_to_server(
        ReplicationServicer(deps), registrar
    )
    health_pb2_grpc.add_HealthServicer_to_server(health, registrar)
    # What reflection.enable_server_reflection does for a grpc.aio server, on the registrar.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(
            (*SERVICE_NAMES, HEALTH_SERVICE, reflection.SERVICE_NAME)
        ),
        registrar,
    )
    return server, writes


def _bind(
    server: grpc.aio.Server,
    listeners: list[Listener],
    owned: list[Listener],
    *,
    mode: int,
    tls: grpc.ServerCredentials | None = None,
) -> list[str]:
    """Bind every listener (TCP ones with ``tls`` when given; Unix sockets always plaintext,
    guarded by their file mode); ``owned`` collects those whose socket files are ours to
    remove."""
    bound: list[str] = []
    for listener in listeners:
        listener.prepare()
        try:
            with private_files():
                if tls is not None and listener.unix_path is None:
                    port = server.add_secure_port(listener.address, tls)
                else:
                    port = server.add_insecure_port(listener.address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {listener.address}: {exc}") from None
        owned.append(listener)
        listener.apply_mode(mode)
        if listener.unix_path is None:
            host = listener.address.rpartition(":")[0]
            bound.append(f"{host}:{port}")
        else:
            bound.append(listener.address)
    return bound


def _log_config(settings: Settings) -> None:
    """One line with the whole configuration, the store URL without its password."""
    fields: dict[str, object] = {
        "version": __version__,
        "store": redact_dsn(settings.store),
        "listen": list(settings.listen),
        "unix_socket_mode": f"{settings.unix_socket_mode:04o}",
        "max_message_bytes": settings.max_message_bytes,
        "store_timeout_s": settings.store_timeout,
        "store_wait_s": "forever" if settings.store_wait is None else settings.store_wait,
        "health_interval_s": settings.health_interval,
        "health_ping_timeout_s": settings.health_ping_timeout,
        "shutdown_grace_s": settings.shutdown_grace,
        "request_retention_s": settings.request_retention_seconds,
        "event_retention_s": settings.event_retention_seconds,
        "graph_retention": str(settings.graph_retention or "off"),
        "watch_buffer": settings.watch_buffer,
        "watch_page_bytes": settings.watch_page_bytes,
        "max_watch_streams": settings.max_watch_streams,
        "max_watch_streams_per_peer": settings.max_watch_streams_per_peer,
        "max_health_watch_streams": settings.max_health_watch_streams,
        "watch_max_lifetime_s": settings.watch_max_lifetime,
        "watch_progress_interval_s": settings.watch_progress_interval,
        "auth": _auth_summary(settings),
        "tls": "mutual" if settings.tls_client_ca else "on" if settings.tls_cert else "off",
        "insecure": settings.insecure,
        "metrics_listen": settings.metrics_listen or "off",
        "console_listen": settings.console_listen or "off",
        "log_level": settings.log_level,
        "log_format": settings.log_format,
    }
    if settings.is_postgres:
        fields.update(
            pg_schema=settings.pg_schema,
            pg_pool_max=settings.pg_pool_max,
            pg_pooler=settings.pg_pooler,
            pg_statement_cache_size=(
                "auto"
                if settings.pg_statement_cache_size is None
                else settings.pg_statement_cache_size
            ),
            # Which way the watch hub hears of new events (never the listen URL itself).
            pg_watch=(
                "listen-dsn"
                if settings.pg_listen_dsn
                else f"poll-{settings.pg_poll_interval:g}s"
                if settings.pg_pooler == "transaction"
                else "listen"
            ),
        )
    else:
        fields.update(sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    summary = " ".join(f"{key}={value}" for key, value in fields.items())
    event(log, logging.INFO, "config", f"checkpointd {__version__} starting: {summary}", **fields)


def _auth_summary(settings: Settings) -> str:
    """Where the tokens come from (never the tokens)."""
    sources = []
    if settings.auth_tokens_file is not None:
        sources.append(f"file:{settings.auth_tokens_file}")
    if settings.auth_token:
        sources.append("env:CHECKPOINTD_AUTH_TOKEN")
    return "+".join(sources) or "off"


def _authenticator(settings: Settings) -> Authenticator | None:
    """The tokens of the file and of CHECKPOINTD_AUTH_TOKEN; None when there are none."""
    grants: list[Grant] = []
    try:
        if settings.auth_tokens_file is not None:
            grants.extend(load_tokens_file(settings.auth_tokens_file))
        if settings.auth_token:
            extra = env_grant(settings.auth_token)
            if any(grant.digest == extra.digest for grant in grants):
                raise TokenFileError(
                    "CHECKPOINTD_AUTH_TOKEN is also a token of the tokens file; use one or the "
                    "other"
                )
            grants.append(extra)
    except TokenFileError as exc:
        raise StartupError(str(exc)) from None
    return Authenticator(grants) if grants else None


def _start_metrics(address: str, metrics: Metrics) -> MetricsServer:
    from checkpointd.metrics import MetricsServer

    listener = parse_listen(address)
    host, _, port = listener.address.rpartition(":")
    try:
        return MetricsServer.start(metrics, host.strip("[]"), int(port))
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on {address}: {exc.strerror or exc}") from None


async def serve(settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT, waiting for the store as configured, then drain and close."""
    try:
        listeners = [parse_listen(address) for address in settings.listen]
        console_listener = (
            parse_listen(settings.console_listen) if settings.console_listen else None
        )
    except ListenerError as exc:
        raise StartupError(str(exc)) from None
    _log_config(settings)
    authenticator = _authenticator(settings)
    try:
        tls_files = TlsFiles.from_settings(
            settings.tls_cert, settings.tls_key, settings.tls_client_ca
        )
        tls = tls_files.credentials() if tls_files is not None else None
        check_exposure(
            listeners,
            auth=authenticator is not None,
            tls=tls is not None,
            mutual_tls=tls_files is not None and tls_files.client_ca is not None,
            insecure=settings.insecure,
        )
        if console_listener is not None:
            # The console is one more listener, under the same rule (its TLS is the same
            # certificate; tokens are checked on every API call).
            check_exposure(
                [console_listener],
                auth=authenticator is not None,
                tls=tls is not None,
                mutual_tls=False,
                insecure=settings.insecure,
            )
    except (TlsError, ExposureError) as exc:
        raise StartupError(str(exc)) from None
    store = build_store(settings)
    graph_store = build_graph_store(store)
    executions = build_execution_reader(store)
    description = redact_dsn(settings.store)
    metrics: Metrics | None = None
    if settings.metrics_listen:
        # prometheus_client is imported only here: a sidecar that serves no metrics does not
        # hold it (nor the http.server and email modules it brings).
        from checkpointd.graph.metrics import timed_graph_store
        from checkpointd.metrics import Metrics
        from checkpointd.metrics_store import timed_store

        metrics = Metrics()
        # Every holder of the store (servicers, watch hub, health pings, scrapes) is timed.
        store = timed_store(store, metrics.store_seconds)
        graph_store = timed_graph_store(graph_store, metrics.store_seconds)
    retention = timedelta(seconds=settings.request_retention_seconds)
    watch_hub = WatchHub(
        store,
        buffer_events=settings.watch_buffer,
        page_bytes=settings.watch_page_bytes,
        max_streams=settings.max_watch_streams,
        max_streams_per_peer=settings.max_watch_streams_per_peer,
        max_lifetime=settings.watch_max_lifetime,
        progress_interval=settings.watch_progress_interval,
    )
    deps = ServiceDeps(
        store=store,
        max_message_bytes=settings.max_message_bytes,
        request_retention=retention,
        prune_batch_size=settings.prune_batch_size,
        watch_hub=watch_hub,
        graph_store=graph_store,
        executions=executions,
    )
    background: list[asyncio.Task[object]] = []
    bound: list[str] = []

    async def store_is_open() -> None:
        log.info(
            "serving on %s (store %s, max message %d bytes)",
            ", ".join(bound),
            description,
            settings.max_message_bytes,
        )
        background.extend(
            retention_jobs(
                store,
                request_retention=retention,
                event_retention=timedelta(seconds=settings.event_retention_seconds),
                batch_size=settings.prune_batch_size,
                graph=graph_store,
                graph_retention=settings.graph_retention,
                graph_counted=None if metrics is None else metrics.count_graph_retention,
            )
        )
        watch_hub.start()

    health = HealthService(SERVICE_NAMES, max_watch_streams=settings.max_health_watch_streams)
    monitor = StoreMonitor(
        store,
        health,
        description=description,
        interval=settings.health_interval,
        ping_timeout=settings.health_ping_timeout,
        wait=settings.store_wait,
        on_first_open=store_is_open,
    )
    server, writes = _build_server(
        settings,
        deps,
        health=health,
        monitor=monitor,
        metrics=metrics,
        authenticator=authenticator,
    )
    owned: list[Listener] = []
    metrics_server: MetricsServer | None = None
    console: Console | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if not stop.is_set():
            stop.set()
            return
        # A second signal: the operator wants out now. Acknowledged writes are already
        # durable (E1); only the socket files need removing.
        event(
            log,
            logging.WARNING,
            "shutdown_forced",
            f"second {signal.Signals(signum).name}: exiting at once",
        )
        for listener in owned:
            listener.cleanup()
        logging.shutdown()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    monitor_task: asyncio.Task[None] | None = None
    try:
        try:
            bound.extend(_bind(server, listeners, owned, mode=settings.unix_socket_mode, tls=tls))
        except ListenerError as exc:
            raise StartupError(str(exc)) from None
        if metrics is not None and settings.metrics_listen:
            metrics_server = _start_metrics(settings.metrics_listen, metrics)
            metrics.watch_store(store, loop, is_open=lambda: monitor.opened)
            metrics.store_up.set_function(lambda: 1.0 if monitor.up else 0.0)
            event(
                log,
                logging.INFO,
                "metrics_listening",
                f"metrics on http://{metrics_server.address}/metrics",
                address=metrics_server.address,
            )
        await server.start()
        if console_listener is not None:
            # Imported only when asked for: aiohttp is half of the server's start-up imports.
            from checkpointd.console import Console, ConsoleError

            console = Console(deps, monitor, authenticator, secure_cookie=tls_files is not None)
            try:
                address = await console.start(
                    console_listener,
                    tls_files.ssl_context() if tls_files is not None else None,
                )
            except ConsoleError as exc:
                raise StartupError(str(exc)) from None
            scheme = "https" if tls_files is not None else "http"
            event(
                log,
                logging.INFO,
                "console_listening",
                f"approvals console on {scheme}://{address}/",
                address=address,
            )
        event(
            log,
            logging.INFO,
            "listening",
            f"listening on {', '.join(bound)}; health NOT_SERVING until the store "
            f"{description} is open",
            addresses=bound,
        )
        monitor_task = asyncio.create_task(monitor.run())
        stop_task = asyncio.create_task(stop.wait())
        background.append(stop_task)
        await asyncio.wait((monitor_task, stop_task), return_when=asyncio.FIRST_COMPLETED)
        if monitor_task.done():
            failure = monitor_task.exception()
            if isinstance(failure, StoreNeverCameUp):
                raise StartupError(str(failure)) from None
            if failure is not None:
                raise failure
        event(
            log,
            logging.INFO,
            "shutdown_started",
            f"shutting down: health NOT_SERVING, finishing in-flight calls for up to "
            f"{settings.shutdown_grace:g}s",
            grace_s=settings.shutdown_grace,
        )
    finally:
        await health.enter_shutdown()
        # Watch streams never finish by themselves: end them now, with UNAVAILABLE
        # (SHUTTING_DOWN), so their clients reconnect from their cursors.
        await watch_hub.close()
        # Write streams stay open while idle: end them too, after the items they have read.
        writes.close()
        if console is not None:
            await console.stop()
        await server.stop(settings.shutdown_grace)
        await cancel_and_wait(monitor_task)
        for task in background:
            await cancel_and_wait(task)
        await store.close()
        if metrics_server is not None:
            await metrics_server.stop()
        for listener in owned:
            listener.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        event(log, logging.INFO, "stopped", "stopped")
