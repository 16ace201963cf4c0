"""Who may reach the server: TLS and mutual TLS for TCP listeners, and the start-up check that
refuses to expose an open server to the network.

TLS applies to TCP listeners only. Unix sockets stay plaintext: nothing travels over a
network, and the socket file's permissions (``--unix-socket-mode``) decide who connects.
Certificates are read once at start; replacing them takes a restart (a rolling restart
loses nothing: clients retry and watches resume from their cursors).

A TCP listener on an address other than loopback needs a token (``--auth-tokens-file`` or
``CHECKPOINTD_AUTH_TOKEN``) or TLS, or an explicit ``--insecure`` that says the network
itself is the boundary (a pod's own network namespace, say); the server logs a warning
when it serves that way.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from checkpointd.listeners import Listener
from checkpointd.logging_setup import event

__all__ = ["ExposureError", "TlsError", "TlsFiles", "check_exposure", "is_loopback"]

log = logging.getLogger("checkpointd")


class TlsError(ValueError):
    """The TLS settings cannot be used; the message says what to fix."""


class ExposureError(ValueError):
    """A listener would expose an open server to the network."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The PEM files of the server's TLS identity and, for mutual TLS, of the client CA."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @classmethod
    def from_settings(
        cls, cert: Path | None, key: Path | None, client_ca: Path | None
    ) -> TlsFiles | None:
        """The files named by ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca``; None
        when TLS is off. A key without a certificate (or the reverse) is an error, as is a
        client CA without both."""
        if cert is None and key is None:
            if client_ca is not None:
                raise TlsError("--tls-client-ca needs --tls-cert and --tls-key as well")
            return None
        if cert is None or key is None:
            missing = "--tls-cert" if cert is None else "--tls-key"
            raise TlsError(f"TLS needs both --tls-cert and --tls-key; {missing} is missing")
        return cls(cert, key, client_ca)

    def credentials(self) -> grpc.ServerCredentials:
        """The gRPC server credentials: TLS, and client certificates required when a client
        CA is configured."""
        cert = _read_pem(self.cert, "--tls-cert", "CERTIFICATE")
        key = _read_pem(self.key, "--tls-key", "PRIVATE KEY")
        client_ca = (
            None
            if self.client_ca is None
            else _read_pem(self.client_ca, "--tls-client-ca", "CERTIFICATE")
        )
        self._check_pair()
        return grpc.ssl_server_credentials(
            [(key, cert)],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same identity for an HTTP listener (the approvals console); client
        certificates are not asked for there: the console's callers present tokens."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key, password=b"")
        return context

    def _check_pair(self) -> None:
        """Load the pair the way any TLS server would: gRPC itself only reports "Failed to
        bind to address" for a key that does not belong to the certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        files = f"--tls-cert {self.cert} and --tls-key {self.key}"
        try:
            # An empty password: an encrypted key fails here instead of prompting a terminal.
            context.load_cert_chain(self.cert, self.key, password=b"")
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise TlsError(
                    f"{files}: the key does not match the certificate (each must come from the "
                    "same pair)"
                ) from None
            detail = exc.reason or str(exc).partition(" (_ssl.c")[0]
            raise TlsError(
                f"{files}: cannot be loaded as a TLS identity ({detail}): the key must be an "
                "unencrypted PEM private key and the certificate its PEM certificate (chain)"
            ) from None
        except OSError as exc:
            raise TlsError(f"{files}: cannot read them: {exc.strerror or exc}") from None


def _read_pem(path: Path, flag: str, kind: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{flag} {path}: cannot read it: {exc.strerror}") from None
    if b"-----BEGIN " not in data or kind.encode() not in data:
        raise TlsError(f"{flag} {path}: not a PEM file holding a {kind.lower()}")
    return data


def is_loopback(listener: Listener) -> bool:
    """Whether a TCP listener accepts connections from this machine only. ``localhost`` and
    literal loopback addresses count; any other name might resolve to anything and does not.
    """
    host = listener.address.rpartition(":")[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(
    listeners: list[Listener], *, auth: bool, tls: bool, mutual_tls: bool, insecure: bool
) -> None:
    """Refuse a non-loopback TCP listener without a token or TLS unless ``insecure``; warn
    about what is served in the open."""
    exposed = [
        item.address for item in listeners if item.unix_path is None and not is_loopback(item)
    ]
    if not exposed:
        return
    where = ", ".join(exposed)
    if not auth and not tls:
        if not insecure:
            raise ExposureError(
                f"refusing to listen on {where} without authentication or TLS: anyone who can "
                "reach it could read and write every namespace. Set --auth-tokens-file or "
                "CHECKPOINTD_AUTH_TOKEN, or --tls-cert/--tls-key, or pass --insecure "
                "(CHECKPOINTD_INSECURE=1) if the network itself is the boundary"
            )
        event(
            log,
            logging.WARNING,
            "insecure",
            f"--insecure: serving {where} without authentication or TLS; anyone who can "
            "reach it can read and write every namespace",
            addresses=exposed,
        )
    elif not auth and not mutual_tls:
        event(
            log,
            logging.WARNING,
            "no_client_auth",
            f"serving {where} over TLS without tokens or client certificates: traffic is "
            "encrypted, but anyone who can reach it can read and write every namespace",
            addresses=exposed,
        )
