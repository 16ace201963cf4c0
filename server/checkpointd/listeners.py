"""Listen addresses: parsing ``host:port`` and ``unix:`` forms, and stale socket files."""

from __future__ import annotations

import contextlib
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Listener", "ListenerError", "parse_listen"]


class ListenerError(ValueError):
    """A listen address that cannot be used; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One address to serve on. ``unix_path`` is set for Unix domain sockets."""

    address: str
    unix_path: Path | None = None

    def prepare(self) -> None:
        """Remove a socket file left by a crashed server; refuse to replace anything else."""
        path = self.unix_path
        if path is None or not path.exists():
            return
        if not stat.S_ISSOCK(path.stat().st_mode):
            raise ListenerError(
                f"cannot listen on {self.address}: {path} exists and is not a socket"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody answers: a stale socket from a crashed server
            return
        finally:
            probe.close()
        raise ListenerError(f"cannot listen on {self.address}: another server is serving there")

    def cleanup(self) -> None:
        """Remove our socket file on exit."""
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()


def parse_listen(address: str) -> Listener:
    """Parse ``host:port``, ``[v6]:port``, ``unix:///abs/path`` or ``unix:relative/path``."""
    if address.startswith("unix:"):
        path = address.removeprefix("unix://") if address.startswith("unix://") else address[5:]
        if not path:
            raise ListenerError(f"listen address {address!r} names no socket path")
        return Listener(address=address, unix_path=Path(path))
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ListenerError(
            f"listen address {address!r} must be host:port (e.g. 127.0.0.1:7470) or unix:///path"
        )
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError(f"listen address {address!r} has an invalid port {port!r}")
    return Listener(address=address)
