"""The options every command that talks to a running server takes: where it is, which
namespace, and how to prove who we are (a bearer token, TLS, mutual TLS); and the client they
make.

The namespace is ``--namespace``, else ``$CHECKPOINTD_NAMESPACE``, else ``default``. The
token is never an argument (it would show in ``ps`` and in shell history): it comes from
``--token-file`` or ``$CHECKPOINTD_TOKEN``. TLS is off for ``unix:`` targets and for TCP
targets unless a ``--tls-*`` option is given.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpointd_client import TlsConfig

if TYPE_CHECKING:
    from checkpointd_client.client import CheckpointdClient

__all__ = [
    "READ_NAMESPACE",
    "RUN_NAMESPACE",
    "add_connection_arguments",
    "connect",
    "non_negative_int",
    "positive_int",
    "read_token",
]

#: ``--namespace``'s help, for a command that reads a namespace, and for one that acts on a run.
READ_NAMESPACE = "the namespace to read [default: $CHECKPOINTD_NAMESPACE, then default]"
RUN_NAMESPACE = "the namespace of the run [default: $CHECKPOINTD_NAMESPACE, then default]"
#: Where --namespace's default comes from: one export serves a whole shell session.
NAMESPACE_ENV = "CHECKPOINTD_NAMESPACE"


def add_connection_arguments(
    parser: argparse.ArgumentParser,
    *,
    namespace_help: str,
    timeout: bool = True,
    all_namespaces: bool = False,
) -> None:
    """Add --target, --namespace, --timeout, --token-file and the --tls-* options; without
    --timeout (``timeout=False``) for a command whose one call is a stream that runs until
    stopped, which no request deadline bounds; with ``all_namespaces``, -A/--all-namespaces
    too, which may not be given with --namespace."""
    parser.add_argument(
        "--target",
        default=None,
        help="the server: host:port or unix:///path "
        "[default: $CHECKPOINTD_TARGET, then 127.0.0.1:7470]",
    )
    where = parser.add_mutually_exclusive_group() if all_namespaces else parser
    where.add_argument(
        "--namespace", default=os.environ.get(NAMESPACE_ENV) or "default", help=namespace_help
    )
    if all_namespaces:
        where.add_argument(
            "-A",
            "--all-namespaces",
            action="store_true",
            help="every namespace that holds a run, a pause or a graph thread and that the "
            "token may read, with a NAMESPACE column",
        )
    if timeout:
        parser.add_argument(
            "--timeout",
            type=_positive_float,
            default=10.0,
            help="seconds each request may take [default: %(default)s]",
        )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="a file holding the bearer token [default: $CHECKPOINTD_TOKEN, if set]",
    )
    tls = parser.add_argument_group("TLS (TCP targets only)")
    tls.add_argument("--tls", action="store_true", help="use TLS with the system's CA roots")
    tls.add_argument("--tls-ca", type=Path, help="the CA certificate (PEM) of the server's")
    tls.add_argument("--tls-cert", type=Path, help="a client certificate (PEM), for mutual TLS")
    tls.add_argument("--tls-key", type=Path, help="the client certificate's key (PEM)")
    tls.add_argument("--tls-server-name", help="the name to check the certificate against")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number > 0."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def _tls(args: argparse.Namespace) -> TlsConfig | bool | None:
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    files = (args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
    if any(value is not None for value in files):
        try:
            return TlsConfig.from_files(
                ca=args.tls_ca,
                cert=args.tls_cert,
                key=args.tls_key,
                server_name=args.tls_server_name,
            )
        except OSError as exc:
            raise ValueError(f"cannot read {exc.filename}: {exc.strerror}") from None
    return True if args.tls else None


def read_token(args: argparse.Namespace) -> str | None:
    """The token of --token-file; None when not given (the client reads $CHECKPOINTD_TOKEN)."""
    path: Path | None = args.token_file
    if path is None:
        return None  # the client reads $CHECKPOINTD_TOKEN
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"cannot read --token-file {path}: {exc.strerror}") from None
    if not token:
        raise ValueError(f"--token-file {path} is empty")
    return token


def connect(args: argparse.Namespace, **options: Any) -> CheckpointdClient:
    """A client for the command's connection options. Imported here, when a command runs,
    so that starting ``checkpointd serve`` does not load the client. ValueError when an
    option is unusable."""
    from checkpointd_client.client import CheckpointdClient

    if "timeout" in vars(args):
        options.setdefault("timeout", args.timeout)
    return CheckpointdClient(
        args.target,
        namespace=args.namespace,
        token=read_token(args),
        tls=_tls(args),
        **options,
    )
