"""A real PgBouncer in ``pool_mode = transaction`` in front of the test Postgres.

Each instance is its own ``pgbouncer`` process with a generated ini on a free loopback port,
its ini, log and pid files in a private directory. PgBouncer refuses to run as root, so under
root the process runs as the ``postgres`` user (the Debian package's), which owns that
directory. Clients log in as anyone (``auth_type = any``): every database is reached as the
user (and password) of the upstream DSN, so nothing secret is written but that DSN's own
password, into a file only the process's user can read.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["PgBouncer", "find_pgbouncer"]


def find_pgbouncer() -> str | None:
    """The pgbouncer binary (Debian puts it in /usr/sbin, often not on a user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _quote(value: str) -> str:
    """A value of a libpq-style connection string in the ini's [databases] section."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """One pgbouncer process; :meth:`url` names a database through it.

    ``pool_size`` is PgBouncer's ``default_pool_size`` (server connections per database and
    user) and ``max_db_connections`` caps the server connections of each database whatever
    the user; 0 leaves that cap off.
    """

    def __init__(
        self,
        upstream_dsn: str,
        *,
        pool_size: int = 20,
        max_db_connections: int = 0,
        max_client_conn: int = 1000,
    ) -> None:
        binary = find_pgbouncer()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install -y pgbouncer)")
        self.binary = binary
        self.upstream = urlsplit(upstream_dsn)
        self.pool_size = pool_size
        self.max_db_connections = max_db_connections
        self.max_client_conn = max_client_conn
        self.port = 0
        # Run as root, PgBouncer runs as postgres, which must reach its files: the temporary
        # directory may be private to root (/tmp with mode 0700), postgres's home is not.
        parent = pwd.getpwnam("postgres").pw_dir if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-", dir=parent))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """PgBouncer's own log."""
        return self.dir / "pgbouncer.log"

    def url(self, database: str | None = None) -> str:
        """A postgresql:// URL of ``database`` (default: the upstream's) through PgBouncer."""
        name = database or self.upstream.path.lstrip("/")
        user = self.upstream.username or "postgres"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{name}"

    def _ini(self) -> str:
        up = self.upstream
        conn = [f"host={_quote(up.hostname or '127.0.0.1')}", f"port={up.port or 5432}"]
        conn.append(f"user={_quote(unquote(up.username or 'postgres'))}")
        if up.password:
            conn.append(f"password={_quote(unquote(up.password))}")
        return "\n".join(
            [
                "[databases]",
                # Any database name, on the upstream server, as the upstream user.
                f"* = {' '.join(conn)}",
                "",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = any",
                "pool_mode = transaction",
                f"default_pool_size = {self.pool_size}",
                f"max_db_connections = {self.max_db_connections}",
                f"max_client_conn = {self.max_client_conn}",
                # A client waits for a server connection rather than failing at once.
                "query_wait_timeout = 60",
                "server_check_delay = 10",
                # Server connections left idle close soon: each pytest-xdist worker has a
                # PgBouncer of its own, and together they stay within max_connections.
                "server_idle_timeout = 5",
                f"logfile = {self.dir / 'pgbouncer.log'}",
                f"pidfile = {self.dir / 'pgbouncer.pid'}",
                # Drivers other than asyncpg send this at startup (psql, psycopg).
                "ignore_startup_parameters = extra_float_digits",
                "",
            ]
        )

    def start(self, timeout: float = 20.0, attempts: int = 3) -> PgBouncer:
        """Start PgBouncer (see :meth:`_start_once`), on a fresh port up to ``attempts``
        times: the free port it was given can be taken by another process before it binds
        it, and a start can fail without a word in its log."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                if attempt == attempts:
                    self.close()
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> PgBouncer:
        """Write the ini, start the process and wait until it accepts connections."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.port = _free_port()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pgbouncer.pid").unlink(missing_ok=True)  # a failed attempt's
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(self._ini())
        ini.chmod(0o600)
        user: str | None = None
        if os.geteuid() == 0:
            # PgBouncer will not run as root; the directory and ini become postgres's.
            user = "postgres"
            entry = pwd.getpwnam(user)
            for path in (self.dir, ini):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        # This attempt's part of the log (a failed attempt's lines stay above it).
        logged_before = self.log_path.stat().st_size if self.log_path.exists() else 0
        with (self.dir / "stderr.log").open("wb") as stderr:
            self.process = subprocess.Popen(
                [self.binary, str(ini)],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                user=user,
                group=pwd.getpwnam(user).pw_gid if user else None,
                extra_groups=[] if user else None,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            # Up once it says so and takes a connection: a connection alone could be another
            # process's listener on the port it was given (then it fails to bind and exits).
            if self._says_up(logged_before):
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port), timeout=1),
                ):
                    return self
            time.sleep(0.05)
        # Stopped, not removed: the next attempt writes its ini into the same directory
        # (a failed attempt that removed it made the retry fail on the missing file).
        output = self._logs()
        self.stop()
        raise RuntimeError(f"pgbouncer did not start:\n{output}")

    def _says_up(self, offset: int) -> bool:
        """Whether the log, from ``offset`` on, says the process is up and listening."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return b"process up" in log.read()
        except OSError:
            return False

    def _logs(self) -> str:
        texts = []
        for name in ("stderr.log", "pgbouncer.log"):
            with contextlib.suppress(OSError):
                texts.append((self.dir / name).read_text(errors="replace"))
        return "\n".join(texts)

    def stop(self) -> None:
        """SIGINT (PgBouncer's immediate shutdown), then wait."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Stop the process and remove its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        upstream = urlunsplit(self.upstream._replace(netloc=self.upstream.hostname or ""))
        return f"PgBouncer(port={self.port}, upstream={upstream})"
