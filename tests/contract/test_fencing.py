"""Contract K4: a write made under a decision's lease lands only while that lease holds the
decision. Every write kind a resumed run makes (checkpoints, idempotency results,
interrupts, a graph's checkpoints and pending writes), on the Write stream and as unary
calls, on every backend: refused ``WRITE_FENCED`` with nothing written once another worker
took the lease over or the decision was carried out; bad fences are ``INVALID_FIELD``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Interrupt

from checkpointd_client import (
    CheckpointdClient,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from checkpointd_client.fencing import LeaseFence, writes_under
from checkpointd_client.langgraph import CheckpointdSaver
from tests.contract.conftest import NO_RETRY, WRITE_PATHS
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedSidecar


@pytest.fixture(params=WRITE_PATHS)
def write_path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _pause(client: CheckpointdClient, execution_id: str) -> str:
    cp, pending = interrupted(execution_id)
    checkpoint_id = client.record_interrupt(cp, pending).pending.checkpoint_id
    client.submit_decision(execution_id, approved=True, decided_by="bot")
    return checkpoint_id


def _lease(client: CheckpointdClient, pause: tuple[str, str, str], token: str) -> LeaseFence:
    execution_id, checkpoint_id, interrupt_id = pause
    leased = client.lease_decision(
        execution_id, checkpoint_id, lease_token=token, lease_seconds=1, interrupt_id=interrupt_id
    )
    return LeaseFence.of(leased, token)


def _take_over(client: CheckpointdClient, pause: tuple[str, str, str], token: str) -> LeaseFence:
    """Take the lease once the holder's has run out (1 s)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return _lease(client, pause, token)
        except FailedPreconditionError as exc:
            if exc.reason != "LEASE_HELD" or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _refused(write: Callable[[], Any], fence: LeaseFence) -> None:
    with writes_under(fence), pytest.raises(FailedPreconditionError) as err:
        write()
    assert err.value.reason == "WRITE_FENCED"
    assert err.value.metadata["execution_id"] == fence.execution_id
    assert err.value.metadata["checkpoint_id"] == fence.checkpoint_id
    assert err.value.metadata["interrupt_id"] == fence.interrupt_id


def test_k4_writes_under_a_lease_taken_over_are_refused_and_change_nothing(
    client: CheckpointdClient, execution_id: str
) -> None:
    """The holder's writes land while it holds the lease, and after it ran out until another
    worker takes it over; then each of its writes (checkpoint, idempotency result, interrupt)
    is WRITE_FENCED and writes nothing, while the new holder's land; once the new holder
    reported, its own fence is refused too."""
    pause = (execution_id, _pause(client, execution_id), "")
    first = _lease(client, pause, "worker-a")
    assert first.attempt == 1
    with writes_under(first):
        client.put_checkpoint(checkpoint(execution_id, node_id="before-takeover"))
        client.put_idempotent(execution_id, "charge", {"charged": 1})
    time.sleep(1.1)  # the lease ran out, nobody took it: the holder still writes
    with writes_under(first):
        client.put_checkpoint(checkpoint(execution_id, node_id="after-expiry"))

    second = _take_over(client, pause, "worker-b")
    assert second.attempt == 2
    late = checkpoint(execution_id, node_id="zombie")
    _refused(lambda: client.put_checkpoint(late), first)
    _refused(lambda: client.put_idempotent(execution_id, "zombie-charge", {"charged": 2}), first)
    zombie_pause = interrupted(execution_id, node_id="zombie-pause")
    _refused(lambda: client.record_interrupt(*zombie_pause), first)
    with pytest.raises(NotFoundError):
        client.get_checkpoint(execution_id, late.checkpoint_id)
    with pytest.raises(NotFoundError):
        client.get_checkpoint(execution_id, zombie_pause[0].checkpoint_id)
    assert client.get_idempotent(execution_id, "zombie-charge").found is False
    assert [c.node_id for c in client.list_checkpoints(execution_id).checkpoints] == [
        "node",
        "before-takeover",
        "after-expiry",
    ]

    with writes_under(second):
        client.put_checkpoint(checkpoint(execution_id, node_id="new-holder"))
    client.report_resume(execution_id, pause[1], lease_token="worker-b")
    _refused(lambda: client.put_checkpoint(checkpoint(execution_id, node_id="late")), second)


def test_k4_a_fence_whose_attempt_or_pause_does_not_match_is_refused(
    client: CheckpointdClient, execution_id: str
) -> None:
    """A fence is the lease as taken: the holder's token with another attempt, a pause
    without a decision, or an undecided pause are all WRITE_FENCED."""
    pause = (execution_id, _pause(client, execution_id), "")
    held = _lease(client, pause, "worker-a")
    stale = LeaseFence(execution_id, pause[1], "worker-a", attempt=held.attempt + 1)
    _refused(lambda: client.put_checkpoint(checkpoint(execution_id)), stale)
    nowhere = LeaseFence(execution_id, "no-such-pause", "worker-a", attempt=1)
    _refused(lambda: client.put_checkpoint(checkpoint(execution_id)), nowhere)
    other = f"{execution_id}-undecided"
    cp, pending = interrupted(other)
    undecided = client.record_interrupt(cp, pending).pending.checkpoint_id
    _refused(
        lambda: client.put_checkpoint(checkpoint(other)),
        LeaseFence(other, undecided, "worker-a", attempt=1),
    )
    assert [c.node_id for c in client.list_checkpoints(execution_id).checkpoints] == ["node"]


@pytest.mark.parametrize(
    ("fence", "field"),
    [
        (LeaseFence("", "cp", "token", 1), "fence.execution_id"),
        (LeaseFence("run", "", "token", 1), "fence.checkpoint_id"),
        (LeaseFence("run", "cp", "", 1), "fence.lease_token"),
        (LeaseFence("run", "cp", "token", 0), "fence.attempt"),
        (LeaseFence("run", "cp", "t" * 129, 1), "fence.lease_token"),
        (LeaseFence("run", "cp", "token", 1, interrupt_id="i\x01"), "fence.interrupt_id"),
    ],
)
def test_k4_a_malformed_fence_is_invalid_and_writes_nothing(
    client: CheckpointdClient, execution_id: str, fence: LeaseFence, field: str
) -> None:
    written = checkpoint(execution_id)
    with writes_under(fence), pytest.raises(InvalidArgumentError) as err:
        client.put_checkpoint(written)
    assert err.value.reason == "INVALID_FIELD"
    assert err.value.metadata["field"] == field
    with pytest.raises(NotFoundError):
        client.get_checkpoint(execution_id, written.checkpoint_id)


@pytest.fixture
def saver(sidecar: SharedSidecar, write_path: str) -> Iterator[CheckpointdSaver]:
    with CheckpointdSaver(
        sidecar.target,
        namespace=sidecar.namespace,
        retry=NO_RETRY,
        write_stream=write_path == "stream",
    ) as s:
        yield s


def test_k4_graph_writes_under_a_lease_taken_over_are_refused(
    client: CheckpointdClient, saver: CheckpointdSaver
) -> None:
    """A graph pause's lease fences the saver's writes: its put and put_writes land under the
    holder's lease and are WRITE_FENCED, writing nothing, once another worker took it over."""
    thread_id = f"thread-{uuid.uuid4().hex[:10]}"
    root: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    paused = saver.put(root, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    raised = Interrupt(value={"reason": "approval"}, id=uuid.uuid4().hex)
    interrupt_id = raised.id
    saver.put_writes(paused, [("__interrupt__", [raised])], task_id="task-1")
    [row] = [
        p
        for p in client.list_pending_interrupts().pending_interrupts
        if p.execution_id == thread_id
    ]
    client.submit_decision(thread_id, approved=True, decided_by="bot", interrupt_id=interrupt_id)
    pause = (thread_id, row.checkpoint_id, interrupt_id)
    first = _lease(client, pause, "worker-a")
    with writes_under(first):
        resumed = saver.put(paused, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        saver.put_writes(resumed, [("log", "under-a")], task_id="task-2")

    _take_over(client, pause, "worker-b")
    zombie = empty_checkpoint()
    _refused(lambda: saver.put(resumed, zombie, {"source": "loop", "step": 2}, {}), first)
    _refused(lambda: saver.put_writes(resumed, [("log", "zombie")], task_id="task-3"), first)
    assert (
        saver.get_tuple(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": zombie["id"],
                }
            }
        )
        is None
    )
    newest = saver.get_tuple(root)
    assert newest is not None
    assert (
        newest.config["configurable"]["checkpoint_id"] == resumed["configurable"]["checkpoint_id"]
    )
    assert [w[1:] for w in newest.pending_writes or []] == [("log", "under-a")]
