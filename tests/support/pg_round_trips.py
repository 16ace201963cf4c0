"""A loopback TCP proxy in front of Postgres (or PgBouncer) that counts round trips.

A round trip is one ``ReadyForQuery`` message from the server: the answer to a simple query
or to a ``Sync``, after which the client waits for nothing more. Everything the client sends
up to a ``Sync`` (Parse, Bind, Execute...) goes as one exchange, so the count is exactly how
often a client waited on the network. Connect with ``sslmode=disable`` (:meth:`dsn` does), so
the server's messages are readable.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["RoundTripCounter"]

_READY_FOR_QUERY = ord("Z")


class RoundTripCounter:
    """Forwards 127.0.0.1:<port> to the host and port of ``dsn`` and counts the server's
    ``ReadyForQuery`` messages over every connection (:attr:`count`)."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        host, port = parts.hostname or "127.0.0.1", parts.port or 5432
        assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"
        self._upstream = (host, port)
        self._parts = parts
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._count = 0
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept_forever, daemon=True).start()

    @property
    def count(self) -> int:
        """Round trips so far, over every connection."""
        with self._lock:
            return self._count

    def dsn(self) -> str:
        """The proxied DSN: the same user, password and database, through this proxy."""
        parts = self._parts
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept_forever(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                if from_server:
                    pending = self._count_ready(pending + data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _count_ready(self, buffer: bytes) -> bytes:
        """Count the whole messages of ``buffer`` that are ReadyForQuery; return the rest."""
        at = 0
        ready = 0
        while len(buffer) - at >= 5:
            length = int.from_bytes(buffer[at + 1 : at + 5], "big")
            if len(buffer) - at < 1 + length:
                break
            if buffer[at] == _READY_FOR_QUERY:
                ready += 1
            at += 1 + length
        if ready:
            with self._lock:
                self._count += ready
        return buffer[at:]
