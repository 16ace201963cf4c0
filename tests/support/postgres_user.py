"""What the test clusters of Postgres share (pg_auto_failover, Patroni, an asynchronous pair):
free loopback ports, a private directory the ``postgres`` user owns, commands run as that
user, and a data directory's postmaster pid. Postgres refuses to run as root, so under root
every command runs as ``postgres`` (``runuser``), in a directory under that user's home (the
temporary directory may be private to root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import tempfile
from pathlib import Path

__all__ = ["as_postgres", "free_port", "postgres_dir", "postmaster_pid"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def as_postgres() -> list[str]:
    """The prefix that runs a command as the ``postgres`` user (none when not root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def postgres_dir(prefix: str) -> Path:
    """A new private directory the user running Postgres owns."""
    root = os.geteuid() == 0
    parent = pwd.getpwnam("postgres").pw_dir if root else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if root:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid of a data directory's postmaster, from its postmaster.pid (None if none)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    return None
