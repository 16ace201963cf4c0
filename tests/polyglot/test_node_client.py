"""The Node.js client's own test suite (``node --test`` in clients/node) against real servers."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Mapping

import pytest

from checkpointd.errors import sent_reasons, wire_reason
from checkpointd_client import ErrorReason
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

NODE_TEST_TIMEOUT_S = 100


def run_node_tests(
    node: str, target: str, *files: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``node --test`` (all test files, or ``files``) in clients/node with the TAP reporter,
    against ``target``, without the caller's $CHECKPOINTD_TOKEN; ``env`` adds variables."""
    full_env = {**os.environ, "CHECKPOINTD_TARGET": target}
    full_env.pop("CHECKPOINTD_TOKEN", None)
    full_env.update(env or {})
    return subprocess.run(
        [node, "--test", "--test-reporter=tap", *files],
        cwd=NODE_CLIENT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=NODE_TEST_TIMEOUT_S,
        check=False,
    )


def tap_count(output: str, name: str) -> int:
    """A count from the TAP summary (``# pass 12``)."""
    match = re.search(rf"^# {name} (\d+)$", output, re.MULTILINE)
    assert match, f"no '# {name}' line in the node test output:\n{output}"
    return int(match.group(1))


def test_j1_c2_i3_i5_node_client_suite_passes(node: str, sidecar: Sidecar) -> None:
    """Every Node.js client test passes over the server's Unix socket, and none is skipped."""
    result = run_node_tests(node, sidecar.target)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert tap_count(output, "fail") == 0, output
    assert tap_count(output, "skipped") == 0, output
    assert tap_count(output, "pass") >= 10, output


@pytest.mark.parametrize("backend", ["sqlite"])
def test_e2_i5_node_client_sends_its_token_on_every_call_and_watch_reconnect(
    node: str, sidecar_factory: Callable[..., Sidecar]
) -> None:
    """test/auth.test.js against a server with CHECKPOINTD_AUTH_TOKEN: no token is
    MISSING_TOKEN, a wrong one INVALID_TOKEN, the right one (option or $CHECKPOINTD_TOKEN)
    puts, gets and watches across forced reconnects. SQLite only: tokens are checked by an
    interceptor before any store is reached, and the Node suite above covers both stores."""
    token = secrets.token_urlsafe(24)
    server = sidecar_factory("--watch-max-lifetime", "0.5", CHECKPOINTD_AUTH_TOKEN=token)
    result = run_node_tests(
        node, server.target, "test/auth.test.js", env={"CHECKPOINTD_TEST_AUTH_TOKEN": token}
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert tap_count(output, "fail") == 0, output
    assert tap_count(output, "skipped") == 0, output
    assert tap_count(output, "pass") >= 6, output
    log = server.log_path.read_text(errors="replace")
    assert "MISSING_TOKEN" in log, log
    assert "INVALID_TOKEN" in log, log
    assert token not in log, "the server log shows the token"
    assert "wrong-" not in log, "the server log shows the wrong token"


def test_node_python_and_server_share_one_list_of_reasons(node: str) -> None:
    """The Node client's ErrorReason (read from error_reason.proto at run time), the Python
    client's (generated from it) and the reasons the server sends are the same strings."""
    result = subprocess.run(
        [node, "-e", "process.stdout.write(JSON.stringify(require('./src').ErrorReason))"],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=NODE_TEST_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    from_node = json.loads(result.stdout)
    assert all(key == value for key, value in from_node.items())
    assert list(from_node) == [member.value for member in ErrorReason]
    assert set(from_node) == {wire_reason(reason) for reason in sent_reasons()}
