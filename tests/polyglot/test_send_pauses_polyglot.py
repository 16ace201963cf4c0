"""A LangGraph.js task that a Send started names its pause by its node (contract G8): the JS
saver lists the Send targets with each put (``send_nodes``), so the inbox shows "review", not
the index its task path holds. Real server, both backends."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

from checkpointd_client import CheckpointdClient
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT

TIMEOUT_S = 60

#: A fan-out: START sends one "review" task per item; each calls interrupt().
FAN_OUT = """
const { Annotation, END, Send, START, StateGraph, interrupt } = require('@langchain/langgraph');
const { CheckpointdSaver } = require('./src/langgraph');
const [namespace, thread] = process.argv.slice(1);
const State = Annotation.Root({
  log: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});
const saver = new CheckpointdSaver({ namespace, graphName: 'js-fan-out' });
const graph = new StateGraph(State)
  .addNode('review', (item) => ({ log: [`${item.name}:${interrupt(item)}`] }))
  .addConditionalEdges(START, () => ['x', 'y'].map((name) => new Send('review', {
    name, reason: `ask-${name}`,
  })))
  .addEdge('review', END)
  .compile({ checkpointer: saver });
(async () => {
  const result = await graph.invoke({ log: [] }, { configurable: { thread_id: thread } });
  process.stdout.write(JSON.stringify(result.__interrupt__.map((i) => i.id)));
  await saver.end();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def test_g8_a_js_send_tasks_pause_is_named_by_its_node(node: str, sidecar: SharedSidecar) -> None:
    thread = f"js-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINTD_TOKEN"}
    env["CHECKPOINTD_TARGET"] = sidecar.target
    done = subprocess.run(
        [node, "-e", FAN_OUT, sidecar.namespace, thread],
        cwd=NODE_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    raised = set(json.loads(done.stdout))
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        rows = [p for p in client.iter_pending_interrupts() if p.execution_id == thread]
    assert {r.interrupt_id for r in rows} == raised
    assert sorted((r.node_id, r.reason, r.chain_name) for r in rows) == [
        ("review", "ask-x", "js-fan-out"),
        ("review", "ask-y", "js-fan-out"),
    ]
