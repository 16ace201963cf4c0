"""The LangGraph.js saver fences its writes (contract K4): inside the JS resume worker's
``writesUnder(fence, ...)``, put and putWrites carry the lease, and once another worker has
taken the decision over the server refuses them with WRITE_FENCED, writing nothing. Real
server, both backends; the leases are taken with the Python client."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from checkpointd_client import CheckpointdClient, FailedPreconditionError
from checkpointd_client.fencing import LeaseFence
from checkpointd_client.langgraph import CheckpointdSaver
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT
from .test_langgraph_js_worker import pause_js

TIMEOUT_S = 60

#: Writes a step of the thread under each fence given (zombie first, then heir) and prints,
#: per fence, "stored" or the refusal's reason and metadata.
WRITE_UNDER = """
const { CheckpointdSaver } = require('./src/langgraph');
const { isWriteFenced, writesUnder } = require('./src/langgraph/fencing');
const [namespace, thread, ...fences] = process.argv.slice(1);
const saver = new CheckpointdSaver({ namespace, graphName: 'js-chain' });
(async () => {
  const results = [];
  for (const text of fences) {
    const fence = JSON.parse(text);
    const newest = await saver.getTuple({ configurable: { thread_id: thread } });
    const checkpoint = { ...newest.checkpoint, id: `${fence.lease_token}-${Date.now()}` };
    const attempt = async (write) => {
      try {
        await writesUnder(fence, write);
        return 'stored';
      } catch (error) {
        if (!isWriteFenced(error)) throw error;
        return `${error.reason}:${error.metadata.execution_id}:${error.metadata.interrupt_id}`;
      }
    };
    results.push({
      putWrites: await attempt(() => saver.putWrites(
        newest.config, [['log', fence.lease_token]], `task-${fence.lease_token}`,
      )),
      put: await attempt(() => saver.put(
        newest.config, checkpoint, { source: 'loop', step: 9 }, {},
      )),
      checkpointId: checkpoint.id,
    });
  }
  process.stdout.write(JSON.stringify(results));
  await saver.end();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def _lease(
    client: CheckpointdClient, thread: str, pause_id: tuple[str, str], token: str
) -> LeaseFence:
    checkpoint_id, interrupt_id = pause_id
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            leased = client.lease_decision(
                thread, checkpoint_id, lease_token=token, lease_seconds=1, interrupt_id=interrupt_id
            )
            return LeaseFence.of(leased, token)
        except FailedPreconditionError as exc:  # the first holder's lease has not run out
            if exc.reason != "LEASE_HELD" or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _as_json(fence: LeaseFence) -> str:
    return json.dumps(
        {
            "execution_id": fence.execution_id,
            "checkpoint_id": fence.checkpoint_id,
            "interrupt_id": fence.interrupt_id,
            "lease_token": fence.lease_token,
            "attempt": fence.attempt,
        }
    )


def test_k4_the_js_saver_writes_under_a_lease_taken_over_are_refused(
    node: str, sidecar: SharedSidecar, tmp_path: Path
) -> None:
    thread = f"js-{uuid.uuid4().hex[:8]}"
    ids = pause_js(node, sidecar, tmp_path, thread, "--graph", "js-chain")
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        [row] = [p for p in client.iter_pending_interrupts() if p.execution_id == thread]
        client.submit_decision(thread, interrupt_id=ids["approve"], approved=True, decided_by="ana")
        pause_id = (row.checkpoint_id, ids["approve"])
        zombie = _lease(client, thread, pause_id, "zombie")
        heir = _lease(client, thread, pause_id, "heir")  # once the zombie's lease ran out
        assert (zombie.attempt, heir.attempt) == (1, 2)
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINTD_TOKEN"}
    env["CHECKPOINTD_TARGET"] = sidecar.target
    done = subprocess.run(
        [node, "-e", WRITE_UNDER, sidecar.namespace, thread, _as_json(zombie), _as_json(heir)],
        cwd=NODE_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    under_zombie, under_heir = json.loads(done.stdout)
    refused = f"WRITE_FENCED:{thread}:{ids['approve']}"
    assert (under_zombie["putWrites"], under_zombie["put"]) == (refused, refused)
    assert (under_heir["putWrites"], under_heir["put"]) == ("stored", "stored")
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        stored = {
            t.config["configurable"]["checkpoint_id"]
            for t in saver.list({"configurable": {"thread_id": thread}})
        }
        assert under_heir["checkpointId"] in stored
        assert under_zombie["checkpointId"] not in stored
        writes = [
            w
            for t in saver.list({"configurable": {"thread_id": thread}})
            for w in t.pending_writes or []
        ]
        assert ("log", "heir") in [w[1:] for w in writes]
        assert ("log", "zombie") not in [w[1:] for w in writes]
