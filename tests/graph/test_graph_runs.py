"""A real LangGraph ``StateGraph`` on the savers, one process per phase, on both backends: a
subgraph pauses on ``interrupt()`` in one process (the blocking saver) and another process
resumes it with ``Command(resume=...)`` (the asyncio saver); time travel (a fork of an old
checkpoint); parallel branches and ``Send`` tasks with one failing and retried. The results
are those of LangGraph's own ``InMemorySaver`` running the same phases in one process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.support.shared_server import SharedSidecar

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


# --- time travel, parallel branches, retries (tests/graph/graph_scenarios.py) -------------

SCENARIOS = Path(__file__).with_name("graph_scenarios.py")


def _scenario(
    sidecar: SharedSidecar, phase: str, thread: str, surface: str, *extra: str
) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(SCENARIOS),
            phase,
            "--target",
            sidecar.target,
            "--namespace",
            sidecar.namespace,
            "--thread",
            thread,
            "--surface",
            surface,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _reference(*phases: str, runs: Path | None = None, fail: str = "") -> list[dict[str, Any]]:
    """The same phases on LangGraph's InMemorySaver, in this process."""
    from langgraph.checkpoint.memory import InMemorySaver

    from tests.graph import graph_scenarios

    saver = InMemorySaver()
    results = []
    for name in phases:
        graph_scenarios.FAIL.clear()
        if fail and name == "fanout":
            graph_scenarios.FAIL.add(fail)
        graph_scenarios.RUNS[:] = [runs] if runs else []
        try:
            results.append(asyncio.run(graph_scenarios.phase(name, saver, "sync", "reference")))
        finally:
            graph_scenarios.FAIL.clear()
            graph_scenarios.RUNS.clear()
    return results


def test_g4_time_travel_forks_an_old_checkpoint_across_processes(sidecar: SharedSidecar) -> None:
    """One process runs a -> b -> c; another walks the history (newest first), updates the
    checkpoint after ``a`` and resumes from it: a fork whose parent is that checkpoint, which
    is left as it was; a third process sees the fork as the thread's head and both branches
    in the history. Every phase answers as on InMemorySaver."""
    thread = f"travel-{uuid.uuid4().hex[:8]}"
    ran = _scenario(sidecar, "chain", thread, "sync")
    forked = _scenario(sidecar, "fork", thread, "async")
    seen = _scenario(sidecar, "inspect", thread, "sync")
    assert [ran, forked, seen] == _reference("chain", "fork", "inspect")
    assert forked["fork_parent_is_old"] is True
    assert forked["log"] == ["a", "edited", "b", "c"]
    assert (forked["old_log"], forked["old_next"]) == (["a"], ["b"])
    assert seen["newest_first"] is True
    assert seen["left_branch_logs"] == [["a", "b", "c"]]


def test_g3_a_failed_task_reruns_alone_with_the_others_writes_kept(
    sidecar: SharedSidecar, tmp_path: Path
) -> None:
    """A step of parallel tasks (a static branch and three ``Send`` tasks), one of which
    raises: the process that ran it ends with the other tasks' writes stored as pending
    writes; a retry in another process runs only the failed task, then the rest of the
    graph, to the result the graph has without the failure."""
    thread = f"fanout-{uuid.uuid4().hex[:8]}"
    runs = tmp_path / "runs"
    failed = _scenario(sidecar, "fanout", thread, "sync", "--runs", str(runs), "--fail", "b")
    assert failed["error"] == "work on b failed"
    first = Counter(runs.read_text().split())
    assert first == Counter({"plan": 1, "audit": 1, "work:a": 1, "work:b": 1, "work:c": 1})
    resumed = _scenario(sidecar, "fanout-resume", thread, "async", "--runs", str(runs))
    rerun = Counter(runs.read_text().split()) - first
    assert rerun == Counter({"work:b": 1, "gather": 1})  # a, c and audit kept their writes
    assert resumed["results"] == ["done:a", "done:b", "done:c"]
    assert resumed["log"] == ["plan", "audit", "gather:3"]
    reference_runs = tmp_path / "reference-runs"
    assert [failed, resumed] == _reference("fanout", "fanout-resume", runs=reference_runs, fail="b")
    assert Counter(reference_runs.read_text().split()) == first + rerun
    (clean,) = _reference("fanout")  # no failure: the same results in one go
    assert (clean["error"], clean["values"]["results"]) == ("", resumed["results"])
