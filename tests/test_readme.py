"""The README's quickstart is the example file, and the example runs as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sidecar import Sidecar

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
