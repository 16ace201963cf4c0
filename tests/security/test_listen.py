"""The start-up check against an open server on the network, and bad token files: each stops
the start with one line, which never holds a token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.contract.helpers import checkpoint
from tests.security.conftest import NO_RETRY, Tokens
from tests.support.sidecar import Sidecar, StoreSpec


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``checkpointd serve`` expecting it to stop by itself."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINTD_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "serve",
            "--store",
            f"sqlite://{tmp_path / 'store.db'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**clean, **env},
    )


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line; everything before it is the start's log."""
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("checkpointd: error: "), result.stderr
    assert not any(line.startswith("Traceback") for line in lines), result.stderr
    return lines[-1]


@pytest.fixture
def open_sidecar(tmp_path: Path) -> Iterator[Callable[..., Sidecar]]:
    """Start servers that listen on every interface besides the Unix socket."""
    started: list[Sidecar] = []
    spec = StoreSpec("sqlite", f"sqlite://{tmp_path / 'store.db'}")

    def start(*extra_args: str, **extra_env: str) -> Sidecar:
        args = ["--listen", "0.0.0.0:0", *extra_args]
        server = Sidecar(spec, extra_args=args, extra_env=dict(extra_env))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.close()


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
def test_non_loopback_listener_without_auth_or_tls_stops_the_start(tmp_path: Path, address: str):
    """Listening on every interface with neither tokens nor TLS exits 1 with one line naming
    the ways out; nothing is served and no store file is created."""
    result = _serve(tmp_path, "--listen", address)
    line = _error_line(result)
    assert "refusing to listen" in line
    assert "--auth-tokens-file" in line
    assert "--insecure" in line
    assert not (tmp_path / "store.db").exists()


def test_insecure_flag_allows_it_with_a_warning(
    open_sidecar: Callable[..., Sidecar], tokens: Tokens
):
    """--insecure or CHECKPOINTD_INSECURE=1 lets the server listen on 0.0.0.0 without
    authentication, and the log warns about it; with a token the warning is not needed."""
    for server in (open_sidecar("--insecure"), open_sidecar(CHECKPOINTD_INSECURE="1")):
        log = server.log_path.read_text()
        assert "WARNING" in log
        assert "without authentication or TLS" in log
        with CheckpointdClient(server.tcp_target, retry=NO_RETRY) as client:
            client.put_checkpoint(checkpoint("run-1"))

    guarded = open_sidecar(CHECKPOINTD_AUTH_TOKEN=tokens.admin)
    assert "without authentication" not in guarded.log_path.read_text()
    with CheckpointdClient(guarded.tcp_target, token=tokens.admin, retry=NO_RETRY) as client:
        client.put_checkpoint(checkpoint("run-2"))


def test_loopback_listeners_need_no_flag():
    """Loopback addresses (and only those) pass the check: localhost is fine, a host name that
    might resolve elsewhere is not."""
    from checkpointd.listeners import parse_listen
    from checkpointd.security import is_loopback

    for address in ("127.0.0.1:0", "127.8.9.10:7470", "[::1]:0", "localhost:7470"):
        assert is_loopback(parse_listen(address)), address
    for address in ("0.0.0.0:0", "[::]:0", "10.0.0.5:7470", "checkpointd.internal:7470"):
        assert not is_loopback(parse_listen(address)), address


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


SECRET = "s3cret-token-that-must-not-show"


def test_a_bad_tokens_file_stops_the_start_without_showing_tokens(tmp_path: Path):
    """A tokens file that cannot be used ends the start with one line naming the file and the
    problem, and never the token (test_tokens.py covers each kind of mistake)."""
    path = _write(tmp_path, '{"tokens": [{"name": "bot", "token": "' + SECRET + '",}]}')
    result = _serve(tmp_path, "--auth-tokens-file", str(path), "--listen", "127.0.0.1:0")
    line = _error_line(result)
    assert f"the tokens file {path} is not valid JSON" in line
    assert SECRET not in result.stderr
    assert SECRET not in result.stdout
