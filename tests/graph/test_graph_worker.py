"""Contract G11: GraphResumeWorker resumes each decided LangGraph pause exactly once, with the
decision as the resume value, and another worker takes over when one is killed mid-resume.
Real StateGraphs (two parallel interrupts per thread) in separate processes, both backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpointd_client import CheckpointdClient, PendingInterrupt
from tests.conftest import BACKENDS
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

Server = Sidecar | SharedSidecar


SCRIPT = Path(__file__).with_name("graph_worker.py")
TIMEOUT_S = 60


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Both backends (the conformance suite covers PgBouncer)."""
    return str(request.param)


def _args(sidecar: Server, phase: str, directory: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(SCRIPT),
        phase,
        "--target",
        sidecar.target,
        "--namespace",
        sidecar.namespace,
        "--dir",
        str(directory),
        *extra,
    ]


def pause(sidecar: Server, directory: Path, thread: str, *extra: str) -> dict[str, str]:
    """Run the thread up to its interrupts in a process of its own; their ids by node."""
    done = subprocess.run(
        _args(sidecar, "pause", directory, "--thread", thread, *extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return ids


@pytest.fixture
def workers(sidecar: Server, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def start(
    workers: list[subprocess.Popen[str]], sidecar: Server, directory: Path, *extra: str
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        _args(sidecar, "work", directory, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    workers.append(process)
    return process


def decision_of(client: CheckpointdClient, thread: str, interrupt_id: str) -> PendingInterrupt:
    token = ""
    while True:
        page = client.list_decisions(page_token=token)
        for decided in page.pending_interrupts:
            if decided.execution_id == thread and decided.interrupt_id == interrupt_id:
                return decided
        token = page.next_page_token
        if not token:
            break
    raise AssertionError(f"no decision on {thread} {interrupt_id}")


def wait_for(client: CheckpointdClient, thread: str, interrupt_id: str, status: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        decided = decision_of(client, thread, interrupt_id)
        assert decided.decision is not None
        if decided.decision.status == status:
            return decided.decision
        assert time.monotonic() < deadline, f"{interrupt_id} never became {status}"
        time.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_g11_workers_resume_each_pause_once_with_the_decision(
    sidecar: SharedSidecar, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    """Two worker processes, two threads of two parallel pauses each: every pause is resumed
    once (attempts 1) with its decision, and each thread finishes once."""
    threads = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    ids = {thread: pause(sidecar, tmp_path, thread) for thread in threads}
    for _ in range(2):
        start(workers, sidecar, tmp_path)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        listed = {(p.execution_id, p.interrupt_id) for p in client.iter_pending_interrupts()}
        assert listed == {(t, i) for t in threads for i in ids[t].values()}
        for thread in threads:
            for node, approved in (("a", True), ("b", False)):
                interrupt_id = ids[thread][node]
                client.submit_decision(
                    thread, interrupt_id=interrupt_id, approved=approved, decided_by=f"bot-{node}"
                )
                decision = wait_for(client, thread, interrupt_id, "resumed")
                assert decision.attempts == 1
        assert [p for p in client.iter_pending_interrupts() if p.execution_id in threads] == []
    for thread in threads:
        assert sorted(lines(tmp_path / f"{thread}.log")) == [
            "a:True:bot-a",
            "b:False:bot-b",
            "ship",
        ]


def test_g11_a_worker_killed_mid_resume_is_taken_over(
    sidecar: SharedSidecar, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    """A worker SIGKILLed inside the resumed node leaves its lease to run out; another worker
    takes the decision over (attempts 2), resumes the thread once more and reports it, and the
    node's effect and the thread's end happen once."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ids = pause(sidecar, tmp_path, thread)
    doomed = start(workers, sidecar, tmp_path, "--block")
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.submit_decision(thread, interrupt_id=ids["a"], approved=True, decided_by="ana")
        entered = tmp_path / f"{thread}.entered"
        deadline = time.monotonic() + TIMEOUT_S
        while not entered.exists():
            assert time.monotonic() < deadline, "the worker never reached the resumed node"
            assert doomed.poll() is None
            time.sleep(0.02)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(TIMEOUT_S)
        held = decision_of(client, thread, ids["a"]).decision
        assert held is not None
        assert held.status == "resuming"
        assert held.attempts == 1
        [still] = [p for p in client.iter_pending_interrupts() if p.interrupt_id == ids["a"]]
        assert still.decision is not None

        start(workers, sidecar, tmp_path)
        decision = wait_for(client, thread, ids["a"], "resumed")
        assert decision.attempts == 2
        client.submit_decision(thread, interrupt_id=ids["b"], approved=True, decided_by="bo")
        assert wait_for(client, thread, ids["b"], "resumed").attempts == 1
        assert [p for p in client.iter_pending_interrupts() if p.execution_id == thread] == []
    assert sorted(lines(tmp_path / f"{thread}.log")) == ["a:True:ana", "b:True:bo", "ship"]


def test_g11_a_worker_killed_after_the_answered_step_is_finished_by_the_next(
    sidecar: SharedSidecar, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    """approve (interrupt) -> slow -> finish: a worker SIGKILLed inside ``slow`` leaves the
    approve step's writes saved and the thread no longer waiting on the interrupt, but not
    finished. The next worker (attempts 2) goes on from there: ``slow`` and ``finish`` run,
    ``approve`` does not run again, and only then is the decision reported resumed."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ids = pause(sidecar, tmp_path, thread, "--graph", "chain")
    doomed = start(workers, sidecar, tmp_path, "--graph", "chain", "--block")
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.submit_decision(thread, interrupt_id=ids["approve"], approved=True, decided_by="ana")
        entered = tmp_path / f"{thread}.entered"
        deadline = time.monotonic() + TIMEOUT_S
        while not entered.exists():
            assert time.monotonic() < deadline, "the worker never reached the slow node"
            assert doomed.poll() is None
            time.sleep(0.02)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(TIMEOUT_S)
        assert lines(tmp_path / f"{thread}.log") == ["approve:True:ana", "slow-entered"]

        start(workers, sidecar, tmp_path, "--graph", "chain")
        decision = wait_for(client, thread, ids["approve"], "resumed")
        assert decision.attempts == 2
        assert [p for p in client.iter_pending_interrupts() if p.execution_id == thread] == []
    assert lines(tmp_path / f"{thread}.log") == [
        "approve:True:ana",
        "slow-entered",
        "slow-entered",
        "slow",
        "finish",
    ]
