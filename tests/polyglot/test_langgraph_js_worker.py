"""LangGraph.js pauses resumed by the Node client's ``GraphResumeWorker`` (contract G15), and
Python and JavaScript graphs side by side in one namespace (G16), on both backends.

Real ``StateGraph``s of @langchain/langgraph in node processes of their own
(clients/node/spec/langgraph/support_graph.cjs: "a" and "b" interrupt in parallel, then
"ship"; each node appends to ``<dir>/<thread>.log`` once resumed), decided by the Python
client by interrupt id, resumed by JS workers with 2 s leases; the Python graph is
tests/graph/graph_worker.py's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

from checkpointd_client import CheckpointdClient
from checkpointd_client.langgraph import CheckpointdSaver
from tests.conftest import BACKENDS
from tests.graph.test_graph_worker import decision_of, lines, wait_for
from tests.graph.test_graph_worker import pause as pause_python
from tests.graph.test_graph_worker import start as start_python
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT

SCRIPT = NODE_CLIENT / "spec" / "langgraph" / "support_graph.cjs"
TIMEOUT_S = 60


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The worker processes a test starts, killed at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def _args(node: str, sidecar: SharedSidecar, phase: str, *extra: str) -> list[str]:
    where = ["--target", sidecar.target, "--namespace", sidecar.namespace]
    return [node, str(SCRIPT), phase, *where, *extra]


def _node_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CHECKPOINTD_TOKEN", None)
    return env


def pause_js(
    node: str, sidecar: SharedSidecar, directory: Path, thread: str, *extra: str
) -> dict[str, str]:
    """Run the JS thread up to its interrupts in a node process; their ids by node."""
    done = subprocess.run(
        _args(node, sidecar, "pause", "--thread", thread, "--dir", str(directory), *extra),
        cwd=NODE_CLIENT,
        env=_node_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return ids


def start_js(
    processes: list[subprocess.Popen[str]],
    node: str,
    sidecar: SharedSidecar,
    directory: Path,
    *extra: str,
) -> subprocess.Popen[str]:
    """A JS GraphResumeWorker process, once it has said it runs."""
    process = subprocess.Popen(
        _args(node, sidecar, "work", "--dir", str(directory), *extra),
        cwd=NODE_CLIENT,
        env=_node_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    processes.append(process)
    assert process.stdout is not None
    assert json.loads(process.stdout.readline())["worker"] == process.pid
    return process


def wait_until_logged(path: Path, expected: list[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while sorted(lines(path)) != sorted(expected):
        assert len(lines(path)) <= len(expected), lines(path)
        assert time.monotonic() < deadline, lines(path)
        time.sleep(0.05)


def test_g15_a_js_worker_resumes_a_js_graph_decided_from_python_once(
    node: str, sidecar: SharedSidecar, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """A thread paused in one node process, its two pauses decided by the Python client by
    interrupt id (one approved with metadata, one rejected with a reason), is resumed by the
    JS worker in another: each node runs once with its decision as interrupt()'s value, each
    decision is reported resumed (attempts 1) and the pauses leave the inbox."""
    thread = f"js-{uuid.uuid4().hex[:8]}"
    ids = pause_js(node, sidecar, tmp_path, thread)
    start_js(processes, node, sidecar, tmp_path)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        listed = {p.interrupt_id: p for p in client.iter_pending_interrupts()}
        assert set(listed) == set(ids.values())
        assert {p.chain_name for p in listed.values()} == {"js-support"}
        client.submit_decision(
            thread,
            interrupt_id=ids["a"],
            approved=True,
            decided_by="ana",
            resume_metadata={"limit": 10},
        )
        assert wait_for(client, thread, ids["a"], "resumed").attempts == 1
        client.submit_decision(
            thread, interrupt_id=ids["b"], approved=False, decided_by="bo", reason="too big"
        )
        assert wait_for(client, thread, ids["b"], "resumed").attempts == 1
        assert list(client.iter_pending_interrupts()) == []
    wait_until_logged(tmp_path / f"{thread}.log", ["a:true:ana", "b:false:bo", "ship"])
    answers = {n: json.loads((tmp_path / f"{thread}.{n}.json").read_text()) for n in "ab"}
    assert answers == {
        "a": {"approved": True, "decided_by": "ana", "reason": None, "metadata": {"limit": 10}},
        "b": {"approved": False, "decided_by": "bo", "reason": "too big", "metadata": {}},
    }
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        found = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert found is not None
        assert sorted(found.checkpoint["channel_values"]["log"]) == ["a:true", "b:false", "ship"]


def test_g15_a_js_worker_killed_mid_resume_is_taken_over_by_another(
    node: str, sidecar: SharedSidecar, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """A JS worker SIGKILLed inside the resumed node leaves its lease to run out; another JS
    worker takes the decision over (attempts 2), resumes the thread and reports it; each node
    and the thread's end run once."""
    thread = f"js-{uuid.uuid4().hex[:8]}"
    ids = pause_js(node, sidecar, tmp_path, thread)
    doomed = start_js(processes, node, sidecar, tmp_path, "--block", "--name", "doomed")
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
        assert (held.status, held.attempts) == ("resuming", 1)
        [still] = [p for p in client.iter_pending_interrupts() if p.interrupt_id == ids["a"]]
        assert still.decision is not None

        start_js(processes, node, sidecar, tmp_path, "--name", "heir")
        assert wait_for(client, thread, ids["a"], "resumed").attempts == 2
        client.submit_decision(thread, interrupt_id=ids["b"], approved=True, decided_by="bo")
        assert wait_for(client, thread, ids["b"], "resumed").attempts == 1
        assert list(client.iter_pending_interrupts()) == []
    wait_until_logged(tmp_path / f"{thread}.log", ["a:true:ana", "b:true:bo", "ship"])


def test_g15_a_js_worker_killed_after_the_answered_step_is_finished_by_the_next(
    node: str, sidecar: SharedSidecar, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """approve (interrupt) -> slow -> finish in LangGraph.js: a JS worker SIGKILLed inside
    ``slow``, the approve step saved, leaves the thread no longer waiting on the interrupt but
    unfinished; the next JS worker (attempts 2) goes on from there (``slow`` and ``finish``
    run, ``approve`` does not run again) before it reports the decision resumed."""
    thread = f"js-{uuid.uuid4().hex[:8]}"
    chain = ("--graph", "js-chain")
    ids = pause_js(node, sidecar, tmp_path, thread, *chain)
    doomed = start_js(processes, node, sidecar, tmp_path, *chain, "--block", "--name", "doomed")
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
        assert lines(tmp_path / f"{thread}.log") == ["approve:true:ana", "slow-entered"]

        start_js(processes, node, sidecar, tmp_path, *chain, "--name", "heir")
        assert wait_for(client, thread, ids["approve"], "resumed").attempts == 2
        assert [p for p in client.iter_pending_interrupts() if p.execution_id == thread] == []
    assert lines(tmp_path / f"{thread}.log") == [
        "approve:true:ana",
        "slow-entered",
        "slow-entered",
        "slow",
        "finish",
    ]


def test_g15_a_graph_that_fails_on_resume_is_reported_resume_failed(
    node: str, sidecar: SharedSidecar, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """A resumed node that throws: the worker reports resume_failed with the error's text
    after one attempt; the failed task's pause leaves the inbox, the other stays."""
    thread = f"js-{uuid.uuid4().hex[:8]}"
    ids = pause_js(node, sidecar, tmp_path, thread)
    start_js(processes, node, sidecar, tmp_path, "--fail")
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.submit_decision(thread, interrupt_id=ids["a"], approved=True, decided_by="ana")
        failed = wait_for(client, thread, ids["a"], "resume_failed")
        assert (failed.attempts, failed.error) == (1, "Error: a refuses ana")
        # The failed task ran past its pause (G10); the other waits, undecided.
        pending = {p.interrupt_id: p.decision for p in client.iter_pending_interrupts()}
        assert pending == {ids["b"]: None}
    assert lines(tmp_path / f"{thread}.log") == []


def test_g15_a_thread_resumed_by_a_worker_that_died_before_reporting_is_not_run_again(
    node: str, sidecar: SharedSidecar, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """A JS worker that resumed the thread and was killed before its report leaves the
    decision resuming with no pause in the inbox; the next JS worker finds it among the open
    decisions, takes it over once the lease runs out (attempts 2) and reports it resumed
    without running the node again, as the thread no longer waits on that interrupt."""
    thread = f"js-{uuid.uuid4().hex[:8]}"
    ids = pause_js(node, sidecar, tmp_path, thread)
    doomed = start_js(processes, node, sidecar, tmp_path, "--die-before-report")
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.submit_decision(thread, interrupt_id=ids["a"], approved=True, decided_by="ana")
        assert doomed.wait(TIMEOUT_S) == -signal.SIGKILL
        assert lines(tmp_path / f"{thread}.log") == ["a:true:ana"]
        held = decision_of(client, thread, ids["a"]).decision
        assert held is not None
        assert (held.status, held.attempts) == ("resuming", 1)
        assert [p.interrupt_id for p in client.iter_pending_interrupts()] == [ids["b"]]

        start_js(processes, node, sidecar, tmp_path)
        assert wait_for(client, thread, ids["a"], "resumed").attempts == 2
        assert lines(tmp_path / f"{thread}.log") == ["a:true:ana"]
        client.submit_decision(thread, interrupt_id=ids["b"], approved=False, decided_by="bo")
        assert wait_for(client, thread, ids["b"], "resumed").attempts == 1
    wait_until_logged(tmp_path / f"{thread}.log", ["a:true:ana", "b:false:bo", "ship"])


def test_g16_python_and_js_graphs_share_a_namespace_and_each_worker_resumes_its_own(
    node: str,
    sidecar: SharedSidecar,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    """A Python graph and a JS graph paused in one namespace: each saver lists only its own
    thread by thread id; across threads the Python saver lists both, while LangGraph.js fails
    on the Python thread's values, msgpack or null (docs/protocol.md: list by thread there);
    all four pauses are in one inbox (Python and Node listings alike); a Python and a JS worker each
    resume only the pauses of the graphs they have, once."""
    py_thread = f"py-{uuid.uuid4().hex[:8]}"
    js_thread = f"js-{uuid.uuid4().hex[:8]}"
    py_ids = pause_python(sidecar, tmp_path, py_thread)
    js_ids = pause_js(node, sidecar, tmp_path, js_thread)

    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        own = {t.config["configurable"]["thread_id"] for t in saver.list(_thread(py_thread))}
        assert own == {py_thread}
        across = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert across == {py_thread, js_thread}
    listed = subprocess.run(
        _args(node, sidecar, "list", "--thread", js_thread),
        cwd=NODE_CLIENT,
        env=_node_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    seen = json.loads(listed.stdout)
    assert set(seen["own"]) == {js_thread}
    # The first Python value it meets: msgpack, or "null" (Python's None).
    assert re.fullmatch(r"Unknown serialization type: (msgpack|null)", seen["across"]["error"])

    every = {(py_thread, i) for i in py_ids.values()} | {(js_thread, i) for i in js_ids.values()}
    inbox = subprocess.run(
        [node, "-e", INBOX, sidecar.namespace],
        cwd=NODE_CLIENT,
        env={**_node_env(), "CHECKPOINTD_TARGET": sidecar.target},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert inbox.returncode == 0, inbox.stderr
    assert {tuple(row) for row in json.loads(inbox.stdout)} == {
        (t, i, "support" if t == py_thread else "js-support") for t, i in every
    }

    start_js(processes, node, sidecar, tmp_path)
    start_python(processes, sidecar, tmp_path)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        assert {(p.execution_id, p.interrupt_id) for p in client.iter_pending_interrupts()} == every
        for thread, ids in ((py_thread, py_ids), (js_thread, js_ids)):
            for name, interrupt_id in ids.items():
                client.submit_decision(
                    thread, interrupt_id=interrupt_id, approved=True, decided_by=f"bot-{name}"
                )
        for thread, interrupt_id in every:
            assert wait_for(client, thread, interrupt_id, "resumed").attempts == 1
        assert list(client.iter_pending_interrupts()) == []
    wait_until_logged(tmp_path / f"{py_thread}.log", ["a:True:bot-a", "b:True:bot-b", "ship"])
    wait_until_logged(tmp_path / f"{js_thread}.log", ["a:true:bot-a", "b:true:bot-b", "ship"])


#: Lists the namespace's inbox with the Node client: [thread, interrupt id, chain name].
INBOX = """
const { CheckpointdClient } = require('./src');
const client = new CheckpointdClient({ namespace: process.argv[1] });
(async () => {
  const rows = [];
  for (let token = '', first = true; first || token; first = false) {
    const page = await client.listPendingInterrupts({ pageToken: token });
    const row = (p) => [p.execution_id, p.interrupt_id, p.chain_name];
    rows.push(...page.pending_interrupts.map(row));
    token = page.next_page_token;
  }
  process.stdout.write(JSON.stringify(rows));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def _thread(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}
