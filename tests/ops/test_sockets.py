"""Unix sockets: created 0600 (or the configured mode), removed on exit; a stale socket file
from a crash is replaced, a live one or a non-socket file is refused."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_socket_is_owner_only_by_default_and_removed_on_exit(sidecar):
    """With no setting the socket file is 0600, and it is gone after SIGTERM."""
    assert stat.S_ISSOCK(os.stat(sidecar.socket_path).st_mode)
    assert _mode(sidecar.socket_path) == 0o600
    assert sidecar.stop() == 0
    assert not sidecar.socket_path.exists()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_socket_mode_is_configurable_by_flag_and_environment(sidecar_factory):
    """CHECKPOINTD_UNIX_SOCKET_MODE and --unix-socket-mode set the socket's permissions."""
    from_env = sidecar_factory(CHECKPOINTD_UNIX_SOCKET_MODE="0660")
    assert _mode(from_env.socket_path) == 0o660
    from_flag = sidecar_factory("--unix-socket-mode", "0666")
    assert _mode(from_flag.socket_path) == 0o666


@pytest.mark.parametrize("backend", ["sqlite"])
def test_stale_socket_from_a_crash_is_replaced(store_spec):
    """A socket file nobody serves on (left by a kill -9) does not stop the next start."""
    server = Sidecar(store_spec)
    try:
        server.start()
        server.kill()
        assert server.socket_path.exists()  # a crash leaves the file behind
        server.start()
        assert _mode(server.socket_path) == 0o600
        assert server.stop() == 0
    finally:
        server.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_live_socket_and_non_socket_files_are_refused(store_spec, tmp_path):
    """A socket someone serves on, or a regular file, at the path ends the start with exit 1
    and is left untouched."""
    live = tmp_path / "live.sock"
    regular = tmp_path / "regular.sock"
    regular.write_text("keep me")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as holder:
        holder.bind(str(live))
        holder.listen()
        for path, expected in (
            (live, "another server is serving there"),
            (regular, "not a socket"),
        ):
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "checkpointd",
                    "serve",
                    "--store",
                    store_spec.url,
                    "--listen",
                    f"unix://{path}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, result.stderr
            assert expected in result.stderr
            assert path.exists()
    assert regular.read_text() == "keep me"


@pytest.mark.parametrize("mode", ["0999", "0400", "01777", "rw"])
def test_bad_socket_mode_is_a_one_line_error(mode, tmp_path):
    """A mode that is not octal, denies the owner, or has special bits is refused (exit 2)."""
    result = subprocess.run(
        [sys.executable, "-m", "checkpointd", "serve", "--unix-socket-mode", mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "CHECKPOINTD_DATA_DIR": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "--unix-socket-mode" in result.stderr
    assert "Traceback" not in result.stderr
