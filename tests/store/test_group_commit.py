"""Group commit on both stores: concurrent writes share a transaction, yet each caller's
write is durable when acknowledged (E1) and fails or succeeds on its own (C2, D1)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path

from checkpointd.domain import CheckpointRecord, CheckpointStatus
from checkpointd.store.base import CheckpointExists, StoreUnavailable
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.interface import Store
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.sidecar import StoreSpec
from tests.support.stores import record_batch_sizes

NS = "default"
T0 = datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def _open_args(spec: StoreSpec) -> dict[str, str]:
    if spec.backend == "sqlite":
        return {"backend": "sqlite", "path": spec.url.removeprefix("sqlite://")}
    return {"backend": "postgres", "dsn": spec.url, "schema": spec.pg_schema}


def _make_store(args: dict[str, str]) -> SQLiteStore | PostgresStore:
    if args["backend"] == "sqlite":
        return SQLiteStore(args["path"])
    return PostgresStore(args["dsn"], schema=args["schema"])


def _checkpoint(execution_id: str, checkpoint_id: str) -> CheckpointRecord:
    return CheckpointRecord(
        execution_id=execution_id,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=None,
        chain_name="chain",
        node_id="node",
        node_index=0,
        step_type="node",
        status=CheckpointStatus.COMPLETED,
        state_snapshot_json=json.dumps({"id": checkpoint_id}),
        node_input_json="{}",
        node_output_json="{}",
        iteration=0,
        iteration_counters_json="{}",
        interrupt_reason=None,
        interrupt_context_json="{}",
        agent_path=None,
        created_at=T0,
    )


def _record_batch_sizes(store: SQLiteStore | PostgresStore) -> list[int]:
    """The sizes of the batches of the store's checkpoint group commit."""
    return record_batch_sizes(
        store._group if isinstance(store, SQLiteStore) else store._checkpoint_group
    )


async def test_c2_failing_writes_do_not_fail_or_lose_their_batch_mates(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Duplicates, retries and fresh writes committed together each get their own answer."""
    sizes = _record_batch_sizes(store)
    taken = await store.put_checkpoint(NS, "req-taken", _checkpoint("exec", "taken"))
    calls: list[tuple[str, Awaitable[CheckpointRecord]]] = []
    for i in range(40):
        calls.append(("fresh", store.put_checkpoint(NS, f"req-{i}", _checkpoint("exec", f"c{i}"))))
        if i % 8 == 0:
            # Another request reusing a stored id: CheckpointExists (C2).
            calls.append(
                ("duplicate", store.put_checkpoint(NS, f"other-{i}", _checkpoint("exec", "taken")))
            )
            # A retry of the request that stored "taken": the stored row (C2).
            calls.append(
                ("retry", store.put_checkpoint(NS, "req-taken", _checkpoint("exec", "taken")))
            )
    # Two requests racing for one new id in the same moment: exactly one stores it.
    calls.append(("race", store.put_checkpoint(NS, "race-a", _checkpoint("exec", "raced"))))
    calls.append(("race", store.put_checkpoint(NS, "race-b", _checkpoint("exec", "raced"))))

    outcomes = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)

    assert max(sizes) > 1, f"no write shared a batch: {sizes}"
    race_wins = 0
    for (kind, _), outcome in zip(calls, outcomes, strict=True):
        if kind == "fresh":
            assert isinstance(outcome, CheckpointRecord), outcome
            assert outcome.sequence > taken.sequence
        elif kind == "duplicate":
            assert isinstance(outcome, CheckpointExists), outcome
        elif kind == "retry":
            assert isinstance(outcome, CheckpointRecord), outcome
            assert outcome.sequence == taken.sequence
        elif isinstance(outcome, CheckpointRecord):
            race_wins += 1
        else:
            assert isinstance(outcome, CheckpointExists), outcome
    assert race_wins == 1
    for i in range(40):
        stored = await store.get_checkpoint(NS, "exec", f"c{i}")
        assert stored is not None
        assert stored.state_snapshot_json == json.dumps({"id": f"c{i}"})
    listed = await store.list_checkpoints(
        NS, "exec", after_sequence=None, descending=False, limit=1000
    )
    assert len(listed) == 42  # taken, 40 fresh, raced: nothing twice, nothing lost


async def test_d1_concurrent_idempotency_puts_of_one_key_keep_one_of_the_values(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Many puts at once, some of the same key: every call succeeds and each key holds one
    of the values written to it (D1)."""
    values = {f"k{i % 10}": set[str]() for i in range(10)}
    calls = []
    for i in range(60):
        key, value = f"k{i % 10}", json.dumps(i)
        values[key].add(value)
        calls.append(store.put_idempotent(NS, "", "exec", key, value, T0))
    assert await asyncio.gather(*calls) == [None] * 60
    for key, written in values.items():
        assert await store.get_idempotent(NS, "exec", key) in written


# The child: many concurrent writers through one store, printing each write once it is
# acknowledged ("c <checkpoint id>" or "i <key>"); the test SIGKILLs it mid-stream.
_CHILD = """
import asyncio, json, sys, uuid
from datetime import UTC, datetime
from tests.store.test_group_commit import _checkpoint, _make_store

async def main(args):
    store = _make_store(args)
    await store.open()
    print("open", flush=True)

    async def writer(n):
        i = 0
        while True:
            i += 1
            if n % 4 == 0:
                key = f"w{n}-{i}"
                await store.put_idempotent("default", "", "exec-i", key, json.dumps(key),
                                           datetime.now(UTC))
                print("i", key, flush=True)
            else:
                checkpoint_id = uuid.uuid4().hex
                await store.put_checkpoint("default", uuid.uuid4().hex,
                                           _checkpoint(f"exec-{n}", checkpoint_id))
                print("c", f"exec-{n}", checkpoint_id, flush=True)

    await asyncio.gather(*(writer(n) for n in range(48)))

asyncio.run(main(json.loads(sys.argv[1])))
"""


def _write_until_killed(args: dict[str, str]) -> list[list[str]]:
    """Run the child until it has acknowledged 600 writes, SIGKILL it, and return every
    acknowledgement it printed (what it printed before dying was acknowledged)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "server")])}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert child.stdout is not None
    lines: list[list[str]] = []
    try:
        for line in child.stdout:
            lines.append(line.split())
            if len(lines) > 600:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        # The kill can land in the middle of a print: only lines that ended count.
        lines.extend(line.split() for line in child.stdout.read().split("\n")[:-1])
        child.stdout.close()
        child.wait()
    assert child.returncode == -signal.SIGKILL, "the child ended before it was killed"
    fields = {"c": 3, "i": 2}
    return [line for line in lines if line and len(line) == fields.get(line[0])]


async def test_e1_every_acknowledged_group_write_survives_sigkill_mid_batch(
    store_spec: StoreSpec,
) -> None:
    """SIGKILL while 48 writers keep batches in flight: every acknowledged write is stored."""
    args = _open_args(store_spec)
    acknowledged = await asyncio.to_thread(_write_until_killed, args)
    assert len(acknowledged) > 500, "the child did not get going"

    reopened = _make_store(args)
    await reopened.open()
    try:
        missing = await _missing(reopened, acknowledged)
    finally:
        await reopened.close()
    assert missing == [], f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"


async def _missing(store: Store, acknowledged: list[list[str]]) -> list[list[str]]:
    missing: list[list[str]] = []
    for line in acknowledged:
        if line[0] == "c":
            found: object = await store.get_checkpoint(NS, line[1], line[2])
        else:
            found = await store.get_idempotent(NS, "exec-i", line[1])
        if found is None:
            missing.append(line)
    return missing


async def test_group_commit_hands_a_batch_failure_to_each_caller_and_recovers() -> None:
    """A commit that raises fails exactly the writes of its batch, each with its own error
    object; the next writes commit normally."""
    failing = {"on": True}
    batches: list[list[int]] = []

    async def commit(items: list[int]) -> list[int | Exception]:
        batches.append(items)
        await asyncio.sleep(0.01)
        if failing["on"] and len(items) > 1:
            raise StoreUnavailable("the batch failed")
        return [item * 10 if item >= 0 else ValueError(f"bad {item}") for item in items]

    group: GroupCommit[int, int] = GroupCommit(commit, max_batch=4)
    first = asyncio.ensure_future(group.submit(0))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(group.submit(i)) for i in (1, 2, 3, 4, 5)]
    outcomes = await asyncio.gather(first, *rest, return_exceptions=True)
    assert outcomes[0] == 0
    assert batches == [[0], [1, 2, 3, 4], [5]]
    errors = outcomes[1:5]
    assert all(isinstance(e, StoreUnavailable) for e in errors)
    assert len({id(e) for e in errors}) == 4  # one error object per caller
    assert outcomes[5] == 50
    failing["on"] = False
    more = await asyncio.gather(*(group.submit(i) for i in (6, -1, 7)), return_exceptions=True)
    assert more[0] == 60
    assert isinstance(more[1], ValueError)
    assert more[2] == 70
