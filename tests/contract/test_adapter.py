"""Contract P2 (and C2, C4, C6, C7, D1, I3 as the adapter sees them): the fastaiagent adapter
``SidecarCheckpointer`` against a real server, on both backends.

Everything here goes through fastaiagent's own models and the ``Checkpointer`` protocol, the
way ``Chain``, ``Agent``, ``Swarm`` and ``Supervisor`` call it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
from fastaiagent.checkpointers import Checkpointer
from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.contract.conftest import NO_RETRY
from tests.support.sidecar import Sidecar

#: A state with what JSON round trips tend to break (J1): big ints, floats, unicode, nesting.
STATE = {"n": 2**70, "f": 0.1, "text": "héllo ✓", "nested": {"a": [1, {"b": None}]}, "e": {}}


@pytest.fixture
def checkpointer(sidecar: Sidecar) -> Iterator[SidecarCheckpointer]:
    """An adapter on the server's Unix socket; no retries, so statuses show as they are."""
    with SidecarCheckpointer(
        sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
    ) as adapter:
        yield adapter


def fast_checkpoint(execution_id: str, **fields) -> FastCheckpoint:
    """A fastaiagent checkpoint as a chain writes it: no id, no created_at unless given."""
    fields.setdefault("chain_name", "flow")
    fields.setdefault("node_id", "node")
    return FastCheckpoint(execution_id=execution_id, **fields)


def fast_interrupt(execution_id: str, **fields) -> tuple[FastCheckpoint, FastPendingInterrupt]:
    """An interrupted fastaiagent checkpoint and its pending row, as ``interrupt()`` builds."""
    cp = fast_checkpoint(
        execution_id,
        status="interrupted",
        interrupt_reason="manager_approval",
        interrupt_context={"amount": 500},
        **fields,
    )
    pending = FastPendingInterrupt(
        execution_id=execution_id,
        chain_name=cp.chain_name,
        node_id=cp.node_id,
        reason="manager_approval",
        context={"amount": 500},
        agent_path=cp.agent_path,
    )
    return cp, pending


def _utc_iso(value: str) -> datetime:
    """Parse an ISO-8601 created_at and check it is an aware UTC time."""
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def test_p2_adapter_is_a_fastaiagent_checkpointer(checkpointer):
    """The adapter satisfies fastaiagent's Checkpointer protocol, and every protocol method
    works on a live server through the protocol's type (isinstance only checks names)."""
    assert isinstance(checkpointer, Checkpointer)
    protocol: Checkpointer = checkpointer
    exec_id = f"exec-{uuid.uuid4().hex[:12]}"
    protocol.setup()
    first = fast_checkpoint(exec_id, node_index=0)
    protocol.put(first)
    protocol.put_writes(exec_id, first.checkpoint_id, [])
    assert protocol.get_last(exec_id) == first
    assert protocol.get_by_id(exec_id, first.checkpoint_id) == first
    assert protocol.list(exec_id, limit=5) == [first]
    cp, pending = fast_interrupt(exec_id)
    protocol.record_interrupt(cp, pending)
    assert [p.execution_id for p in protocol.list_pending_interrupts(limit=5)] == [exec_id]
    assert protocol.delete_pending_interrupt_atomic(exec_id) == pending
    assert protocol.delete_pending_interrupt_atomic(exec_id) is None
    protocol.put_idempotent(exec_id, "fn", {"r": 1})
    assert protocol.get_idempotent(exec_id, "fn") == {"r": 1}
    assert protocol.prune(timedelta(days=3650)) == 0
    protocol.delete_execution(exec_id)
    assert protocol.get_last(exec_id) is None
    assert protocol.get_idempotent(exec_id, "fn") is None


def test_p2_put_fills_checkpoint_id_and_created_at_and_reads_return_fastaiagent_models(
    checkpointer, execution_id
):
    """put fills checkpoint_id and created_at (ISO) on the object; get_last/get_by_id return
    fastaiagent's own Checkpoint, equal to the one put."""
    cp = fast_checkpoint(execution_id, state_snapshot=STATE, node_output={"x": [1.5, -2]})
    before = datetime.now(tz=UTC)
    assert checkpointer.put(cp) is None
    assert uuid.UUID(cp.checkpoint_id)
    assert isinstance(cp.created_at, str)
    assert before - timedelta(minutes=5) < _utc_iso(cp.created_at) < before + timedelta(minutes=5)

    last = checkpointer.get_last(execution_id)
    by_id = checkpointer.get_by_id(execution_id, cp.checkpoint_id)
    assert type(last) is FastCheckpoint
    assert type(by_id) is FastCheckpoint
    assert last == cp
    assert by_id == cp
    assert by_id.state_snapshot["n"] == 2**70


def test_p2_put_keeps_the_callers_id_and_backdated_created_at(checkpointer, execution_id):
    """A caller's checkpoint_id is kept and its created_at (J4) is written back in UTC."""
    cp = fast_checkpoint(
        execution_id, checkpoint_id="mine-1", created_at="2020-01-01T02:00:00.000123+02:00"
    )
    checkpointer.put(cp)
    assert cp.checkpoint_id == "mine-1"
    assert cp.created_at == "2020-01-01T00:00:00.000123+00:00"
    assert checkpointer.get_by_id(execution_id, "mine-1") == cp


def test_p2_misses_return_none(checkpointer, execution_id):
    """get_last, get_by_id, delete_pending_interrupt_atomic and get_idempotent return None on
    a miss, as the reference does; list returns []."""
    assert checkpointer.get_last(execution_id) is None
    assert checkpointer.get_by_id(execution_id, "nope") is None
    assert checkpointer.delete_pending_interrupt_atomic(execution_id) is None
    assert checkpointer.get_idempotent(execution_id, "fn") is None
    assert checkpointer.list(execution_id) == []
    checkpointer.put(fast_checkpoint(execution_id))
    assert checkpointer.get_by_id(execution_id, "nope") is None  # the run exists, the id not
    assert checkpointer.delete_pending_interrupt_atomic(execution_id) is None


def test_c2_duplicate_put_raises_an_integrity_error_and_changes_nothing(checkpointer, execution_id):
    """A second put of a stored checkpoint_id raises an exception with a class named
    IntegrityError in its MRO, and the stored row stays as it was."""
    cp = fast_checkpoint(execution_id, state_snapshot={"v": 1})
    checkpointer.put(cp)
    original = cp.model_copy()
    rewrite = cp.model_copy(update={"state_snapshot": {"v": 2}, "created_at": ""})
    with pytest.raises(Exception) as err:  # noqa: PT011 - the class name is what is checked
        checkpointer.put(rewrite)
    assert "IntegrityError" in [k.__name__ for k in type(err.value).__mro__]
    assert checkpointer.get_by_id(execution_id, cp.checkpoint_id) == original
    assert checkpointer.list(execution_id) == [original]


def test_p2_record_interrupt_fills_both_objects_and_lists_fastaiagent_pending(
    checkpointer, execution_id
):
    """record_interrupt fills checkpoint_id/created_at on the checkpoint and created_at on the
    pending row; list_pending_interrupts returns fastaiagent's PendingInterrupt."""
    cp, pending = fast_interrupt(execution_id, agent_path="swarm:s/agent:a")
    assert checkpointer.record_interrupt(cp, pending) is None
    assert uuid.UUID(cp.checkpoint_id)
    _utc_iso(cp.created_at)
    assert pending.created_at == cp.created_at

    assert checkpointer.get_last(execution_id) == cp
    listed = checkpointer.list_pending_interrupts()
    assert listed == [pending]
    assert type(listed[0]) is FastPendingInterrupt


def test_i3_delete_pending_interrupt_atomic_claims_once_then_none(checkpointer, execution_id):
    """The first claim returns the pending row (a fastaiagent PendingInterrupt); the next
    returns None and the row is no longer listed."""
    cp, pending = fast_interrupt(execution_id)
    checkpointer.record_interrupt(cp, pending)
    claimed = checkpointer.delete_pending_interrupt_atomic(execution_id)
    assert type(claimed) is FastPendingInterrupt
    assert claimed == pending
    assert checkpointer.delete_pending_interrupt_atomic(execution_id) is None
    assert checkpointer.list_pending_interrupts() == []
    assert checkpointer.get_last(execution_id) == cp  # the checkpoint stays


def test_i3_one_of_16_threads_claiming_through_one_adapter_wins(checkpointer, execution_id):
    """16 threads released together on one adapter: exactly one gets the row, 15 get None."""
    cp, pending = fast_interrupt(execution_id)
    checkpointer.record_interrupt(cp, pending)
    barrier = threading.Barrier(16, timeout=30)
    results: list[object] = []
    lock = threading.Lock()

    def claim() -> None:
        barrier.wait()
        try:
            outcome: object = checkpointer.delete_pending_interrupt_atomic(execution_id)
        except Exception as exc:  # any exception is a defect to report, not a crash
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 16
    assert [r for r in results if r is not None] == [pending]


def test_c4_list_returns_the_newest_n_rows_oldest_first_in_write_order(checkpointer, execution_id):
    """list(limit=N) returns the newest N rows, oldest first, in write order.

    Deliberately not the reference's order: its SQLite backend sorts by node_index and cuts
    the first N, which drops the newest rows of a long run and misorders a Swarm resumed
    twice. fastaiagent callers scan reversed(list(...)) for the most recent state, so they
    need the newest rows, in the order they were written. Here node_index and created_at run
    backwards, so neither can pass for the write order.
    """
    old = datetime(2024, 1, 1, tzinfo=UTC)
    written = []
    for i in range(6):
        cp = fast_checkpoint(
            execution_id,
            node_id=f"n{i}",
            node_index=10 - i,
            created_at=(old - timedelta(hours=i)).isoformat(),
        )
        checkpointer.put(cp)
        written.append(cp)
    assert checkpointer.list(execution_id, limit=3) == written[3:]
    assert checkpointer.list(execution_id, limit=6) == written
    assert checkpointer.list(execution_id, limit=100) == written
    assert checkpointer.list(execution_id) == written  # the protocol's default limit, 100


def test_c4_list_with_a_limit_above_1000_reads_past_one_page(checkpointer, execution_id):
    """With 1100 rows, limits above the server's 1000-row page still return the newest N rows
    oldest first, and a limit above the history returns all of it."""
    ids = []
    for i in range(1100):
        cp = fast_checkpoint(execution_id, node_id=f"n{i}", node_index=1100 - i)
        checkpointer.put(cp)
        ids.append(cp.checkpoint_id)
    assert [c.checkpoint_id for c in checkpointer.list(execution_id, limit=1050)] == ids[50:]
    assert [c.checkpoint_id for c in checkpointer.list(execution_id, limit=1001)] == ids[99:]
    assert [c.checkpoint_id for c in checkpointer.list(execution_id, limit=5000)] == ids
    assert [c.checkpoint_id for c in checkpointer.list(execution_id, limit=2)] == ids[-2:]


def test_c4_list_with_limit_zero_is_empty(checkpointer, execution_id):
    """limit=0 returns [] even when the run has rows; a negative limit is a ValueError."""
    checkpointer.put(fast_checkpoint(execution_id))
    assert checkpointer.list(execution_id, limit=0) == []
    assert checkpointer.list_pending_interrupts(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        checkpointer.list(execution_id, limit=-1)


def test_c7_prune_returns_the_total_count_as_an_int(checkpointer):
    """prune returns one int, checkpoints plus idempotency rows, and keeps interrupted rows."""
    old = (datetime.now(tz=UTC) - timedelta(days=30)).isoformat()
    checkpointer.put(fast_checkpoint("done", status="completed", created_at=old))
    checkpointer.put(fast_checkpoint("done", status="failed", created_at=old))
    checkpointer.put(fast_checkpoint("done", node_id="recent"))
    paused, pending = fast_interrupt("paused", created_at=old)
    checkpointer.record_interrupt(paused, pending)

    pruned = checkpointer.prune(timedelta(days=7))
    assert type(pruned) is int
    assert pruned == 2
    assert [c.node_id for c in checkpointer.list("done")] == ["recent"]
    assert checkpointer.get_last("paused") == paused
    assert checkpointer.list_pending_interrupts() == [pending]

    checkpointer.put_idempotent("done", "fn", {"ok": True})
    assert checkpointer.prune(timedelta(seconds=0)) == 2  # "recent" and the cached result
    assert checkpointer.get_idempotent("done", "fn") is None


def test_c6_delete_execution_removes_the_run_and_only_it(checkpointer, execution_id):
    """delete_execution removes the run's checkpoints, pending interrupt and cached results."""
    checkpointer.put(fast_checkpoint(execution_id))
    cp, pending = fast_interrupt(execution_id)
    checkpointer.record_interrupt(cp, pending)
    checkpointer.put_idempotent(execution_id, "fn", [1, 2])
    bystander = fast_checkpoint(f"{execution_id}-other")
    checkpointer.put(bystander)

    assert checkpointer.delete_execution(execution_id) is None

    assert checkpointer.get_last(execution_id) is None
    assert checkpointer.list(execution_id) == []
    assert checkpointer.list_pending_interrupts() == []
    assert checkpointer.get_idempotent(execution_id, "fn") is None
    assert checkpointer.get_last(bystander.execution_id) == bystander
    checkpointer.delete_execution(execution_id)  # deleting nothing is no error


def test_d1_idempotent_results_round_trip_and_replace(checkpointer, execution_id):
    """put_idempotent caches any JSON value exactly; a second put replaces it."""
    checkpointer.put_idempotent(execution_id, "fn", STATE)
    assert checkpointer.get_idempotent(execution_id, "fn") == STATE
    checkpointer.put_idempotent(execution_id, "fn", [1, "two"])
    assert checkpointer.get_idempotent(execution_id, "fn") == [1, "two"]
    assert checkpointer.get_idempotent(execution_id, "other") is None


def test_p2_sixteen_threads_share_one_adapter(checkpointer, execution_id):
    """16 threads put and get_last through one adapter at once: every thread reads back its
    own latest row, and the shared run holds every row, each thread's in its order."""
    threads_n, puts_n = 16, 15
    barrier = threading.Barrier(threads_n, timeout=30)
    errors: list[BaseException] = []
    written: dict[int, list[str]] = {}

    def work(t: int) -> None:
        try:
            barrier.wait()
            own = f"{execution_id}-t{t}"
            mine = []
            for i in range(puts_n):
                cp = fast_checkpoint(own, node_id=f"t{t}-{i}")
                checkpointer.put(cp)
                assert checkpointer.get_last(own) == cp
                shared = fast_checkpoint(execution_id, node_id=f"t{t}-{i}")
                checkpointer.put(shared)
                mine.append(shared.checkpoint_id)
            written[t] = mine
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    rows = checkpointer.list(execution_id, limit=1000)
    assert len(rows) == threads_n * puts_n
    assert len({c.checkpoint_id for c in rows}) == threads_n * puts_n
    for n, mine in written.items():
        assert [c.checkpoint_id for c in rows if c.node_id.startswith(f"t{n}-")] == mine


async def test_p2_blocking_methods_work_inside_a_running_event_loop(checkpointer, execution_id):
    """fastaiagent calls the checkpointer synchronously from async def code: every method
    works with an event loop running in the calling thread."""
    cp = fast_checkpoint(execution_id, node_id="a")
    checkpointer.put(cp)
    assert checkpointer.get_last(execution_id) == cp
    assert checkpointer.get_by_id(execution_id, cp.checkpoint_id) == cp
    paused, pending = fast_interrupt(execution_id)
    checkpointer.record_interrupt(paused, pending)
    assert checkpointer.list(execution_id) == [cp, paused]
    assert checkpointer.list_pending_interrupts() == [pending]
    assert checkpointer.delete_pending_interrupt_atomic(execution_id) == pending
    checkpointer.put_idempotent(execution_id, "fn", 1)
    assert checkpointer.get_idempotent(execution_id, "fn") == 1
    assert checkpointer.prune(timedelta(days=1)) == 0
    checkpointer.delete_execution(execution_id)
    assert checkpointer.get_last(execution_id) is None


def test_p2_setup_and_put_writes_are_no_ops(checkpointer, execution_id):
    """setup (twice) and put_writes return None and write nothing, like the reference."""
    assert checkpointer.setup() is None
    assert checkpointer.setup() is None
    assert checkpointer.put_writes(execution_id, "cp", [{"k": "v"}]) is None
    assert checkpointer.list(execution_id) == []


def test_p2_close_releases_the_channel_and_the_next_call_reopens(sidecar, execution_id):
    """close() releases the channel (a client taken before it stays closed; twice is fine),
    and the next call opens a new one, as the reference reconnects after close: fastaiagent's
    own supervisor crash test closes a store and keeps listing through it."""
    adapter = SidecarCheckpointer(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY)
    cp = fast_checkpoint(execution_id)
    adapter.put(cp)
    before = adapter.client
    adapter.close()
    adapter.close()
    with pytest.raises(RuntimeError, match="closed"):
        before.get_latest_checkpoint(execution_id)
    assert adapter.get_last(execution_id) == cp
    assert adapter.client is not before
    adapter.put(fast_checkpoint(execution_id, node_index=1))
    assert [c.node_index for c in adapter.list(execution_id)] == [0, 1]
    adapter.close()

    with SidecarCheckpointer(
        sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
    ) as managed:
        assert managed.get_last(execution_id) is not None
    assert managed.get_last(execution_id) is not None  # reopened after the context closed it
    managed.close()


# --- Supervisor (P2) ---------------------------------------------------------------------------


def _supervisor_run(checkpointer: Checkpointer, execution_id: str) -> dict[str, object]:
    """A fastaiagent Supervisor whose worker pauses in a tool for a human, then is resumed by
    a freshly built Supervisor (as another process would); returns what each step showed.

    The models are scripted from the conversation alone (which tool calls have results), so a
    rebuilt model continues where the saved history says it was.
    """
    import asyncio

    from fastaiagent import Agent, FunctionTool, Resume, idempotent, interrupt
    from fastaiagent.agent.team import Supervisor, Worker
    from fastaiagent.llm.message import MessageRole
    from fastaiagent.testing import FunctionModel

    side_effects: list[str] = []

    def scripted(call_id: str, tool: str, args: dict[str, object], final: str) -> FunctionModel:
        def respond(messages):
            results = {m.tool_call_id: m.content for m in messages if m.role == MessageRole.tool}
            if call_id not in results:
                return "", [{"id": call_id, "name": tool, "arguments": args}]
            return final.format(result=results[call_id])

        return FunctionModel(respond, model=f"scripted-{tool}")

    @idempotent
    def reserve(order_id: str) -> dict[str, str]:
        side_effects.append(f"reserve {order_id}")
        return {"reservation": f"rsv-{order_id}"}

    def refund(order_id: str) -> str:
        """Refund an order once a human approves."""
        reservation = reserve(order_id)
        decision = interrupt("refund_approval", {"order_id": order_id})
        return f"{'refunded' if decision.approved else 'denied'} {reservation['reservation']}"

    def build() -> Supervisor:
        worker = Agent(
            name="refunds",
            system_prompt="You refund orders.",
            llm=scripted("call_refund", "refund", {"order_id": "A-1"}, "worker: {result}"),
            tools=[FunctionTool(name="refund", fn=refund)],
        )
        return Supervisor(
            name="desk",
            llm=scripted(
                "call_delegate", "delegate_to_refunds", {"task": "refund A-1"}, "done: {result}"
            ),
            workers=[Worker(agent=worker, role="refunds", description="Refunds orders")],
            checkpointer=checkpointer,
        )

    async def scenario() -> dict[str, object]:
        first = await build().arun("Refund order A-1", execution_id=execution_id)
        pending = checkpointer.list_pending_interrupts(limit=10)
        paused_rows = [(cp.agent_path, cp.status) for cp in checkpointer.list(execution_id)]
        resumed = await build().aresume(execution_id, resume_value=Resume(approved=True))
        return {
            "first": (first.status, (first.pending_interrupt or {}).get("reason")),
            "pending": [(p.execution_id, p.reason, p.agent_path) for p in pending],
            "paused_rows": paused_rows,
            "resumed": (resumed.status, resumed.output),
            "pending_after": checkpointer.list_pending_interrupts(limit=10),
            "side_effects": side_effects,
            "last": (
                checkpointer.get_last(execution_id)
                or FastCheckpoint(execution_id="", chain_name="", node_id="")
            ).status,
        }

    return asyncio.run(scenario())


def test_p2_supervisor_pauses_in_a_worker_and_resumes_through_the_adapter_like_the_reference(
    checkpointer, execution_id, tmp_path, monkeypatch
):
    """fastaiagent's Supervisor runs on the adapter as on its own SQLiteCheckpointer: the
    worker's interrupt pauses the run with a pending row under the worker's nested
    agent_path, a freshly built Supervisor resumes it to completion, the @idempotent side
    effect fires once, and the rows written match the reference's, in order."""
    from fastaiagent.checkpointers import SQLiteCheckpointer

    monkeypatch.chdir(tmp_path)  # fastaiagent keeps a local folder in the working directory
    ours = _supervisor_run(checkpointer, execution_id)
    reference = SQLiteCheckpointer(str(tmp_path / "reference.db"))
    reference.setup()
    theirs = _supervisor_run(reference, execution_id)

    assert ours["first"] == ("paused", "refund_approval")
    worker_tool = "supervisor:desk/worker:refunds/tool:refund"
    assert ours["pending"] == [(execution_id, "refund_approval", worker_tool)]
    assert ours["resumed"] == ("completed", "done: worker: refunded rsv-A-1")
    assert ours["pending_after"] == []
    assert ours["side_effects"] == ["reserve A-1"]
    assert ours == theirs


def test_p2_close_and_reopen_many_times_leaves_no_threads_behind(sidecar, execution_id):
    """Each close releases what its channel started: fifty close/reopen cycles end with no
    more threads than one open adapter had."""
    adapter = SidecarCheckpointer(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY)
    adapter.put(fast_checkpoint(execution_id))
    adapter.close()
    adapter.get_last(execution_id)
    baseline = threading.active_count()
    for _ in range(50):
        adapter.close()
        assert adapter.get_last(execution_id) is not None
    assert threading.active_count() <= baseline
    adapter.close()


def test_p2_close_while_other_threads_call_never_fails_them(sidecar, execution_id):
    """Calls racing a close either finish on the old channel or reopen: with one thread
    closing in a loop, readers on others see every call succeed or see only the closed
    error of a call already in flight on the old channel, never a wrong answer."""
    adapter = SidecarCheckpointer(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY)
    cp = fast_checkpoint(execution_id)
    adapter.put(cp)
    results: list[object] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                results.append(adapter.get_last(execution_id))
            except Exception as exc:  # recorded and checked below
                results.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(20):
        adapter.close()
    stop.set()
    for t in threads:
        t.join()
    adapter.close()
    assert results
    for result in results:
        assert result == cp or "closed" in str(result) or "CANCELLED" in str(result), result


# --- P5: fastaiagent's optional replication protocols ---------------------------------------


def test_p5_adapter_is_a_replicated_and_quarantinable_checkpointer(checkpointer):
    """isinstance holds for both optional protocols, and each method's signature is
    fastaiagent's own (names, kinds, defaults and annotations)."""
    import inspect

    from fastaiagent.checkpointers.protocol import (
        QuarantinableCheckpointer,
        ReplicatedCheckpointer,
    )

    assert isinstance(checkpointer, ReplicatedCheckpointer)
    assert isinstance(checkpointer, QuarantinableCheckpointer)
    for protocol, name in (
        (ReplicatedCheckpointer, "fetch_unsynced"),
        (ReplicatedCheckpointer, "mark_synced"),
        (QuarantinableCheckpointer, "mark_quarantined"),
    ):
        ours = inspect.signature(getattr(SidecarCheckpointer, name))
        theirs = inspect.signature(getattr(protocol, name))
        assert ours == theirs, name


def test_p5_fetch_unsynced_rows_map_to_the_same_wire_rows_as_the_reference(checkpointer, tmp_path):
    """The same checkpoints, written through the adapter and through fastaiagent's
    SQLiteCheckpointer, come out of fetch_unsynced with the same keys and map onto the same
    ingest wire rows (the store's sequence aside), oldest first."""
    from fastaiagent.checkpointers import SQLiteCheckpointer, platform_replica

    reference = SQLiteCheckpointer(db_path=str(tmp_path / "ref.db"))
    reference.setup()
    platform_replica._REGISTRY.discard(reference)
    written = []
    for i, status in enumerate(("completed", "interrupted", "failed")):
        cp = fast_checkpoint(
            "run",
            checkpoint_id=f"cp-{i}-{uuid.uuid4().hex[:8]}",
            node_index=i,
            status=status,
            step_type="node",
            state_snapshot=STATE,
            node_output={"i": i},
            agent_path="agent:a",
            created_at=datetime(2026, 1, 1, 0, 0, i, 500, tzinfo=UTC).isoformat(),
        )
        written.append(cp)
        checkpointer.put(cp.model_copy())
        reference.put(cp.model_copy())
    try:
        from fastaiagent._internal.project import safe_get_project_id

        pid = safe_get_project_id()  # what fastaiagent's drain passes
        ours = checkpointer.fetch_unsynced(10, pid)
        theirs = reference.fetch_unsynced(10, pid)
        assert [r["checkpoint_id"] for r in ours] == [c.checkpoint_id for c in written]
        assert set(ours[0]) == set(theirs[0])

        def wire(row):
            mapped = platform_replica._to_wire(row)
            mapped.pop("sequence", None)
            return mapped

        assert [wire(r) for r in ours] == [wire(r) for r in theirs]
        assert checkpointer.fetch_unsynced(2, pid) == ours[:2]
        assert checkpointer.fetch_unsynced(0) == []
    finally:
        reference.close()


def test_p5_mark_synced_and_mark_quarantined_drain_the_outbox_idempotently(checkpointer):
    """mark_synced and mark_quarantined take rows out of fetch_unsynced; repeating them, or
    naming unknown ids, is harmless; an empty call is a no-op."""
    ids = []
    for i in range(4):
        cp = fast_checkpoint("run", node_index=i)
        checkpointer.put(cp)
        ids.append(cp.checkpoint_id)
    checkpointer.mark_synced([])
    checkpointer.mark_quarantined({})
    checkpointer.mark_synced([ids[0], "unknown"])
    checkpointer.mark_synced([ids[0]])
    checkpointer.mark_quarantined({ids[1]: "HTTP 422: too large", "unknown": "x"})
    checkpointer.mark_quarantined({ids[2]: ""})  # recorded as "no reason given"
    assert [r["checkpoint_id"] for r in checkpointer.fetch_unsynced(10)] == [ids[3]]
    # 2500 ids go in several calls under the server's per-call limit.
    checkpointer.mark_synced([ids[3]] + [f"other-{i}" for i in range(2500)])
    assert checkpointer.fetch_unsynced(10) == []
