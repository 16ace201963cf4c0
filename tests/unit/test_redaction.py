"""Store URLs as they are shown: every password replaced, the rest as written (contract E2)."""

from __future__ import annotations

import pytest

from checkpointd.config import dsn_secrets, redact_dsn


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app@db:5432/agents", "postgresql://app@db:5432/agents"),
        ("postgresql://app:pw@db:5432/agents", "postgresql://app:***@db:5432/agents"),
        ("postgresql://:pw@db/agents", "postgresql://:***@db/agents"),
        (
            "postgresql://app:p%40ss@db/agents?password=q%26w&sslpassword=k&sslmode=require",
            "postgresql://app:***@db/agents?password=***&sslpassword=***&sslmode=require",
        ),
        ("postgresql://app:pw@h1:5432,h2:5433/db", "postgresql://app:***@h1:5432,h2:5433/db"),
        ("postgresql://app:pa/ss@db/agents", "postgresql://app:***@db/agents"),
        (
            "postgresql://db/agents?user=app&password=",
            "postgresql://db/agents?user=app&password=***",
        ),
        ("postgres://db/agents?passfile=/run/pgpass", "postgres://db/agents?passfile=/run/pgpass"),
        ("sqlite:///var/lib/checkpointd/store.db", "sqlite:///var/lib/checkpointd/store.db"),
    ],
)
def test_e2_redact_dsn_hides_every_password(url: str, shown: str):
    """User-info and query passwords (multi-host, percent-encoded, unescaped ``/``) all
    become ``***``; nothing else changes."""
    assert redact_dsn(url) == shown
    for secret in dsn_secrets(url):
        assert secret not in redact_dsn(url)


def test_e2_dsn_secrets_lists_passwords_as_written_and_decoded():
    """Driver messages may quote a password either way, so both are scrubbed."""
    secrets = dsn_secrets("postgresql://app:p%40ss@db/agents?password=q%26w")
    assert set(secrets) == {"p%40ss", "p@ss", "q%26w", "q&w"}
