"""TLS and mutual TLS on TCP listeners; Unix sockets stay plaintext.

The transport does not depend on the store, so these run on the SQLite backend only.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from checkpointd.security import TlsError, TlsFiles
from checkpointd_client import (
    CheckpointdClient,
    SnapshotComplete,
    TlsConfig,
    UnauthenticatedError,
    UnavailableError,
)
from tests.contract.helpers import checkpoint, interrupted
from tests.security.certs import Pki
from tests.security.conftest import NO_RETRY, Tokens
from tests.support.sidecar import Sidecar, StoreSpec


@pytest.fixture
def sqlite_sidecar(tmp_path: Path) -> Iterator[Callable[..., Sidecar]]:
    """Start servers on one SQLite file."""
    started: list[Sidecar] = []
    spec = StoreSpec("sqlite", f"sqlite://{tmp_path / 'store.db'}")

    def start(*extra_args: str, **extra_env: str) -> Sidecar:
        server = Sidecar(spec, extra_args=list(extra_args), extra_env=dict(extra_env))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.close()


def _round_trip(client: CheckpointdClient) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    stored = client.put_checkpoint(checkpoint(run))
    assert client.get_latest_checkpoint(run).checkpoint_id == stored.checkpoint_id
    with client.watch_interrupts(reconnect=False, timeout=10) as watch:
        assert isinstance(next(iter(watch)), SnapshotComplete)


def test_tls_listener_refuses_plaintext_and_serves_tls_clients(
    sqlite_sidecar: Callable[..., Sidecar], pki: Pki
):
    """With --tls-cert/--tls-key the TCP listener speaks only TLS: a plaintext client and a
    client that does not trust the server's CA fail; a client trusting it works, watch
    included; the Unix socket stays plaintext."""
    server = sqlite_sidecar("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    untrusted = TlsConfig.from_files(ca=pki.rogue_ca)
    for tls in (None, untrusted):
        with (
            CheckpointdClient(server.tcp_target, tls=tls, retry=NO_RETRY, timeout=3) as client,
            pytest.raises(UnavailableError),
        ):
            client.get_latest_checkpoint("run-1")
    trusted = TlsConfig.from_files(ca=pki.ca)
    with CheckpointdClient(server.tcp_target, tls=trusted, retry=NO_RETRY) as client:
        _round_trip(client)
    localhost = f"localhost:{server.tcp_target.rpartition(':')[2]}"
    with CheckpointdClient(localhost, tls=trusted, retry=NO_RETRY) as client:
        _round_trip(client)
    with CheckpointdClient(server.target, retry=NO_RETRY) as over_socket:
        _round_trip(over_socket)
    with pytest.raises(ValueError, match="TCP targets"):
        CheckpointdClient(server.target, tls=trusted)


def test_mutual_tls_requires_a_client_certificate_from_the_client_ca(
    sqlite_sidecar: Callable[..., Sidecar], pki: Pki, tokens: Tokens, tokens_file: Path
):
    """With --tls-client-ca a client without a certificate, or with one from another CA,
    cannot connect; one with a certificate from the CA can, and tokens still apply on top."""
    server = sqlite_sidecar(
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
        "--auth-tokens-file",
        str(tokens_file),
    )
    target = server.tcp_target
    no_cert = TlsConfig.from_files(ca=pki.ca)
    foreign = TlsConfig.from_files(ca=pki.ca, cert=pki.rogue_client_cert, key=pki.rogue_client_key)
    for tls in (no_cert, foreign):
        with (
            CheckpointdClient(target, tls=tls, token=tokens.admin, retry=NO_RETRY, timeout=3) as c,
            pytest.raises(UnavailableError),
        ):
            c.get_latest_checkpoint("run-1")
    mutual = TlsConfig.from_files(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    assert "PRIVATE" not in repr(mutual)
    with CheckpointdClient(target, tls=mutual, token=tokens.admin, retry=NO_RETRY) as client:
        _round_trip(client)
    with (
        CheckpointdClient(target, tls=mutual, retry=NO_RETRY) as without_token,
        pytest.raises(UnauthenticatedError),
    ):
        without_token.get_latest_checkpoint("run-1")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (("cert", None, None), "--tls-key is missing"),
        ((None, "key", None), "--tls-cert is missing"),
        ((None, None, "ca"), "--tls-client-ca needs --tls-cert and --tls-key"),
        (("key", "key", None), "--tls-cert"),
        (("cert", "missing", None), "cannot read it"),
        (("cert", "key", "key"), "--tls-client-ca"),
    ],
)
def test_tls_settings_that_cannot_work_are_refused(
    pki: Pki, tmp_path: Path, files: tuple[str | None, str | None, str | None], message: str
):
    """A half-configured TLS setup, an unreadable file or a file of the wrong kind is refused
    with a message naming the flag to fix."""
    paths = {
        "cert": pki.server_cert,
        "key": pki.server_key,
        "ca": pki.ca,
        "missing": tmp_path / "nope.pem",
    }
    cert, key, client_ca = (None if name is None else paths[name] for name in files)

    def configure() -> None:
        tls = TlsFiles.from_settings(cert, key, client_ca)
        assert tls is not None
        tls.credentials()

    with pytest.raises(TlsError) as refused:
        configure()
    assert message in str(refused.value)


def test_a_tls_mistake_stops_the_start_with_one_line(pki: Pki, tmp_path: Path):
    """The command exits 1 with one line naming the missing flag."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "serve",
            "--store",
            f"sqlite://{tmp_path / 'store.db'}",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            str(pki.server_cert),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "checkpointd: error: TLS needs both --tls-cert and --tls-key; --tls-key is missing"
    )


def test_a_key_that_does_not_match_the_certificate_stops_the_start_saying_so(
    pki: Pki, tmp_path: Path
):
    """A key from another pair (here the client's) is refused at start with one line naming
    both files and what is wrong, not gRPC's "Failed to bind to address"; exit status 1."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "serve",
            "--store",
            f"sqlite://{tmp_path / 'store.db'}",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.client_key),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("checkpointd: error: "), result.stderr
    assert "the key does not match the certificate" in last
    assert str(pki.client_key) in last
    assert str(pki.server_cert) in last
    assert "Failed to bind" not in result.stderr


def test_c11_runs_list_over_mutual_tls_with_a_token_file(
    sqlite_sidecar: Callable[..., Sidecar], pki: Pki, tokens: Tokens, tokens_file: Path
):
    """`checkpointd runs list` reaches a server that wants mutual TLS and a token through
    --tls-ca/--tls-cert/--tls-key and --token-file; without the token it fails with the
    server's refusal, and the token shows nowhere in its output."""
    server = sqlite_sidecar(
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
        "--auth-tokens-file",
        str(tokens_file),
    )
    mutual = TlsConfig.from_files(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    with CheckpointdClient(server.tcp_target, tls=mutual, token=tokens.admin) as client:
        client.put_checkpoint(checkpoint("run-tls"))
    token_file = pki.ca.parent / f"token-{uuid.uuid4().hex[:6]}"
    token_file.write_text(tokens.admin + "\n")
    base = [sys.executable, "-m", "checkpointd", "runs", "list", "--target", server.tcp_target]
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert)]
    tls += ["--tls-key", str(pki.client_key)]
    env = {"CHECKPOINTD_TOKEN": "", "PATH": "/usr/bin:/bin"}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *extra], capture_output=True, text=True, timeout=30, check=False, env=env
        )

    ok = run(*tls, "--token-file", str(token_file))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[1].split()[:4] == ["run-tls", "fastaiagent", "flow", "running"]
    refused = run(*tls)
    assert refused.returncode == 1
    assert "token" in refused.stderr.lower()
    half = run("--tls-cert", str(pki.client_cert), "--token-file", str(token_file))
    assert half.returncode == 1
    assert "--tls-cert and --tls-key go together" in half.stderr
    for result in (ok, refused, half):
        assert tokens.admin not in result.stdout + result.stderr


def test_c11_interrupts_commands_over_mutual_tls_with_a_token_file(
    sqlite_sidecar: Callable[..., Sidecar], pki: Pki, tokens: Tokens, tokens_file: Path
):
    """`checkpointd interrupts list|watch|decide` take the same connection options as `runs`:
    they reach a server that wants mutual TLS and a token through --tls-ca/--tls-cert/
    --tls-key and --token-file (or $CHECKPOINTD_TOKEN); without a token they fail with the
    server's refusal, and the token shows nowhere in their output."""
    server = sqlite_sidecar(
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
        "--auth-tokens-file",
        str(tokens_file),
    )
    mutual = TlsConfig.from_files(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    with CheckpointdClient(server.tcp_target, tls=mutual, token=tokens.admin) as client:
        client.record_interrupt(*interrupted("run-paused"))
    token_file = pki.ca.parent / f"token-{uuid.uuid4().hex[:6]}"
    token_file.write_text(tokens.admin + "\n")
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert)]
    tls += ["--tls-key", str(pki.client_key)]
    env = {"CHECKPOINTD_TOKEN": "", "PATH": "/usr/bin:/bin"}

    def command(action: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "checkpointd", "interrupts", action, *extra]

    def run(action: str, *extra: str, **more_env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command(action, "--target", server.tcp_target, *extra),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**env, **more_env},
        )

    listed = run("list", *tls, "--token-file", str(token_file))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[0] == "run-paused"
    from_env = run("list", *tls, CHECKPOINTD_TOKEN=tokens.admin)
    assert from_env.returncode == 0, from_env.stderr
    assert from_env.stdout.splitlines()[1].split()[0] == "run-paused"
    refused = run("list", *tls)
    assert refused.returncode == 1
    assert "token" in refused.stderr.lower()
    half = run("decide", "run-paused", "--approve", "--tls-key", str(pki.client_key))
    assert half.returncode == 1
    assert "--tls-cert and --tls-key go together" in half.stderr

    watch = subprocess.Popen(
        command("watch", "--target", server.tcp_target, "--json", *tls),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "CHECKPOINTD_TOKEN": tokens.admin},
    )
    lines: queue.Queue[str] = queue.Queue()
    stdout = watch.stdout
    assert stdout is not None

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        snapshot = json.loads(lines.get(timeout=30))
        assert snapshot["kind"] == "snapshot"
        assert snapshot["pending"]["execution_id"] == "run-paused"
        decided = run("decide", "run-paused", "--approve", *tls, "--token-file", str(token_file))
        assert decided.returncode == 0, decided.stderr
        assert decided.stdout.startswith("approved run-paused (node node) as ")
        while (item := json.loads(lines.get(timeout=30)))["kind"] != "event":
            pass
        assert item["pending"]["decision"]["approved"] is True
    finally:
        watch.send_signal(signal.SIGTERM)
        _, watch_stderr = watch.communicate(timeout=30)
    assert watch.returncode == 0, watch_stderr
    for result in (listed, from_env, refused, half, decided):
        assert tokens.admin not in result.stdout + result.stderr
    assert tokens.admin not in watch_stderr
