"""The server's settings: one frozen object, built from flags and CHECKPOINTD_* variables.

Every setting has a flag, an environment variable, and a documented default. Precedence:
flag, then environment, then default. Each default is written once, on :class:`Settings`;
:data:`OPTIONS` says for each setting its flag, variable, parser and help, and both
``checkpointd serve``'s command line and the README's table of settings
(``tools/settings_table.py``) are generated from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from checkpointd.graph.retention_job import GraphRetention, parse_graph_retention
from checkpointd.listeners import (
    DEFAULT_UNIX_SOCKET_MODE,
    ListenerError,
    parse_listen,
    parse_socket_mode,
)
from checkpointd.logging_setup import LOG_FORMATS

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_PG_POLL_INTERVAL",
    "DEFAULT_PG_POOL_MAX",
    "DEFAULT_PG_POOL_MIN",
    "DEFAULT_PG_SCHEMA",
    "DEFAULT_SQLITE_BUSY_TIMEOUT_MS",
    "DEFAULT_STORE_TIMEOUT",
    "DEFAULT_WATCH_PAGE_BYTES",
    "DEFAULT_WATCH_PROGRESS_INTERVAL_SECONDS",
    "LOG_LEVELS",
    "OPTIONS",
    "PG_POOLERS",
    "WATCH_PROGRESS_INTERVAL_MAX_SECONDS",
    "WATCH_PROGRESS_INTERVAL_MIN_SECONDS",
    "Option",
    "Settings",
    "default_data_dir",
    "default_store_url",
    "dsn_secrets",
    "redact_dsn",
]

DEFAULT_PORT = 7470
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_REQUEST_RETENTION_SECONDS = 24 * 3600
DEFAULT_EVENT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_WATCH_BUFFER = 1000
DEFAULT_WATCH_PAGE_BYTES = 256 * 1024
DEFAULT_MAX_WATCH_STREAMS = 1000
DEFAULT_MAX_WATCH_STREAMS_PER_PEER = 100
DEFAULT_MAX_HEALTH_WATCH_STREAMS = 1000
DEFAULT_WATCH_MAX_LIFETIME_SECONDS = 3600.0
DEFAULT_WATCH_PROGRESS_INTERVAL_SECONDS = 10.0
#: The progress intervals a watch may ask for (contract I6); a longer one is served as the most.
WATCH_PROGRESS_INTERVAL_MIN_SECONDS = 1.0
WATCH_PROGRESS_INTERVAL_MAX_SECONDS = 300.0
DEFAULT_PG_SCHEMA = "checkpointd"
# The store settings' defaults, which the store constructors take as theirs too.
DEFAULT_STORE_TIMEOUT = 10.0
DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5000
DEFAULT_PG_POOL_MIN = 1
DEFAULT_PG_POOL_MAX = 10
DEFAULT_PG_POLL_INTERVAL = 0.5
PG_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
LOG_LEVELS = ("debug", "info", "warning", "error")
PG_POOLERS = ("none", "transaction")


def default_data_dir() -> Path:
    """``$CHECKPOINTD_DATA_DIR``, else ``$XDG_DATA_HOME/checkpointd``, else
    ``~/.local/share/checkpointd``."""
    explicit = os.environ.get("CHECKPOINTD_DATA_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "checkpointd"


def default_store_url() -> str:
    """The embedded default: an SQLite file in the data directory."""
    return f"sqlite://{default_data_dir() / 'checkpointd.db'}"


# Query parameters holding a secret: libpq's ``password`` and ``sslpassword`` (the key's
# passphrase), and any other whose name says it is one (``passfile`` is only a path).
_SECRET_PARAM_RE = re.compile(r"(?i)(password|secret|token)")


def _split_userinfo(url: str) -> tuple[str, str, str] | None:
    """``(before, password, after)`` when the URL's user info carries a password. The
    authority ends at the last ``@`` before the query, so a password holding an unescaped
    ``/`` or ``@`` is still all found."""
    scheme_end = url.find("://")
    if scheme_end < 0:
        return None
    start = scheme_end + 3
    query_start = min(
        (i for i in (url.find("?", start), url.find("#", start)) if i >= 0), default=len(url)
    )
    at = url.rfind("@", start, query_start)
    if at < 0:
        return None
    colon = url.find(":", start, at)
    if colon < 0:
        return None
    return url[: colon + 1], url[colon + 1 : at], url[at:]


def _query_secrets(url: str) -> list[tuple[int, int]]:
    """Spans of the values of secret query parameters (``?password=...&sslpassword=...``)."""
    query_start = url.find("?")
    if query_start < 0:
        return []
    spans: list[tuple[int, int]] = []
    position = query_start + 1
    end = url.find("#", position)
    end = len(url) if end < 0 else end
    for item in re.finditer(r"[^&;]+", url[position:end]):
        name, equals, _ = item.group().partition("=")
        if equals and _SECRET_PARAM_RE.search(unquote(name)):
            spans.append((position + item.start() + len(name) + 1, position + item.end()))
    return spans


def redact_dsn(url: str) -> str:
    """The URL with every password replaced by ``***`` (in the user info and in secret query
    parameters such as ``password`` and ``sslpassword``): the one form of a store URL that is
    ever logged or printed."""
    for start, end in reversed(_query_secrets(url)):
        url = f"{url[:start]}***{url[end:]}"
    userinfo = _split_userinfo(url)
    if userinfo is not None:
        before, _, after = userinfo
        url = f"{before}***{after}"
    return url


def dsn_secrets(url: str) -> list[str]:
    """Every password the URL carries, as written and percent-decoded: text that must be
    scrubbed from any message (a driver error may quote the connection parameters)."""
    found = [url[start:end] for start, end in _query_secrets(url)]
    userinfo = _split_userinfo(url)
    if userinfo is not None:
        found.append(userinfo[1])
    secrets = {text for value in found for text in (value, unquote(value)) if text}
    return sorted(secrets, key=len, reverse=True)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `checkpointd serve` is configured with."""

    store: str
    """``sqlite://PATH`` (``sqlite:///abs/file.db``) or ``postgresql://...``
    (CHECKPOINTD_STORE)."""
    listen: tuple[str, ...] = (DEFAULT_LISTEN,)
    """``host:port`` and/or ``unix:///path`` addresses to serve on (CHECKPOINTD_LISTEN,
    comma-separated)."""
    pg_schema: str = DEFAULT_PG_SCHEMA
    """The Postgres schema holding checkpointd's tables (CHECKPOINTD_PG_SCHEMA)."""
    pg_pool_min: int = DEFAULT_PG_POOL_MIN
    """Smallest Postgres pool size (CHECKPOINTD_PG_POOL_MIN)."""
    pg_pool_max: int = DEFAULT_PG_POOL_MAX
    """Largest Postgres pool size (CHECKPOINTD_PG_POOL_MAX)."""
    pg_pooler: str = "none"
    """``none``, or ``transaction`` when the store URL reaches Postgres through a
    transaction-pooling PgBouncer (CHECKPOINTD_PG_POOLER)."""
    pg_statement_cache_size: int | None = None
    """Prepared statements cached per connection; None: 100, or 0 behind a transaction
    pooler (CHECKPOINTD_PG_STATEMENT_CACHE_SIZE)."""
    pg_listen_dsn: str | None = field(default=None, repr=False)
    """A direct Postgres URL for the watch hub's LISTEN connection; None: the store URL, or
    polling behind a transaction pooler (CHECKPOINTD_PG_LISTEN_DSN)."""
    pg_poll_interval: float = DEFAULT_PG_POLL_INTERVAL
    """Seconds between outbox reads when watching polls (behind a transaction pooler without
    a listen DSN) (CHECKPOINTD_PG_POLL_INTERVAL)."""
    sqlite_busy_timeout_ms: int = DEFAULT_SQLITE_BUSY_TIMEOUT_MS
    """Milliseconds an SQLite write waits for another process's lock
    (CHECKPOINTD_SQLITE_BUSY_TIMEOUT_MS)."""
    store_timeout: float = DEFAULT_STORE_TIMEOUT
    """Seconds a store operation may take before it fails (CHECKPOINTD_STORE_TIMEOUT)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest request accepted, and the size a list page stops at
    (CHECKPOINTD_MAX_MESSAGE_BYTES)."""
    request_retention_seconds: int = DEFAULT_REQUEST_RETENTION_SECONDS
    """Seconds request ids are remembered after their request was applied: claim tokens,
    idempotency puts, the request ids of deleted or pruned checkpoints, and the replies of
    DeleteExecution and PruneCheckpoints; a retry arriving later is a new call
    (CHECKPOINTD_REQUEST_RETENTION; CHECKPOINTD_CLAIM_RETENTION is its deprecated name)."""
    event_retention_seconds: int = DEFAULT_EVENT_RETENTION_SECONDS
    """Seconds interrupt events stay in the outbox; a watch resuming from an older cursor gets
    OUT_OF_RANGE (CHECKPOINTD_EVENT_RETENTION)."""
    watch_buffer: int = DEFAULT_WATCH_BUFFER
    """Events a watcher may fall behind before its stream ends with RESOURCE_EXHAUSTED
    (CHECKPOINTD_WATCH_BUFFER)."""
    watch_page_bytes: int = DEFAULT_WATCH_PAGE_BYTES
    """Largest read of snapshot rows or events, by their stored sizes, that a watch stream (or
    the watch reader) makes at once; a stream reads its next page only once the previous one
    is written, so this bounds what one stream holds (CHECKPOINTD_WATCH_PAGE_BYTES)."""
    watch_progress_interval: float = DEFAULT_WATCH_PROGRESS_INTERVAL_SECONDS
    """Longest silence of a live watch stream before the server sends a progress message with
    its cursor, unless the request asks for another (CHECKPOINTD_WATCH_PROGRESS_INTERVAL)."""
    prune_batch_size: int = 1000
    """Rows deleted per prune transaction, by PruneCheckpoints and the retention jobs alike
    (CHECKPOINTD_PRUNE_BATCH_SIZE)."""
    graph_retention: GraphRetention | None = None
    """Per-namespace retention of graph threads, applied every few minutes (idle threads
    deleted, the newest K checkpoints kept); None: none (CHECKPOINTD_GRAPH_RETENTION)."""
    shutdown_grace: float = 10.0
    """Seconds in-flight RPCs get to finish on SIGTERM (CHECKPOINTD_SHUTDOWN_GRACE)."""
    log_level: str = "info"
    """debug, info, warning or error (CHECKPOINTD_LOG_LEVEL)."""
    log_format: str = "text"
    """``text`` (one readable line per event) or ``json`` (one object per line)
    (CHECKPOINTD_LOG_FORMAT)."""
    unix_socket_mode: int = DEFAULT_UNIX_SOCKET_MODE
    """Permissions of the Unix socket files the server creates (CHECKPOINTD_UNIX_SOCKET_MODE)."""
    health_interval: float = 2.0
    """Seconds between the store pings that decide the health status
    (CHECKPOINTD_HEALTH_INTERVAL)."""
    store_wait: float | None = None
    """Seconds to wait at start for a database that is not there yet; None waits forever, 0
    fails at once (CHECKPOINTD_STORE_WAIT)."""
    metrics_listen: str | None = None
    """``host:port`` of the Prometheus endpoint; None leaves it off
    (CHECKPOINTD_METRICS_LISTEN)."""
    console_listen: str | None = None
    """``host:port`` of the approvals console (page and JSON API); None leaves it off
    (CHECKPOINTD_CONSOLE_LISTEN). A non-loopback address needs tokens, TLS or ``insecure``,
    like the gRPC listeners."""
    auth_tokens_file: Path | None = None
    """The JSON file of tokens and their grants (CHECKPOINTD_AUTH_TOKENS_FILE); see
    :mod:`checkpointd.auth`."""
    auth_token: str | None = field(default=None, repr=False)
    """One read-write token for every namespace (CHECKPOINTD_AUTH_TOKEN only, never a flag)."""
    tls_cert: Path | None = None
    """PEM certificate (chain) of the TCP listeners (CHECKPOINTD_TLS_CERT)."""
    tls_key: Path | None = None
    """PEM private key of ``tls_cert`` (CHECKPOINTD_TLS_KEY)."""
    tls_client_ca: Path | None = None
    """PEM CA bundle; when set, TCP clients must present a certificate it signed
    (CHECKPOINTD_TLS_CLIENT_CA)."""
    insecure: bool = False
    """Allow a non-loopback TCP listener without token or TLS (CHECKPOINTD_INSECURE=1)."""
    max_watch_streams: int = DEFAULT_MAX_WATCH_STREAMS
    """Open WatchInterrupts streams per server; 0: no limit (CHECKPOINTD_MAX_WATCH_STREAMS)."""
    max_watch_streams_per_peer: int = DEFAULT_MAX_WATCH_STREAMS_PER_PEER
    """Open WatchInterrupts streams per connection; 0: no limit
    (CHECKPOINTD_MAX_WATCH_STREAMS_PER_PEER)."""
    max_health_watch_streams: int = DEFAULT_MAX_HEALTH_WATCH_STREAMS
    """Open ``grpc.health.v1.Health/Watch`` streams per server (they need no token); 0: no
    limit (CHECKPOINTD_MAX_HEALTH_WATCH_STREAMS)."""
    watch_max_lifetime: float = DEFAULT_WATCH_MAX_LIFETIME_SECONDS
    """Seconds after which a watch stream ends with UNAVAILABLE (WATCH_EXPIRED) and the client
    resumes from its cursor; 0: never (CHECKPOINTD_WATCH_MAX_LIFETIME)."""

    @property
    def health_ping_timeout(self) -> float:
        """Seconds a health ping may take before the store counts as lost: the health
        interval, at least 1 s (so a busy machine does not flap), at most the store timeout.
        """
        return min(self.store_timeout, max(self.health_interval, 1.0))

    @property
    def is_postgres(self) -> bool:
        """Whether the store URL names Postgres."""
        return self.store.startswith(("postgresql://", "postgres://"))

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file named by ``sqlite://PATH``."""
        return Path(self.store.removeprefix("sqlite://"))


# --- parsers of flag and variable values (ValueError says what is wrong) ---------------------


def positive_int(text: str) -> int:
    """An integer above zero."""
    value = int(text)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def positive_float(text: str) -> float:
    """A number above zero."""
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def progress_seconds(text: str) -> float:
    """A progress interval: 1 to 300 seconds."""
    value = float(text)
    if not WATCH_PROGRESS_INTERVAL_MIN_SECONDS <= value <= WATCH_PROGRESS_INTERVAL_MAX_SECONDS:
        raise ValueError(
            f"must be {WATCH_PROGRESS_INTERVAL_MIN_SECONDS:g} to "
            f"{WATCH_PROGRESS_INTERVAL_MAX_SECONDS:g} seconds"
        )
    return value


def non_negative_int(text: str) -> int:
    """Zero (no limit) or a positive integer."""
    value = int(text)
    if value < 0:
        raise ValueError("must be zero (no limit) or a positive integer")
    return value


def non_negative_float(text: str) -> float:
    """Zero or a positive number."""
    value = float(text)
    if not value >= 0:
        raise ValueError("must be zero or a positive number")
    return value


def boolean(text: str) -> bool:
    """1/0, true/false, yes/no, on/off."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be 1 or 0")


def store_wait(text: str) -> float | None:
    """Seconds, or ``forever`` (None)."""
    if text.strip().lower() == "forever":
        return None
    try:
        return non_negative_float(text)
    except ValueError:
        raise ValueError("must be a number of seconds (0 = fail at once) or 'forever'") from None


def tcp_address(text: str) -> str:
    """``host:port`` of an HTTP endpoint."""
    if text.startswith("unix:"):
        raise ValueError("must be host:port (metrics are served over HTTP on TCP)")
    try:
        parse_listen(text)
    except ListenerError as exc:
        raise ValueError(str(exc)) from None
    return text


def console_address(text: str) -> str:
    """``host:port`` of the console."""
    if text.startswith("unix:"):
        raise ValueError("must be host:port (the console is served over HTTP on TCP)")
    return tcp_address(text)


def address_list(text: str) -> list[str]:
    """Comma-separated addresses."""
    return [address.strip() for address in text.split(",") if address.strip()]


# --- the table of options --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One setting as the command line and the README show it; its default is the
    :class:`Settings` field's (``setting``), or what ``shown_default`` describes."""

    setting: str | None
    """The :class:`Settings` field; None for a variable read elsewhere."""
    env: tuple[str, ...]
    """Its variables, the first one preferred (the others are former names)."""
    help: str
    """What it does, for ``--help`` and the README (backticks are dropped in ``--help``)."""
    flags: tuple[str, ...] = ()
    """Its flags, the first one preferred; none: environment only."""
    parse: Callable[[str], Any] | None = None
    """Parser of a value; None: the text itself."""
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    shown_default: str | None = None
    """The default in words (Markdown), where the value alone would mislead; None: ``off``
    when the default is None, else the value."""
    default_note: str = ""
    """Added after the default in the README, e.g. ``16 MiB``."""
    more: str = ""
    """Added to the README's text only (links, details too long for ``--help``)."""
    security: bool = False
    """Listed in ``--help``'s security group."""
    repeatable: bool = False
    """The flag may repeat; the variable holds a comma-separated list."""

    @property
    def default(self) -> Any:
        """The setting's default (None for an option without a default value)."""
        if self.setting is None:
            return None
        default = _SETTINGS_FIELDS[self.setting].default
        if isinstance(default, tuple) and self.repeatable:
            return list(default)
        return None if default is MISSING else default

    def default_text(self) -> str:
        """The default as the README says it (Markdown)."""
        if self.shown_default is not None:
            return self.shown_default
        value = self.default
        if value is None or value is False:
            return "off"
        if isinstance(value, list):
            text = ", ".join(str(item) for item in value)
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        return f"`{text}`" + (f" ({self.default_note})" if self.default_note else "")


_SETTINGS_FIELDS = {item.name: item for item in fields(Settings)}

OPTIONS: tuple[Option, ...] = (
    Option(
        "store",
        ("CHECKPOINTD_STORE",),
        "`sqlite://PATH` (`sqlite:///var/lib/checkpointd/store.db`) or "
        "`postgresql://user@host:5432/db`; for a replicated Postgres name every node and ask "
        "for the writable one: `postgresql://user@db1:5432,db2:5432/db"
        "?target_session_attrs=read-write`",
        flags=("--store",),
        shown_default="`sqlite://$DATA_DIR/checkpointd.db`",
    ),
    Option(
        None,
        ("CHECKPOINTD_DATA_DIR",),
        "where the default SQLite file lives",
        shown_default="`$XDG_DATA_HOME/checkpointd` or `~/.local/share/checkpointd`",
    ),
    Option(
        "listen",
        ("CHECKPOINTD_LISTEN",),
        "`host:port` and/or `unix:///path/to.sock`",
        flags=("--listen",),
        parse=address_list,
        repeatable=True,
    ),
    Option(
        "pg_schema",
        ("CHECKPOINTD_PG_SCHEMA",),
        "Postgres schema for the tables",
        flags=("--pg-schema",),
    ),
    Option(
        "pg_pool_max",
        ("CHECKPOINTD_PG_POOL_MAX",),
        "largest Postgres connection pool",
        flags=("--pg-pool-max",),
        parse=positive_int,
    ),
    Option(
        "pg_pooler",
        ("CHECKPOINTD_PG_POOLER",),
        "`transaction` when `--store` goes through PgBouncer in `pool_mode = transaction`: no "
        "session state is relied on (statements unprepared unless "
        "`--pg-statement-cache-size` says otherwise, watching through `--pg-listen-dsn` or by "
        "polling)",
        flags=("--pg-pooler",),
        parse=str.lower,
        choices=PG_POOLERS,
        more=" ([Many pods](ha.md#many-pods))",
    ),
    Option(
        "pg_statement_cache_size",
        ("CHECKPOINTD_PG_STATEMENT_CACHE_SIZE",),
        "prepared statements cached per Postgres connection; behind PgBouncer 1.21+ with "
        "`max_prepared_statements` > 0 a cache works again (e.g. 100)",
        flags=("--pg-statement-cache-size",),
        parse=non_negative_int,
        metavar="N",
        shown_default="`100`, or `0` with `--pg-pooler transaction`",
    ),
    Option(
        "pg_listen_dsn",
        ("CHECKPOINTD_PG_LISTEN_DSN",),
        "direct `postgresql://` URL (not through a transaction pooler) of the one `LISTEN` "
        "connection that wakes watchers",
        flags=("--pg-listen-dsn",),
        metavar="URL",
        shown_default="the `--store` URL; with `--pg-pooler transaction`, none: poll",
    ),
    Option(
        "pg_poll_interval",
        ("CHECKPOINTD_PG_POLL_INTERVAL",),
        "with `--pg-pooler transaction` and no `--pg-listen-dsn`: seconds between reads of the "
        "event outbox, the longest a watcher waits for an event",
        flags=("--pg-poll-interval",),
        parse=positive_float,
        metavar="SECONDS",
    ),
    Option(
        "sqlite_busy_timeout_ms",
        ("CHECKPOINTD_SQLITE_BUSY_TIMEOUT_MS",),
        "milliseconds an SQLite write waits for another process's lock before answering "
        "`UNAVAILABLE`",
        flags=("--sqlite-busy-timeout-ms",),
        parse=positive_int,
    ),
    Option(
        "store_timeout",
        ("CHECKPOINTD_STORE_TIMEOUT",),
        "seconds a store operation may take",
        flags=("--store-timeout",),
        parse=positive_float,
    ),
    Option(
        "max_message_bytes",
        ("CHECKPOINTD_MAX_MESSAGE_BYTES",),
        "largest request accepted",
        flags=("--max-message-bytes",),
        parse=positive_int,
        default_note="16 MiB",
        more="; list pages also stop before this size, and only the rows that fit are read "
        "from the store",
    ),
    Option(
        "request_retention_seconds",
        ("CHECKPOINTD_REQUEST_RETENTION", "CHECKPOINTD_CLAIM_RETENTION"),
        "seconds request ids are remembered, so a retry is answered like the first call: "
        "claim tokens, idempotency puts, the request ids of deleted or pruned checkpoints, and "
        "the replies of `DeleteExecution` / `PruneCheckpoints` (`--claim-retention` / "
        "`CHECKPOINTD_CLAIM_RETENTION`: deprecated names of this setting)",
        flags=("--request-retention", "--claim-retention"),
        parse=positive_int,
    ),
    Option(
        "graph_retention",
        ("CHECKPOINTD_GRAPH_RETENTION",),
        "retention of LangGraph threads per namespace, `NAMESPACE=RULES` separated by `;`: "
        "`idle:DURATION` deletes the threads whose newest checkpoint is older (`90m`, `12h`, "
        "`7d`, `2w`), `keep:N` keeps the N newest checkpoints of each `checkpoint_ns` of a "
        "thread with every value and write they need, `off` none; `*` is every namespace "
        "without its own (`*=idle:30d,keep:100;audit=off`). A thread paused on an interrupt "
        "is never cut; applied every few minutes (at most 10) in batches of "
        "`--prune-batch-size` checkpoints, and on demand by `ApplyGraphRetention`",
        flags=("--graph-retention",),
        parse=parse_graph_retention,
        metavar="POLICIES",
        more=" ([Graph retention](#graph-retention))",
    ),
    Option(
        "event_retention_seconds",
        ("CHECKPOINTD_EVENT_RETENTION",),
        "seconds interrupt events stay available to watchers resuming from a cursor",
        flags=("--event-retention",),
        parse=positive_int,
        default_note="7 days",
    ),
    Option(
        "watch_buffer",
        ("CHECKPOINTD_WATCH_BUFFER",),
        "events a watcher may fall behind before its stream ends `RESOURCE_EXHAUSTED`; also "
        "the most snapshot rows (and events, at most 500) a stream reads from the store at once",
        flags=("--watch-buffer",),
        parse=positive_int,
    ),
    Option(
        "watch_page_bytes",
        ("CHECKPOINTD_WATCH_PAGE_BYTES",),
        "most bytes of snapshot rows or events a watch stream (or the watch reader) reads from "
        "the store at once, by their stored sizes (one larger row is read alone); a stream "
        "reads its next page only after writing the last, so this bounds what one stream holds",
        flags=("--watch-page-bytes",),
        parse=positive_int,
        metavar="BYTES",
        default_note="256 KiB",
    ),
    Option(
        "watch_progress_interval",
        ("CHECKPOINTD_WATCH_PROGRESS_INTERVAL",),
        "longest silence of a live watch stream before the server sends a `progress` message "
        "with its cursor, 1 to 300; a watch may ask for another (`progress_interval`), and "
        "the project's clients reconnect after 3 times it without a message",
        flags=("--watch-progress-interval",),
        parse=progress_seconds,
        metavar="SECONDS",
    ),
    Option(
        "prune_batch_size",
        ("CHECKPOINTD_PRUNE_BATCH_SIZE",),
        "rows deleted per prune transaction (PruneCheckpoints and the retention jobs): each "
        "batch commits on its own, so a large prune never holds other writers for long",
        flags=("--prune-batch-size",),
        parse=positive_int,
        metavar="ROWS",
    ),
    Option(
        "shutdown_grace",
        ("CHECKPOINTD_SHUTDOWN_GRACE",),
        "seconds in-flight calls get after SIGTERM",
        flags=("--shutdown-grace",),
        parse=positive_float,
    ),
    Option(
        "log_level",
        ("CHECKPOINTD_LOG_LEVEL",),
        "`debug`, `info`, `warning`, `error`; other libraries (the database drivers, gRPC) "
        "stay at `warning` whatever the level, since their debug lines carry SQL parameters: "
        "stored data and tokens",
        flags=("--log-level",),
        parse=str.lower,
        choices=LOG_LEVELS,
    ),
    Option(
        "log_format",
        ("CHECKPOINTD_LOG_FORMAT",),
        "`text` (one readable line per event) or `json` (one object per line)",
        flags=("--log-format",),
        parse=str.lower,
        choices=LOG_FORMATS,
    ),
    Option(
        "unix_socket_mode",
        ("CHECKPOINTD_UNIX_SOCKET_MODE",),
        "octal permissions of the Unix socket files (`0660` lets the group in)",
        flags=("--unix-socket-mode",),
        parse=parse_socket_mode,
        metavar="MODE",
        shown_default=f"`{DEFAULT_UNIX_SOCKET_MODE:04o}`",
    ),
    Option(
        "health_interval",
        ("CHECKPOINTD_HEALTH_INTERVAL",),
        "seconds between the store pings behind the `grpc.health.v1` status; a ping not "
        "answered within this long (at least 1 s, at most `--store-timeout`) counts as the "
        "store lost",
        flags=("--health-interval",),
        parse=positive_float,
        metavar="SECONDS",
    ),
    Option(
        "store_wait",
        ("CHECKPOINTD_STORE_WAIT",),
        "seconds to wait at start for a database that is not there yet, serving "
        "`NOT_SERVING` meanwhile; `0` fails at once (exit 1)",
        flags=("--store-wait",),
        parse=store_wait,
        metavar="SECONDS",
        shown_default="`forever`",
    ),
    Option(
        "metrics_listen",
        ("CHECKPOINTD_METRICS_LISTEN",),
        "`host:port` of the Prometheus endpoint (`http://HOST:PORT/metrics`); keep it on "
        "loopback (e.g. `127.0.0.1:9464`) unless the network is trusted",
        flags=("--metrics-listen",),
        parse=tcp_address,
        metavar="HOST:PORT",
    ),
    Option(
        "console_listen",
        ("CHECKPOINTD_CONSOLE_LISTEN",),
        "`host:port` of the approvals page and its JSON API (e.g. `127.0.0.1:7471`); a "
        "non-loopback address needs tokens, TLS or `--insecure`, like the gRPC listeners",
        flags=("--console-listen",),
        parse=console_address,
        metavar="HOST:PORT",
        more=" ([Approvals page](approvals.md#approvals-page))",
    ),
    Option(
        "auth_tokens_file",
        ("CHECKPOINTD_AUTH_TOKENS_FILE",),
        "JSON file of tokens, each with its namespaces and role (SECURITY.md); "
        "`CHECKPOINTD_AUTH_TOKEN` adds one read-write token for every namespace",
        flags=("--auth-tokens-file",),
        parse=Path,
        metavar="PATH",
        shown_default="off (no authentication)",
        more=" ([Security](security.md))",
        security=True,
    ),
    Option(
        "auth_token",
        ("CHECKPOINTD_AUTH_TOKEN",),
        "one read-write token for every namespace (never a flag: `ps` would show it)",
        security=True,
    ),
    Option(
        "tls_cert",
        ("CHECKPOINTD_TLS_CERT",),
        "PEM certificate (chain) served on TCP listeners: they speak TLS only",
        flags=("--tls-cert",),
        parse=Path,
        metavar="PATH",
        security=True,
    ),
    Option(
        "tls_key",
        ("CHECKPOINTD_TLS_KEY",),
        "PEM private key of `--tls-cert`",
        flags=("--tls-key",),
        parse=Path,
        metavar="PATH",
        security=True,
    ),
    Option(
        "tls_client_ca",
        ("CHECKPOINTD_TLS_CLIENT_CA",),
        "PEM CA bundle: TCP clients must present a certificate it signed (mutual TLS)",
        flags=("--tls-client-ca",),
        parse=Path,
        metavar="PATH",
        security=True,
    ),
    Option(
        "insecure",
        ("CHECKPOINTD_INSECURE",),
        "allow a TCP listener on a non-loopback address without tokens or TLS (logged as a "
        "warning)",
        flags=("--insecure",),
        parse=boolean,
        security=True,
    ),
    Option(
        "max_watch_streams",
        ("CHECKPOINTD_MAX_WATCH_STREAMS",),
        "open `WatchInterrupts` streams per server, `0` for no limit",
        flags=("--max-watch-streams",),
        parse=non_negative_int,
        metavar="N",
        security=True,
    ),
    Option(
        "max_watch_streams_per_peer",
        ("CHECKPOINTD_MAX_WATCH_STREAMS_PER_PEER",),
        "open `WatchInterrupts` streams per TCP client connection, `0` for no limit; "
        "Unix-socket clients all look alike to gRPC, so only `--max-watch-streams` bounds them",
        flags=("--max-watch-streams-per-peer",),
        parse=non_negative_int,
        metavar="N",
        security=True,
    ),
    Option(
        "max_health_watch_streams",
        ("CHECKPOINTD_MAX_HEALTH_WATCH_STREAMS",),
        "open `grpc.health.v1` `Watch` streams per server, which need no token, `0` for no limit",
        flags=("--max-health-watch-streams",),
        parse=non_negative_int,
        metavar="N",
        security=True,
    ),
    Option(
        "watch_max_lifetime",
        ("CHECKPOINTD_WATCH_MAX_LIFETIME",),
        "seconds after which a watch stream ends `UNAVAILABLE` (`WATCH_EXPIRED`) and the "
        "client resumes from its cursor, `0`: never",
        flags=("--watch-max-lifetime",),
        parse=non_negative_float,
        metavar="SECONDS",
        more="; every connection is closed by then too (after a GOAWAY) and whatever is still "
        "on it cancelled 2 s later, which is how a stream blocked writing to a client that "
        "stopped reading ends, counted against `--max-watch-streams` until it has",
        security=True,
    ),
)
"""Every setting of ``checkpointd serve``, in the order ``--help`` and the README list them."""
