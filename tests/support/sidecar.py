"""Run checkpointd as users do: a subprocess of ``python -m checkpointd serve``.

Each server listens on a Unix socket (in a short temporary directory, since socket paths
are limited to about 100 bytes) and on a loopback TCP port chosen by the kernel. The
server's log goes to a file, which is read for the "serving on" line that says where it
listens, and shown when a start fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Sidecar", "StoreSpec"]

#: The interpreter the servers run on, where it is not the tests' own: make test-compat runs
#: the client's tests in an environment of the client alone (next to langgraph-api) against
#: the dev environment's server, as a sidecar runs apart from the app.
SERVER_PYTHON_ENV = "CHECKPOINTD_TEST_SERVER_PYTHON"


def server_python() -> str:
    """The Python that runs ``python -m checkpointd``: $CHECKPOINTD_TEST_SERVER_PYTHON, or
    the tests' own interpreter."""
    return os.environ.get(SERVER_PYTHON_ENV) or sys.executable


_SERVING_RE = re.compile(r"serving on (?P<addresses>[^(]+) \(")


@dataclass(frozen=True)
class StoreSpec:
    """Which store a sidecar serves: the backend name, its URL and (Postgres) its schema.

    ``url`` always reaches the database directly (tests read their ground truth there);
    ``server_url``, when set, is what the server is given instead (Postgres through
    PgBouncer), with ``server_args`` added to its command line."""

    backend: str
    url: str
    pg_schema: str = "checkpointd"
    server_url: str = ""
    server_args: tuple[str, ...] = ()

    @property
    def store_url(self) -> str:
        """The ``--store`` URL the server is started with."""
        return self.server_url or self.url


@dataclass
class Sidecar:
    """One checkpointd server process; start() again after stop() or kill() to restart it."""

    store: StoreSpec
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    socket_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cpd-")))
    process: subprocess.Popen[bytes] | None = None
    tcp_target: str = ""
    _log_count: int = 0

    @property
    def backend(self) -> str:
        """ "sqlite", "postgres" or "pgbouncer" (Postgres through PgBouncer)."""
        return self.store.backend

    @property
    def namespace(self) -> str:
        """The namespace a test uses on this server: the default one, the store being the
        test's own (a shared server's view answers a namespace of the test's own)."""
        return "default"

    @property
    def socket_path(self) -> Path:
        """Where the server's Unix socket lives."""
        return self.socket_dir / "checkpointd.sock"

    @property
    def target(self) -> str:
        """The gRPC target of the Unix socket."""
        return f"unix://{self.socket_path}"

    @property
    def log_path(self) -> Path:
        """The log file of the current (or last) process."""
        return self.socket_dir / f"server-{self._log_count}.log"

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            server_python(),
            "-m",
            "checkpointd",
            "serve",
            "--store",
            self.store.store_url,
            "--pg-schema",
            self.store.pg_schema,
            "--listen",
            self.target,
            "--listen",
            "127.0.0.1:0",
            "--shutdown-grace",
            "2",
            *self.store.server_args,
            *self.extra_args,
        ]

    def start(self, timeout: float = 30.0) -> Sidecar:
        """Start the process and wait until it says it is serving."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self._log_count += 1
        env = {**os.environ, "CHECKPOINTD_LOG_LEVEL": "info", **self.extra_env}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _SERVING_RE.search(self.log_path.read_text(errors="replace"))
            if match:
                addresses = [a.strip() for a in match.group("addresses").split(",")]
                self.tcp_target = next(a for a in addresses if not a.startswith("unix:"))
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        log_text = self.log_path.read_text(errors="replace")
        self.kill()
        raise RuntimeError(f"checkpointd did not start:\n{log_text}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait; return the exit status."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def kill(self) -> None:
        """SIGKILL: the crash a durable store must survive."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        """Stop the process and remove its socket directory."""
        self.stop()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
