"""G11 under fire: a bot decides paused LangGraph threads (``approve`` (interrupt) -> ``slow``
-> ``finish``) while GraphResumeWorker processes resume them, and workers are SIGKILLed at
each point of a resume in turn:

* ``lease``: the lease is taken, nothing written yet (the worker is about to read the thread);
* ``node``: inside ``slow``, the interrupt answered and that step's checkpoint saved;
* ``end``: the last checkpoint saved (``finish`` ran), the outcome not reported yet.

A worker reaching its planned point logs it and waits there; the test kills it as soon as it
reads that, and starts a new worker in its place. Every thread ends finished exactly once:
its history is one line with one checkpoint after ``finish``, nothing left to run, the state
``approve, slow, finish``; ``finish`` ran once; every decision ends ``resumed`` (a killed
one after a takeover, attempt 2 or more); the inbox is empty. Reduced size in ``make test-system``
(one kill per point); five per point on 40 threads under ``CHECKPOINTD_RELIABILITY=full``.
Both backends.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkpointd_client import CheckpointdClient
from tests.reliability import graph_fleet
from tests.reliability.figures import record, size
from tests.support.sidecar import Sidecar

pytestmark = [pytest.mark.own_server, pytest.mark.timeout(size(300, 1800))]

FLEET = Path(graph_fleet.__file__)
POINTS = graph_fleet.POINTS
#: Kills at each point.
KILLS = size(1, 5)
THREADS = size(2 * len(POINTS), 40)
WORKERS = 2
#: The workers' lease: a killed worker's thread is taken over once it has run out.
LEASE_SECONDS = 3
#: The longest the fleet may go without any progress (a worker holding, a kill, a decision
#: changing status): a takeover waits out one lease; a worker starts in a few seconds.
STALLED_S = 90.0


def status_of(client: CheckpointdClient, *, attempts: bool = False) -> dict[str, tuple[str, Any]]:
    """Each decided thread's decision status, with its attempts (else whether it is
    reported: attempts change while a thread is taken over)."""
    found: dict[str, tuple[str, Any]] = {}
    token = ""
    while True:
        page = client.list_decisions(page_token=token)
        for pending in page.pending_interrupts:
            decision = pending.decision
            assert decision is not None
            found[pending.execution_id] = (
                decision.status,
                decision.attempts if attempts else decision.reported_at is not None,
            )
        token = page.next_page_token
        if not token:
            return found


def test_g11_decided_threads_finish_once_while_workers_are_killed_at_each_point(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    namespace = f"g11-{uuid.uuid4().hex[:8]}"
    events = tmp_path / "events.jsonl"
    logs: list[Path] = []
    workers: dict[int, subprocess.Popen[bytes]] = {}

    def spawn() -> None:
        log = tmp_path / f"worker-{len(logs)}.log"
        logs.append(log)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(FLEET),
                    "worker",
                    *("--target", sidecar.target, "--namespace", namespace),
                    *("--dir", str(tmp_path), "--name", f"w{len(logs) - 1}"),
                    *("--lease-seconds", str(LEASE_SECONDS)),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        workers[process.pid] = process

    def fired() -> list[dict[str, Any]]:
        if not events.exists():
            return []
        return [json.loads(line) for line in events.read_text().splitlines() if line]

    for _ in range(WORKERS):
        spawn()
    paused = asyncio.run(graph_fleet.pause(sidecar.target, namespace, tmp_path, THREADS))
    threads = list(paused)
    # The first KILLS threads die at "lease", the next at "node", the next at "end".
    plan = {t: POINTS[n // KILLS] for n, t in enumerate(threads[: KILLS * len(POINTS)])}
    (tmp_path / "plan.json").write_text(json.dumps(plan))

    kills: Counter[str] = Counter()
    killed: set[int] = set()
    try:
        with CheckpointdClient(sidecar.target, namespace=namespace) as bot:
            undecided = list(threads)
            progress, last_progress = None, time.monotonic()
            while True:
                for hold in (e for e in fired() if e["event"] == "hold"):
                    if hold["pid"] in killed:
                        continue
                    assert plan[hold["thread"]] == hold["point"], hold
                    doomed = workers[hold["pid"]]
                    doomed.send_signal(signal.SIGKILL)
                    doomed.wait(30)
                    killed.add(doomed.pid)
                    kills[hold["point"]] += 1
                    spawn()
                # The bot decides a few threads at a time while the workers run.
                for thread in undecided[:2]:
                    bot.submit_decision(
                        thread, interrupt_id=paused[thread], approved=True, decided_by="bot"
                    )
                del undecided[:2]
                statuses = status_of(bot)
                now = (sorted(kills.items()), sorted(statuses.items()))
                if now != progress:
                    progress, last_progress = now, time.monotonic()
                if not undecided and Counter(statuses.values()) == {("resumed", True): THREADS}:
                    break
                for pid, process in workers.items():
                    assert pid in killed or process.poll() is None, f"worker {pid} exited"
                stuck = Counter(statuses.values())
                assert time.monotonic() - last_progress < STALLED_S, f"no progress: {stuck}"
                time.sleep(0.05)

            final = status_of(bot, attempts=True)
            assert list(bot.iter_pending_interrupts()) == []
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in workers.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    # Every decision resumed; a killed worker's thread was taken over (attempt 2 or more).
    assert set(final) == set(threads)
    assert {status for status, _ in final.values()} == {"resumed"}
    attempts = {thread: n for thread, (_, n) in final.items()}
    assert all(attempts[t] >= 2 for t in plan), attempts
    assert kills == {point: KILLS for point in POINTS}

    # Every thread finished exactly once, as the store shows it.
    duplicates = finished_once = 0
    reader = graph_fleet.BlockingFleetSaver(sidecar.target, namespace=namespace)
    reader.fleet = graph_fleet.Fleet(tmp_path, resuming=False)
    with reader:
        graph = graph_fleet.build(reader, reader.fleet, stall=False)
        for thread in threads:
            config: Any = {"configurable": {"thread_id": thread}}
            history = list(reader.list(config))
            parents = [
                t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config
            ]
            assert len(parents) == len(set(parents)), f"{thread} branched"
            ends = [
                t for t in history if "finish" in (t.checkpoint["channel_values"].get("log") or [])
            ]
            duplicates += len(ends) - 1
            finished_once += len(ends) == 1
            assert len(ends) == 1, thread
            state = graph.get_state(config)
            assert state.values["log"] == ["approve", "slow", "finish"], thread
            assert (state.next, state.interrupts) == ((), ()), thread

    fired_events = fired()
    refused = [e for e in fired_events if e["event"] == "write" and e["outcome"] != "ok"]
    fenced = {e["thread"] for e in refused}
    finishes = Counter(
        e["thread"] for e in fired_events if e["event"] == "node" and e["node"] == "finish"
    )
    # finish ran once per thread (a worker that lost its lease under load may have run it
    # again, its checkpoint refused: the store above shows one).
    assert {t: n for t, n in finishes.items() if n != 1 and t not in fenced} == {}
    assert set(finishes) == set(threads)
    text = "".join(log.read_text(errors="replace") for log in logs)
    assert "Traceback" not in text.replace("resume of", "")
    record(
        "graph resume workers (G11, K2, K4)",
        pauses=THREADS,
        **{f"kills_at_{point}": kills[point] for point in POINTS},
        threads_finished_once=finished_once,
        duplicate_ends=duplicates,
        takeovers=sum(1 for n in attempts.values() if n > 1),
        fenced_writes_refused=sum(1 for e in refused if e["outcome"] == "WRITE_FENCED"),
        finish_reruns=sum(finishes.values()) - THREADS,
    )
