"""The server's settings: one frozen object, built from flags and CHECKPOINTD_* variables.

Every setting has a flag, an environment variable, and a documented default. Precedence:
flag, then environment, then default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

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
DEFAULT_PG_SCHEMA = "checkpointd"
# The store settings' defaults, which the store constructors take as theirs too.
DEFAULT_STORE_TIMEOUT = 10.0
DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5000
DEFAULT_PG_POOL_MIN = 1
DEFAULT_PG_POOL_MAX = 10
DEFAULT_PG_POLL_INTERVAL = 0.5
PG_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


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
    prune_batch_size: int = 1000
    """Rows deleted per prune transaction (fixed: no flag or variable sets it)."""
    shutdown_grace: float = 10.0
    """Seconds in-flight RPCs get to finish on SIGTERM (CHECKPOINTD_SHUTDOWN_GRACE)."""
    log_level: str = "info"
    """debug, info, warning or error (CHECKPOINTD_LOG_LEVEL)."""
    log_format: str = "text"
    """``text`` (one readable line per event) or ``json`` (one object per line)
    (CHECKPOINTD_LOG_FORMAT)."""
    unix_socket_mode: int = 0o600
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
