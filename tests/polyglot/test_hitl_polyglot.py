"""A Node.js bot answers a LangChain agent's HumanInTheLoopMiddleware pause with typed
decisions (contract K3): the email edited, the deletion answered for the tool; the Python
GraphResumeWorker carries them out, and the agent ends as LangChain's own run with the same
decisions. Real server, both backends."""

from __future__ import annotations

import json
import os
import subprocess

from checkpointd_client import CheckpointdClient, PendingInterrupt
from tests.e2e.test_langchain_hitl import (  # noqa: F401 - ran is a fixture
    _outcome,
    ran,
    reference,
    run_decided,
    status_of,
)
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT

TIMEOUT_S = 60

DECIDE = """
const { CheckpointdClient } = require('./src');
const [namespace, thread, interruptId] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace });
(async () => {
  let refused = 'none';
  try {
    // delete_file's review allows what the middleware allows; a count that does not fit is refused.
    await client.submitDecision(thread, {
      decidedBy: 'node-bot', interruptId, response: { actions: [{ type: 'approve' }] },
    });
  } catch (error) {
    refused = `${error.reason}:${error.metadata?.field}`;
  }
  const decided = await client.submitDecision(thread, {
    decidedBy: 'node-bot',
    interruptId,
    response: {
      actions: [
        { type: 'edit', args: { to: 'dan', body: 'from node' } },
        { type: 'respond', message: 'Done by hand.' },
      ],
    },
  });
  process.stdout.write(JSON.stringify({ refused, decision: decided.decision }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""


async def test_k3_a_node_bot_edits_and_answers_a_batched_pause(
    node: str,
    sidecar: SharedSidecar,
    ran: list[str],  # noqa: F811
) -> None:
    """The Node client's typed answers are checked (a wrong count is INVALID_FIELD on
    response.actions), stored, and resumed by the Python worker as LangChain's decisions."""
    edited = {"to": "dan", "body": "from node"}
    expected, expected_ran = reference(
        lambda _: {
            "decisions": [
                {"type": "edit", "edited_action": {"name": "send_email", "args": edited}},
                {"type": "respond", "message": "Done by hand."},
            ]
        }
    )
    seen: dict[str, object] = {}

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [pause] = found
        done = subprocess.run(
            [node, "-e", DECIDE, sidecar.namespace, pause.execution_id, pause.interrupt_id],
            cwd=NODE_CLIENT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
        )
        assert done.returncode == 0, done.stderr
        seen.update(json.loads(done.stdout))
        status_of(client, pause.execution_id, pause.interrupt_id, "resumed")

    done, _ = await run_decided(sidecar, ran, decide, 1)
    assert seen["refused"] == "INVALID_FIELD:response.actions"
    decision = seen["decision"]
    assert isinstance(decision, dict)
    assert decision["approved"] is True
    assert [a["type"] for a in decision["response"]["actions"]] == [
        "ACTION_DECISION_TYPE_EDIT",
        "ACTION_DECISION_TYPE_RESPOND",
    ]
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    assert ran == expected_ran == ["send_email:dan"]
