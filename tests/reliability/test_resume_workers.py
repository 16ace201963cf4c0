"""K2 under fire: a bot decides paused fastaiagent runs while three resume-worker processes
carry the decisions out and one of them is SIGKILLed again and again, each time in the middle
of a resume (it is slow, and killed as soon as it logs that it is fulfilling an order).

Every decided run completes exactly once (one completed run-end row), every ``@idempotent``
side effect fires once, no decision is lost (each ends ``resumed``), and a second decision on
any pause is refused. In the second variant a Node.js bot (clients/node/examples/
approval_bot.js, approving everything it sees undecided) races the Python bot for every
pause: each pause still takes exactly one decision, from one bot or the other. Reduced size
in ``make test-system``; 200 runs under ``CHECKPOINTD_RELIABILITY=full``. Both backends.
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
from tests.polyglot.conftest import NODE_CLIENT
from tests.polyglot.conftest import node as node  # the fixture, for the Node variant
from tests.reliability.figures import record, size
from tests.support.sidecar import Sidecar

pytestmark = [pytest.mark.own_server, pytest.mark.timeout(size(240, 1800))]

FLEET = Path(__file__).with_name("resume_fleet.py")
RUNS = size(20, 200)
WORKERS = 3
#: How often the first worker is killed mid-resume (restarted at once each time).
KILLS = size(3, 20)
#: The workers' lease. A worker stalled longer than this (a starved CPU under a parallel
#: test run) loses it while still resuming, and the lease is no fence (README), so it is
#: kept well above such stalls; a killed worker's run is taken over after it.
LEASE_SECONDS = 5
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


@pytest.mark.parametrize("bots", ["python", "python-and-node"])
def test_k2_decided_runs_complete_once_while_a_worker_is_killed(
    sidecar: Sidecar, tmp_path: Path, bots: str, request: pytest.FixtureRequest
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

    # The first worker starts alone, the others once it is fulfilling an order: it then
    # surely holds one to be killed in, however the machine schedules the fleet.
    workers = [spawn(0)]
    others_started = False
    if bots == "python-and-node":
        node_exe = request.getfixturevalue("node")
        node_log = tmp_path / "node-bot.log"
        with node_log.open("wb") as out:
            workers.append(
                subprocess.Popen(
                    [
                        node_exe,
                        "examples/approval_bot.js",
                        *("--namespace", namespace, "--limit", "1e12", "--name", "node-bot"),
                    ],
                    cwd=NODE_CLIENT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
                )
            )
    kills = 0
    lost_to: list[tuple[str, str]] = []
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
                    try:
                        bot.submit_decision(
                            run,
                            approved=verdict,
                            decided_by="py-bot",
                            resume_metadata={"by": "py-bot"},
                        )
                    except FailedPreconditionError as exc:  # the Node bot was first
                        lost_to.append((bots, exc.metadata["decided_by"]))
                    if n % 5 == 0:
                        with pytest.raises(FailedPreconditionError) as refused:
                            bot.submit_decision(run, approved=not verdict, decided_by="late-bot")
                        assert refused.value.reason == "ALREADY_DECIDED"
                        assert refused.value.metadata["decided_by"] in {"py-bot", "node-bot"}
                del undecided[:2]
                if not others_started and fulfilling(workers[0].pid):
                    workers += [spawn(n) for n in range(1, WORKERS)]
                    others_started = True
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
            decisions = {p.execution_id: p.decision for p in _all_decisions(bot)}
            assert set(decisions) == set(runs)
            approved = {run for run, d in decisions.items() if d is not None and d.approved}
            deciders = Counter(d.decided_by for d in decisions.values() if d is not None)
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
    assert set(lost_to) <= {("python-and-node", "node-bot")}
    if bots == "python":
        assert deciders == {"py-bot": RUNS}
    else:
        assert set(deciders) <= {"py-bot", "node-bot"}
    record(
        f"resume workers (K2, {bots} bots)",
        runs=RUNS,
        node_bot_decisions=deciders.get("node-bot", 0),
        worker_kills=kills,
        fulfil_reruns=redriven,
        redrives=text.count(" re-drives "),
    )


def _all_decisions(client: CheckpointdClient) -> list:  # type: ignore[type-arg]
    """Every decided pause of the namespace, page by page."""
    found, token = [], ""
    while True:
        page = client.list_decisions(page_token=token)
        found += page.pending_interrupts
        token = page.next_page_token
        if not token:
            return found
