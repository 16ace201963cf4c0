"""How a client proves who it is: a bearer token, and TLS (mutual TLS with a client certificate).

The token is sent as ``authorization: Bearer <token>`` metadata on every call, watches
included. It comes from the ``token`` argument or, when that is ``None``,
``$CHECKPOINTD_TOKEN``. TLS is for TCP targets; checkpointd serves Unix sockets in plaintext
(their file permissions decide who connects), so a ``unix:`` target with TLS is an error.

::

    tls = TlsConfig.from_files(ca="ca.pem", cert="client.pem", key="client-key.pem")
    client = CheckpointdClient("checkpointd.internal:7470", token=..., tls=tls)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

__all__ = ["TOKEN_ENV_VAR", "TlsConfig", "auth_metadata", "open_aio_channel", "open_channel"]

#: The environment variable the clients read the token from when none is given.
TOKEN_ENV_VAR = "CHECKPOINTD_TOKEN"  # noqa: S105 - a variable name, not a secret


@dataclass(frozen=True, kw_only=True, slots=True)
class TlsConfig:
    """TLS settings of a client channel (all PEM bytes; see :meth:`from_files`)."""

    root_certificates: bytes | None = None
    """The CA certificates that may sign the server's certificate; None: the system's roots."""
    certificate_chain: bytes | None = None
    """The client certificate, for servers that require one (mutual TLS)."""
    private_key: bytes | None = field(default=None, repr=False)
    """The private key of ``certificate_chain``."""
    server_name: str | None = None
    """The name to check the server's certificate against, when it differs from the target's
    host (e.g. connecting by IP to a certificate issued for a DNS name)."""

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("a client certificate needs its private key, and the reverse")

    @classmethod
    def from_files(
        cls,
        *,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        server_name: str | None = None,
    ) -> TlsConfig:
        """Read the PEM files: ``ca`` (the server's CA), ``cert`` and ``key`` (the client's
        certificate and key, for mutual TLS)."""

        def read(path: str | os.PathLike[str] | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(
            root_certificates=read(ca),
            certificate_chain=read(cert),
            private_key=read(key),
            server_name=server_name,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The gRPC channel credentials."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def resolve_tls(tls: TlsConfig | bool | None, target: str) -> TlsConfig | None:
    """``True`` means TLS with the system's roots; ``None``/``False`` plaintext."""
    if tls is None or tls is False:
        return None
    config = TlsConfig() if tls is True else tls
    if not isinstance(config, TlsConfig):
        raise TypeError(f"tls must be a TlsConfig, True or None, got {type(tls).__name__}")
    if target.startswith("unix:"):
        raise ValueError(
            "TLS is for TCP targets: checkpointd serves Unix sockets in plaintext, guarded by "
            "the socket file's permissions"
        )
    return config


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata that carries ``token`` (else ``$CHECKPOINTD_TOKEN``); empty without one."""
    if token is None:
        token = os.environ.get(TOKEN_ENV_VAR) or None
    if token is None:
        return ()
    if not isinstance(token, str):
        raise TypeError(f"token must be a string, got {type(token).__name__}")
    token = token.strip()
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        # Never echo the token: this message may end up in a log.
        raise ValueError("the token must be non-empty printable ASCII without spaces")
    return (("authorization", f"Bearer {token}"),)


def _options(tls: TlsConfig, options: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    if tls.server_name is None:
        return options
    return [*options, ("grpc.ssl_target_name_override", tls.server_name)]


def open_channel(
    target: str, options: list[tuple[str, Any]], tls: TlsConfig | None
) -> grpc.Channel:
    """A blocking channel, over TLS when ``tls`` is given."""
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, tls.channel_credentials(), options=_options(tls, options))


def open_aio_channel(
    target: str, options: list[tuple[str, Any]], tls: TlsConfig | None
) -> grpc.aio.Channel:
    """An asyncio channel, over TLS when ``tls`` is given."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(
        target, tls.channel_credentials(), options=_options(tls, options)
    )
