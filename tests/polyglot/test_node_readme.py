"""The Node.js client's LangGraph.js quickstart is the example file, and it runs as its README
says: the graph pauses in the inbox, a decision made elsewhere by the interrupt id it printed
is carried out by its GraphResumeWorker, and it ends (contracts G11, G15)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

EXAMPLE = NODE_CLIENT / "examples" / "langgraph_quickstart.js"
TIMEOUT_S = 120


def test_node_readme_langgraph_quickstart_is_the_example_file() -> None:
    """The code shown in clients/node/README.md is examples/langgraph_quickstart.js, byte for
    byte."""
    readme = (NODE_CLIENT / "README.md").read_text()
    blocks = re.findall(r"```js\n(.*?)```", readme, flags=re.DOTALL)
    assert EXAMPLE.read_text() in blocks


def run_quickstart(node: str, script: Path, cwd: Path, target: str) -> None:
    """Run the quickstart ``script`` from ``cwd`` against ``target`` as its README says: it
    prints the pause and the CLI command that decides it; the decision, made with the Python
    client by the interrupt id it printed, is carried out by its worker, once, and it prints
    the graph's log and exits."""
    env = {**os.environ, "CHECKPOINTD_TARGET": target}
    env.pop("CHECKPOINTD_TOKEN", None)
    process = subprocess.Popen(
        [node, str(script)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        paused = process.stdout.readline()
        found = re.match(r"paused: thread (\S+), interrupt (\S+), waiting for (.*)$", paused)
        assert found, paused + (process.stderr.read() if process.stderr else "")
        thread, interrupt_id = found.group(1), found.group(2)
        assert json.loads(found.group(3)) == {"amount": 500}
        assert process.stdout.readline().startswith("decide it on http://127.0.0.1:7471/")
        command = process.stdout.readline().split()
        assert command == [
            "checkpointd", "interrupts", "decide", thread,
            "--interrupt-id", interrupt_id, "--approve",
        ]  # fmt: skip
        with CheckpointdClient(target) as client:
            [row] = client.list_pending_interrupts(chain_name="orders").pending_interrupts
            assert (row.execution_id, row.interrupt_id) == (thread, interrupt_id)
            client.submit_decision(
                thread, interrupt_id=interrupt_id, approved=True, decided_by="maria"
            )
            rest, errors = process.communicate(timeout=TIMEOUT_S)
            assert process.returncode == 0, errors
            assert rest.splitlines() == ['resumed: ["approved by maria"]']
            [decided] = client.list_decisions().pending_interrupts
            assert decided.decision is not None
            assert (decided.decision.status, decided.decision.attempts) == ("resumed", 1)
            assert client.list_pending_interrupts().pending_interrupts == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_g15_langgraph_js_quickstart_pauses_and_its_worker_resumes_once_decided(
    node: str, sidecar: Sidecar
) -> None:
    """Run as the README says (from clients/node, $CHECKPOINTD_TARGET set), the quickstart
    pauses, and its worker carries out the decision made by the interrupt id it printed
    (the same from the packed package: tests/polyglot/test_node_package.py)."""
    run_quickstart(node, EXAMPLE, NODE_CLIENT, sidecar.target)
