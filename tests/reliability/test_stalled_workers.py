"""K4 end to end: a resume worker that stalls past its lease cannot write after another worker
took the run over.

Two worker processes of one kind (fastaiagent's ``ResumeWorker``; LangGraph's
``GraphResumeWorker`` with the asyncio saver, and with the blocking saver whose graph runs in a
thread of its own) resume paused runs under 2 s leases. Whichever takes a decision first
stalls inside the node after the answered pause (its event loop blocked; the graph's thread,
for the blocking saver), and the test SIGSTOPs it: it cannot renew its lease. Once the lease
has run out the other worker takes the run over (attempt 2), finishes it and reports
``resumed``. Then the stalled worker is SIGCONTed and goes on where it stopped, as a paused VM
would: its next write is refused ``WRITE_FENCED``, it stops without reporting, and nothing of
it lands: the run ended once, by the new holder.

The first run of each kind is the control: its resume writes without the fence (as the
workers did before K4), and the same stall lands the stalled worker's writes after the
takeover, a second branch of the run that ends it a second time, so the harness is seen to
catch what the fence prevents. With the asyncio saver the renewal that fails as the worker
wakes may cancel the run before it writes its next checkpoint, so that kind has no control;
in the other two only the fence stops the stalled worker. Reduced size in ``make test-system`` (one
control and one stall per kind and backend); six stalls each under
``CHECKPOINTD_RELIABILITY=full``. Both backends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from checkpointd_client import CheckpointdClient, PendingInterrupt
from checkpointd_client.langgraph import CheckpointdSaver
from tests.reliability import graph_fleet
from tests.reliability.figures import record, size
from tests.reliability.test_resume_workers import fleet_env
from tests.support.sidecar import Sidecar

pytestmark = [pytest.mark.own_server, pytest.mark.timeout(size(300, 1800))]

HERE = Path(__file__).parent
RESUME_FLEET = HERE / "resume_fleet.py"
GRAPH_FLEET = HERE / "graph_fleet.py"
#: The workers' lease: the stalled worker is stopped for longer than this.
LEASE_SECONDS = 2
#: Stalls per kind and backend.
STALLS = size(1, 6)
#: How long any one step of a process may take (start, take a lease, finish a run): each
#: takes well under a few seconds, so this only bounds a hang.
DEADLINE = 120.0

KINDS = ["fastaiagent", "langgraph-async", "langgraph-sync"]


@dataclass
class Fleet:
    """The worker processes of one kind on one namespace, and the files they share."""

    kind: str
    sidecar: Sidecar
    directory: Path
    namespace: str = field(default_factory=lambda: f"k4-{uuid.uuid4().hex[:8]}")
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def events(self) -> Path:
        return self.directory / "events.jsonl"

    def command(self, role: str, *extra: str) -> list[str]:
        where = ["--target", self.sidecar.target, "--namespace", self.namespace]
        if self.kind == "fastaiagent":
            script, files = RESUME_FLEET, ["--events", str(self.events)]
        else:
            script, files = GRAPH_FLEET, ["--dir", str(self.directory)]
        return [sys.executable, str(script), role, *where, *files, *extra]

    def start_workers(self, count: int) -> None:
        """Workers that stall in the first resume of each run they reach."""
        extra = ["--lease-seconds", str(LEASE_SECONDS)]
        if self.kind == "fastaiagent":
            extra += ["--stall", str(self.directory)]
        else:
            extra += ["--stall", "--saver", self.kind.removeprefix("langgraph-")]
        for n in range(count):
            with (self.directory / f"w{n}.log").open("wb") as out:
                self.workers.append(
                    subprocess.Popen(
                        self.command("worker", "--name", f"w{n}", *extra),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=fleet_env(self.directory),
                    )
                )

    def pause(self, count: int) -> list[tuple[str, str]]:
        """``count`` runs paused: each one's id and interrupt id (empty for fastaiagent's)."""
        if self.kind != "fastaiagent":
            target, namespace = self.sidecar.target, self.namespace
            return list(
                asyncio.run(graph_fleet.pause(target, namespace, self.directory, count)).items()
            )
        done = subprocess.run(
            self.command("start", "--count", str(count)),
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            env=fleet_env(self.directory),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return [(run, "") for run in done.stdout.split()]

    def worker(self, pid: int) -> tuple[int, subprocess.Popen[bytes]]:
        return next((n, w) for n, w in enumerate(self.workers) if w.pid == pid)

    def log_of(self, n: int) -> str:
        return (self.directory / f"w{n}.log").read_text(errors="replace")

    def fired(self, **match: Any) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        events = [json.loads(line) for line in self.events.read_text().splitlines() if line]
        return [e for e in events if all(e.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)


def wait_until(what: str, done: Callable[[], bool], fleet: Fleet) -> None:
    """Until ``done()``; fail at once if a worker exits."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        for process in fleet.workers:
            assert process.poll() is None, f"{what}: worker {process.pid} exited"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE} s"
        time.sleep(0.02)


def decision_on(client: CheckpointdClient, run: str, interrupt_id: str) -> PendingInterrupt:
    token = ""
    while True:
        page = client.list_decisions(page_token=token)
        for decided in page.pending_interrupts:
            if decided.execution_id == run and decided.interrupt_id == interrupt_id:
                return decided
        token = page.next_page_token
        if not token:
            raise AssertionError(f"no decision on {run} {interrupt_id!r}")


def status_of(client: CheckpointdClient, run: str, interrupt_id: str) -> tuple[str, int]:
    decision = decision_on(client, run, interrupt_id).decision
    assert decision is not None
    return decision.status, decision.attempts


@dataclass(frozen=True)
class Stored:
    """What the store holds of a run: how often it ended, whether it is one line (no step
    written twice, no second branch), and how many rows it has."""

    ends: int
    linear: bool
    rows: int


def stored(fleet: Fleet, client: CheckpointdClient, run: str) -> Stored:
    if fleet.kind == "fastaiagent":
        rows = list(client.iter_checkpoints(run))
        fulfilled = [c for c in rows if c.node_id == "fulfil" and c.step_type == "node"]
        ends = [c for c in rows if c.step_type == "run_end"]
        assert all(c.status == "completed" for c in ends), ends
        return Stored(ends=len(ends), linear=len(fulfilled) == 1, rows=len(rows))
    with CheckpointdSaver(fleet.sidecar.target, namespace=fleet.namespace) as saver:
        history = list(saver.list({"configurable": {"thread_id": run}}))
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config]
    finished = [t for t in history if "finish" in (t.checkpoint["channel_values"].get("log") or [])]
    return Stored(
        ends=len(finished),
        linear=len(parents) == len(set(parents)),  # no checkpoint is the parent of two
        rows=sum(1 + len(t.pending_writes or ()) for t in history),
    )


@dataclass
class Stall:
    """One stall and what followed it."""

    run: str
    after_takeover: Stored
    at_end: Stored
    outcomes: Counter[str]
    stalled_log: str
    holder_log: str
    decision: tuple[str, int]


def stall(
    fleet: Fleet, client: CheckpointdClient, run: str, interrupt_id: str, *, unfenced: bool
) -> Stall:
    """Decide the run; the worker that takes it stalls and is stopped; the other takes it
    over and finishes it; the stalled one goes on until its resume has stopped. With
    ``unfenced``, the run's resumes write without the fence."""
    if unfenced:
        (fleet.directory / f"{run}.unfenced").touch()
    client.submit_decision(run, interrupt_id=interrupt_id, approved=True, decided_by="bot")
    key = "order_id" if fleet.kind == "fastaiagent" else "thread"
    wait_until("a worker stalls", lambda: bool(fleet.fired(event="stall", **{key: run})), fleet)
    [stalled_at] = fleet.fired(event="stall", **{key: run})
    n, stalled = fleet.worker(stalled_at["pid"])
    stalled.send_signal(signal.SIGSTOP)

    # The other worker takes the run over once the lease has run out, and finishes it.
    wait_until(
        "the other worker reports",
        lambda: status_of(client, run, interrupt_id)[0] != "resuming",
        fleet,
    )
    assert status_of(client, run, interrupt_id) == ("resumed", 2)
    after_takeover = stored(fleet, client, run)
    assert after_takeover.ends == 1
    assert after_takeover.linear

    # The stalled worker goes on where it stopped.
    (fleet.directory / f"{run}.go").touch()
    stalled.send_signal(signal.SIGCONT)

    def outcomes() -> Counter[str]:
        writes = fleet.fired(event="write", pid=stalled.pid, after_stall=True, **{key: run})
        return Counter(w["outcome"] for w in writes)

    if unfenced:
        # Until its next checkpoint has landed.
        wait_until(
            "the stalled worker writes a checkpoint",
            lambda: bool(
                fleet.fired(
                    event="write",
                    method="put",
                    outcome="ok",
                    pid=stalled.pid,
                    after_stall=True,
                    **{key: run},
                )
            ),
            fleet,
        )
    else:
        # Until its first write is answered (refused: asserted below).
        wait_until("the stalled worker writes", lambda: sum(outcomes().values()) > 0, fleet)
    stopped = (f"a write of {run} was refused", f"lost the lease on {run}", f"report on {run}")
    wait_until(
        "the stalled worker stops its resume",
        lambda: any(line in fleet.log_of(n) for line in stopped),
        fleet,
    )
    if unfenced and fleet.kind == "langgraph-sync":
        # Nothing stops the graph's thread but the fence: it runs the thread to its end.
        wait_until(
            "the stalled worker's graph ends the thread",
            lambda: bool(
                fleet.fired(event="write", end=True, pid=stalled.pid, after_stall=True, thread=run)
            ),
            fleet,
        )
    [holder] = [m for m, _ in enumerate(fleet.workers) if m != n]
    return Stall(
        run=run,
        after_takeover=after_takeover,
        at_end=stored(fleet, client, run),
        outcomes=outcomes(),
        stalled_log=fleet.log_of(n),
        holder_log=fleet.log_of(holder),
        decision=status_of(client, run, interrupt_id),
    )


@pytest.fixture
def fleets(sidecar: Sidecar, tmp_path: Path) -> Iterator[Callable[[str], Fleet]]:
    made: list[Fleet] = []

    def make(kind: str) -> Fleet:
        directory = tmp_path / f"fleet-{len(made)}"
        directory.mkdir()
        made.append(Fleet(kind, sidecar, directory))
        return made[-1]

    yield make
    for fleet in made:
        fleet.close()


@pytest.mark.parametrize("kind", KINDS)
def test_k4_a_stalled_worker_is_fenced_and_the_run_ends_once(
    fleets: Callable[[str], Fleet], kind: str
) -> None:
    fleet = fleets(kind)
    controls = 0 if kind == "langgraph-async" else 1
    fleet.start_workers(2)
    paused = fleet.pause(controls + STALLS)
    refused = control_ends = takeovers = ended_once = duplicates = 0
    with CheckpointdClient(fleet.sidecar.target, namespace=fleet.namespace) as client:
        for run, interrupt_id in paused[:controls]:
            # Unfenced, the stalled worker's writes land after the takeover: a second branch.
            seen = stall(fleet, client, run, interrupt_id, unfenced=True)
            assert seen.decision == ("resumed", 2)
            assert seen.outcomes["ok"] >= 1, seen.outcomes
            assert seen.at_end.rows > seen.after_takeover.rows
            assert not seen.at_end.linear, seen
            if kind == "langgraph-sync":
                assert seen.at_end.ends == 2, seen
            control_ends += seen.at_end.ends - 1

        for run, interrupt_id in paused[controls:]:
            seen = stall(fleet, client, run, interrupt_id, unfenced=False)
            # The new holder carried the decision out and reported it; the stalled worker's
            # writes were refused, it stopped without reporting, and nothing of it landed.
            assert seen.decision == ("resumed", 2)
            assert f" re-drives {run} " in seen.holder_log
            assert seen.at_end == seen.after_takeover, seen
            assert set(seen.outcomes) == {"WRITE_FENCED"}, seen.outcomes
            assert f"report on {run}" not in seen.stalled_log
            refused += seen.outcomes["WRITE_FENCED"]
            takeovers += seen.decision[1] - 1
            ended_once += seen.at_end.ends == 1
            duplicates += seen.at_end.ends - 1
    for n in range(len(fleet.workers)):
        assert "Traceback" not in fleet.log_of(n).replace("resume of", "")
    record(
        f"stalled workers (K4, {kind})",
        stalls=STALLS,
        takeovers=takeovers,
        runs_ended_once=ended_once,
        duplicate_ends=duplicates,
        fenced_writes_refused=refused,
        unfenced_controls=controls,
        unfenced_control_extra_ends=control_ends,
    )
