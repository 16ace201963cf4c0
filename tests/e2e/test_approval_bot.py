"""examples/approval_bot.py end to end: two bots decide, two workers resume, once per order.

Orders are started by the example's own ``submit`` command (the app), some before the bots
start (they reach the bots through the watch's snapshot) and some after (live events). Two
bot processes watch the same namespace and race to decide every order below the limit (one
decision wins per order); two resume-worker processes carry the decisions out. The ledger
the chain writes after approval is the side effect that must happen once per order.
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
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

ROOT = Path(__file__).resolve().parents[2]
BOT = ROOT / "examples" / "approval_bot.py"
TIMEOUT = 60
LIMIT = 1000
BEFORE = [100, 2000, 300]  # submitted before the bots start: seen in their snapshot
AFTER = [5000, 50, 999]  # submitted while they watch: seen as live events


def bot_env(home: Path) -> dict[str, str]:
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


def test_p4_k1_k2_two_approval_bots_and_two_workers_complete_each_order_once(
    sidecar: Sidecar, tmp_path: Path
):
    """Orders under the limit are decided once each across two bots (the loser is quiet)
    and resumed once each across two workers; the others are escalated and stay pending,
    undecided; SIGTERM stops every process cleanly."""
    namespace = f"bots-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.jsonl"
    env = bot_env(tmp_path)
    common = [sys.executable, str(BOT), "--target", sidecar.target, "--namespace", namespace]
    common += ["--ledger", str(ledger)]

    def submit(amounts: list[int]) -> dict[str, int]:
        done = subprocess.run(
            [*common, "submit", *map(str, amounts)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        orders = {}
        for line in done.stdout.splitlines():
            order_id, amount, status = line.split()
            assert status == "paused"
            orders[order_id] = int(amount.removeprefix("amount="))
        return orders

    orders = submit(BEFORE)
    bots = []
    for n in (1, 2):
        cmd = [*common, "run", "--limit", str(LIMIT), "--name", f"bot-{n}"]
        with (
            (tmp_path / f"bot-{n}.out").open("w") as out_file,
            (tmp_path / f"bot-{n}.err").open("w") as err_file,
        ):
            bots.append(
                subprocess.Popen(cmd, stdout=out_file, stderr=err_file, env=env, cwd=tmp_path)
            )
    for n in (1, 2):
        cmd = [*common, "worker", "--name", f"worker-{n}"]
        with (
            (tmp_path / f"worker-{n}.out").open("w") as out_file,
            (tmp_path / f"worker-{n}.err").open("w") as err_file,
        ):
            bots.append(
                subprocess.Popen(cmd, stdout=out_file, stderr=err_file, env=env, cwd=tmp_path)
            )
    try:
        orders |= submit(AFTER)
        approved = {o for o, amount in orders.items() if amount < LIMIT}
        escalated = set(orders) - approved

        def outputs() -> str:
            return "".join((tmp_path / f"bot-{n}.out").read_text() for n in (1, 2))

        def all_started() -> bool:
            # Each process says so once its SIGTERM handler is in place: one signalled before
            # that dies of the signal instead of stopping cleanly.
            said = {"bot": "watching namespace", "worker": "resuming decided orders"}
            return all(
                f"{role}-{n}: {said[role]}" in (tmp_path / f"{role}-{n}.err").read_text()
                for role in said
                for n in (1, 2)
            )

        deadline = time.monotonic() + TIMEOUT
        while True:
            lines = ledger.read_text().splitlines() if ledger.exists() else []
            text = outputs()
            if (
                len(lines) >= len(approved)
                and all(f"ESCALATE {o}" in text for o in escalated)
                and all_started()
            ):
                break
            assert time.monotonic() < deadline, f"bots did not finish: {text!r}"
            assert all(b.poll() is None for b in bots), "a bot exited early"
            time.sleep(0.05)
    finally:
        for bot in bots:
            bot.send_signal(signal.SIGTERM)
        codes = [bot.wait(TIMEOUT) for bot in bots]

    errors = [
        (tmp_path / f"{role}-{n}.err").read_text() for role in ("bot", "worker") for n in (1, 2)
    ]
    assert codes == [0, 0, 0, 0], errors
    for err in errors:
        assert "Traceback" not in err
        assert "stopped" in err

    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert Counter(e["order_id"] for e in entries) == Counter(approved)
    assert all(e["outcome"] == "shipped" for e in entries)
    assert {e["by"] for e in entries} <= {"bot-1", "bot-2"}
    approvals = [line.split()[1] for line in outputs().split("\n") if line.startswith("APPROVED")]
    assert Counter(approvals) == Counter(approved)

    with CheckpointdClient(sidecar.target, namespace=namespace) as client:
        still = {p.execution_id: p for p in client.iter_pending_interrupts()}
        decided = client.list_decisions().pending_interrupts
    assert set(still) == escalated
    assert all(p.decision is None for p in still.values())
    assert sorted(p.execution_id for p in decided) == sorted(approved)
    assert all(p.decision is not None and p.decision.status == "resumed" for p in decided)
