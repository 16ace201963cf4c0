"""C10 on both stores: a request id found with another fingerprint is refused
(:class:`RequestIdReused`) and writes nothing, also when the two requests are committed in
one group; ids stored before schema version 7 have no fingerprint and keep answering their
retries as before."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

from checkpointd.domain import DecisionOutcome, DecisionRecord, DeleteExecutionResult
from checkpointd.store import replies
from checkpointd.store.base import RequestAppliedThenDeleted, RequestIdReused
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.store.test_group_commit import _checkpoint, _make_store, _open_args
from tests.support.sidecar import StoreSpec
from tests.support.stores import OLD_CHECKPOINT, insert_raw, pin_schema

NS = "default"
T0 = datetime(2025, 6, 1, 9, 0, 0, tzinfo=UTC)
PUT_A, PUT_B = "PutCheckpoint:aaaa", "PutCheckpoint:bbbb"
IDEM_A, IDEM_B = "PutIdempotencyResult:aaaa", "PutIdempotencyResult:bbbb"


async def test_c10_reuses_committed_in_one_group_apply_one_request(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Concurrent puts sharing a request id with different fingerprints, which the group
    commit writes together: the first is applied, its retry gets its row, the others are
    refused; the same for idempotency results, whose value stays the first one."""
    checkpoints = await asyncio.gather(
        store.put_checkpoint(NS, "busy", _checkpoint("e", "busy")),  # busies the writer
        store.put_checkpoint(NS, "same", _checkpoint("e", "c-a"), fingerprint=PUT_A),
        store.put_checkpoint(NS, "same", _checkpoint("e", "c-a"), fingerprint=PUT_A),
        store.put_checkpoint(NS, "same", _checkpoint("f", "c-b"), fingerprint=PUT_B),
        return_exceptions=True,
    )
    assert checkpoints[1] == checkpoints[2]
    assert isinstance(checkpoints[3], RequestIdReused), checkpoints[3]
    assert (checkpoints[3].request_id, checkpoints[3].method) == ("same", "PutCheckpoint")
    assert await store.get_latest_checkpoint(NS, "f") is None

    results = await asyncio.gather(
        store.put_idempotent(NS, "busy-2", "e", "other", "0", T0),
        store.put_idempotent(NS, "idem", "e", "k", "1", T0, fingerprint=IDEM_A),
        store.put_idempotent(NS, "idem", "e", "k", "1", T0, fingerprint=IDEM_A),
        store.put_idempotent(NS, "idem", "e", "k", "2", T0, fingerprint=IDEM_B),
        return_exceptions=True,
    )
    assert list(results[:3]) == [None, None, None]
    assert isinstance(results[3], RequestIdReused), results[3]
    assert await store.get_idempotent(NS, "e", "k") == "1"


async def test_c10_an_empty_fingerprint_is_not_compared(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A caller that gives no fingerprint (the store's default) gets the retry answer, as
    before C10; a request with one finds the id stored without one and gets it too."""
    first = await store.put_checkpoint(NS, "r", _checkpoint("e", "c1"))
    assert await store.put_checkpoint(NS, "r", _checkpoint("e", "c2"), fingerprint=PUT_A) == first
    await store.put_checkpoint(NS, "s", _checkpoint("e", "c3"), fingerprint=PUT_A)
    assert (await store.put_checkpoint(NS, "s", _checkpoint("e", "c4"))).checkpoint_id == "c3"


async def _insert_old_rows(args: dict[str, str]) -> None:
    """Rows a version-6 server wrote: a checkpoint with its request id, an idempotency put,
    a tombstone, a delete's reply and a decision, none of them with a fingerprint."""
    reply = replies.encode(DeleteExecutionResult(3, False, 0))
    decision_columns = (
        "namespace, execution_id, checkpoint_id, request_id, approved, metadata_json, "
        "decided_by, decided_at, decision_status, chain_name, node_id, reason, context_json, "
        "created_at, sequence"
    )
    await insert_raw(
        args,
        [
            OLD_CHECKPOINT.format(
                namespace=NS, request_id="'put-old'", execution_id="e", checkpoint_id="first"
            ),
            "INSERT INTO @sapplied_requests (namespace, request_id, applied_at, kind, "
            f"reply_json) VALUES ('{NS}', 'idem-old', @t, 'idempotency_put', NULL), "
            f"('{NS}', 'gone-old', @t, 'deleted_write', NULL), "
            f"('{NS}', 'del-old', @t, 'delete_execution', '{reply}')",
            "INSERT INTO @sidempotency_results (namespace, execution_id, key, result_json, "
            f"created_at) VALUES ('{NS}', 'e', 'k', '1', @t)",
            f"INSERT INTO @sinterrupt_decisions ({decision_columns}) VALUES ('{NS}', 'd', 'p', "
            "'dec-old', @y, '{}', 'bot', @t, 'decided', 'c', 'n', 'r', '{}', @t, 2)",
        ],
    )


async def test_c10_ids_stored_before_the_migration_keep_answering_their_retries(
    store_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written at schema version 6, then migrated to 7: each request id it holds
    (a put's, an idempotency put's, a tombstone, a delete's reply, a decision's) answers a
    request carrying it as before, as a retry; new ids are fingerprinted."""
    args = _open_args(store_spec)
    pin_schema(monkeypatch, store_spec.backend, 6)
    old = _make_store(args)
    await old.open()
    await old.close()
    monkeypatch.undo()
    await _insert_old_rows(args)

    upgraded = _make_store(args)
    await upgraded.open()
    try:
        retry = await upgraded.put_checkpoint(
            NS, "put-old", _checkpoint("e", "second"), fingerprint=PUT_A
        )
        assert retry.checkpoint_id == "first"
        await upgraded.put_idempotent(NS, "idem-old", "e", "k", "2", T0, fingerprint=IDEM_A)
        assert await upgraded.get_idempotent(NS, "e", "k") == "1"
        with pytest.raises(RequestAppliedThenDeleted):
            await upgraded.put_checkpoint(
                NS, "gone-old", _checkpoint("g", "gone"), fingerprint=PUT_A
            )
        deleted = await upgraded.delete_execution(
            NS, "x", request_id="del-old", fingerprint="DeleteExecution:aaaa"
        )
        assert deleted == DeleteExecutionResult(3, False, 0)
        decision = DecisionRecord(False, "{}", "bot", None, T0)
        change = await upgraded.submit_decision(
            NS, "dec-old", "other", decision, fingerprint="SubmitDecision:aaaa"
        )
        assert change.outcome is DecisionOutcome.REPEATED
        assert change.pending is not None
        assert change.pending.decision is not None
        assert change.pending.decision.approved

        await upgraded.put_checkpoint(NS, "new", _checkpoint("e", "new"), fingerprint=PUT_A)
        with pytest.raises(RequestIdReused):
            await upgraded.put_checkpoint(
                NS,
                "new",
                dataclasses.replace(_checkpoint("e", "new"), node_id="other"),
                fingerprint=PUT_B,
            )
    finally:
        await upgraded.close()
