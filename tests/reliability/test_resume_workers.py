"""K2 under fire: a bot decides paused fastaiagent runs while three resume-worker processes
carry the decisions out and one of them is SIGKILLed again and again, each time in the middle
of a resume (it is slow, and killed as soon as it logs that it is fulfilling an order).

Every decided run completes exactly once (one completed run-end row), every ``@idempotent``
side effect fires once, no decision is lost (each ends ``resumed``), and a second decision on
any pause is refused. Reduced size in ``make test``; 200 runs under
``CHECKPOINTD_RELIABILITY=full``. Both backends.
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

from checkpointd_client import CheckpointdClient, FailedPreconditionError
from tests.reliability.figures import record, size
from tests.support.sidecar import Sidecar

FLEET = Path(__file__).with_name("resume_fleet.py")
RUNS = size(20, 200)
WORKERS = 3
#: How often the first worker is killed mid-resume (restarted at once each time).
KILLS = size(3, 20)
LEASE_SECONDS = 2
#: The first worker lingers this long in each order's fulfil node: long enough to be
#: killed there; the others take 0.05 s.
SLOW = 2.0
DEADLINE = size(180, 900)


def fleet_env(home: Path) -> dict[str, str]:
    """fastaiagent's local files under ``home``, none of the caller's FASTAIAGENT_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTAIAGENT_")}
    env.update(
        FASTAIAGENT_LOCAL_DB=str(home / "local.db"),
        FASTAIAGENT_KB_DIR=str(home / "kb"),
        FASTAIAGENT_CACHE_DIR=str(home / "cache"),
        FASTAIAGENT_UI_ENABLED="false",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def test_k2_decided_runs_complete_once_while_a_worker_is_killed(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    namespace = f"k2-{uuid.uuid4().hex[:8]}"
    events = tmp_path / "events.jsonl"
    env = fleet_env(tmp_path)
    common = [sys.executable, str(FLEET)]
    where = ["--target", sidecar.target, "--namespace", namespace, "--events", str(events)]

    started = subprocess.run(
        [*common, "start", *where, "--count", str(RUNS)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=env,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    runs = started.stdout.split()
    assert len(runs) == RUNS

    logs: list[Path] = []

    def spawn(n: int) -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{n}-{len(logs)}.log"
        logs.append(log)
        args = ["--name", f"w{n}", "--lease-seconds", str(LEASE_SECONDS)]
        args += ["--slow", str(SLOW if n == 0 else 0.05)]
        with log.open("wb") as out:
            return subprocess.Popen(
                [*common, "worker", *where, *args], stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def fulfilling(pid: int) -> bool:
        """Whether the process ``pid`` has started fulfilling an order."""
        if not events.exists():
            return False
        return any(
            json.loads(line)["event"] == "fulfil" and json.loads(line)["pid"] == pid
            for line in events.read_text().splitlines()
        )

    workers = [spawn(n) for n in range(WORKERS)]
    kills = 0
    approved: set[str] = set()
    try:
        with CheckpointdClient(sidecar.target, namespace=namespace) as bot:
            # The bot decides the runs a few at a time while the workers run (a quarter are
            # rejected); a second decision, by anyone, is refused naming the first.
            undecided = list(enumerate(runs))
            deadline = time.monotonic() + DEADLINE
            waiting = set(runs)
            while waiting:
                assert time.monotonic() < deadline, f"{len(waiting)} runs never completed"
                for n, run in undecided[:2]:
                    verdict = n % 4 != 0
                    bot.submit_decision(
                        run, approved=verdict, decided_by="py-bot", resume_metadata={"by": "py-bot"}
                    )
                    if verdict:
                        approved.add(run)
                    if n % 5 == 0:
                        with pytest.raises(FailedPreconditionError) as refused:
                            bot.submit_decision(run, approved=not verdict, decided_by="late-bot")
                        assert refused.value.reason == "ALREADY_DECIDED"
                        assert refused.value.metadata["decided_by"] == "py-bot"
                del undecided[:2]
                if kills < KILLS and fulfilling(workers[0].pid):
                    workers[0].send_signal(signal.SIGKILL)
                    workers[0].wait(30)
                    kills += 1
                    workers[0] = spawn(0)
                for run in list(waiting)[:50]:
                    latest = bot.get_latest_checkpoint(run)
                    if latest.step_type == "run_end" and latest.status == "completed":
                        waiting.discard(run)
                time.sleep(0.1)

            # No decision lost: each one was reported resumed, and is closed.
            statuses: Counter[str] = Counter()
            for run in runs:
                [interrupted] = [c for c in bot.iter_checkpoints(run) if c.status == "interrupted"]
                with pytest.raises(FailedPreconditionError) as closed:
                    bot.lease_decision(run, interrupted.checkpoint_id, lease_token="probe")
                assert closed.value.reason == "DECISION_CLOSED"
                statuses[closed.value.metadata["status"]] += 1
                ends = [c for c in bot.iter_checkpoints(run) if c.step_type == "run_end"]
                assert [c.status for c in ends] == ["completed"], run
            assert statuses == {"resumed": RUNS}
            assert list(bot.iter_pending_interrupts()) == []
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    fired = [json.loads(line) for line in events.read_text().splitlines()]
    by_kind = {
        kind: Counter(e["order_id"] for e in fired if e["event"] == kind)
        for kind in ("charge", "ship", "refund", "fulfil")
    }
    assert by_kind["charge"] == Counter(runs)
    assert by_kind["ship"] == Counter(approved)
    assert by_kind["refund"] == Counter(set(runs) - approved)
    assert set(by_kind["fulfil"]) == set(runs)
    redriven = sum(by_kind["fulfil"].values()) - RUNS
    text = "".join(log.read_text(errors="replace") for log in logs)
    assert "Traceback" not in text.replace("resume of", "")  # failures are reported, not crashes
    assert kills >= 1
    # Each kill stopped a fulfil half-way, and another worker ran that order's fulfil again:
    # yet each order shipped or refunded once.
    assert sum(1 for count in by_kind["fulfil"].values() if count > 1) >= 1
    record(
        "resume workers (K2)",
        runs=RUNS,
        worker_kills=kills,
        fulfil_reruns=redriven,
        redrives=text.count(" re-drives "),
    )
