"""The Node.js client's own test suite (``node --test`` in clients/node) against each backend."""

from __future__ import annotations

import os
import re
import subprocess

from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

NODE_TEST_TIMEOUT_S = 100


def run_node_tests(node: str, target: str) -> subprocess.CompletedProcess[str]:
    """Run ``node --test`` in clients/node with the TAP reporter, against ``target``."""
    env = {**os.environ, "CHECKPOINTD_TARGET": target}
    return subprocess.run(
        [node, "--test", "--test-reporter=tap"],
        cwd=NODE_CLIENT,
        env=env,
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
