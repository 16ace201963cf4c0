"""What the operations tests share: a server that may start before its store, health and
metrics probes, and ways to stage a database that is not there or is held busy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.sidecar import Sidecar, StoreSpec
from tests.support.tcp_proxy import TcpProxy

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

_LISTENING_RE = re.compile(r"listening on (?P<addresses>[^;]+);")
_METRICS_RE = re.compile(r"metrics on http://(?P<address>\S+)/metrics")


class EarlySidecar(Sidecar):
    """A sidecar whose start() returns as soon as it listens, before its store is open."""

    def start(self, timeout: float = 30.0) -> EarlySidecar:
        """Start the process and wait for its "listening on" line."""
        self.wait_for_log(_LISTENING_RE, timeout, launch=True)
        return self

    def wait_for_log(
        self, pattern: re.Pattern[str] | str, timeout: float = 30.0, *, launch: bool = False
    ) -> re.Match[str]:
        """Wait until the log matches ``pattern`` (starting the process first if asked)."""
        if launch:
            assert self.process is None or self.process.poll() is not None, "already running"
            self._log_count += 1
            env = {**os.environ, "CHECKPOINTD_LOG_LEVEL": "info", **self.extra_env}
            with self.log_path.open("wb") as log:
                self.process = subprocess.Popen(
                    self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
                )
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = regex.search(self.log_text())
            if match:
                return match
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"log never matched {regex.pattern!r}:\n{self.log_text()}")

    def log_text(self) -> str:
        """The current process's log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def metrics_url(self) -> str:
        """Where the server serves /metrics (it must run with --metrics-listen)."""
        match = _METRICS_RE.search(self.log_text())
        assert match, self.log_text()
        return f"http://{match.group('address')}/metrics"


def scrape(url: str) -> str:
    """One Prometheus scrape, as text."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name{labels...}`` in a scrape, or None when absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(match.group(3))
    return None


def wait_for_metric(url: str, name: str, value: float, timeout: float = 30.0, **labels: str):
    """Scrape until the sample reaches ``value``."""
    deadline = time.monotonic() + timeout
    last: float | None = None
    while time.monotonic() < deadline:
        last = sample(scrape(url), name, **labels)
        if last == value:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name}{labels} stayed {last}, expected {value}")


class HealthProbe:
    """The standard health service of one server, as Kubernetes' gRPC probe calls it."""

    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = health_pb2_grpc.HealthStub(self._channel)

    def check(self, service: str = "") -> int:
        """The status of ``service`` ("" is the whole server)."""
        request = health_pb2.HealthCheckRequest(service=service)
        response: health_pb2.HealthCheckResponse = self._stub.Check(request, timeout=10)
        return response.status

    def watch(self, service: str = ""):
        """A Watch stream: an iterator of statuses that can be cancelled."""
        return self._stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=90)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def next_status(stream, wanted: int) -> None:
    """Read a health Watch stream until it reports ``wanted``."""
    for response in stream:
        if response.status == wanted:
            return
    raise AssertionError(f"the health stream ended before reporting {wanted}")


@dataclass
class Outage:
    """Makes the store unreachable for a server: Postgres through a proxy that can cut every
    connection; SQLite with a foreign exclusive lock on the database file."""

    spec: StoreSpec
    """The store as the server sees it (through the proxy for Postgres)."""
    _proxy: TcpProxy | None = None
    _locker: sqlite3.Connection | None = None

    @classmethod
    @contextlib.contextmanager
    def around(cls, spec: StoreSpec) -> Iterator[Outage]:
        """An Outage for ``spec``, closed afterwards."""
        if spec.backend == "postgres":
            parts = urlsplit(spec.url)
            proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
            netloc = parts.netloc.rpartition("@")[0] + "@" if "@" in parts.netloc else ""
            url = parts._replace(netloc=f"{netloc}127.0.0.1:{proxy.port}").geturl()
            outage = cls(StoreSpec(spec.backend, url, spec.pg_schema), _proxy=proxy)
        else:
            outage = cls(spec)
        try:
            yield outage
        finally:
            outage.end()
            if outage._proxy is not None:
                outage._proxy.close()

    def begin(self) -> None:
        """Take the database away."""
        if self._proxy is not None:
            self._proxy.cut()
            return
        path = Path(self.spec.url.removeprefix("sqlite://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        self._locker = locker

    def partition(self) -> None:
        """Postgres only: stop every packet between the server and the database, closing
        nothing, until :meth:`end`."""
        assert self._proxy is not None, "a partition needs the Postgres proxy"
        self._proxy.freeze()

    def end(self) -> None:
        """Give it back."""
        if self._proxy is not None:
            self._proxy.restore()
            self._proxy.thaw()
        if self._locker is not None:
            self._locker.execute("ROLLBACK")
            self._locker.close()
            self._locker = None


class StoreBlocker:
    """Holds the store busy so calls stay in flight: Postgres, an ACCESS EXCLUSIVE lock on the
    checkpoints table (blocks reads and writes); SQLite, a foreign write transaction (blocks
    writes)."""

    def __init__(self, spec: StoreSpec) -> None:
        self._spec = spec
        self._release = threading.Event()
        self._held = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> StoreBlocker:
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()
        assert self._held.wait(30), self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """Let the held calls go on."""
        self._release.set()
        if self._thread is not None:
            self._thread.join(30)

    def _hold(self) -> None:
        try:
            if self._spec.backend == "postgres":
                asyncio.run(self._hold_postgres())
            else:
                path = self._spec.url.removeprefix("sqlite://")
                conn = sqlite3.connect(path, isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")
                self._held.set()
                self._release.wait(120)
                conn.execute("ROLLBACK")
                conn.close()
        except BaseException as exc:
            self._error = exc
            raise

    async def _hold_postgres(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self._spec.url, timeout=10)
        try:
            async with conn.transaction():
                await conn.execute(
                    f'LOCK TABLE "{self._spec.pg_schema}".checkpoints IN ACCESS EXCLUSIVE MODE'
                )
                self._held.set()
                await asyncio.to_thread(self._release.wait, 120)
        finally:
            await conn.close()
