"""examples/langgraph_approval.py as its docstring runs it: a refund waits, a decision by
interrupt id is carried out by the example's worker, and the thread is paid once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_approval.py"
TIMEOUT_S = 60


def example(sidecar: Sidecar, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--target", sidecar.target, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("backend", ["sqlite"])
def test_g11_the_langgraph_approval_example_runs_as_documented(sidecar: Sidecar) -> None:
    """start pauses a refund in the inbox; a decision naming its interrupt id is carried out
    by the example's worker; show then says approved and paid, once; SIGTERM stops it."""
    started = example(sidecar, "start", "120")
    thread, interrupt_id = str(started["thread"]), str(started["interrupt_id"])
    assert started["waiting_for"] == {"reason": "refund_approval", "amount": 120.0}
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--target", sidecar.target, "worker"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with CheckpointdClient(sidecar.target) as client:
            [row] = client.list_pending_interrupts(chain_name="refunds").pending_interrupts
            assert (row.execution_id, row.interrupt_id) == (thread, interrupt_id)
            client.submit_decision(
                thread, interrupt_id=interrupt_id, approved=True, decided_by="maria"
            )
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                [decided] = client.list_decisions().pending_interrupts
                assert decided.decision is not None
                if decided.decision.status == "resumed":
                    break
                assert time.monotonic() < deadline, "the worker never resumed the refund"
                time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, errors = worker.communicate(timeout=TIMEOUT_S)
    assert worker.returncode == 0, errors
    shown = example(sidecar, "show", thread)
    assert shown["log"] == ["drafted a refund of 120.0", "approved by maria", "paid"]
    assert shown["waiting"] == []
