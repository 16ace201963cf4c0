"""``--all-namespaces`` (``-A``): which namespaces a listing reads.

The gRPC API has no call that lists namespaces; the approvals console does
(``GET /api/namespaces``): the namespaces that hold a pending interrupt, those the token may
read. So ``-A`` asks the console, at ``--console`` (or ``$CHECKPOINTD_CONSOLE_URL``), with the
command's token, and then reads each namespace over gRPC as ``--namespace`` would. That covers
every pending interrupt (``interrupts list -A`` misses none), and the runs of the namespaces
that have one; a namespace whose runs have no pending pause is not found that way, and is
read with ``--namespace``.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import urllib.error
import urllib.request
from typing import Any

from checkpointd.cli.connection import read_token

__all__ = ["CONSOLE_ENV", "add_console_argument", "readable_namespaces"]

#: Where ``--console``'s default comes from.
CONSOLE_ENV = "CHECKPOINTD_CONSOLE_URL"
#: The variable the token comes from when --token-file is not given, as the client reads it.
TOKEN_VARIABLE = "CHECKPOINTD_TOKEN"  # noqa: S105 (a variable's name, not a secret)


def add_console_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--console``, where ``-A`` finds the namespaces."""
    parser.add_argument(
        "--console",
        default=None,
        metavar="URL",
        help=f"the approvals console, which -A asks for the namespaces [default: ${CONSOLE_ENV}]",
    )


def readable_namespaces(args: argparse.Namespace, *, timeout: float) -> list[str]:
    """The namespaces with a pending interrupt that the token may read, as the console lists
    them, in name order. ValueError when the console cannot be asked or refuses."""
    url = args.console or os.environ.get(CONSOLE_ENV) or ""
    if not url:
        raise ValueError(
            "--all-namespaces asks the approvals console for the namespaces (the gRPC API "
            f"lists none): give its address with --console or ${CONSOLE_ENV}"
        )
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--console must be an http:// or https:// URL, not {url!r}")
    endpoint = url.rstrip("/") + "/api/namespaces"
    headers = {"Accept": "application/json"}
    token = read_token(args) or os.environ.get(TOKEN_VARIABLE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    context = None
    if endpoint.startswith("https:") and args.tls_ca is not None:
        context = ssl.create_default_context(cafile=str(args.tls_ca))
    # The scheme was checked above: http or https only.
    request = urllib.request.Request(endpoint, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:  # noqa: S310
            body: Any = json.loads(reply.read())
    except urllib.error.HTTPError as error:
        with error:
            raise ValueError(f"the console at {url} refused: {_said(error.read())}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise ValueError(f"cannot ask the console at {url}: {reason}") from None
    listed = body.get("namespaces") if isinstance(body, dict) else None
    if not isinstance(listed, list):
        raise ValueError(f"the console at {url} answered no namespace list")
    return sorted(str(n["name"]) for n in listed if isinstance(n, dict) and "name" in n)


def _said(raw: bytes) -> str:
    """The console's error, as its JSON says it (its message and reason)."""
    try:
        error = json.loads(raw)["error"]
        return f"{error['message']} ({error['reason'] or error['code']})"
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode(errors="replace")
