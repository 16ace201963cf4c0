"""Secrets never reach the output (contract E2): not a store password, however the URL carries
it, and not stored data or tokens at ``--log-level debug``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from checkpointd_client import CheckpointdClient
from tests.contract.helpers import checkpoint, interrupted
from tests.ops.helpers import EarlySidecar
from tests.support.sidecar import Sidecar, StoreSpec

# Three different secrets, one per place a postgresql:// URL can carry one.
USERINFO_PW = "userinfo-pw-4f1c9e"
QUERY_PW = "query-pw-7b2d0a"
SSL_PW = "sslkey-pw-91ce33"
SECRETS = (USERINFO_PW, QUERY_PW, SSL_PW)


def _with_passwords(url: str) -> str:
    """``url`` with a password in its user info and in its query (``password``,
    ``sslpassword``); the test Postgres trusts loopback and ignores them."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = (parts.username or "postgres") if "@" in parts.netloc else "postgres"
    query = "&".join(
        item for item in (parts.query, f"password={QUERY_PW}", f"sslpassword={SSL_PW}") if item
    )
    return parts._replace(netloc=f"{user}:{USERINFO_PW}@{host}", query=query).geturl()


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} was printed:\n{text}"


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checkpointd", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("backend", ["postgres"])
def test_e2_store_password_is_never_printed_while_serving(store_spec: StoreSpec):
    """A Postgres URL with a password in its user info and in ``?password=`` and
    ``?sslpassword=`` (only Postgres URLs carry passwords): start line, "listening ... until
    the store ... is open", "store connected", "serving on" and shutdown show the URL with
    every password replaced, at debug level too."""
    spec = StoreSpec("postgres", _with_passwords(store_spec.url), store_spec.pg_schema)
    server = EarlySidecar(spec, extra_env={"CHECKPOINTD_LOG_LEVEL": "debug"})
    try:
        server.start()
        server.wait_for_log("serving on")
        assert server.stop() == 0
        text = server.log_text()
        for line in ("starting:", "health NOT_SERVING until the store", "store connected"):
            assert line in text
        assert "password=***" in text
        assert "sslpassword=***" in text
        assert f"{urlsplit(spec.url).username}:***@" in text
        _assert_no_secret(text)
    finally:
        server.close()


def test_e2_store_password_is_never_printed_when_the_start_fails(tmp_path: Path):
    """A database that is not there, waited for briefly (``--store-wait 1``), and a URL of the
    wrong scheme: the waiting lines and the one-line errors name the URL without its
    passwords."""
    unreachable = _with_passwords("postgresql://app@127.0.0.1:1/db")
    failed = _serve("--store", unreachable, "--store-wait", "1", "--listen", "127.0.0.1:0")
    assert failed.returncode == 1, failed.stderr
    assert "waiting for the store postgresql://app:***@127.0.0.1:1/db?password=***" in (
        failed.stderr
    )
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("checkpointd: error: cannot open the store postgresql://app:***@")
    _assert_no_secret(failed.stdout + failed.stderr)
    misspelt = _serve("--store", unreachable.replace("postgresql:", "postgrsql:"))
    assert misspelt.returncode == 2, misspelt.stderr
    assert "must start with sqlite:// or postgresql://" in misspelt.stderr
    _assert_no_secret(misspelt.stdout + misspelt.stderr)


def test_e2_serve_help_never_prints_the_store_password():
    """``serve --help`` shows CHECKPOINTD_STORE's value as the default, passwords replaced."""
    store = _with_passwords("postgresql://app@db.internal:5432/agents")
    shown = _serve("--help", env={"CHECKPOINTD_STORE": store})
    assert shown.returncode == 0, shown.stderr
    assert "db.internal:5432/agents" in " ".join(shown.stdout.split())
    _assert_no_secret(shown.stdout + shown.stderr)


def test_e2_debug_logs_carry_no_stored_data_or_tokens(
    sidecar_factory: Callable[..., Sidecar],
):
    """At ``--log-level debug`` the drivers' loggers (aiosqlite logs every statement with its
    parameters) stay at WARNING: a checkpoint's state, an interrupt's context and a claim
    token never reach the log, on both backends."""
    server = sidecar_factory(CHECKPOINTD_LOG_LEVEL="debug")
    state_marker = f"state-marker-{uuid.uuid4().hex}"
    context_marker = f"context-marker-{uuid.uuid4().hex}"
    claim_token = f"claim-token-{uuid.uuid4().hex}"
    run = f"run-{uuid.uuid4().hex[:8]}"
    with CheckpointdClient(server.target) as client:
        client.put_checkpoint(checkpoint(run, state_snapshot={"secret": state_marker}))
        cp, pending = interrupted(run, interrupt_context={"note": context_marker})
        client.record_interrupt(cp, pending)
        claimed = client.claim_interrupt(run, claim_token=claim_token)
        assert claimed.context == {"note": context_marker}
        assert client.get_latest_checkpoint(run).interrupt_context == {"note": context_marker}
    time.sleep(1.0)  # idle: the drivers' periodic statements would be logged meanwhile
    assert server.stop() == 0
    text = server.log_path.read_text(errors="replace")
    assert "log_level=debug" in text
    for marker in (state_marker, context_marker, claim_token):
        assert marker not in text, f"{marker!r} was logged"
    for driver in ("aiosqlite", "asyncpg", "grpc"):
        assert f" DEBUG {driver}" not in text
        assert f" INFO {driver}" not in text


@pytest.mark.parametrize("backend", ["postgres"])
def test_e2_listen_dsn_password_is_never_printed(store_spec: StoreSpec):
    """``--pg-listen-dsn`` carries a password like the store URL: neither ``serve --help``
    (showing CHECKPOINTD_PG_LISTEN_DSN as the default) nor the log of a LISTEN connection
    that cannot be opened shows it; the server keeps serving, polling instead."""
    listen = _with_passwords("postgresql://app@127.0.0.1:1/db")
    shown = _serve("--help", env={"CHECKPOINTD_PG_LISTEN_DSN": listen})
    assert shown.returncode == 0, shown.stderr
    # argparse may break the long URL anywhere: compare without whitespace.
    assert "postgresql://app:***@127.0.0.1:1/db" in "".join(shown.stdout.split())
    _assert_no_secret(shown.stdout + shown.stderr)

    server = Sidecar(store_spec, extra_args=["--pg-listen-dsn", listen]).start()
    try:
        with CheckpointdClient(server.target) as client:
            # The server listens only while a watch stream is open (an idle one polls nothing).
            with client.watch_interrupts(reconnect=False, timeout=60) as watch:
                next(iter(watch))
                deadline = time.monotonic() + 30
                while (
                    "cannot LISTEN" not in server.log_path.read_text()
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.05)
            client.put_checkpoint(checkpoint(f"run-{uuid.uuid4().hex[:8]}"))
        assert server.stop() == 0
        text = server.log_path.read_text()
        assert "cannot LISTEN" in text
        assert "pg_watch=listen-dsn" in text
        _assert_no_secret(text)
    finally:
        server.close()
