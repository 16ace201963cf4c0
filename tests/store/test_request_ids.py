"""C9 on both stores, driven with explicit clocks: request ids of deleted rows and the replies
of deletes and prunes are remembered until the purge forgets them (the request-id
retention), and two writes sharing a request id store one row, also within one group-commit
batch."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from checkpointd.domain import CheckpointStatus
from checkpointd.store.base import RequestAppliedThenDeleted
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.store.test_group_commit import _checkpoint, _make_store, _open_args
from tests.support.records import pending
from tests.support.sidecar import StoreSpec
from tests.support.stores import pin_schema

NS = "default"
T0 = datetime(2025, 6, 1, 9, 0, 0, 250000, tzinfo=UTC)


async def test_c9_request_ids_forgotten_after_retention(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Until the purge passes them, a deleted put's request id refuses its retry and a
    delete's request id returns its first counts; after it, both are new calls."""
    await store.put_checkpoint(NS, "put-1", _checkpoint("e", "c1"))
    first = await store.delete_execution(NS, "e", request_id="del-1", now=T0)
    assert first.checkpoints_deleted == 1
    with pytest.raises(RequestAppliedThenDeleted) as info:
        await store.put_checkpoint(NS, "put-1", _checkpoint("e", "c1"))
    assert info.value.request_id == "put-1"

    assert await store.purge_applied_requests(T0) == 0  # strictly before the cutoff
    await store.put_checkpoint(NS, "put-2", _checkpoint("e", "c2"))
    assert await store.delete_execution(NS, "e", request_id="del-1", now=T0) == first

    assert await store.purge_applied_requests(T0 + timedelta(seconds=1)) == 2
    # Forgotten: the late retry is a new write, the delete a new delete.
    stored = await store.put_checkpoint(NS, "put-1", _checkpoint("e", "c1"))
    assert stored.checkpoint_id == "c1"
    again = await store.delete_execution(NS, "e", request_id="del-1", now=T0 + timedelta(hours=1))
    assert again.checkpoints_deleted == 2  # c1 and c2


async def test_c9_prune_reply_and_tombstones_forgotten_after_retention(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A prune remembers its counts and the request ids of the rows it deleted, until the
    purge forgets them."""
    old = dataclasses.replace(_checkpoint("e", "old"), created_at=T0 - timedelta(days=30))
    await store.put_checkpoint(NS, "put-old", old)
    first = await store.prune(NS, T0, batch_size=10, request_id="prune-1", now=T0)
    assert first.checkpoints_deleted == 1
    with pytest.raises(RequestAppliedThenDeleted):
        await store.put_checkpoint(NS, "put-old", old)
    await store.put_checkpoint(NS, "put-old-2", dataclasses.replace(old, checkpoint_id="old-2"))
    assert await store.prune(NS, T0, batch_size=10, request_id="prune-1", now=T0) == first
    assert await store.get_checkpoint(NS, "e", "old-2") is not None

    assert await store.purge_applied_requests(T0 + timedelta(seconds=1)) == 2
    assert (await store.put_checkpoint(NS, "put-old", old)).checkpoint_id == "old"
    again = await store.prune(NS, T0, batch_size=10, request_id="prune-1", now=T0)
    assert again.checkpoints_deleted == 2


async def test_c9_record_retry_after_delete_is_refused_and_writes_nothing(
    store: SQLiteStore | PostgresStore,
) -> None:
    """record_interrupt's late retry after a delete writes no checkpoint and no pending row."""
    interrupted = dataclasses.replace(
        _checkpoint("e", "c"), status=CheckpointStatus.INTERRUPTED, interrupt_reason="r"
    )
    await store.record_interrupt(NS, "rec-1", interrupted, pending("e"))
    await store.delete_execution(NS, "e", request_id="", now=T0)
    with pytest.raises(RequestAppliedThenDeleted):
        await store.record_interrupt(NS, "rec-1", interrupted, pending("e"))
    assert await store.get_latest_checkpoint(NS, "e") is None
    assert await store.claim_interrupt(NS, "e", "tok", T0) is None


async def test_c9_writes_sharing_a_request_id_store_one_row(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Concurrent writes with one request id and different (server-filled) checkpoint ids,
    committed together: one row is stored and every caller gets it."""
    results = await asyncio.gather(
        store.put_checkpoint(NS, "filler", _checkpoint("e", "filler")),  # busies the writer
        *(store.put_checkpoint(NS, "same", _checkpoint("e", f"filled-{i}")) for i in range(4)),
    )
    same = results[1:]
    assert all(r == same[0] for r in same), same
    rows = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=10)
    assert sorted(r.checkpoint_id for r in rows) == sorted(["filler", same[0].checkpoint_id])


async def test_c9_migration_keeps_the_request_id_of_the_first_of_duplicate_rows(
    store_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before version 4 may hold two rows of one request (a retry whose
    checkpoint id the server filled). Upgrading keeps the request id on the first row only,
    so a retry then returns that row, and both rows stay readable."""
    args = _open_args(store_spec)
    pin_schema(monkeypatch, store_spec.backend, 3)
    old = _make_store(args)
    await old.open()
    await old.close()
    monkeypatch.undo()

    columns = (
        "namespace, request_id, execution_id, checkpoint_id, chain_name, node_id, node_index, "
        "status, state_snapshot_json, node_input_json, node_output_json, iteration, "
        "iteration_counters_json, interrupt_context_json, created_at"
    )
    if args["backend"] == "sqlite":
        import sqlite3

        with sqlite3.connect(args["path"]) as conn:
            for checkpoint_id in ("first", "second"):
                conn.execute(
                    f"INSERT INTO checkpoints ({columns}) VALUES "
                    "(?, 'req', 'e', ?, 'c', 'n', 0, 'completed', '{}', '{}', '{}', 0, '{}', "
                    "'{}', 0)",
                    (NS, checkpoint_id),
                )
    else:
        import asyncpg

        pg = await asyncpg.connect(args["dsn"])
        try:
            for checkpoint_id in ("first", "second"):
                await pg.execute(
                    f'INSERT INTO "{args["schema"]}".checkpoints ({columns}) VALUES '
                    "($1, 'req', 'e', $2, 'c', 'n', 0, 'completed', '{}', '{}', '{}', 0, '{}', "
                    "'{}', now())",
                    NS,
                    checkpoint_id,
                )
        finally:
            await pg.close()

    upgraded = _make_store(args)
    await upgraded.open()
    try:
        retry = await upgraded.put_checkpoint(NS, "req", _checkpoint("e", "third"))
        assert retry.checkpoint_id == "first"
        assert await upgraded.get_checkpoint(NS, "e", "second") is not None
        assert await upgraded.get_checkpoint(NS, "e", "third") is None
    finally:
        await upgraded.close()
