"""A Node.js bot decides, a Python worker resumes: the decision channel across languages.

Paused fastaiagent order runs wait for approval; clients/node/examples/approval_bot.js
approves those under its limit with one ``submitDecision`` call each and escalates the rest;
a Python ``ResumeWorker`` carries the approvals out. The approved runs complete once, with the
decision the Node bot made; the escalated ones stay pending, undecided.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.reliability.test_resume_workers import FLEET, fleet_env
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

BOT = NODE_CLIENT / "examples" / "approval_bot.js"
TIMEOUT_S = 60


def test_k1_k2_node_bot_approves_and_a_python_worker_completes_the_run(
    node: str, sidecar: Sidecar, tmp_path: Path
) -> None:
    namespace = f"poly-{uuid.uuid4().hex[:8]}"
    events = tmp_path / "events.jsonl"
    env = fleet_env(tmp_path)
    where = ["--target", sidecar.target, "--namespace", namespace, "--events", str(events)]
    started = subprocess.run(
        [sys.executable, str(FLEET), "start", *where, "--count", "4"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    runs = started.stdout.split()  # amounts 10, 11, 12, 13
    approved, escalated = runs[:2], runs[2:]

    bot_out = tmp_path / "bot.out"
    with bot_out.open("w") as out:
        bot = subprocess.Popen(
            [node, str(BOT), "--namespace", namespace, "--limit", "12", "--name", "node-bot"],
            cwd=NODE_CLIENT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
        )
    worker_log = tmp_path / "worker.log"
    with worker_log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, str(FLEET), "worker", *where, "--name", "py-worker"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        with CheckpointdClient(sidecar.target, namespace=namespace) as client:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                # The worker reports the resume after the run's last checkpoint: wait for both.
                reported = {
                    p.execution_id
                    for p in client.list_decisions().pending_interrupts
                    if p.decision is not None and p.decision.status == "resumed"
                }
                done = [
                    run
                    for run in approved
                    if run in reported and client.get_latest_checkpoint(run).step_type == "run_end"
                ]
                lines = [json.loads(line) for line in bot_out.read_text().splitlines() if line]
                said = {(line["step"], line.get("execution_id")) for line in lines}
                if len(done) == len(approved) and all(("escalated", r) in said for r in escalated):
                    break
                assert time.monotonic() < deadline, (bot_out.read_text(), worker_log.read_text())
                time.sleep(0.1)

            for run in approved:
                assert ("approved", run) in said
                assert client.get_latest_checkpoint(run).status == "completed"
                [decided] = [
                    p for p in client.list_decisions().pending_interrupts if p.execution_id == run
                ]
                assert decided.decision is not None
                assert (decided.decision.decided_by, decided.decision.status) == (
                    "node-bot",
                    "resumed",
                )
            waiting = {p.execution_id: p for p in client.iter_pending_interrupts()}
            assert set(waiting) == set(escalated)
            assert all(p.decision is None for p in waiting.values())
    finally:
        for proc in (bot, worker):
            proc.send_signal(signal.SIGTERM)
        for proc in (bot, worker):
            proc.wait(30)

    fired = [json.loads(line) for line in events.read_text().splitlines()]
    assert Counter(e["order_id"] for e in fired if e["event"] == "ship") == Counter(approved)
    assert json.loads(bot_out.read_text().splitlines()[-1])["step"] == "stopped"
