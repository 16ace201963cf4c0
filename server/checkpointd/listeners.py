"""Listen addresses: parsing ``host:port`` and ``unix:`` forms, socket file permissions, and
stale socket files.

A Unix socket is created with the owner's read and write permission only (no other local
user can connect, even for a moment), then given the configured mode (``0600`` by default),
and removed when the server exits. A socket file left by a crashed server is replaced; a
socket someone still serves on, or a file that is not a socket, is refused.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_UNIX_SOCKET_MODE",
    "Listener",
    "ListenerError",
    "parse_listen",
    "parse_socket_mode",
    "private_files",
]

DEFAULT_UNIX_SOCKET_MODE = 0o600


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

    def apply_mode(self, mode: int) -> None:
        """Give our socket file its configured permissions (after binding)."""
        if self.unix_path is not None:
            try:
                os.chmod(self.unix_path, mode)
            except OSError as exc:
                raise ListenerError(
                    f"cannot set mode {mode:04o} on {self.unix_path}: {exc.strerror}"
                ) from None

    def cleanup(self) -> None:
        """Remove our socket file on exit."""
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Within the block, new files (sockets included) get no permission for group or others."""
    previous = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(previous)


def parse_socket_mode(text: str) -> int:
    """Parse an octal permission mode such as ``0600`` or ``660``; the owner needs rw."""
    digits = text.strip().removeprefix("0o")
    if not digits or any(ch not in "01234567" for ch in digits):
        raise ValueError("must be an octal permission mode such as 0600 or 0660")
    mode = int(digits, 8)
    if mode > 0o777:
        raise ValueError("must be at most 0777 (no setuid, setgid or sticky bits)")
    if mode & 0o600 != 0o600:
        raise ValueError("must give the owner read and write permission (0600 at least)")
    return mode


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
