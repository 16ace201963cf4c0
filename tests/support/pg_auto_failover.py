"""A pg_auto_failover formation on loopback: a monitor, a primary and a standby.

Debian's ``postgresql-15-auto-failover`` provides ``pg_autoctl``. It refuses to run as root,
so under root every command runs as the ``postgres`` user (``runuser``), in a private
directory that user owns (under its home: the temporary directory may be private to root).
pg_autoctl's own configuration and state files go there too (XDG_CONFIG_HOME, XDG_DATA_HOME),
never into the postgres user's home. Every node has a free port (never the machine's own
cluster's), without SSL, with ``trust`` authentication; the data nodes listen on 127.0.0.1
only, the monitor (``pg_autoctl create monitor`` has no ``--listen``) on every address, its
pg_hba.conf admitting 127.0.0.0/8 only.

The monitor's health checks are made fast (a check every second, a node unhealthy after 3 s)
so that a failover takes seconds, not the default half minute. With two data nodes
pg_auto_failover replicates synchronously (replication-quorum true: the primary has
``synchronous_standby_names`` naming the standby and ``synchronous_commit = on``), so a commit
is acknowledged only once the standby has it.

:meth:`close` stops and removes everything, whatever state the nodes are in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tests.support.postgres_user import as_postgres, free_port, postgres_dir, postmaster_pid

__all__ = ["Formation", "PgAutoFailoverMissing", "find_pg_autoctl"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: The monitor's health-check settings (milliseconds, or a count): fast detection.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "5000",
}
DATABASE = "checkpointd"


class PgAutoFailoverMissing(RuntimeError):
    """pg_autoctl is not installed, or cannot run here."""


def find_pg_autoctl() -> str | None:
    """The pg_autoctl binary (Debian's package puts it in /usr/bin, with a copy of the
    PostgreSQL version's bin directory in its search path)."""
    return shutil.which("pg_autoctl") or shutil.which("pg_autoctl", path=str(PG_BIN))


@dataclass
class Node:
    """One pg_autoctl service (the monitor or a data node) and its Postgres."""

    name: str
    port: int
    pgdata: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def postmaster_pid(self) -> int | None:
        """The pid of this node's postmaster, from its postmaster.pid (None if not running)."""
        return postmaster_pid(self.pgdata)


@dataclass
class Formation:
    """A monitor and two data nodes, ``node1`` (the first primary) and ``node2``."""

    root: Path = field(default_factory=Path)
    monitor: Node | None = None
    nodes: dict[str, Node] = field(default_factory=dict)
    #: The nodes crashed on purpose (their services' exits are expected).
    killed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        binary = find_pg_autoctl()
        if binary is None:
            raise PgAutoFailoverMissing(
                "pg_autoctl is not installed (apt-get install -y postgresql-15-auto-failover)"
            )
        if not (PG_BIN / "pg_ctl").exists():
            raise PgAutoFailoverMissing(f"PostgreSQL 15 is not installed ({PG_BIN})")
        self.binary = binary
        self.root = postgres_dir("pgaf-")
        self.env = {
            "PATH": f"{PG_BIN}:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "data"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "PG_CONFIG": str(PG_BIN / "pg_config"),
            "PGHOST": "127.0.0.1",
            "LANG": "C.UTF-8",
        }

    # --- running commands as postgres -----------------------------------------------------

    def _command(self, *args: str) -> list[str]:
        env = [f"{k}={v}" for k, v in self.env.items()]
        prefix = as_postgres()
        return [*prefix, "env", "-i", *env, *args]

    def _run(self, *args: str, timeout: float = 60.0) -> str:
        done = subprocess.run(
            self._command(*args), capture_output=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}"
            )
        return done.stdout.decode()

    def _service(self, node: Node, *args: str) -> None:
        """Start a pg_autoctl command that creates a node and then runs its service, in a
        session of its own (so that the whole service can be killed by its group)."""
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                self._command(self.binary, *args),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def sql(self, node: Node, query: str, database: str = "postgres") -> str:
        """Run ``query`` on ``node`` with psql as postgres; its unaligned output."""
        return self._run(
            str(PG_BIN / "psql"),
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            str(node.port),
            "-d",
            database,
            "-c",
            query,
        ).strip()

    # --- building the formation -----------------------------------------------------------

    def _new_node(self, name: str) -> Node:
        return Node(name, free_port(), self.root / name, self.root / f"{name}.log")

    def monitor_uri(self) -> str:
        assert self.monitor is not None
        return (
            f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover"
            "?sslmode=disable"
        )

    def start(self, timeout: float = 120.0) -> Formation:
        """Create and run the monitor, then node1 (the primary), then node2 (its standby);
        return once node1 is primary and node2 secondary."""
        for sub in ("config", "data", "run"):
            self._run("mkdir", "-p", str(self.root / sub))
        deadline = time.monotonic() + timeout
        self.monitor = self._new_node("monitor")
        self._service(
            self.monitor,
            "create",
            "monitor",
            "--pgctl",
            str(PG_BIN / "pg_ctl"),
            "--pgdata",
            str(self.monitor.pgdata),
            "--pgport",
            str(self.monitor.port),
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--run",
        )
        self._await(self._monitor_ready, deadline, "the monitor never came up")
        for name, value in MONITOR_SETTINGS.items():
            self.sql(self.monitor, f"ALTER SYSTEM SET {name} = {value}")
        self.sql(self.monitor, "SELECT pg_reload_conf()")
        for name in ("node1", "node2"):
            node = self.nodes[name] = self._new_node(name)
            self._service(
                node,
                "create",
                "postgres",
                "--pgctl",
                str(PG_BIN / "pg_ctl"),
                "--pgdata",
                str(node.pgdata),
                "--pgport",
                str(node.port),
                "--listen",
                "127.0.0.1",
                "--hostname",
                "127.0.0.1",
                "--name",
                name,
                "--dbname",
                DATABASE,
                "--monitor",
                self.monitor_uri(),
                "--auth",
                "trust",
                "--no-ssl",
                "--run",
            )
            # Alone, node1 is "single"; node2 joins as its standby, and node1 becomes
            # "primary" once node2 is in sync.
            wanted: dict[str, tuple[str, ...]] = (
                {"node1": ("single",)}
                if name == "node1"
                else {
                    "node1": ("primary", "primary"),
                    "node2": ("secondary", "secondary"),
                }
            )
            self._await(
                partial(self._reached, wanted),
                deadline,
                f"the formation never reached {wanted}",
            )
        return self

    def _reached(self, wanted: dict[str, tuple[str, ...]]) -> bool:
        """Whether each named node's reported and goal states are the wanted ones (one name:
        both). While node2 is being built, node1 is asked for an immediate checkpoint: the
        standby's pg_basebackup starts with a spread one, which would take a minute or more."""
        if "node2" in wanted:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.sql(self.nodes["node1"], "CHECKPOINT")
        states = self.states()
        return all(n in states and states[n] == (want[0], want[-1]) for n, want in wanted.items())

    def _monitor_ready(self) -> bool:
        assert self.monitor is not None
        try:
            return self.sql(self.monitor, "SELECT 1", "pg_auto_failover") == "1"
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def _await(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            try:
                if ready():
                    return
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what}:\n{self.describe()}")
            for node in [self.monitor, *self.nodes.values()]:
                if node is not None and node.process is not None:
                    code = node.process.poll()
                    if code is not None and node.name not in self.killed:
                        raise RuntimeError(
                            f"{node.name}'s pg_autoctl exited {code}:\n{self.describe()}"
                        )
            time.sleep(0.2)

    # --- observing and failing ------------------------------------------------------------

    def states(self) -> dict[str, tuple[str, str]]:
        """Each data node's (reported state, goal state), as the monitor has them."""
        assert self.monitor is not None
        rows = self.sql(
            self.monitor,
            "SELECT json_agg(json_build_array(nodename, reportedstate, goalstate)) "
            "FROM pgautofailover.node",
            "pg_auto_failover",
        )
        return {name: (reported, goal) for name, reported, goal in json.loads(rows or "[]")}

    def primary(self) -> str | None:
        """The node the monitor has as the writable one (primary or wait_primary), if any."""
        for name, (reported, goal) in self.states().items():
            if reported == goal and reported in ("primary", "wait_primary", "single"):
                return name
        return None

    def await_primary(self, name: str, timeout: float) -> None:
        """Wait until ``name`` is the monitor's writable node."""
        self._await(
            lambda: self.primary() == name, time.monotonic() + timeout, f"{name} never promoted"
        )

    def sync_settings(self, name: str) -> tuple[str, str]:
        """(synchronous_standby_names, synchronous_commit) on ``name``."""
        node = self.nodes[name]
        return (
            self.sql(node, "SHOW synchronous_standby_names"),
            self.sql(node, "SHOW synchronous_commit"),
        )

    def kill(self, name: str) -> None:
        """Crash ``name``: SIGKILL its pg_autoctl service (the whole session it runs in) and
        its postmaster, so nothing restarts that Postgres."""
        node = self.nodes[name]
        self.killed.add(name)
        postmaster = node.postmaster_pid()
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(10)
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)

    def restart(self, name: str) -> None:
        """Run a crashed node's pg_autoctl service again: the monitor has it rejoin as a
        standby of the new primary (pg_rewind)."""
        node = self.nodes[name]
        self.killed.discard(name)
        self._service(node, "run", "--pgdata", str(node.pgdata))

    def await_state(self, name: str, state: str, timeout: float) -> None:
        """Wait until the monitor has ``name`` reported and assigned ``state``."""
        self._await(
            partial(self._reached, {name: (state,)}),
            time.monotonic() + timeout,
            f"{name} never became {state}",
        )

    def url(self, *names: str, read_write: bool = True) -> str:
        """A postgresql:// URL of the checkpointd database on ``names`` (all data nodes
        when none), with target_session_attrs=read-write unless ``read_write`` is False."""
        hosts = ",".join(f"127.0.0.1:{self.nodes[n].port}" for n in names or self.nodes)
        query = "?target_session_attrs=read-write" if read_write else ""
        return f"postgresql://postgres@{hosts}/{DATABASE}{query}"

    def describe(self) -> str:
        """The nodes' logs' last lines, for a failure message."""
        parts = []
        for node in [self.monitor, *self.nodes.values()]:
            if node is not None and node.log.exists():
                tail = node.log.read_text(errors="replace").splitlines()[-15:]
                parts.append(f"--- {node.name} ({node.log})\n" + "\n".join(tail))
        return "\n".join(parts)

    # --- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every service and Postgres (immediately) and remove the directory."""
        everyone = [*self.nodes.values(), *([self.monitor] if self.monitor else [])]
        for node in everyone:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self._run(
                        self.binary,
                        "stop",
                        "--pgdata",
                        str(node.pgdata),
                        "--immediate",
                        timeout=15,
                    )
        for node in everyone:
            if node.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(10)
            postmaster = node.postmaster_pid()
            if postmaster is not None and _is_postgres(postmaster, node.pgdata):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(postmaster, signal.SIGKILL)
        # A postmaster's children outlive it for a moment (a WAL receiver may still create a
        # segment): wait until every process of those sessions is gone before removing files.
        groups = {node.process.pid for node in everyone if node.process is not None}
        deadline = time.monotonic() + 15
        while _running_in(groups) and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(3):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                break
            time.sleep(0.5)


def _running_in(groups: set[int]) -> bool:
    """Whether any process still belongs to one of these process groups."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after it.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) in groups:
                return True
    return False


def _is_postgres(pid: int, pgdata: Path) -> bool:
    """Whether ``pid`` is still a postgres serving ``pgdata`` (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.decode(errors="replace") == str(pgdata) for arg in cmdline)
