"""Fixtures of the security suite: tokens and their file, throwaway certificates, servers."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from checkpointd_client import RetryPolicy
from tests.security.certs import Pki, make_pki
from tests.support.sidecar import Sidecar

# Retries would hide the status a test is looking for.
NO_RETRY = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class Tokens:
    """The tokens of the file the servers are given (each a random secret)."""

    admin: str
    """read-write in every namespace (stored as plaintext in the file)."""
    bot: str
    """read-write in team-a only (stored as its SHA-256)."""
    viewer: str
    """read-only in team-a and default (stored as its SHA-256)."""
    wrong: str
    """known to no server."""

    def all(self) -> tuple[str, ...]:
        """Every token, for checks that none of them leaked."""
        return (self.admin, self.bot, self.viewer, self.wrong)


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def tokens() -> Tokens:
    """Fresh random tokens."""
    return Tokens(*(f"tok-{secrets.token_urlsafe(24)}" for _ in range(4)))


@pytest.fixture
def tokens_file(tokens: Tokens, tmp_path: Path) -> Path:
    """The JSON tokens file granting admin, bot and viewer (mode 0600)."""
    path = tmp_path / "tokens.json"
    document = {
        "tokens": [
            {"name": "admin", "token": tokens.admin, "namespaces": ["*"], "role": "read-write"},
            {
                "name": "bot",
                "token_sha256": _sha256(tokens.bot),
                "namespaces": ["team-a"],
                "role": "read-write",
            },
            {
                "name": "viewer",
                "token_sha256": _sha256(tokens.viewer),
                "namespaces": ["team-a", "default"],
                "role": "read-only",
            },
        ]
    }
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    return path


@pytest.fixture
def auth_sidecar(sidecar_factory: Callable[..., Sidecar], tokens_file: Path) -> Sidecar:
    """A server of each backend that requires the tokens of ``tokens_file``, logging at
    debug level (so a leaked token would show)."""
    return sidecar_factory("--auth-tokens-file", str(tokens_file), CHECKPOINTD_LOG_LEVEL="debug")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway CA with server and client certificates, and an unrelated CA."""
    return make_pki(tmp_path_factory.mktemp("pki"))
