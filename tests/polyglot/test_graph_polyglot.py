"""A Node.js bot decides LangGraph pauses by interrupt id, a Python GraphResumeWorker resumes
them (contracts G8, G11 across languages): a thread with two parallel interrupts, one
approved and one rejected from Node, finishes once with each decision."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from tests.graph.test_graph_worker import lines, pause, start, wait_for, workers  # noqa: F401
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

TIMEOUT_S = 60

DECIDE = """
const { CheckpointdClient } = require('./src');
const [namespace, thread, approveId, rejectId] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace });
(async () => {
  const listed = await client.listPendingInterrupts();
  const mine = listed.pending_interrupts.filter((p) => p.execution_id === thread);
  const by = 'node-bot';
  const a = await client.submitDecision(
    thread, { approved: true, decidedBy: by, interruptId: approveId });
  const b = await client.submitDecision(
    thread, { approved: false, decidedBy: by, interruptId: rejectId, reason: 'too big' });
  let missing = 'none';
  try {
    const unknown = 'f'.repeat(32);
    await client.submitDecision(thread, { approved: true, decidedBy: by, interruptId: unknown });
  } catch (error) {
    missing = error.reason;
  }
  process.stdout.write(JSON.stringify({
    listed: mine.map((p) => p.interrupt_id).sort(),
    decided: [a.interrupt_id, b.interrupt_id],
    missing,
  }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def test_g8_g11_a_node_bot_decides_graph_pauses_by_id_and_a_python_worker_resumes_them(
    node: str,
    sidecar: Sidecar,
    tmp_path: Path,
    workers: list[subprocess.Popen[str]],  # noqa: F811
) -> None:
    """The Node client lists both pauses with their ids, decides each by ``interruptId``
    (an unknown id is NO_PENDING_INTERRUPT); the worker resumes the thread with each verdict,
    once."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ids = pause(sidecar, tmp_path, thread)
    done = subprocess.run(
        [node, "-e", DECIDE, sidecar.namespace, thread, ids["a"], ids["b"]],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "listed": sorted(ids.values()),
        "decided": [ids["a"], ids["b"]],
        "missing": "NO_PENDING_INTERRUPT",
    }
    start(workers, sidecar, tmp_path)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        for interrupt_id in ids.values():
            wait_for(client, thread, interrupt_id, "resumed")
    deadline = time.monotonic() + TIMEOUT_S
    while "ship" not in lines(tmp_path / f"{thread}.log"):
        assert time.monotonic() < deadline, "the thread never finished"
        time.sleep(0.05)
    assert sorted(lines(tmp_path / f"{thread}.log")) == [
        "a:True:node-bot",
        "b:False:node-bot",
        "ship",
    ]
