"""Direct tests of SQLiteStore (no gRPC): contract rules C*, I*, D1, J1, J4, N1, E1."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    CheckpointStatus,
    PendingFilter,
    PendingRecord,
    RecordInterruptResult,
)
from checkpointd.store.base import CheckpointExists, Store, StoreError, StoreUnavailable
from checkpointd.store.sqlite import SQLiteStore
from checkpointd.store.sqlite import errors as sqlite_errors
from checkpointd.store.sqlite import sql as sqlite_sql
from checkpointd.store.sqlite import store as sqlite_module
from tests.support.protocols import signature_mismatches

NS = "default"
T0 = datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)


def ckpt(
    execution_id: str = "exec-1",
    checkpoint_id: str | None = None,
    *,
    status: CheckpointStatus = CheckpointStatus.COMPLETED,
    step_type: str | None = "node",
    created_at: datetime = T0,
    **overrides: Any,
) -> CheckpointRecord:
    record = CheckpointRecord(
        execution_id=execution_id,
        checkpoint_id=checkpoint_id or uuid.uuid4().hex,
        parent_checkpoint_id=None,
        chain_name="chain",
        node_id="node",
        node_index=0,
        step_type=step_type,
        status=status,
        state_snapshot_json="{}",
        node_input_json="{}",
        node_output_json="{}",
        iteration=0,
        iteration_counters_json="{}",
        interrupt_reason=None,
        interrupt_context_json="{}",
        agent_path=None,
        created_at=created_at,
    )
    return dataclasses.replace(record, **overrides)


def pending(execution_id: str = "exec-1", **overrides: Any) -> PendingRecord:
    record = PendingRecord(
        execution_id=execution_id,
        chain_name="chain",
        node_id="approve",
        reason="needs approval",
        context_json='{"amount": 5}',
        agent_path="root/agent",
        created_at=T0,
        checkpoint_id="",
    )
    return dataclasses.replace(record, **overrides)


async def interrupt(
    store: SQLiteStore,
    execution_id: str = "exec-1",
    *,
    namespace: str = NS,
    created_at: datetime = T0,
    **pending_overrides: Any,
) -> RecordInterruptResult:
    checkpoint = ckpt(
        execution_id,
        status=CheckpointStatus.INTERRUPTED,
        created_at=created_at,
        interrupt_reason="needs approval",
    )
    return await store.record_interrupt(
        namespace,
        uuid.uuid4().hex,
        checkpoint,
        pending(execution_id, created_at=created_at, **pending_overrides),
    )


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection on the store's file, for looking behind the store."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def events(path: Path) -> list[tuple[str, str, str, str]]:
    """(namespace, kind, execution_id, checkpoint_id) of every outbox row, in cursor order."""
    with raw(path) as conn:
        return conn.execute(
            "SELECT namespace, kind, execution_id, checkpoint_id FROM interrupt_events "
            "ORDER BY cursor"
        ).fetchall()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(db_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# --- data: J1, J4 ----------------------------------------------------------------------------


async def test_store_protocol_is_satisfied(store: SQLiteStore) -> None:
    """SQLiteStore implements every Store method with the protocol's signature, and an open
    store answers through the protocol's type (not only by method names, as isinstance does)."""
    assert signature_mismatches(SQLiteStore, Store) == []
    as_protocol: Store = store
    await as_protocol.ping()
    written = await as_protocol.put_checkpoint("default", "req-1", ckpt("exec-p", "cp-p"))
    assert await as_protocol.get_checkpoint("default", "exec-p", "cp-p") == written
    assert as_protocol.event_notifier() is not None


async def test_j1_round_trip_preserves_every_field(store: SQLiteStore) -> None:
    """Every field comes back exactly, big integers, floats and unicode in JSON included."""
    big = 2**70
    state = json.dumps({"n": big, "f": 0.1, "neg": -(2**65), "u": "héllo ✓ 日本 🚀", "e": {}})
    original = ckpt(
        "exec-ü",
        "cp-日本",
        parent_checkpoint_id="cp-parent",
        chain_name="chain ✓",
        node_id="node-🚀",
        node_index=7,
        step_type="agent",
        status=CheckpointStatus.FAILED,
        state_snapshot_json=state,
        node_input_json='{"list": [1, 2.5, null, true, "x"], "nested": {"a": {"b": []}}}',
        node_output_json=f'{{"big": {big}}}',
        iteration=2**40,
        iteration_counters_json='{"loop": 3}',
        interrupt_reason="why ✓",
        interrupt_context_json='{"k": "v"}',
        agent_path="supervisor/worker",
        created_at=datetime(2024, 1, 2, 3, 4, 5, 999999, tzinfo=UTC),
    )
    stored = await store.put_checkpoint(NS, "req-1", original)
    assert stored.sequence > 0
    assert stored == dataclasses.replace(original, sequence=stored.sequence)
    fetched = await store.get_checkpoint(NS, "exec-ü", "cp-日本")
    assert fetched == stored
    assert fetched is not None
    assert json.loads(fetched.state_snapshot_json)["n"] == big
    assert json.loads(fetched.node_output_json) == {"big": big}
    assert fetched.created_at.tzinfo is not None
    assert fetched.created_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "created_at",
    [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 3, 10, 2, 30, 0, 1, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    ],
)
async def test_j4_created_at_is_stored_exactly_in_utc(
    store: SQLiteStore, created_at: datetime
) -> None:
    """created_at keeps its exact instant to the microsecond and comes back in UTC."""
    stored = await store.put_checkpoint(NS, "", ckpt("e", "c", created_at=created_at))
    fetched = await store.get_checkpoint(NS, "e", "c")
    assert fetched is not None
    assert fetched.created_at == created_at
    assert fetched.created_at.utcoffset() == timedelta(0)
    assert fetched.created_at.microsecond == created_at.astimezone(UTC).microsecond
    assert stored.created_at == fetched.created_at
    assert stored.created_at.tzinfo == fetched.created_at.tzinfo


async def test_j4_naive_datetime_is_refused(store: SQLiteStore) -> None:
    """A naive datetime is a programming error, not silently taken as local time."""
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.put_checkpoint(NS, "", ckpt(created_at=datetime(2024, 1, 1)))


# --- checkpoints: C2-C7 -------------------------------------------------------------------


async def test_c2_retry_with_same_request_id_returns_stored_row(store: SQLiteStore) -> None:
    """A retry with the same request id gets the stored row back and writes nothing."""
    first = await store.put_checkpoint(NS, "req-1", ckpt("e", "c", node_input_json='{"a": 1}'))
    retry = await store.put_checkpoint(NS, "req-1", ckpt("e", "c", node_input_json='{"a": 2}'))
    assert retry == first
    rows = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=10)
    assert rows == [first]


@pytest.mark.parametrize(("first_request", "second_request"), [("req-1", "req-2"), ("", "")])
async def test_c2_second_write_with_existing_id_raises_checkpoint_exists(
    store: SQLiteStore, first_request: str, second_request: str
) -> None:
    """A second write of an existing checkpoint id fails and changes nothing."""
    first = await store.put_checkpoint(NS, first_request, ckpt("e", "c", node_input_json="{}"))
    with pytest.raises(CheckpointExists) as info:
        await store.put_checkpoint(NS, second_request, ckpt("e", "c", node_input_json="[1]"))
    assert info.value.checkpoint_id == "c"
    assert await store.get_checkpoint(NS, "e", "c") == first


async def test_n1_same_ids_in_two_namespaces_are_separate(store: SQLiteStore) -> None:
    """The same checkpoint and execution ids in two namespaces are two rows, each invisible
    from the other namespace."""
    a = await store.put_checkpoint("team-a", "r", ckpt("e", "c", node_id="a"))
    b = await store.put_checkpoint("team-b", "r", ckpt("e", "c", node_id="b"))
    assert a.sequence != b.sequence
    assert await store.get_checkpoint("team-a", "e", "c") == a
    assert await store.get_checkpoint("team-b", "e", "c") == b
    assert await store.get_latest_checkpoint("team-c", "e") is None
    await store.put_idempotent("team-a", "", "e", "k", "1", NOW)
    assert await store.get_idempotent("team-b", "e", "k") is None
    await interrupt(store, "e", namespace="team-a")
    assert await store.claim_interrupt("team-b", "e", "tok", NOW) is None
    no_filter = PendingFilter()
    assert (
        await store.list_pending("team-b", before_sequence=None, limit=10, filters=no_filter) == []
    )
    deleted = await store.delete_execution("team-b", "e")
    assert deleted.checkpoints_deleted == 1
    assert await store.get_checkpoint("team-a", "e", "c") == a
    assert await store.claim_interrupt("team-a", "e", "tok", NOW) is not None


async def test_c3_latest_is_by_sequence_not_created_at(store: SQLiteStore) -> None:
    """The latest row is the last written even when its created_at is older (backdated)."""
    await store.put_checkpoint(NS, "", ckpt("e", "new-clock", created_at=T0 + timedelta(days=1)))
    last = await store.put_checkpoint(NS, "", ckpt("e", "backdated", created_at=T0))
    await store.put_checkpoint(NS, "", ckpt("other", "x", created_at=T0 + timedelta(days=9)))
    latest = await store.get_latest_checkpoint(NS, "e")
    assert latest == last


async def test_c3_latest_can_skip_run_end_rows(store: SQLiteStore) -> None:
    """With skip_run_end the newest non-run_end row is returned (step_type NULL included)."""
    step = await store.put_checkpoint(NS, "", ckpt("e", "step", step_type=None))
    end = await store.put_checkpoint(NS, "", ckpt("e", "end", step_type=RUN_END))
    assert await store.get_latest_checkpoint(NS, "e") == end
    assert await store.get_latest_checkpoint(NS, "e", skip_run_end=True) == step


async def test_c3_missing_execution_has_no_latest(store: SQLiteStore) -> None:
    """An unknown execution has no latest checkpoint."""
    assert await store.get_latest_checkpoint(NS, "nope") is None
    assert await store.get_latest_checkpoint(NS, "nope", skip_run_end=True) is None


async def test_c4_list_pages_through_250_rows_in_both_directions(store: SQLiteStore) -> None:
    """Keyset paging by sequence reads every row once, ascending and descending."""
    written = []
    for i in range(250):
        # node_index runs backwards: order must follow the sequence, not node_index.
        written.append(await store.put_checkpoint(NS, "", ckpt("e", f"c{i}", node_index=250 - i)))
        if i % 10 == 0:
            await store.put_checkpoint(NS, "", ckpt("other", f"o{i}"))

    async def read_all(descending: bool) -> list[CheckpointRecord]:
        rows: list[CheckpointRecord] = []
        after: int | None = None
        while True:
            page = await store.list_checkpoints(
                NS, "e", after_sequence=after, descending=descending, limit=100
            )
            rows += page
            if len(page) < 100:
                return rows
            after = page[-1].sequence

    assert await read_all(descending=False) == written
    assert await read_all(descending=True) == written[::-1]
    newest = await store.list_checkpoints(NS, "e", after_sequence=None, descending=True, limit=3)
    assert [r.checkpoint_id for r in newest] == ["c249", "c248", "c247"]


async def test_c4_list_of_unknown_execution_is_empty(store: SQLiteStore) -> None:
    """Listing an unknown execution returns no rows, and a non-positive limit is refused."""
    assert (
        await store.list_checkpoints(NS, "x", after_sequence=None, descending=False, limit=5) == []
    )
    with pytest.raises(ValueError, match="limit"):
        await store.list_checkpoints(NS, "x", after_sequence=None, descending=False, limit=0)


async def test_c5_get_by_id_requires_the_matching_execution(store: SQLiteStore) -> None:
    """A checkpoint id is found only under its own execution."""
    stored = await store.put_checkpoint(NS, "", ckpt("e", "c"))
    assert await store.get_checkpoint(NS, "e", "c") == stored
    assert await store.get_checkpoint(NS, "other", "c") is None
    assert await store.get_checkpoint(NS, "e", "missing") is None


async def test_c6_delete_execution_removes_everything_and_emits_removed(
    store: SQLiteStore, db_path: Path
) -> None:
    """Delete removes checkpoints, pending row and idempotency rows, and writes one
    'removed' event; other executions are untouched."""
    for i in range(3):
        await store.put_checkpoint(NS, "", ckpt("e", f"c{i}"))
    recorded = await interrupt(store, "e")
    await store.put_idempotent(NS, "", "e", "k1", "1", NOW)
    await store.put_idempotent(NS, "", "e", "k2", "2", NOW)
    keep = await store.put_checkpoint(NS, "", ckpt("keep", "k"))
    await store.put_idempotent(NS, "", "keep", "k1", "1", NOW)

    result = await store.delete_execution(NS, "e")

    assert result.checkpoints_deleted == 4
    assert result.pending_interrupt_deleted is True
    assert result.idempotency_results_deleted == 2
    assert await store.get_latest_checkpoint(NS, "e") is None
    assert await store.get_idempotent(NS, "e", "k1") is None
    assert await store.claim_interrupt(NS, "e", "", NOW) is None
    assert await store.get_latest_checkpoint(NS, "keep") == keep
    assert await store.get_idempotent(NS, "keep", "k1") == "1"
    cp_id = recorded.checkpoint.checkpoint_id
    assert events(db_path) == [(NS, "added", "e", cp_id), (NS, "removed", "e", cp_id)]


async def test_c6_delete_without_pending_writes_no_event(store: SQLiteStore, db_path: Path) -> None:
    """Deleting an execution that has no pending interrupt writes no event."""
    await store.put_checkpoint(NS, "", ckpt("e", "c"))
    result = await store.delete_execution(NS, "e")
    assert result.checkpoints_deleted == 1
    assert result.pending_interrupt_deleted is False
    assert result.idempotency_results_deleted == 0
    assert events(db_path) == []
    again = await store.delete_execution(NS, "e")
    assert again.checkpoints_deleted == 0


async def test_c3_sequence_is_never_reused_after_delete(store: SQLiteStore) -> None:
    """Sequences keep rising after the newest rows are deleted (AUTOINCREMENT)."""
    last = await store.put_checkpoint(NS, "", ckpt("e", "c1"))
    await store.delete_execution(NS, "e")
    again = await store.put_checkpoint(NS, "", ckpt("e", "c2"))
    assert again.sequence > last.sequence


async def test_c7_prune_deletes_old_rows_in_batches_and_keeps_protected_ones(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prune deletes old completed/failed checkpoints and idempotency rows in batches; it
    never deletes interrupted checkpoints, pending rows, or idempotency rows of executions
    with a pending interrupt, nor anything newer than the cutoff or in another namespace."""
    old = T0
    cutoff = T0 + timedelta(days=1)
    new = T0 + timedelta(days=2)
    for i in range(20):
        status = CheckpointStatus.COMPLETED if i % 2 else CheckpointStatus.FAILED
        await store.put_checkpoint(
            NS, "", ckpt(f"e{i % 3}", f"old{i}", status=status, created_at=old)
        )
        await store.put_idempotent(NS, "", f"e{i % 3}", f"k{i}", "1", old)
    fresh = await store.put_checkpoint(NS, "", ckpt("e0", "fresh", created_at=new))
    await store.put_idempotent(NS, "", "e0", "fresh", "1", new)
    other_ns = await store.put_checkpoint("other", "", ckpt("e0", "old-other", created_at=old))
    await store.put_idempotent("other", "", "e0", "k", "1", old)
    held = await interrupt(store, "held", created_at=old)
    await store.put_idempotent(NS, "", "held", "side-effect", '"done"', old)
    interrupted_only = await store.put_checkpoint(
        NS, "", ckpt("e1", "int", status=CheckpointStatus.INTERRUPTED, created_at=old)
    )

    transactions = 0
    real_write = SQLiteStore._write

    def counting_write(self: SQLiteStore) -> Any:
        nonlocal transactions
        transactions += 1
        return real_write(self)

    monkeypatch.setattr(SQLiteStore, "_write", counting_write)
    result = await store.prune(NS, cutoff, batch_size=7)
    monkeypatch.undo()

    assert result.checkpoints_deleted == 20
    assert result.idempotency_results_deleted == 20
    # 20 rows in batches of 7: 7 + 7 + 6 for each table.
    assert transactions == 6
    assert await store.get_checkpoint(NS, "e0", "old0") is None
    assert await store.get_checkpoint(NS, "e0", "fresh") == fresh
    assert await store.get_checkpoint("other", "e0", "old-other") == other_ns
    assert await store.get_idempotent("other", "e0", "k") == "1"
    assert await store.get_idempotent(NS, "e0", "fresh") == "1"
    assert await store.get_checkpoint(NS, "e1", "int") == interrupted_only
    assert await store.get_checkpoint(NS, "held", held.checkpoint.checkpoint_id) == held.checkpoint
    assert await store.get_idempotent(NS, "held", "side-effect") == '"done"'
    listed = await store.list_pending(NS, before_sequence=None, limit=10, filters=PendingFilter())
    assert listed == [held.pending]
    again = await store.prune(NS, cutoff, batch_size=7)
    assert (again.checkpoints_deleted, again.idempotency_results_deleted) == (0, 0)


async def test_c7_prune_with_exact_multiple_of_batch(store: SQLiteStore) -> None:
    """Prune stops correctly when the row count is an exact multiple of the batch size."""
    for i in range(10):
        await store.put_checkpoint(NS, "", ckpt("e", f"c{i}"))
    result = await store.prune(NS, T0 + timedelta(seconds=1), batch_size=5)
    assert result.checkpoints_deleted == 10
    with pytest.raises(ValueError, match="batch_size"):
        await store.prune(NS, T0, batch_size=0)


# --- interrupts: I1-I4 --------------------------------------------------------------------


async def test_i1_record_interrupt_writes_checkpoint_pending_and_added_event(
    store: SQLiteStore, db_path: Path
) -> None:
    """Record stores the checkpoint, the pending row (with its sequence) and an 'added' event."""
    result = await interrupt(store, "e")
    assert result.pending_created is True
    assert result.checkpoint.sequence > 0
    assert result.pending.sequence == result.checkpoint.sequence
    assert result.pending.checkpoint_id == result.checkpoint.checkpoint_id
    assert await store.get_latest_checkpoint(NS, "e") == result.checkpoint
    listed = await store.list_pending(NS, before_sequence=None, limit=10, filters=PendingFilter())
    assert listed == [result.pending]
    assert events(db_path) == [(NS, "added", "e", result.checkpoint.checkpoint_id)]


async def test_i1_record_interrupt_with_duplicate_checkpoint_writes_nothing(
    store: SQLiteStore, db_path: Path
) -> None:
    """A record whose checkpoint id exists (other request) writes no pending row, no event."""
    await store.put_checkpoint(NS, "req-1", ckpt("e", "c"))
    checkpoint = ckpt("e", "c", status=CheckpointStatus.INTERRUPTED)
    with pytest.raises(CheckpointExists):
        await store.record_interrupt(NS, "req-2", checkpoint, pending("e"))
    assert (
        await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter()) == []
    )
    assert events(db_path) == []


async def test_i2_record_twice_keeps_first_pending_and_stores_checkpoint(
    store: SQLiteStore, db_path: Path
) -> None:
    """A second record keeps the first pending row, still stores its checkpoint, and says
    no pending row was created."""
    first = await interrupt(store, "e", reason="first")
    second = await interrupt(store, "e", reason="second")
    assert second.pending_created is False
    assert second.pending == first.pending
    assert second.checkpoint.sequence > first.checkpoint.sequence
    assert await store.get_latest_checkpoint(NS, "e") == second.checkpoint
    assert [e[1] for e in events(db_path)] == ["added"]


async def test_i2_record_retry_returns_stored_checkpoint_and_pending(store: SQLiteStore) -> None:
    """A retried record gets the stored checkpoint and the pending row it created, even
    after that row was claimed."""
    checkpoint = ckpt("e", "c", status=CheckpointStatus.INTERRUPTED)
    first = await store.record_interrupt(NS, "req-1", checkpoint, pending("e"))
    retry = await store.record_interrupt(NS, "req-1", checkpoint, pending("e"))
    assert retry == first
    claimed = await store.claim_interrupt(NS, "e", "tok", NOW)
    assert claimed == first.pending
    after_claim = await store.record_interrupt(NS, "req-1", checkpoint, pending("e"))
    assert after_claim == first


async def test_i3_claim_exactly_once_among_32_concurrent_tasks(store: SQLiteStore) -> None:
    """Of 32 concurrent claims exactly one gets the pending row, the others None."""
    for round_ in range(5):
        execution_id = f"e{round_}"
        recorded = await interrupt(store, execution_id)
        results = await asyncio.gather(
            *(store.claim_interrupt(NS, execution_id, f"tok-{i}", NOW) for i in range(32))
        )
        winners = [r for r in results if r is not None]
        assert winners == [recorded.pending]


CLAIM_CHILD = """
import asyncio, json, sys
from datetime import UTC, datetime
from checkpointd.store.sqlite import SQLiteStore

async def main(path, name, tasks):
    store = SQLiteStore(path)
    await store.open()
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, _, execution_id = line.strip().partition(" ")
            if command != "claim":
                break
            now = datetime.now(UTC)
            results = await asyncio.gather(
                *(store.claim_interrupt("default", execution_id, f"{name}-{i}", now)
                  for i in range(tasks)),
                return_exceptions=True,
            )
            out = [
                {"error": repr(r)} if isinstance(r, BaseException)
                else {"won": None if r is None else r.checkpoint_id}
                for r in results
            ]
            print(json.dumps(out), flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_i3_claim_exactly_once_across_processes(store: SQLiteStore, db_path: Path) -> None:
    """Three server processes sharing the file race for each of 20 pending interrupts:
    exactly one claim wins each time, the others get None and none raises."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CLAIM_CHILD,
            str(db_path),
            f"p{n}",
            "4",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for n in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        for round_ in range(20):
            execution_id = f"exec-{round_}"
            recorded = await interrupt(store, execution_id)
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"claim {execution_id}\n".encode())
            outcomes: list[dict[str, Any]] = []
            for child in children:
                assert child.stdout is not None
                outcomes += json.loads(await asyncio.wait_for(child.stdout.readline(), 60))
            assert [o for o in outcomes if "error" in o] == []
            won = [o["won"] for o in outcomes if o["won"] is not None]
            assert won == [recorded.checkpoint.checkpoint_id], f"round {round_}: {outcomes}"
            assert len(outcomes) == 12
    finally:
        for child in children:
            await child.communicate(b"quit\n")
    assert [child.returncode for child in children] == [0, 0, 0]


async def test_i3_claim_retry_with_same_token_returns_same_row(
    store: SQLiteStore, db_path: Path
) -> None:
    """A retried claim with its token gets the same row; another token gets None; one
    'claimed' event is written."""
    recorded = await interrupt(store, "e")
    later = NOW + timedelta(minutes=1)
    first = await store.claim_interrupt(NS, "e", "tok-1", NOW)
    assert first == recorded.pending
    assert await store.claim_interrupt(NS, "e", "tok-1", later) == first
    assert await store.claim_interrupt(NS, "e", "tok-2", later) is None
    assert [e[1] for e in events(db_path)] == ["added", "claimed"]


async def test_i3_concurrent_retries_of_one_token_all_get_the_row(store: SQLiteStore) -> None:
    """Concurrent claims carrying the same token (retries racing) all get the row."""
    recorded = await interrupt(store, "e")
    results = await asyncio.gather(*(store.claim_interrupt(NS, "e", "tok", NOW) for _ in range(8)))
    assert results == [recorded.pending] * 8


async def test_i3_claim_without_token_is_not_remembered(store: SQLiteStore) -> None:
    """A claim with an empty token works once and is not replayed."""
    recorded = await interrupt(store, "e")
    assert await store.claim_interrupt(NS, "e", "", NOW) == recorded.pending
    assert await store.claim_interrupt(NS, "e", "", NOW) is None


async def test_i3_purge_claims_forgets_old_claims(store: SQLiteStore) -> None:
    """purge_claims removes claims older than the cutoff; a retry then gets None."""
    await interrupt(store, "old")
    await interrupt(store, "recent")
    await store.claim_interrupt(NS, "old", "tok", NOW)
    await store.claim_interrupt(NS, "recent", "tok", NOW + timedelta(hours=2))
    assert await store.purge_claims(NOW + timedelta(hours=1)) == 1
    assert await store.claim_interrupt(NS, "old", "tok", NOW) is None
    assert await store.claim_interrupt(NS, "recent", "tok", NOW) is not None


async def test_i4_list_pending_newest_first_paged_and_filtered(store: SQLiteStore) -> None:
    """Pending rows come newest first, page by sequence, and filter by chain name, reason
    and agent_path prefix (with % and _ taken literally)."""
    paths = ["a/b", "a/bc", "a%/x", "a_/x", "ab/x", None]
    recorded = [
        await interrupt(
            store,
            f"e{i}",
            chain_name="c1" if i % 2 else "c2",
            reason="r1" if i < 3 else "r2",
            agent_path=paths[i],
        )
        for i in range(6)
    ]
    everything = [r.pending for r in reversed(recorded)]

    async def listed(before: int | None = None, limit: int = 10, **filters: Any) -> list[str]:
        rows = await store.list_pending(
            NS, before_sequence=before, limit=limit, filters=PendingFilter(**filters)
        )
        return [r.execution_id for r in rows]

    assert (
        await store.list_pending(NS, before_sequence=None, limit=10, filters=PendingFilter())
        == everything
    )
    page1 = await store.list_pending(NS, before_sequence=None, limit=4, filters=PendingFilter())
    page2 = await store.list_pending(
        NS, before_sequence=page1[-1].sequence, limit=4, filters=PendingFilter()
    )
    assert page1 + page2 == everything
    assert await listed(chain_name="c1") == ["e5", "e3", "e1"]
    assert await listed(reason="r1") == ["e2", "e1", "e0"]
    assert await listed(chain_name="c1", reason="r1") == ["e1"]
    assert await listed(agent_path_prefix="a/b") == ["e1", "e0"]
    assert await listed(agent_path_prefix="a%") == ["e2"]
    assert await listed(agent_path_prefix="a_") == ["e3"]
    assert await listed(agent_path_prefix="a") == ["e4", "e3", "e2", "e1", "e0"]
    assert await listed(agent_path_prefix="") == ["e5", "e4", "e3", "e2", "e1", "e0"]
    assert await listed(agent_path_prefix="zzz") == []
    assert await listed(before=recorded[2].pending.sequence, chain_name="c2") == ["e0"]


# --- idempotency: D1 ----------------------------------------------------------------------


async def test_d1_put_replaces_and_get_returns_exact_json(store: SQLiteStore) -> None:
    """Put replaces the cached value; get returns the exact text, a cached null included."""
    assert await store.get_idempotent(NS, "e", "k") is None
    await store.put_idempotent(NS, "", "e", "k", '{"n": 1180591620717411303424}', NOW)
    assert await store.get_idempotent(NS, "e", "k") == '{"n": 1180591620717411303424}'
    await store.put_idempotent(NS, "", "e", "k", "null", NOW)
    await store.put_idempotent(NS, "", "e", "k", "null", NOW)
    assert await store.get_idempotent(NS, "e", "k") == "null"
    assert await store.get_idempotent(NS, "e", "other") is None


# --- durability, errors, schema: E1-E3 ----------------------------------------------------


async def test_e1_wal_and_synchronous_full(store: SQLiteStore, db_path: Path) -> None:
    """The file is in WAL mode and the writer commits with synchronous=FULL."""
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    writer = store._writer
    assert writer is not None
    assert [tuple(row) for row in await writer.execute_fetchall("PRAGMA synchronous")] == [(2,)]


KILL_CHILD = """
import asyncio, sys
from datetime import UTC, datetime
from checkpointd.domain import CheckpointRecord, CheckpointStatus
from checkpointd.store.sqlite import SQLiteStore

async def main(path):
    store = SQLiteStore(path)
    await store.open()
    record = CheckpointRecord("e", "acked", None, "c", "n", 0, None, CheckpointStatus.COMPLETED,
                              "{}", "{}", "{}", 0, "{}", None, "{}", None, datetime.now(UTC))
    await store.put_checkpoint("default", "r", record)
    print("acked", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def test_e1_acknowledged_write_survives_kill_9(db_path: Path) -> None:
    """A write acknowledged by a process that is then SIGKILLed is there on reopen."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILL_CHILD, str(db_path), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 60) == b"acked\n"
    finally:
        child.kill()
        await child.communicate()
    store = SQLiteStore(db_path)
    await store.open()
    try:
        assert await store.get_checkpoint(NS, "e", "acked") is not None
    finally:
        await store.close()


def applied_versions(path: Path) -> list[int]:
    with raw(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


async def test_migrations_are_idempotent_when_opened_twice(db_path: Path) -> None:
    """Opening the same file again applies nothing twice and keeps the data."""
    first = SQLiteStore(db_path)
    await first.open()
    try:
        stored = await first.put_checkpoint(NS, "", ckpt("e", "c"))
        await first.open()  # a second open of an open store is a no-op
    finally:
        await first.close()
    second = SQLiteStore(db_path)
    await second.open()
    try:
        assert await second.get_checkpoint(NS, "e", "c") == stored
    finally:
        await second.close()
    versions = [m.version for m in sqlite_module._load_migrations()]
    assert applied_versions(db_path) == versions


MIGRATE_CHILD = """
import asyncio, sys
from checkpointd.store.sqlite import SQLiteStore

async def main(path):
    print("ready", flush=True)
    sys.stdin.readline()
    store = SQLiteStore(path)
    await store.open()
    await store.ping()
    await store.close()
    print("opened", flush=True)

asyncio.run(main(sys.argv[1]))
"""


async def test_migrations_are_safe_when_processes_open_a_new_file_at_once(db_path: Path) -> None:
    """Four processes opening a fresh file at the same moment all succeed, and each
    migration is applied exactly once."""
    for attempt in range(3):
        path = db_path.with_name(f"race-{attempt}.db")
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                MIGRATE_CHILD,
                str(path),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for _ in range(4)
        ]
        for child in children:  # every child has imported before any gets the start signal
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        outputs = await asyncio.gather(*(child.communicate(b"go\n") for child in children))
        for child, (out, err) in zip(children, outputs, strict=True):
            assert child.returncode == 0, err.decode()
            assert out == b"opened\n"
        versions = [m.version for m in sqlite_module._load_migrations()]
        assert applied_versions(path) == versions


def _plan(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[str]:
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


async def test_queries_are_index_lookups(store: SQLiteStore, db_path: Path) -> None:
    """EXPLAIN QUERY PLAN: latest, list, get-by-id, pending, claim and prune queries search
    an index and never scan a table or sort."""
    m = sqlite_sql
    full_filter = PendingFilter(chain_name="c", reason="r", agent_path_prefix="a/")
    list_pending_sql, list_pending_params = SQLiteStore._list_pending_query(NS, 10, 5, full_filter)
    queries: list[tuple[str, tuple[Any, ...]]] = [
        (m.LATEST_CHECKPOINT, (NS, "e")),
        (m.LATEST_CHECKPOINT_SKIP_STEP_TYPE, (NS, "e", RUN_END)),
        (m.LIST_CHECKPOINTS_ASC, (NS, "e", 0, 2**63 - 1, 10)),
        (m.LIST_CHECKPOINTS_DESC, (NS, "e", 0, 99, 10)),
        (m.LIST_CHECKPOINT_SIZES_ASC, (NS, "e", 0, 2**63 - 1, 10)),
        (m.LIST_CHECKPOINT_SIZES_DESC, (NS, "e", 0, 99, 10)),
        (m.GET_CHECKPOINT, (NS, "c", "e")),
        (m.CHECKPOINT_BY_ID, (NS, "c")),
        (m.CHECKPOINT_BY_REQUEST_ID, (NS, "r")),
        (m.IS_TOMBSTONE, (NS, "r")),
        (m.REPLY_OF_REQUEST, (NS, "r")),
        (m.TOMBSTONE_EXECUTION, (1, NS, "e")),
        (m.DELETE_CHECKPOINTS_OF_EXECUTION, (NS, "e")),
        (m.PRUNE_CHECKPOINTS_BATCH, (NS, 1, 10)),
        (m.PENDING_OF_EXECUTION, (NS, "e")),
        (m.DELETE_PENDING_OF_EXECUTION, (NS, "e")),
        (list_pending_sql, tuple(list_pending_params)),
        (m.LIST_PENDING + m.LIST_PENDING_ORDER, (NS, 10, 5)),
        (m.CLAIM_BY_TOKEN, (NS, "e", "t")),
        (m.CLAIM_BY_CHECKPOINT, (NS, "e", "c")),
        (m.PURGE_CLAIMS, (1,)),
        (m.GET_IDEMPOTENT, (NS, "e", "k")),
        (m.DELETE_IDEMPOTENT_OF_EXECUTION, (NS, "e")),
        (m.PRUNE_IDEMPOTENT_BATCH, (NS, 1, 10)),
    ]
    with raw(db_path) as conn:
        for sql, params in queries:
            plan = _plan(conn, sql, params)
            assert any(step.startswith("SEARCH") for step in plan), (sql, plan)
            assert not [s for s in plan if s.startswith("SCAN") or "TEMP B-TREE" in s], (sql, plan)


async def test_unopenable_path_raises_store_unavailable_naming_the_path(tmp_path: Path) -> None:
    """A path in a missing directory, or a directory, cannot be opened: StoreUnavailable
    with a message naming the file."""
    for path in (tmp_path / "missing" / "x.db", tmp_path):
        store = SQLiteStore(path)
        with pytest.raises(StoreUnavailable) as info:
            await store.open()
        assert str(info.value) == (
            f"cannot open SQLite database at {path}: unable to open database file"
        )
        await store.close()


async def test_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    """A file that is not SQLite gives a StoreError naming the file and the reason."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match=r"junk\.db: file is not a database"):
        await store.open()


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (8, "attempt to write a readonly database", "is read-only"),
        (13, "database or disk is full", "disk or database is full"),
        (10 | (3 << 8), "disk I/O error", "disk I/O error"),
        (5, "database is locked", "busy_timeout (5000 ms)"),
        (14, "unable to open database file", "unable to open database file"),
    ],
)
def test_e2_unavailable_errors_map_to_store_unavailable(
    code: int, message: str, expected: str
) -> None:
    """Busy, read-only, full, I/O and cannot-open errors become StoreUnavailable."""
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code
    translated = sqlite_errors.translate(exc, "/data/x.db", busy_timeout_ms=5000, closed=False)
    assert isinstance(translated, StoreUnavailable)
    assert expected in str(translated)
    assert "/data/x.db" in str(translated)


def test_e2_other_errors_never_leak_sql() -> None:
    """A generic SQL error is a StoreError whose message shows no SQL text."""
    exc = sqlite3.OperationalError('near "SELEC": syntax error')
    exc.sqlite_errorcode = 1
    exc.sqlite_errorname = "SQLITE_ERROR"
    translated = sqlite_errors.translate(exc, "/data/x.db", busy_timeout_ms=5000, closed=False)
    assert type(translated) is StoreError
    assert "SELEC" not in str(translated)
    assert "SQLITE_ERROR" in str(translated)


async def test_e3_busy_past_timeout_is_unavailable_then_recovers(db_path: Path) -> None:
    """While another process holds the write lock, a write fails with StoreUnavailable after
    busy_timeout (reads still work); once the lock is released writes succeed again."""
    store = SQLiteStore(db_path, busy_timeout_ms=200)
    await store.open()
    try:
        first = await store.put_checkpoint(NS, "", ckpt("e", "c1"))
        with raw(db_path) as blocker:
            blocker.execute("BEGIN IMMEDIATE")
            # The message says which limit ended the wait; a hang would meet the test timeout.
            with pytest.raises(StoreUnavailable, match=r"locked .* busy_timeout \(200 ms\)"):
                await store.put_checkpoint(NS, "", ckpt("e", "c2"))
            assert await store.get_latest_checkpoint(NS, "e") == first
            blocker.execute("ROLLBACK")
        second = await store.put_checkpoint(NS, "", ckpt("e", "c2"))
        assert await store.get_latest_checkpoint(NS, "e") == second
    finally:
        await store.close()


async def test_e3_call_timeout_is_unavailable_and_store_still_works(db_path: Path) -> None:
    """A call that outlives ``timeout`` raises StoreUnavailable in bounded time, its
    transaction is rolled back, and the store works afterwards."""
    store = SQLiteStore(db_path, busy_timeout_ms=1500, timeout=0.3)
    await store.open()
    try:
        with raw(db_path) as blocker:
            blocker.execute("BEGIN IMMEDIATE")
            # The call's timeout (0.3 s), not busy_timeout (1.5 s), is what ended it: the message
            # names which, so no clock is needed to tell them apart.
            with pytest.raises(StoreUnavailable, match=r"did not answer within 0.3 s"):
                await store.put_checkpoint(NS, "", ckpt("e", "late"))
            blocker.execute("ROLLBACK")
        stored = await store.put_checkpoint(NS, "", ckpt("e", "c"))
        assert await store.get_latest_checkpoint(NS, "e") == stored
        assert await store.get_checkpoint(NS, "e", "late") is None
    finally:
        await store.close()


async def test_ping_and_closed_store(db_path: Path) -> None:
    """ping answers on an open store; a closed store raises StoreUnavailable; close twice
    is safe."""
    store = SQLiteStore(db_path)
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.ping()
    await store.open()
    await store.ping()
    await store.close()
    await store.close()
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.put_checkpoint(NS, "", ckpt())
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.get_idempotent(NS, "e", "k")


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_in_memory_database_is_refused(path: str) -> None:
    """An in-memory database (private to each connection) is refused up front."""
    with pytest.raises(ValueError, match="path of a database file"):
        SQLiteStore(path)
