"""A real LangGraph ``StateGraph`` on the savers, one process per phase, on both backends: a
subgraph pauses on ``interrupt()`` in one process (the blocking saver) and another process
resumes it with ``Command(resume=...)`` (the asyncio saver). The results are those of
LangGraph's own ``InMemorySaver`` running both phases in one process."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.support.shared_server import SharedSidecar

pytestmark = pytest.mark.shared_server

PHASE = Path(__file__).with_name("graph_phase.py")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Both backends (the conformance suite covers PgBouncer)."""
    return str(request.param)


def _phase(sidecar: SharedSidecar, phase: str, thread: str, surface: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(PHASE),
            phase,
            "--target",
            sidecar.target,
            "--namespace",
            sidecar.namespace,
            "--thread",
            thread,
            "--surface",
            surface,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_subgraph_paused_in_one_process_resumes_in_another(sidecar: SharedSidecar) -> None:
    """The pause leaves the interrupt's value and the next node; the resume runs the rest
    once, with the resume value, and the whole history is there."""
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    paused = _phase(sidecar, "pause", thread, "sync")
    assert paused == {
        "log": ["prep"],
        "interrupts": [{"question": "ship it?", "seen": ["prep"]}],
        "next": ["review"],
        "state_log": ["prep"],
        "history": 3,
    }
    resumed = _phase(sidecar, "resume", thread, "async")
    log = ["prep", "prep", "answer:approved", "done"]  # the subgraph returns its whole log
    assert resumed == {"log": log, "interrupts": [], "next": [], "state_log": log, "history": 5}
