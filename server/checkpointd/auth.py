"""Token authentication and per-namespace authorization of every checkpointd RPC.

Tokens come from a JSON file (``--auth-tokens-file``) and/or one environment variable
(``CHECKPOINTD_AUTH_TOKEN``: read-write in every namespace), never from the command line,
where ``ps`` would show them. The file::

    {"tokens": [
      {"name": "approval-bot", "token_sha256": "<64 hex digits>",
       "namespaces": ["team-a"], "role": "read-write"},
      {"name": "dashboard", "token": "<the token itself>",
       "namespaces": ["*"], "role": "read-only"}
    ]}

``token_sha256`` (the hex SHA-256 of the token, ``printf %s TOKEN | sha256sum``) is
preferred: the file then holds no secret. ``token`` is accepted for convenience and hashed
when the file is read; either way only digests stay in memory. A client sends
``authorization: Bearer <token>``; its SHA-256 is compared with every known digest by
:func:`hmac.compare_digest`, so the time taken says nothing about how close a guess was.

:data:`RPC_ACCESS` is the one table that says which RPC reads and which writes. A call
without a token is ``UNAUTHENTICATED`` (``MISSING_TOKEN``), with an unknown token
``UNAUTHENTICATED`` (``INVALID_TOKEN``), with a namespace that is not a namespace name
``INVALID_ARGUMENT`` (``INVALID_FIELD``, by :func:`checkpointd.validation.namespace`, the rule
every servicer applies), outside the token's namespaces ``PERMISSION_DENIED``
(``NAMESPACE_NOT_ALLOWED``) and a write with a read-only token ``PERMISSION_DENIED``
(``READ_ONLY_TOKEN``). Health and reflection answer without a token (probes carry none;
reflection describes the protocol, which is public, and no data). Neither the token nor any
part of it is ever logged or put in an error message. :func:`checkpointd.edge.auth_layer`
applies these checks to every call, of every kind; the Write stream
(:data:`ITEM_CHECKED_STREAMS`) carries calls of the table, so its token is checked when it
opens and each item by the same rules as its unary call (:data:`ITEM_GATE`).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import logging
import re
import stat
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpointd import validation
from checkpointd.errors import (
    InvalidToken,
    MissingToken,
    NamespaceNotAllowed,
    ReadOnlyToken,
    status_for,
)
from checkpointd.logging_setup import event

__all__ = [
    "ALL_NAMESPACES",
    "ITEM_CHECKED_STREAMS",
    "ITEM_GATE",
    "RPC_ACCESS",
    "Access",
    "Authenticator",
    "Grant",
    "Role",
    "TokenFileError",
    "check_namespace",
    "env_grant",
    "load_tokens_file",
    "log_denied",
]

log = logging.getLogger("checkpointd")

#: The namespace entry that grants every namespace.
ALL_NAMESPACES = "*"
#: The name of the grant made by ``CHECKPOINTD_AUTH_TOKEN``.
ENV_TOKEN_NAME = "CHECKPOINTD_AUTH_TOKEN"  # noqa: S105 - a variable name, not a secret
#: Tokens shorter than this are refused: a token is a password that nobody types.
MIN_TOKEN_LENGTH = 16

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEX_DIGEST_RE = re.compile(r"[0-9a-fA-F]{64}")
_ENTRY_KEYS = frozenset({"name", "token", "token_sha256", "namespaces", "role"})


class Access(enum.Enum):
    """What an RPC does to the store."""

    READ = "read"
    WRITE = "write"


class Role(enum.Enum):
    """What a token may do."""

    READ_ONLY = "read-only"
    READ_WRITE = "read-write"


_CHECKPOINTS = "/checkpointd.v1.CheckpointService/"
_INTERRUPTS = "/checkpointd.v1.InterruptService/"
_IDEMPOTENCY = "/checkpointd.v1.IdempotencyService/"
_REPLICATION = "/checkpointd.v1.ReplicationService/"
_GRAPH = "/checkpointd.v1.GraphService/"

#: The one table: every checkpointd RPC, read or write. A method missing here is refused to
#: every token (a test checks that the table names every method of the services).
RPC_ACCESS: dict[str, Access] = {
    _CHECKPOINTS + "PutCheckpoint": Access.WRITE,
    _CHECKPOINTS + "GetCheckpoint": Access.READ,
    _CHECKPOINTS + "GetLatestCheckpoint": Access.READ,
    _CHECKPOINTS + "ListCheckpoints": Access.READ,
    _CHECKPOINTS + "DeleteExecution": Access.WRITE,
    _CHECKPOINTS + "PruneCheckpoints": Access.WRITE,
    _CHECKPOINTS + "GetResumePoint": Access.READ,
    _CHECKPOINTS + "GetForkPoint": Access.READ,
    _CHECKPOINTS + "ListExecutions": Access.READ,
    _CHECKPOINTS + "GetExecution": Access.READ,
    _INTERRUPTS + "RecordInterrupt": Access.WRITE,
    _INTERRUPTS + "ClaimInterrupt": Access.WRITE,
    _INTERRUPTS + "ListPendingInterrupts": Access.READ,
    _INTERRUPTS + "WatchInterrupts": Access.READ,
    _INTERRUPTS + "SubmitDecision": Access.WRITE,
    _INTERRUPTS + "LeaseDecision": Access.WRITE,
    _INTERRUPTS + "ReportResume": Access.WRITE,
    _INTERRUPTS + "ListDecisions": Access.READ,
    _IDEMPOTENCY + "PutIdempotencyResult": Access.WRITE,
    _IDEMPOTENCY + "GetIdempotencyResult": Access.READ,
    # Settling changes what every replicator of the namespace sees next: a write.
    _REPLICATION + "ListUnsyncedCheckpoints": Access.READ,
    _REPLICATION + "MarkCheckpointsSynced": Access.WRITE,
    _REPLICATION + "QuarantineCheckpoints": Access.WRITE,
    _GRAPH + "PutGraphCheckpoint": Access.WRITE,
    _GRAPH + "PutGraphWrites": Access.WRITE,
    _GRAPH + "GetGraphCheckpoint": Access.READ,
    _GRAPH + "ListGraphCheckpoints": Access.READ,
    _GRAPH + "GetGraphDeltaHistory": Access.READ,
    _GRAPH + "DeleteGraphThread": Access.WRITE,
    _GRAPH + "DeleteGraphRuns": Access.WRITE,
    _GRAPH + "CopyGraphThread": Access.WRITE,
    _GRAPH + "PruneGraphThreads": Access.WRITE,
    _GRAPH + "ApplyGraphRetention": Access.WRITE,
}


#: Streams whose items are calls of the table above, each checked as that call would be
#: (the token when the stream opens, the access and namespace per item).
ITEM_CHECKED_STREAMS: frozenset[str] = frozenset({"/checkpointd.v1.WriteService/Write"})

#: The check of one item of an item-checked stream, set while the stream runs:
#: ``gate(unary_method, request)`` raises ReadOnlyToken, NamespaceNotAllowed or InvalidField.
#: ``None`` (no authentication configured) admits every item.
ITEM_GATE: ContextVar[Callable[[str, Any], None] | None] = ContextVar(
    "checkpointd_item_gate", default=None
)


class TokenFileError(ValueError):
    """The tokens file cannot be used; the message says what to fix (and holds no token)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """One token: who it is, what it may touch, and the SHA-256 of the token itself."""

    name: str
    digest: bytes
    namespaces: frozenset[str] | None
    """The namespaces it may use; None: every namespace (``"*"``)."""
    role: Role

    def allows_namespace(self, namespace: str) -> bool:
        """Whether the token may use ``namespace``."""
        return self.namespaces is None or namespace in self.namespaces

    def __repr__(self) -> str:  # the digest is no secret, but keep it out of logs anyway
        scope = "*" if self.namespaces is None else ",".join(sorted(self.namespaces))
        return f"Grant(name={self.name!r}, namespaces={scope}, role={self.role.value})"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _check_token_text(token: str, where: str) -> None:
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenFileError(f"{where}: the token must be at least {MIN_TOKEN_LENGTH} characters")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise TokenFileError(
            f"{where}: the token must be printable ASCII without spaces (it travels in a header)"
        )


def env_grant(token: str) -> Grant:
    """The grant of ``CHECKPOINTD_AUTH_TOKEN``: read-write in every namespace."""
    _check_token_text(token, ENV_TOKEN_NAME)
    return Grant(ENV_TOKEN_NAME, _digest(token), None, Role.READ_WRITE)


def _parse_entry(entry: object, where: str) -> tuple[Grant, bool]:
    """One entry of the file; also whether it held a plaintext token."""
    if not isinstance(entry, dict):
        raise TokenFileError(f"{where}: must be an object")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise TokenFileError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
            f"{', '.join(sorted(_ENTRY_KEYS))}"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise TokenFileError(
            f"{where}: name must be 1-64 letters, digits, '.', '_', '-' (it appears in logs "
            "and errors in place of the token)"
        )
    where = f"{where} ({name!r})"
    token, hashed = entry.get("token"), entry.get("token_sha256")
    if (token is None) == (hashed is None):
        raise TokenFileError(f"{where}: give exactly one of token_sha256 (preferred) or token")
    if token is not None:
        if not isinstance(token, str):
            raise TokenFileError(f"{where}: token must be a string")
        _check_token_text(token, where)
        digest = _digest(token)
    else:
        if not isinstance(hashed, str) or not _HEX_DIGEST_RE.fullmatch(hashed):
            raise TokenFileError(
                f"{where}: token_sha256 must be 64 hex digits (printf %s TOKEN | sha256sum)"
            )
        digest = bytes.fromhex(hashed)
    namespaces = entry.get("namespaces")
    if (
        not isinstance(namespaces, list)
        or not namespaces
        or not all(isinstance(n, str) for n in namespaces)
    ):
        raise TokenFileError(
            f'{where}: namespaces must be a non-empty list of namespace names, or ["*"]'
        )
    for namespace in namespaces:
        if namespace != ALL_NAMESPACES and not validation.is_namespace_name(namespace):
            raise TokenFileError(
                f"{where}: {namespace[:80]!r} is not a namespace name (nor '*'): "
                f"{validation.NAMESPACE_RULE}"
            )
    role_text = entry.get("role")
    try:
        role = Role(role_text)
    except ValueError:
        raise TokenFileError(f"{where}: role must be 'read-only' or 'read-write'") from None
    scope = None if ALL_NAMESPACES in namespaces else frozenset(namespaces)
    return Grant(name, digest, scope, role), token is not None


def load_tokens_file(path: Path) -> list[Grant]:
    """Read and check the tokens file; :class:`TokenFileError` names the entry to fix."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except OSError as exc:
        raise TokenFileError(f"cannot read the tokens file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"the tokens file {path} is not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # Only the position: the message of a decode error can quote the (secret) text.
        raise TokenFileError(
            f"the tokens file {path} is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(document, dict) or set(document) != {"tokens"}:
        raise TokenFileError(f'the tokens file {path} must be an object {{"tokens": [...]}}')
    entries = document["tokens"]
    if not isinstance(entries, list) or not entries:
        raise TokenFileError(f"the tokens file {path}: tokens must be a non-empty list")
    grants: list[Grant] = []
    plaintext = False
    for index, entry in enumerate(entries):
        grant, was_plain = _parse_entry(entry, f"{path}: tokens[{index}]")
        plaintext |= was_plain
        for other in grants:
            if other.name == grant.name:
                raise TokenFileError(f"{path}: tokens[{index}]: name {grant.name!r} repeats")
            if hmac.compare_digest(other.digest, grant.digest):
                raise TokenFileError(
                    f"{path}: tokens[{index}] ({grant.name!r}) has the same token as "
                    f"{other.name!r}; give each client its own"
                )
        grants.append(grant)
    if plaintext and mode & (stat.S_IRWXG | stat.S_IRWXO):
        event(
            log,
            logging.WARNING,
            "tokens_file_readable",
            f"the tokens file {path} holds plaintext tokens and is readable by other users "
            f"(mode {stat.S_IMODE(mode):04o}): chmod 0600 it, or store token_sha256 instead",
            path=str(path),
        )
    return grants


class Authenticator:
    """Finds the grant of a call's bearer token, in time independent of the token."""

    def __init__(self, grants: Iterable[Grant]) -> None:
        self._grants = tuple(grants)
        if not self._grants:
            raise ValueError("an authenticator needs at least one token")

    @property
    def grants(self) -> tuple[Grant, ...]:
        """Every known token's grant."""
        return self._grants

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Grant:
        """The grant of the ``authorization: Bearer`` token; MissingToken or InvalidToken."""
        values = [value for key, value in metadata or () if key == "authorization"]
        if not values:
            raise MissingToken()
        if len(values) > 1:
            raise InvalidToken("send one authorization header, not several")
        value = values[0]
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        scheme, _, token = str(value).partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise InvalidToken("the authorization header must be 'Bearer <token>'")
        presented = _digest(token)
        found: Grant | None = None
        for grant in self._grants:  # every digest is compared, whichever matches
            if hmac.compare_digest(presented, grant.digest):
                found = grant
        if found is None:
            raise InvalidToken()
        return found

    def admit(
        self, method: str, access: Access, metadata: Iterable[tuple[str, Any]] | None
    ) -> Grant:
        """The grant of a call to ``method``; MissingToken, InvalidToken, or ReadOnlyToken
        for a write with a read-only token."""
        grant = self.authenticate(metadata)
        if access is Access.WRITE and grant.role is not Role.READ_WRITE:
            raise ReadOnlyToken(method.rsplit("/", 1)[-1], grant.name)
        return grant


def log_denied(method: str, peer: str, exc: Exception) -> None:
    """Log a refused call (``auth_denied``): the method, the peer, the reason and the token's
    name when it has one, never the token."""
    info = getattr(exc, "metadata", {})
    status = status_for(exc)
    reason = status.reason if status is not None else type(exc).__name__
    named = {"token_name": info["token_name"]} if "token_name" in info else {}
    event(
        log,
        logging.INFO,
        "auth_denied",
        f"denied {method} from {peer}: {reason}"
        + (f" (token {named['token_name']!r})" if named else ""),
        method=method,
        peer=peer,
        reason=reason,
        **named,
    )


def check_namespace(method: str, peer: str, grant: Grant, request: Any) -> None:
    """Refuse a request message whose namespace is not a namespace name (InvalidField, for
    every token, granted "*" or not: the one rule every servicer applies) or is outside the
    token's namespaces (NamespaceNotAllowed, logged)."""
    raw = getattr(request, "namespace", None)
    if raw is None:
        return  # a message without a namespace
    namespace = validation.namespace(raw)
    if not grant.allows_namespace(namespace):
        denied = NamespaceNotAllowed(namespace, grant.name)
        log_denied(method, peer, denied)
        raise denied
