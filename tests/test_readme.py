"""The README's quickstart is the example file, and the example runs as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

ROOT = Path(__file__).resolve().parent.parent


def test_readme_quickstart_is_the_example_file():
    """The code shown in the README is examples/quickstart.py, byte for byte."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert (ROOT / "examples" / "quickstart.py").read_text() in blocks


@pytest.mark.parametrize("backend", ["sqlite"])
def test_quickstart_pauses_and_resumes_through_the_sidecar(sidecar: Sidecar, tmp_path):
    """The quickstart charges once, pauses, is listed as pending, and completes on resume."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,  # fastaiagent writes its local folder into the working directory
        env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "charging acct-42: 500"
    assert lines[1] == "first run: paused waiting for manager_approval"
    assert lines[2].startswith("pending in the sidecar: ['order-")
    assert lines[3].startswith("resumed: completed")
    assert sum("charging" in line for line in lines) == 1


def test_readme_langgraph_quickstart_is_the_example_file():
    """The LangGraph quickstart shown in the README is examples/langgraph_quickstart.py."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert (ROOT / "examples" / "langgraph_quickstart.py").read_text() in blocks


@pytest.mark.parametrize("backend", ["sqlite"])
def test_g11_langgraph_quickstart_pauses_and_its_worker_resumes_once_decided(sidecar: Sidecar):
    """The quickstart's graph pauses in the inbox and says how to decide; a decision made
    elsewhere by the interrupt id it printed is carried out by its worker, and it ends."""
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "langgraph_quickstart.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert script.stdout is not None
        paused = script.stdout.readline()
        found = re.match(r"paused: thread (\S+), interrupt (\S+), waiting for (.*)$", paused)
        assert found, paused + script.stderr.read() if script.stderr else paused
        thread, interrupt_id = found.group(1), found.group(2)
        assert found.group(3) == "{'amount': 500}"
        assert script.stdout.readline().startswith("decide it on http://127.0.0.1:7471/")
        # The command it prints works as pasted, from where it ran: it decides the pause.
        command = script.stdout.readline().split()
        assert command[1:] == [
            "interrupts", "decide", thread, "--interrupt-id", interrupt_id, "--approve",
        ]  # fmt: skip
        assert Path(command[0]).name == "checkpointd"
        with CheckpointdClient(sidecar.target) as client:
            [row] = client.list_pending_interrupts(chain_name="orders").pending_interrupts
            assert (row.execution_id, row.interrupt_id) == (thread, interrupt_id)
        decided = subprocess.run(
            [*command, "--decided-by", "maria"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
        )
        assert decided.returncode == 0, decided.stderr
        rest, errors = script.communicate(timeout=120)
        assert script.returncode == 0, errors
        assert rest.splitlines() == ["resumed: ['approved by maria']"]
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
