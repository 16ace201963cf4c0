"""Python and Node.js processes sharing one server: a pause in one language, a claim in the other.

A fastaiagent chain on ``SidecarCheckpointer`` pauses for a human; a Node.js process watching
the namespace sees the pause on the WatchInterrupts stream and claims it; the chain's own
resume then loses with fastaiagent's ``AlreadyResumed``. The other way round, a Node.js
process records a pause and the Python adapter claims it, after which Node.js loses. The
interrupt context crosses both languages with its big integers and unicode intact.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest
from fastaiagent import AlreadyResumed, Chain, FunctionTool, Resume, interrupt

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

SCRIPT = NODE_CLIENT / "examples" / "interrupts.js"
LINE_TIMEOUT_S = 30

CONTEXT: dict[str, Any] = {
    "amount": 2**70 + 1,
    "floor": -(2**63) - 1,
    "approver": "Zoë Ångström — 日本語 ✓ 🚀",
    "items": [{"sku": "ß-1", "qty": 3}],
    "empty": {},
}


def approval_chain(store: SidecarCheckpointer) -> Chain:
    """A one-node chain that pauses on ``manager_approval`` with CONTEXT."""

    def approve(order: str) -> dict[str, Any]:
        decision = interrupt("manager_approval", {"order": order, **CONTEXT})
        return {"approved": decision.approved}

    chain = Chain("polyglot-approval", checkpointer=store)
    chain.add_node(
        "approve",
        tool=FunctionTool(name="approve", fn=approve),
        input_mapping={"order": "{{state.order}}"},
        output_key="decision",
    )
    return chain


class NodeProcess:
    """One run of examples/interrupts.js, read one JSON line at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, node: str, target: str, *args: str) -> NodeProcess:
        """Start the script with CHECKPOINTD_TARGET=target."""
        proc = await asyncio.create_subprocess_exec(
            node,
            str(SCRIPT),
            *args,
            cwd=NODE_CLIENT,
            env={**os.environ, "CHECKPOINTD_TARGET": target},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def line(self) -> dict[str, Any]:
        """The next JSON line on stdout (stderr in the failure message when there is none)."""
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), LINE_TIMEOUT_S)
        if not raw:
            assert self.proc.stderr is not None
            err = await self.proc.stderr.read()
            raise AssertionError(f"the node script ended early: {err.decode(errors='replace')}")
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    async def exit_code(self) -> int:
        """Wait for the script to end."""
        return await asyncio.wait_for(self.proc.wait(), LINE_TIMEOUT_S)

    async def close(self) -> None:
        """Kill the script if it still runs."""
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def test_i3_i5_node_watcher_claims_a_python_pause_then_python_resume_is_already_resumed(
    node: str, sidecar: Sidecar
) -> None:
    """Node.js sees a fastaiagent pause on the watch stream and wins the claim (I3, I5, J1)."""
    namespace = f"poly-{uuid.uuid4().hex[:10]}"
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    watcher = await NodeProcess.start(
        node, sidecar.target, "watch-and-claim", "--namespace", namespace, "--execution-id", run_id
    )
    store = SidecarCheckpointer(sidecar.target, namespace=namespace)
    try:
        assert (await watcher.line())["step"] == "watching"  # the snapshot is complete
        chain = approval_chain(store)
        paused = await chain.aexecute({"order": "A-1"}, execution_id=run_id)
        assert paused.status == "paused"

        seen = await watcher.line()
        assert (seen["step"], seen.get("execution_id")) == ("seen", run_id), seen
        claimed = await watcher.line()
        assert claimed["step"] == "claimed"
        assert claimed["pending"]["execution_id"] == run_id
        assert claimed["pending"]["reason"] == "manager_approval"
        assert claimed["pending"]["context"] == {"order": "A-1", **CONTEXT}
        assert await watcher.exit_code() == 0

        with pytest.raises(AlreadyResumed):
            await chain.aresume(run_id, resume_value=Resume(approved=True))
        assert store.list_pending_interrupts() == []
    finally:
        await watcher.close()
        store.close()


async def test_i5_node_watcher_reconnects_across_a_server_restart(
    node: str, sidecar: Sidecar
) -> None:
    """A pause made while the server restarted reaches the Node.js watcher as an event (I5)."""
    namespace = f"poly-{uuid.uuid4().hex[:10]}"
    run_id = f"order-{uuid.uuid4().hex[:8]}"
    store = SidecarCheckpointer(sidecar.target, namespace=namespace)
    # An earlier pause, claimed at once: the watcher's snapshot is then taken at a cursor
    # above 0, and a reconnect from it can only be answered with events, not a new snapshot.
    await approval_chain(store).aexecute({"order": "earlier"}, execution_id=f"{run_id}-earlier")
    assert store.delete_pending_interrupt_atomic(f"{run_id}-earlier") is not None
    store.close()
    watcher = await NodeProcess.start(
        node, sidecar.target, "watch-and-claim", "--namespace", namespace, "--execution-id", run_id
    )
    try:
        watching = await watcher.line()
        assert watching["step"] == "watching"
        assert int(watching["cursor"]) > 0
        await asyncio.to_thread(sidecar.stop)
        await asyncio.to_thread(sidecar.start)  # the same Unix socket path
        store = SidecarCheckpointer(sidecar.target, namespace=namespace)
        try:
            paused = await approval_chain(store).aexecute({"order": "B-2"}, execution_id=run_id)
            assert paused.status == "paused"
            seen = await watcher.line()  # an event after the cursor: no second snapshot
            assert (seen["step"], seen.get("execution_id")) == ("seen", run_id), seen
            assert int(seen["cursor"]) > int(watching["cursor"])
            claimed = await watcher.line()
            assert claimed["pending"]["context"] == {"order": "B-2", **CONTEXT}
            assert await watcher.exit_code() == 0
            assert store.list_pending_interrupts() == []
        finally:
            store.close()
    finally:
        await watcher.close()


async def test_i3_j1_python_claims_a_node_pause_then_node_loses(
    node: str, sidecar: Sidecar
) -> None:
    """Node.js records a pause; the Python adapter claims it; a Node.js claim is NOT_FOUND (I3)."""
    namespace = f"poly-{uuid.uuid4().hex[:10]}"
    run_id = f"node-run-{uuid.uuid4().hex[:8]}"
    common = ("--namespace", namespace, "--execution-id", run_id)
    recorder = await NodeProcess.start(
        node, sidecar.target, "record", *common, "--context-json", json.dumps(CONTEXT)
    )
    recorded = await recorder.line()
    assert await recorder.exit_code() == 0
    assert recorded["step"] == "recorded"
    assert recorded["pending_created"] is True

    store = SidecarCheckpointer(sidecar.target, namespace=namespace)
    try:
        [listed] = store.list_pending_interrupts()
        assert listed.execution_id == run_id
        claimed = store.delete_pending_interrupt_atomic(run_id)
        assert claimed is not None
        assert claimed.context == CONTEXT  # written by Node.js, every digit intact
        assert claimed.reason == "manager_approval"
        latest = store.get_last(run_id)
        assert latest is not None
        assert latest.interrupt_context == CONTEXT
    finally:
        store.close()

    loser = await NodeProcess.start(node, sidecar.target, "claim", *common)
    lost = await loser.line()
    assert await loser.exit_code() == 1
    assert (lost["step"], lost["code"], lost["reason"]) == (
        "error",
        "NOT_FOUND",
        "NO_PENDING_INTERRUPT",
    )
