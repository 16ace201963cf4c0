"""A Patroni cluster on loopback: a single-node etcd, a primary and a synchronous standby.

Debian's ``patroni`` (3.0.2) and ``etcd-server`` (3.4) packages provide the binaries; nothing
runs under systemd: etcd and each member's Patroni are subprocesses of the test, in a
temporary directory of their own. Postgres refuses to run as root, so under root Patroni runs
as the ``postgres`` user (``runuser``), in a directory that user owns under its home (the
temporary directory may be private to root). Every listener (etcd's client and peer ports,
each member's Postgres and REST API) is on 127.0.0.1, on a free port (never the machine's own
cluster's), with ``trust`` authentication from loopback.

:data:`PATRONI_YAML` is each member's whole configuration: the settings docs/ha.md shows as
tested. ``synchronous_mode`` makes the standby synchronous (the primary's
``synchronous_standby_names`` names it, ``synchronous_commit`` is ``on``), so a commit is
acknowledged only once the standby has it, and only that standby may be promoted.

:meth:`Cluster.close` stops and removes everything, whatever state the members are in.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.postgres_user import as_postgres, free_port, postgres_dir, postmaster_pid

__all__ = ["PATRONI_YAML", "Cluster", "PatroniMissing"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
DATABASE = "checkpointd"
SCOPE = "checkpointd"

#: One member's configuration (str.format fields: name, ports, directories). The DCS part
#: (bootstrap.dcs) is written to etcd by the first member and shared by both.
PATRONI_YAML = """\
scope: {scope}
name: {name}

restapi:
  listen: 127.0.0.1:{rest_port}
  connect_address: 127.0.0.1:{rest_port}

etcd3:
  hosts: 127.0.0.1:{etcd_port}

bootstrap:
  dcs:
    # The leader holds a key that expires after ttl seconds unless renewed; Patroni renews
    # it every loop_wait seconds, and gives each etcd or Postgres call retry_timeout seconds.
    # A standby takes over once the key has expired: ttl bounds how long a lost primary
    # goes unnoticed. Patroni wants loop_wait + 2 * retry_timeout <= ttl.
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    # A standby more than this many bytes of WAL behind the primary's last reported
    # position is not promoted (1 MB, Patroni's default).
    maximum_lag_on_failover: 1048576
    # The primary's synchronous_standby_names names the standby, and Patroni promotes only
    # that synchronous standby: a commit acknowledged is on the new primary too. Not
    # strict: alone, the primary goes on taking writes without a standby.
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      parameters:
        synchronous_commit: "on"
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8

postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {data_dir}
  bin_dir: {bin_dir}
  pgpass: {root}/{name}.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: {root}
  # A new replica copies the primary at once, not after a spread checkpoint (minutes).
  basebackup:
    - checkpoint: fast
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
"""

#: urllib without the environment's proxies: every request here is to 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PatroniMissing(RuntimeError):
    """Patroni, etcd or PostgreSQL 15 is not installed."""


def _get(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    """GET ``url``: (HTTP status, the JSON body or None); status 0 if nothing answered."""
    try:
        with _HTTP.open(url, timeout=timeout) as reply:
            status, body = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (OSError, ValueError):
        return 0, None
    try:
        return int(status), json.loads(body)
    except ValueError:
        return int(status), None


@dataclass
class Member:
    """One Patroni and the Postgres it runs."""

    name: str
    pg_port: int
    rest_port: int
    data_dir: Path
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def rest(self, path: str) -> tuple[int, Any]:
        return _get(f"http://127.0.0.1:{self.rest_port}{path}")

    def postmaster_pid(self) -> int | None:
        """The pid of this member's postmaster, from its postmaster.pid (None if not running)."""
        return postmaster_pid(self.data_dir)


@dataclass
class Cluster:
    """etcd and two members, ``node1`` (the first primary) and ``node2`` (its standby)."""

    root: Path = field(default_factory=Path)
    etcd_port: int = 0
    etcd: subprocess.Popen[bytes] | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: The members crashed on purpose (their Patroni's exit is expected).
    killed: set[str] = field(default_factory=set)
    #: The Postgres processes killed (postmasters and their children), which close() waits
    #: to be gone.
    postgres: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.patroni = shutil.which("patroni")
        self.etcd_binary = shutil.which("etcd")
        if self.patroni is None or self.etcd_binary is None:
            raise PatroniMissing(
                "patroni or etcd is not installed (apt-get install -y patroni etcd-server)"
            )
        if not (PG_BIN / "postgres").exists():
            raise PatroniMissing(f"PostgreSQL 15 is not installed ({PG_BIN})")
        self.root = postgres_dir("patroni-")

    # --- building the cluster -------------------------------------------------------------

    def _spawn(self, command: list[str], log: Path) -> subprocess.Popen[bytes]:
        """Start ``command`` in a session of its own (so that it can be killed by its group),
        its output to ``log``."""
        with log.open("ab") as out:
            return subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer = f"http://127.0.0.1:{free_port()}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        assert self.etcd_binary is not None
        self.etcd = self._spawn(
            [
                self.etcd_binary,
                "--name=etcd0",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=etcd0={peer}",
                "--initial-cluster-state=new",
            ],
            self.root / "etcd.log",
        )

    def _etcd_healthy(self) -> bool:
        status, body = _get(f"http://127.0.0.1:{self.etcd_port}/health")
        return status == 200 and isinstance(body, dict) and body.get("health") == "true"

    def _start_member(self, name: str) -> Member:
        member = self.members[name] = Member(
            name,
            pg_port=free_port(),
            rest_port=free_port(),
            data_dir=self.root / name,
            config=self.root / f"{name}.yml",
            log=self.root / f"{name}.log",
        )
        member.config.write_text(
            PATRONI_YAML.format(
                scope=SCOPE,
                name=name,
                rest_port=member.rest_port,
                etcd_port=self.etcd_port,
                pg_port=member.pg_port,
                data_dir=member.data_dir,
                bin_dir=PG_BIN,
                root=self.root,
            )
        )
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "LANG": "C.UTF-8"}
        prefix = as_postgres()
        assert self.patroni is not None
        member.process = self._spawn(
            [
                *prefix,
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                self.patroni,
                str(member.config),
            ],
            member.log,
        )
        return member

    def start(self, timeout: float = 120.0) -> Cluster:
        """Run etcd, then node1 (which bootstraps the cluster), the database, then node2
        (a replica); return once node1 is primary and node2 its synchronous standby."""
        deadline = time.monotonic() + timeout
        self._start_etcd()
        self._await(self._etcd_healthy, deadline, "etcd never came up")
        self._start_member("node1")
        self._await(lambda: self.primary() == "node1", deadline, "node1 never led")
        self.sql("node1", f"CREATE DATABASE {DATABASE}")
        node2 = self._start_member("node2")
        # /sync answers 200 on the synchronous standby; node1's settings must name it.
        self._await(
            lambda: node2.rest("/sync")[0] == 200 and "node2" in self.sync_settings("node1")[0],
            deadline,
            "node2 never became node1's synchronous standby",
        )
        return self

    def _await(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            try:
                if ready():
                    return
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what}:\n{self.describe()}")
            if self.etcd is not None and (code := self.etcd.poll()) is not None:
                raise RuntimeError(f"etcd exited {code}:\n{self.describe()}")
            for member in self.members.values():
                code = member.process.poll() if member.process is not None else None
                if code is not None and member.name not in self.killed:
                    raise RuntimeError(f"{member.name}'s patroni exited {code}:\n{self.describe()}")
            time.sleep(0.2)

    # --- observing and failing ------------------------------------------------------------

    def sql(self, name: str, query: str, database: str = "postgres") -> str:
        """Run ``query`` on member ``name`` with psql as postgres; its unaligned output."""
        done = subprocess.run(
            [
                str(PG_BIN / "psql"),
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                f"host=127.0.0.1 port={self.members[name].pg_port} user=postgres "
                f"dbname={database} connect_timeout=5",
                "-c",
                query,
            ],
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        if done.returncode != 0:
            raise RuntimeError(f"{query} on {name} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode().strip()

    def primary(self) -> str | None:
        """The member whose REST API says it is the running primary (holds the leader key and
        takes writes), if any."""
        for name, member in self.members.items():
            if name not in self.killed and member.rest("/primary")[0] == 200:
                return name
        return None

    def await_primary(self, name: str, timeout: float) -> None:
        """Wait until ``name`` is the primary."""
        self._await(
            lambda: self.primary() == name, time.monotonic() + timeout, f"{name} never promoted"
        )

    def sync_settings(self, name: str) -> tuple[str, str]:
        """(synchronous_standby_names, synchronous_commit) on ``name``."""
        return (
            self.sql(name, "SHOW synchronous_standby_names"),
            self.sql(name, "SHOW synchronous_commit"),
        )

    def kill(self, name: str) -> None:
        """Crash ``name`` as a lost machine would: SIGKILL its Patroni (the whole session it
        runs in) and its postmaster. Patroni alive would restart a killed Postgres in place
        instead of failing over; dead, it stops renewing the leader key."""
        member = self.members[name]
        self.killed.add(name)
        postmaster = member.postmaster_pid()
        if member.process is not None and member.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(member.process.pid, signal.SIGKILL)
            member.process.wait(10)
        if postmaster is not None and _is_postgres(postmaster, member.data_dir):
            self.postgres |= _kill_with_children(postmaster)

    def url(self, *names: str, read_write: bool = True) -> str:
        """A postgresql:// URL of the checkpointd database on ``names`` (both members when
        none), with target_session_attrs=read-write unless ``read_write`` is False."""
        hosts = ",".join(f"127.0.0.1:{self.members[n].pg_port}" for n in names or self.members)
        query = "?target_session_attrs=read-write" if read_write else ""
        return f"postgresql://postgres@{hosts}/{DATABASE}{query}"

    def describe(self) -> str:
        """The cluster as Patroni sees it and the logs' last lines, for a failure message."""
        parts = []
        for member in self.members.values():
            if member.name not in self.killed:
                parts.append(f"--- cluster, from {member.name}: {member.rest('/cluster')[1]}")
                break
        logs = [self.root / "etcd.log", *(m.log for m in self.members.values())]
        for log in logs:
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-15:]
                parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # --- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every Patroni, Postgres and etcd, and remove the directory."""
        processes: list[subprocess.Popen[bytes]] = [
            *(m.process for m in self.members.values() if m.process is not None),
            *([self.etcd] if self.etcd is not None else []),
        ]
        # Patroni first, so that no Patroni restarts a Postgres killed after it.
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        for member in self.members.values():
            pid = member.postmaster_pid()
            if pid is not None and _is_postgres(pid, member.data_dir):
                self.postgres |= _kill_with_children(pid)
        # A killed process lingers for a moment (a WAL receiver may still create a segment):
        # wait until every one is gone before removing files.
        deadline = time.monotonic() + 15
        while any(Path(f"/proc/{pid}").exists() for pid in self.postgres):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for _ in range(3):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                break
            time.sleep(0.5)


def _kill_with_children(postmaster: int) -> set[int]:
    """SIGKILL a postmaster and its children; their pids. Patroni starts the postmaster in
    a session of its own, and each child calls setsid too, so no process group holds them
    all: the children are found by their parent (before it dies and they are reparented)."""
    family = {postmaster}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # pid (comm) state ppid ...: comm may hold spaces, so split after it.
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                family.add(int(stat.parent.name))
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return family


def _is_postgres(pid: int, *data_dirs: Path) -> bool:
    """Whether ``pid`` is still a postgres serving one of ``data_dirs`` (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    wanted = {str(d) for d in data_dirs}
    return any(arg.decode(errors="replace") in wanted for arg in cmdline)
