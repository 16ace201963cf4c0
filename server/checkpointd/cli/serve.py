"""``checkpointd serve``: run the server.

Each flag has a ``CHECKPOINTD_*`` environment equivalent; the flag wins. Configuration
mistakes end with one line on stderr saying what to fix, and exit status 2 (bad flags) or 1
(cannot start).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from checkpointd.config import (
    DEFAULT_EVENT_RETENTION_SECONDS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_HEALTH_WATCH_STREAMS,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_WATCH_STREAMS,
    DEFAULT_MAX_WATCH_STREAMS_PER_PEER,
    DEFAULT_PG_SCHEMA,
    DEFAULT_REQUEST_RETENTION_SECONDS,
    DEFAULT_WATCH_BUFFER,
    DEFAULT_WATCH_MAX_LIFETIME_SECONDS,
    DEFAULT_WATCH_PAGE_BYTES,
    PG_SCHEMA_RE,
    Settings,
    default_store_url,
    redact_dsn,
)
from checkpointd.listeners import (
    DEFAULT_UNIX_SOCKET_MODE,
    ListenerError,
    parse_listen,
    parse_socket_mode,
)
from checkpointd.logging_setup import LOG_FORMATS, configure_logging

__all__ = ["register"]

T = TypeVar("T")
LOG_LEVELS = ("debug", "info", "warning", "error")
PG_POOLERS = ("none", "transaction")


def _env(name: str, parse: Callable[[str], T], default: T) -> T:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise SystemExit(f"checkpointd: error: {name}={raw!r} is not valid: {exc}") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be zero (no limit) or a positive integer")
    return value


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be 1 or 0")


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must be zero or a positive number")
    return value


def _store_wait(text: str) -> float | None:
    if text.strip().lower() == "forever":
        return None
    try:
        return _non_negative_float(text)
    except ValueError:
        raise ValueError("must be a number of seconds (0 = fail at once) or 'forever'") from None


def _tcp_address(text: str) -> str:
    if text.startswith("unix:"):
        raise ValueError("must be host:port (metrics are served over HTTP on TCP)")
    try:
        parse_listen(text)
    except ListenerError as exc:
        raise ValueError(str(exc)) from None
    return text


def _console_address(text: str) -> str:
    if text.startswith("unix:"):
        raise ValueError("must be host:port (the console is served over HTTP on TCP)")
    return _tcp_address(text)


def _address_list(text: str) -> list[str]:
    return [address.strip() for address in text.split(",") if address.strip()]


def _help_text(text: str) -> str:
    """``text`` shown as is in a help string (argparse expands ``%`` there)."""
    return text.replace("%", "%%")


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Adapt a parser for argparse, whose error message then names the flag."""

    def parse_arg(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    parse_arg.__name__ = parse.__name__
    return parse_arg


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the command line."""
    serve = commands.add_parser(
        "serve",
        help="run the server",
        description="Run the checkpointd gRPC server. Every flag has a CHECKPOINTD_* "
        "environment variable; the flag wins.",
    )
    serve.set_defaults(handler=run)
    store = _env("CHECKPOINTD_STORE", str, default_store_url())
    serve.add_argument(
        "--store",
        default=store,
        # Not %(default)s: CHECKPOINTD_STORE may carry a password, never to be printed.
        help="sqlite://PATH (e.g. sqlite:///var/lib/checkpointd/store.db) or "
        "postgresql://user@host:5432/db [CHECKPOINTD_STORE; default: "
        f"{_help_text(redact_dsn(store))}]",
    )
    serve.add_argument(
        "--listen",
        action="append",
        help="host:port or unix:///path; repeat for several "
        f"[CHECKPOINTD_LISTEN, comma-separated; default: {DEFAULT_LISTEN}]",
    )
    serve.add_argument(
        "--pg-schema",
        default=_env("CHECKPOINTD_PG_SCHEMA", str, DEFAULT_PG_SCHEMA),
        help="Postgres schema for the tables [CHECKPOINTD_PG_SCHEMA; default: %(default)s]",
    )
    serve.add_argument(
        "--pg-pool-max",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_PG_POOL_MAX", _positive_int, 10),
        help="largest Postgres connection pool [CHECKPOINTD_PG_POOL_MAX; default: %(default)s]",
    )
    serve.add_argument(
        "--pg-pooler",
        choices=PG_POOLERS,
        default=_env("CHECKPOINTD_PG_POOLER", str.lower, "none"),
        help="transaction: --store goes through a transaction-pooling PgBouncer (no session "
        "state is relied on: statements unprepared unless --pg-statement-cache-size says "
        "otherwise, watching through --pg-listen-dsn or by polling) "
        "[CHECKPOINTD_PG_POOLER; default: %(default)s]",
    )
    serve.add_argument(
        "--pg-statement-cache-size",
        type=_checked(_non_negative_int),
        default=_env("CHECKPOINTD_PG_STATEMENT_CACHE_SIZE", _non_negative_int, None),
        metavar="N",
        help="prepared statements cached per Postgres connection; behind PgBouncer 1.21+ with "
        "max_prepared_statements > 0 a cache works again (e.g. 100) "
        "[CHECKPOINTD_PG_STATEMENT_CACHE_SIZE; default: 100, or 0 with --pg-pooler transaction]",
    )
    listen_dsn = _env("CHECKPOINTD_PG_LISTEN_DSN", str, None)
    listen_default = (
        redact_dsn(listen_dsn)
        if listen_dsn
        else "the --store URL; with --pg-pooler transaction, none: poll"
    )
    serve.add_argument(
        "--pg-listen-dsn",
        default=listen_dsn,
        metavar="URL",
        # Never %(default)s: the URL may carry a password.
        help="postgresql:// URL of a direct connection (not through a transaction pooler) for "
        "the one LISTEN session that wakes watchers "
        f"[CHECKPOINTD_PG_LISTEN_DSN; default: {_help_text(listen_default)}]",
    )
    serve.add_argument(
        "--pg-poll-interval",
        type=_checked(_positive_float),
        default=_env("CHECKPOINTD_PG_POLL_INTERVAL", _positive_float, 0.5),
        metavar="SECONDS",
        help="with --pg-pooler transaction and no --pg-listen-dsn, seconds between reads of the "
        "event outbox: the longest a watcher waits for an event "
        "[CHECKPOINTD_PG_POLL_INTERVAL; default: %(default)s]",
    )
    serve.add_argument(
        "--sqlite-busy-timeout-ms",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_SQLITE_BUSY_TIMEOUT_MS", _positive_int, 5000),
        help="milliseconds an SQLite write waits for another process's lock before answering "
        "UNAVAILABLE [CHECKPOINTD_SQLITE_BUSY_TIMEOUT_MS; default: %(default)s]",
    )
    serve.add_argument(
        "--max-message-bytes",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_MAX_MESSAGE_BYTES", _positive_int, DEFAULT_MAX_MESSAGE_BYTES),
        help="largest request accepted [CHECKPOINTD_MAX_MESSAGE_BYTES; default: %(default)s]",
    )
    # One retention for every request id; --claim-retention (CHECKPOINTD_CLAIM_RETENTION) is
    # its former, narrower name, still accepted.
    serve.add_argument(
        "--request-retention",
        "--claim-retention",
        dest="request_retention",
        type=_checked(_positive_int),
        default=_env(
            "CHECKPOINTD_REQUEST_RETENTION",
            _positive_int,
            _env("CHECKPOINTD_CLAIM_RETENTION", _positive_int, DEFAULT_REQUEST_RETENTION_SECONDS),
        ),
        help="seconds request ids are remembered, so a retry is answered like the first call: "
        "claim tokens, idempotency puts, deleted checkpoints' request ids, delete and prune "
        "replies [CHECKPOINTD_REQUEST_RETENTION; default: %(default)s; --claim-retention and "
        "CHECKPOINTD_CLAIM_RETENTION are deprecated names of this setting]",
    )
    serve.add_argument(
        "--event-retention",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_EVENT_RETENTION", _positive_int, DEFAULT_EVENT_RETENTION_SECONDS),
        help="seconds interrupt events are kept for watchers resuming from a cursor "
        "[CHECKPOINTD_EVENT_RETENTION; default: %(default)s]",
    )
    serve.add_argument(
        "--watch-buffer",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_WATCH_BUFFER", _positive_int, DEFAULT_WATCH_BUFFER),
        help="events a watcher may fall behind before its stream ends with RESOURCE_EXHAUSTED; "
        "also the most snapshot rows a stream reads at once "
        "[CHECKPOINTD_WATCH_BUFFER; default: %(default)s]",
    )
    serve.add_argument(
        "--watch-page-bytes",
        type=_checked(_positive_int),
        default=_env("CHECKPOINTD_WATCH_PAGE_BYTES", _positive_int, DEFAULT_WATCH_PAGE_BYTES),
        metavar="BYTES",
        help="most bytes of snapshot rows or events a watch stream reads from the store at once "
        "(a larger single row is read alone); a stream reads its next page only after writing "
        "the last, so this bounds what one stream holds "
        "[CHECKPOINTD_WATCH_PAGE_BYTES; default: %(default)s]",
    )
    serve.add_argument(
        "--store-timeout",
        type=_checked(_positive_float),
        default=_env("CHECKPOINTD_STORE_TIMEOUT", _positive_float, 10.0),
        help="seconds a store operation may take [CHECKPOINTD_STORE_TIMEOUT; default: %(default)s]",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=_checked(_positive_float),
        default=_env("CHECKPOINTD_SHUTDOWN_GRACE", _positive_float, 10.0),
        help="seconds in-flight calls get on SIGTERM "
        "[CHECKPOINTD_SHUTDOWN_GRACE; default: %(default)s]",
    )
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=_env("CHECKPOINTD_LOG_LEVEL", str.lower, "info"),
        help="[CHECKPOINTD_LOG_LEVEL; default: %(default)s]",
    )
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=_env("CHECKPOINTD_LOG_FORMAT", str.lower, "text"),
        help="text: one readable line per event; json: one JSON object per line "
        "[CHECKPOINTD_LOG_FORMAT; default: %(default)s]",
    )
    serve.add_argument(
        "--unix-socket-mode",
        type=_checked(parse_socket_mode),
        default=_env("CHECKPOINTD_UNIX_SOCKET_MODE", parse_socket_mode, DEFAULT_UNIX_SOCKET_MODE),
        metavar="MODE",
        help="octal permissions of the Unix socket files (0660 lets the group connect) "
        f"[CHECKPOINTD_UNIX_SOCKET_MODE; default: {DEFAULT_UNIX_SOCKET_MODE:04o}]",
    )
    serve.add_argument(
        "--health-interval",
        type=_checked(_positive_float),
        default=_env("CHECKPOINTD_HEALTH_INTERVAL", _positive_float, 2.0),
        metavar="SECONDS",
        help="seconds between the store pings that decide the grpc.health.v1 status "
        "[CHECKPOINTD_HEALTH_INTERVAL; default: %(default)s]",
    )
    serve.add_argument(
        "--store-wait",
        type=_checked(_store_wait),
        default=_env("CHECKPOINTD_STORE_WAIT", _store_wait, None),
        metavar="SECONDS",
        help="how long to wait at start for a database that is not there yet, serving "
        "NOT_SERVING meanwhile; 0 fails at once (exit 1) "
        "[CHECKPOINTD_STORE_WAIT; default: forever]",
    )
    serve.add_argument(
        "--metrics-listen",
        type=_checked(_tcp_address),
        default=_env("CHECKPOINTD_METRICS_LISTEN", _tcp_address, None),
        metavar="HOST:PORT",
        help="serve Prometheus metrics over HTTP at http://HOST:PORT/metrics; keep it on "
        "loopback (e.g. 127.0.0.1:9464) unless the network is trusted "
        "[CHECKPOINTD_METRICS_LISTEN; default: off]",
    )
    serve.add_argument(
        "--console-listen",
        type=_checked(_console_address),
        default=_env("CHECKPOINTD_CONSOLE_LISTEN", _console_address, None),
        metavar="HOST:PORT",
        help="serve the approvals page and its JSON API over HTTP at http://HOST:PORT/ "
        "(e.g. 127.0.0.1:7471); a non-loopback address needs tokens, TLS or --insecure, "
        "like the gRPC listeners [CHECKPOINTD_CONSOLE_LISTEN; default: off]",
    )
    security = serve.add_argument_group(
        "security",
        "Tokens come from a file or CHECKPOINTD_AUTH_TOKEN, never from the command line. "
        "TLS applies to TCP listeners; Unix sockets are guarded by their file permissions.",
    )
    security.add_argument(
        "--auth-tokens-file",
        type=Path,
        default=_env("CHECKPOINTD_AUTH_TOKENS_FILE", Path, None),
        metavar="PATH",
        help="JSON file of tokens, each with its namespaces and role (see SECURITY.md); "
        "CHECKPOINTD_AUTH_TOKEN adds one read-write token for every namespace "
        "[CHECKPOINTD_AUTH_TOKENS_FILE; default: no tokens, no authentication]",
    )
    security.add_argument(
        "--tls-cert",
        type=Path,
        default=_env("CHECKPOINTD_TLS_CERT", Path, None),
        metavar="PATH",
        help="PEM certificate (chain) served on TCP listeners [CHECKPOINTD_TLS_CERT]",
    )
    security.add_argument(
        "--tls-key",
        type=Path,
        default=_env("CHECKPOINTD_TLS_KEY", Path, None),
        metavar="PATH",
        help="PEM private key of --tls-cert [CHECKPOINTD_TLS_KEY]",
    )
    security.add_argument(
        "--tls-client-ca",
        type=Path,
        default=_env("CHECKPOINTD_TLS_CLIENT_CA", Path, None),
        metavar="PATH",
        help="PEM CA bundle: TCP clients must present a certificate it signed (mutual TLS) "
        "[CHECKPOINTD_TLS_CLIENT_CA]",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        default=_env("CHECKPOINTD_INSECURE", _flag, False),
        help="allow a TCP listener on a non-loopback address without tokens or TLS "
        "(logged as a warning) [CHECKPOINTD_INSECURE=1]",
    )
    security.add_argument(
        "--max-watch-streams",
        type=_checked(_non_negative_int),
        default=_env("CHECKPOINTD_MAX_WATCH_STREAMS", _non_negative_int, DEFAULT_MAX_WATCH_STREAMS),
        metavar="N",
        help="open WatchInterrupts streams per server, 0 for no limit "
        "[CHECKPOINTD_MAX_WATCH_STREAMS; default: %(default)s]",
    )
    security.add_argument(
        "--max-watch-streams-per-peer",
        type=_checked(_non_negative_int),
        default=_env(
            "CHECKPOINTD_MAX_WATCH_STREAMS_PER_PEER",
            _non_negative_int,
            DEFAULT_MAX_WATCH_STREAMS_PER_PEER,
        ),
        metavar="N",
        help="open WatchInterrupts streams per TCP client connection (Unix-socket clients are "
        "bounded by --max-watch-streams only), 0 for no limit "
        "[CHECKPOINTD_MAX_WATCH_STREAMS_PER_PEER; default: %(default)s]",
    )
    security.add_argument(
        "--max-health-watch-streams",
        type=_checked(_non_negative_int),
        default=_env(
            "CHECKPOINTD_MAX_HEALTH_WATCH_STREAMS",
            _non_negative_int,
            DEFAULT_MAX_HEALTH_WATCH_STREAMS,
        ),
        metavar="N",
        help="open grpc.health.v1 Watch streams per server (they need no token), 0 for no "
        "limit [CHECKPOINTD_MAX_HEALTH_WATCH_STREAMS; default: %(default)s]",
    )
    security.add_argument(
        "--watch-max-lifetime",
        type=_checked(_non_negative_float),
        default=_env(
            "CHECKPOINTD_WATCH_MAX_LIFETIME",
            _non_negative_float,
            DEFAULT_WATCH_MAX_LIFETIME_SECONDS,
        ),
        metavar="SECONDS",
        help="end a watch stream after this long with UNAVAILABLE (WATCH_EXPIRED); clients "
        "resume from their cursor. 0: never [CHECKPOINTD_WATCH_MAX_LIFETIME; default: %(default)s]",
    )


def _settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    no_addresses: list[str] = []
    listen: list[str] = args.listen or _env("CHECKPOINTD_LISTEN", _address_list, no_addresses)
    store: str = args.store
    if not store.startswith(("sqlite://", "postgresql://", "postgres://")):
        parser.error(f"--store {redact_dsn(store)!r} must start with sqlite:// or postgresql://")
    if store.startswith("sqlite://") and not store.removeprefix("sqlite://"):
        parser.error(
            "--store sqlite:// needs a file path, e.g. sqlite:///var/lib/checkpointd/store.db"
        )
    if not PG_SCHEMA_RE.fullmatch(args.pg_schema):
        parser.error(
            f"--pg-schema {args.pg_schema!r} must be a SQL identifier "
            "(letters, digits, _; not starting with a digit; at most 63 characters)"
        )
    if args.pg_pooler not in PG_POOLERS:
        parser.error(f"CHECKPOINTD_PG_POOLER must be one of {', '.join(PG_POOLERS)}")
    listen_dsn: str | None = args.pg_listen_dsn or None
    if listen_dsn is not None and not listen_dsn.startswith(("postgresql://", "postgres://")):
        parser.error(f"--pg-listen-dsn {redact_dsn(listen_dsn)!r} must start with postgresql://")
    if args.log_level not in LOG_LEVELS:
        parser.error(f"CHECKPOINTD_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    if args.log_format not in LOG_FORMATS:
        parser.error(f"CHECKPOINTD_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
    return Settings(
        store=store,
        listen=tuple(listen) or (DEFAULT_LISTEN,),
        pg_schema=args.pg_schema,
        pg_pool_max=args.pg_pool_max,
        pg_pooler=args.pg_pooler,
        pg_statement_cache_size=args.pg_statement_cache_size,
        pg_listen_dsn=listen_dsn,
        pg_poll_interval=args.pg_poll_interval,
        sqlite_busy_timeout_ms=args.sqlite_busy_timeout_ms,
        store_timeout=args.store_timeout,
        max_message_bytes=args.max_message_bytes,
        request_retention_seconds=args.request_retention,
        event_retention_seconds=args.event_retention,
        watch_buffer=args.watch_buffer,
        watch_page_bytes=args.watch_page_bytes,
        shutdown_grace=args.shutdown_grace,
        log_level=args.log_level,
        log_format=args.log_format,
        unix_socket_mode=args.unix_socket_mode,
        health_interval=args.health_interval,
        store_wait=args.store_wait,
        metrics_listen=args.metrics_listen,
        console_listen=args.console_listen,
        auth_tokens_file=args.auth_tokens_file,
        auth_token=os.environ.get("CHECKPOINTD_AUTH_TOKEN") or None,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        insecure=args.insecure,
        max_watch_streams=args.max_watch_streams,
        max_watch_streams_per_peer=args.max_watch_streams_per_peer,
        max_health_watch_streams=args.max_health_watch_streams,
        watch_max_lifetime=args.watch_max_lifetime,
    )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (a dependency on Linux): less CPU per call
    on the event loop; None (asyncio's own loop) without it."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Serve until SIGTERM/SIGINT; 1 when the server cannot start."""
    settings = _settings(args, parser)
    configure_logging(settings.log_level, settings.log_format)
    from checkpointd.app import StartupError, serve

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(settings))
    except StartupError as exc:
        print(f"checkpointd: error: {exc}", file=sys.stderr)
        return 1
    return 0
