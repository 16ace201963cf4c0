"""ResumeWorker in this process against a real server: a failed resume is recorded on the
decision for the bot to see, and a chain the worker has no runner for waits, logged once,
until a worker that can build one (a resolver) carries it out."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastaiagent import Chain, FunctionTool, interrupt

from checkpointd_client import CheckpointdClient, PendingInterrupt
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

TIMEOUT_S = 60


def two_step_chain(name: str, store: SidecarCheckpointer, second: Callable[[str], Any]) -> Chain:
    """ask (pauses for a decision) -> second."""

    def ask(item: str) -> dict[str, Any]:
        decision = interrupt("approval", {"item": item})
        return {"approved": decision.approved, "by": decision.metadata.get("by")}

    chain = Chain(name, checkpointer=store)
    chain.add_node(
        "ask",
        tool=FunctionTool(name="ask", fn=ask),
        input_mapping={"item": "{{state.item}}"},
        output_key="answer",
    )
    chain.add_node(
        "second",
        tool=FunctionTool(name="second", fn=second),
        input_mapping={"item": "{{state.item}}"},
        output_key="done",
    )
    chain.connect("ask", "second")
    return chain


def pause(chain: Chain, execution_id: str) -> None:
    result = asyncio.run(chain.aexecute({"item": execution_id}, execution_id=execution_id))
    assert result.status == "paused"


@pytest.fixture
def namespace() -> str:
    return f"rw-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(sidecar: Sidecar, namespace: str) -> Iterator[SidecarCheckpointer]:
    with SidecarCheckpointer(sidecar.target, namespace=namespace) as s:
        yield s


def running(worker: ResumeWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for_status(client: CheckpointdClient, execution_id: str, status: str) -> PendingInterrupt:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        for decided in client.list_decisions().pending_interrupts:
            decision = decided.decision
            if decided.execution_id == execution_id and decision and decision.status == status:
                return decided
        assert time.monotonic() < deadline, f"{execution_id} never became {status}"
        time.sleep(0.05)


def test_k2_a_failed_resume_is_recorded_on_the_decision(
    sidecar: Sidecar, namespace: str, store: SidecarCheckpointer
) -> None:
    """The run's error is the decision's: status resume_failed, with the error text."""

    def second(item: str) -> str:
        raise RuntimeError(f"warehouse down for {item}")

    chain = two_step_chain("fragile", store, second)
    pause(chain, "run-f")
    worker = ResumeWorker({"fragile": chain}, target=sidecar.target, namespace=namespace)
    thread = running(worker)
    try:
        with CheckpointdClient(sidecar.target, namespace=namespace) as client:
            client.submit_decision("run-f", approved=True, decided_by="bot")
            failed = wait_for_status(client, "run-f", "resume_failed")
    finally:
        worker.stop()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    assert failed.decision is not None
    assert "warehouse down for run-f" in failed.decision.error
    assert failed.decision.attempts == 1


def test_k2_a_chain_without_runner_waits_logged_once_until_a_resolver_builds_it(
    sidecar: Sidecar,
    namespace: str,
    store: SidecarCheckpointer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker without the chain leaves its decisions waiting and says so once; a worker
    whose resolver builds the chain then carries both out, with the decision's metadata."""
    done: list[str] = []

    def finish(item: str) -> str:
        done.append(item)
        return item

    chain = two_step_chain("late", store, finish)
    for run in ("run-a", "run-b"):
        pause(chain, run)
    caplog.set_level(logging.WARNING, logger="checkpointd_client.resume_worker")
    blind = ResumeWorker({"other": chain}, target=sidecar.target, namespace=namespace, name="blind")
    thread = running(blind)
    try:
        with CheckpointdClient(sidecar.target, namespace=namespace) as client:
            for run in ("run-a", "run-b"):
                client.submit_decision(
                    run, approved=True, decided_by="bot", resume_metadata={"by": "bot"}
                )
            deadline = time.monotonic() + TIMEOUT_S
            while "no runner for chain 'late'" not in caplog.text:
                assert time.monotonic() < deadline, "the missing runner was never logged"
                time.sleep(0.05)
            time.sleep(0.5)  # it would have resumed by now if it were going to
            assert {p.decision.status for p in client.iter_pending_interrupts() if p.decision} == {
                "decided"
            }
            assert caplog.text.count("no runner for chain 'late'") == 1

            asked: list[str] = []

            def resolve(pending: PendingInterrupt) -> Chain | None:
                asked.append(pending.chain_name)
                return chain if pending.chain_name == "late" else None

            able = ResumeWorker(resolver=resolve, target=sidecar.target, namespace=namespace)
            able_thread = running(able)
            try:
                for run in ("run-a", "run-b"):
                    wait_for_status(client, run, "resumed")
            finally:
                able.stop()
                able_thread.join(TIMEOUT_S)
    finally:
        blind.stop()
        thread.join(TIMEOUT_S)
    assert sorted(done) == ["run-a", "run-b"]
    assert set(asked) == {"late"}
    for run in ("run-a", "run-b"):
        latest = store.get_last(run)
        assert latest is not None
        assert latest.state_snapshot["answer"] == {"approved": True, "by": "bot"}
