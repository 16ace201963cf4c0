"""The `checkpointd` command: defaults, and one-line errors that say what to fix."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpointd import __version__


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 30):
    return subprocess.run(
        [sys.executable, "-m", "checkpointd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_version_prints_the_version():
    """`checkpointd version` prints the installed version."""
    result = _run("version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"checkpointd {__version__}"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["serve", "--store", "mysql://x"], "must start with sqlite:// or postgresql://"),
        (["serve", "--store", "sqlite://"], "needs a file path"),
        (["serve", "--max-message-bytes", "-5"], "--max-message-bytes"),
        (["serve", "--pg-schema", "1bad;drop"], "must be a SQL identifier"),
        (["serve", "--no-such-flag"], "unrecognized arguments"),
        (["serve", "--listen", "nonsense"], "must be host:port"),
        (["serve", "--pg-pooler", "session"], "invalid choice"),
        (["serve", "--pg-listen-dsn", "mysql://u:pw@h/db"], "must start with postgresql://"),
        (["serve", "--pg-statement-cache-size", "-1"], "--pg-statement-cache-size"),
        (["serve", "--pg-poll-interval", "0"], "--pg-poll-interval"),
    ],
)
def test_bad_configuration_is_one_line_and_non_zero(args, expected, tmp_path):
    """A configuration mistake ends with a short error naming what to fix, never a traceback."""
    result = _run(*args, env={"CHECKPOINTD_DATA_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_environment_value_is_reported_with_its_name(tmp_path):
    """A malformed CHECKPOINTD_* variable is named in the error."""
    result = _run("serve", env={"CHECKPOINTD_MAX_MESSAGE_BYTES": "lots"})
    assert result.returncode != 0
    assert "CHECKPOINTD_MAX_MESSAGE_BYTES='lots' is not valid" in result.stderr


@pytest.mark.parametrize("wait", ["0", "0.5"])
def test_unreachable_database_with_a_store_wait_exits_1_without_leaking_the_password(wait):
    """With --store-wait 0 (fail fast) or a short wait, a Postgres that is not there ends the
    start with one line naming the host, not the password."""
    result = _run(
        "serve",
        "--store",
        "postgresql://app:s3cret-pw@127.0.0.1:1/db",
        "--listen",
        "127.0.0.1:0",
        "--store-wait",
        wait,
    )
    assert result.returncode == 1
    assert "cannot open the store" in result.stderr
    assert "127.0.0.1:1" in result.stderr
    assert "s3cret-pw" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert ("gave up after" in result.stderr) == (wait != "0")


def test_unreachable_database_by_default_waits_not_serving_and_stops_on_sigterm(tmp_path):
    """By default the server waits for the database: it listens, logs what it waits for
    (without the password), and still stops cleanly (exit 0) on SIGTERM."""
    sock = tmp_path / "s.sock"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "serve",
            "--store",
            "postgresql://app:s3cret-pw@127.0.0.1:1/db",
            "--listen",
            f"unix://{sock}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines: list[str] = []
        for line in process.stderr:
            lines.append(line)
            if "waiting for the store" in line:
                break
        assert "waiting for the store postgresql://app:***@127.0.0.1:1/db" in lines[-1]
        assert sock.exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        log = "".join(lines) + process.stderr.read()
        assert "s3cret-pw" not in log
        assert not sock.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def test_serve_help_names_the_environment_variable_of_every_flag():
    """`checkpointd serve --help` documents each flag with its CHECKPOINTD_* variable."""
    result = _run("serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    flags = sorted(set(re.findall(r"(--[a-z][a-z0-9-]+)", text)) - {"--help"})
    assert "--metrics-listen" in flags
    assert "--store-wait" in flags
    for flag in flags:
        variable = "CHECKPOINTD_" + flag[2:].upper().replace("-", "_")
        assert variable in text, flag


def test_unusable_sqlite_path_exits_1(tmp_path):
    """An SQLite path that cannot be created is reported with the path."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run("serve", "--store", f"sqlite://{blocker}/sub/store.db", "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert str(blocker) in result.stderr
    assert "Traceback" not in result.stderr


def test_listen_address_in_use_exits_1(tmp_path):
    """A port someone else holds is a one-line error."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _run(
            "serve", "--store", f"sqlite://{tmp_path / 's.db'}", "--listen", f"127.0.0.1:{port}"
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_defaults_serve_sqlite_in_the_data_dir_and_stop_cleanly_on_sigterm(tmp_path):
    """With no flags the server keeps its SQLite file in the data directory, listens on the
    environment's address, and exits 0 on SIGTERM."""
    data_dir = tmp_path / "data"
    sock = tmp_path / "s.sock"
    env = {
        **os.environ,
        "CHECKPOINTD_DATA_DIR": str(data_dir),
        "CHECKPOINTD_LISTEN": f"unix://{sock}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "checkpointd", "serve"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    try:
        deadline = time.monotonic() + 30
        database = data_dir / "checkpointd.db"
        while time.monotonic() < deadline and process.poll() is None:
            if sock.exists() and database.exists():
                break
            time.sleep(0.05)
        assert sock.exists(), process.stderr.read() if process.poll() is not None else "no socket"
        assert (data_dir / "checkpointd.db").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        log = process.stderr.read()
        assert f"sqlite://{data_dir / 'checkpointd.db'}" in log
        assert not Path(sock).exists()  # the socket file is removed on exit
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
