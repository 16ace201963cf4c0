"""A Postgres primary and an asynchronous streaming standby on loopback, and the failover that
loses commits: the standby streams through a TCP proxy (tests/support/tcp_proxy.py) that can
stop passing on what the primary sends, so the commits acknowledged after :meth:`lag` never
reach it; :meth:`fail_over` then kills the primary and promotes the standby, as an HA manager
configured for asynchronous replication does.

Postgres 15's binaries (Debian's postgresql-15); under root every command runs as the
``postgres`` user (``runuser``), in a directory under its home, with ``trust`` authentication
on 127.0.0.1 only. :meth:`close` stops and removes everything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.support.postgres_user import as_postgres, free_port, postgres_dir, postmaster_pid
from tests.support.tcp_proxy import TcpProxy

__all__ = ["AsyncPair"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
DATABASE = "checkpointd"


class AsyncPair:
    """``primary`` and ``standby`` data directories, the standby fed through ``proxy``."""

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            raise FileNotFoundError(f"PostgreSQL 15 is not installed ({PG_BIN})")
        self.root = postgres_dir("pgpair-")
        self.primary, self.standby = self.root / "primary", self.root / "standby"
        self.ports = {self.primary: free_port(), self.standby: free_port()}
        self.proxy: TcpProxy | None = None

    def _run(self, *args: str, timeout: float = 120.0) -> str:
        prefix = as_postgres()
        done = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def _pg_ctl(self, data: Path, *args: str) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(data) + ".log", "-w", *args)

    def sql(self, data: Path, query: str, database: str = "postgres") -> str:
        return self._run(
            str(PG_BIN / "psql"),
            "-h", "127.0.0.1", "-p", str(self.ports[data]), "-U", "postgres",
            "-d", database, "-AtXc", query,
        )  # fmt: skip

    def start(self) -> AsyncPair:
        """Build and start the primary, then the standby from a base backup taken through the
        proxy (so it streams through it too), and wait until it streams."""
        primary_port = self.ports[self.primary]
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.primary), "-U", "postgres", "-A", "trust",
            "--no-sync",
        )  # fmt: skip
        with (self.primary / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"port = {primary_port}\nlisten_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\nwal_level = replica\nmax_wal_senders = 4\n"
                # Asynchronous: a commit is acknowledged once it is on the primary's disk.
                "synchronous_standby_names = ''\n"
            )
        self._pg_ctl(self.primary, "start")
        self.sql(self.primary, f"CREATE DATABASE {DATABASE}")
        self.proxy = TcpProxy("127.0.0.1", primary_port)
        self._run(
            str(PG_BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.proxy.port),
            "-U", "postgres", "-D", str(self.standby), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        with (self.standby / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {self.ports[self.standby]}\n")
        self._pg_ctl(self.standby, "start")
        streaming = "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
        for _ in range(300):
            if self.sql(self.standby, streaming) == "1":
                return self
            subprocess.run(["sleep", "0.1"], check=True)
        raise RuntimeError("the standby never streamed")

    def await_replicated(self, timeout: float = 30.0) -> None:
        """Wait until the standby has received everything the primary has written so far."""
        lsn = self.sql(self.primary, "SELECT pg_current_wal_lsn()")
        caught_up = f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'::pg_lsn"
        for _ in range(int(timeout * 10)):
            if self.sql(self.standby, caught_up) == "t":
                return
            subprocess.run(["sleep", "0.1"], check=True)
        raise RuntimeError(f"the standby never received the primary's WAL up to {lsn}")

    def lag(self) -> None:
        """From now on the standby receives nothing more: the commits the primary
        acknowledges after this are on the primary alone."""
        assert self.proxy is not None
        self.proxy.silence()

    def fail_over(self) -> None:
        """Crash the primary (SIGKILL of its postmaster) and promote the standby with what it
        has; return once the standby takes writes."""
        pid = postmaster_pid(self.primary)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert self.proxy is not None
        self.proxy.cut()
        self._pg_ctl(self.standby, "promote")

    def url(self) -> str:
        """Both nodes, the writable one wanted (docs/ha.md)."""
        hosts = ",".join(f"127.0.0.1:{self.ports[d]}" for d in (self.primary, self.standby))
        return f"postgresql://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def close(self) -> None:
        """Stop both nodes (immediately) and the proxy, and remove the directories."""
        for data in (self.standby, self.primary):
            pid = postmaster_pid(data)
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.proxy is not None:
            self.proxy.close()
        shutil.rmtree(self.root, ignore_errors=True)
