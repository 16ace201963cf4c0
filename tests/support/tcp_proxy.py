"""A loopback TCP proxy that can cut every connection, to stage a database outage, or freeze
them, to stage a network partition.

While down, it closes the open connections and resets every new one at once, which is what
a client sees when its database restarts or the network drops. While frozen, it forwards
nothing and answers nothing, on open connections and new ones alike, but closes none: what a
client sees when packets stop arriving, or when a peer's host vanished without closing (only
keepalives can tell). Silenced, the connections open at that moment still carry what the
client sends, but nothing of what the server answers (replies, headers, trailers, PING acks)
reaches the client: a half-open path or a wedged middlebox, which only a client that notices
the silence and opens a new connection gets past; new connections are forwarded as usual.
Only loopback addresses are ever used.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forwards 127.0.0.1:<port> to an upstream loopback address until told to cut."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        assert upstream_host in ("127.0.0.1", "localhost", "::1"), "loopback only"
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._down = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        # The client-side sockets of the silenced connections: what is read for them from
        # upstream is dropped.
        self._silenced: set[socket.socket] = set()
        self._clients: set[socket.socket] = set()
        self.connections = 0
        threading.Thread(target=self._accept_forever, daemon=True).start()

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until :meth:`restore`."""
        self._down.set()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()
            self._clients.clear()
            self._silenced.clear()

    def restore(self) -> None:
        """Forward again (after :meth:`cut` or :meth:`freeze`)."""
        self._down.clear()
        self._flowing.set()

    def silence(self) -> int:
        """Drop everything the server sends on the connections open now, forwarding what
        their clients send; return how many were silenced."""
        with self._lock:
            self._silenced |= self._clients
            return len(self._clients)

    def freeze(self) -> None:
        """Stop forwarding in both directions, on every connection, until :meth:`thaw`; new
        connections are accepted but not answered."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again, what was held first."""
        self._flowing.set()

    def close(self) -> None:
        """Stop the proxy."""
        self._closed.set()
        self.cut()
        self._flowing.set()
        self._listener.close()

    def _accept_forever(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                client.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                client.close()  # a reset, like a database that is not there
                continue
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        self._flowing.wait()  # frozen: a new connection is accepted but not answered
        if self._closed.is_set():
            client.close()
            return
        try:
            upstream = socket.create_connection(self._upstream, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
            self._clients.add(client)
            self.connections += 1
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                self._flowing.wait()  # frozen: hold it, as a network that drops packets
                if sink in self._silenced:
                    continue  # the server's bytes to a silenced connection are lost
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for sock in (source, sink):
                    self._clients.discard(sock)
                    self._silenced.discard(sock)
