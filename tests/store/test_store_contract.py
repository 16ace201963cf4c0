"""The store contract, on every backend: contract rules C*, I1-I4, D1, J1, J4, N1 at the
store (no gRPC), checked through Store and its own outbox."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    CheckpointStatus,
    PendingFilter,
)
from checkpointd.store.base import CheckpointExists
from checkpointd.store.interface import Store
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.sqlite.access import SQLiteAccess
from tests.support.protocols import signature_mismatches
from tests.support.records import NS, T0, checkpoint, interrupt, pending
from tests.support.sidecar import StoreSpec
from tests.support.stores import events, open_store

NOW = datetime(2024, 6, 1, tzinfo=UTC)


async def test_store_protocol_is_satisfied(store: Store) -> None:
    """Each store implements every Store method with Store's signature (the abstract ones and
    any it overrides), and an open store answers through Store's type."""
    # interface.py names the two access types only for the type checker (no import cycle).
    access_types = {"SQLiteAccess": SQLiteAccess, "PostgresAccess": PostgresAccess}
    assert signature_mismatches(type(store), Store, localns=access_types) == []
    as_protocol: Store = store
    await as_protocol.ping()
    written = await as_protocol.put_checkpoint("default", "req-1", checkpoint("exec-p", "cp-p"))
    assert await as_protocol.get_checkpoint("default", "exec-p", "cp-p") == written
    assert as_protocol.event_notifier() is not None


async def test_j1_round_trip_preserves_every_field(store: Store) -> None:
    """Every field comes back exactly, big integers, floats and unicode in JSON included."""
    big = 2**70
    state = json.dumps({"n": big, "f": 0.1, "neg": -(2**65), "u": "héllo ✓ 日本 🚀", "e": {}})
    original = checkpoint(
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
async def test_j4_created_at_is_stored_exactly_in_utc(store: Store, created_at: datetime) -> None:
    """created_at keeps its exact instant to the microsecond and comes back in UTC."""
    stored = await store.put_checkpoint(NS, "", checkpoint("e", "c", created_at=created_at))
    fetched = await store.get_checkpoint(NS, "e", "c")
    assert fetched is not None
    assert fetched.created_at == created_at
    assert fetched.created_at.utcoffset() == timedelta(0)
    assert fetched.created_at.microsecond == created_at.astimezone(UTC).microsecond
    assert stored.created_at == fetched.created_at
    assert stored.created_at.tzinfo == fetched.created_at.tzinfo


async def test_j4_naive_datetime_is_refused(store: Store) -> None:
    """A naive datetime is a programming error, not silently taken as local time."""
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.put_checkpoint(NS, "", checkpoint(created_at=datetime(2024, 1, 1)))


async def test_non_positive_listing_limits_are_refused(store: Store) -> None:
    """A listing with a limit below one is a caller bug, refused on both backends."""
    for listing in (
        store.list_checkpoints(NS, "x", after_sequence=None, descending=False, limit=0),
        store.list_pending(NS, before_sequence=None, limit=0, filters=PendingFilter()),
        store.list_unsynced(NS, after_sequence=None, limit=0),
    ):
        with pytest.raises(ValueError, match="limit"):
            await listing


async def test_j1_json_text_unicode_and_pending_rows_round_trip_exactly(store: Store) -> None:
    """Every field comes back exactly: JSON text byte for byte, big ints, unicode, UTC µs time."""
    state = (
        '{"z": 1, "a": {"big": 123456789012345678901234567890, "neg": -9223372036854775809},'
        ' "f": 0.1, "e": 1e-7, "u": "h\\u00e9llo ✓ 🚀 \\u0000", "empty": {}, "list": [null, true]}'
    )
    original = CheckpointRecord(
        execution_id="exé-1",
        checkpoint_id="cp-✓-1",
        parent_checkpoint_id="cp-0",
        chain_name="chaîne",
        node_id="nœud",
        node_index=2**40,
        step_type="step",
        status=CheckpointStatus.FAILED,
        state_snapshot_json=state,
        node_input_json='{"in": [1, 2.50, "x"]}',
        node_output_json='{ "spaced" :  true }',
        iteration=2**62,
        iteration_counters_json='{"loop": 3}',
        interrupt_reason="why ✓",
        interrupt_context_json='{"ctx": 18446744073709551617}',
        agent_path="root/sub agent/ü",
        created_at=datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5))),
    )
    stored = await store.put_checkpoint(NS, "req-1", original)
    assert stored.sequence > 0
    assert stored.created_at.tzinfo is UTC
    assert stored.created_at == original.created_at
    assert stored == replace(
        original, sequence=stored.sequence, created_at=original.created_at.astimezone(UTC)
    )
    assert await store.get_checkpoint(NS, "exé-1", "cp-✓-1") == stored
    assert await store.get_latest_checkpoint(NS, "exé-1") == stored
    page = await store.list_checkpoints(
        NS, "exé-1", after_sequence=None, descending=False, limit=10
    )
    assert page == [stored]

    proposed = pending(
        "exé-2", context_json='{"n": 12345678901234567890, "u": "✓"}', agent_path="a/ü"
    )
    result = await store.record_interrupt(
        NS, "req-2", checkpoint("exé-2", status=CheckpointStatus.INTERRUPTED), proposed
    )
    assert result.pending == replace(
        proposed, checkpoint_id=result.checkpoint.checkpoint_id, sequence=result.checkpoint.sequence
    )
    assert result.pending.created_at.tzinfo is UTC
    listed = await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter())
    assert listed == [result.pending]

    await store.put_idempotent(NS, "", "exé-1", "key ✓", state, T0)
    assert await store.get_idempotent(NS, "exé-1", "key ✓") == state


async def test_j4_extreme_created_at_round_trips(store: Store) -> None:
    """The first and last representable instants are stored and read back exactly, in UTC,
    and prune still orders them correctly."""
    first = datetime(1, 1, 1, tzinfo=UTC)
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    for when in (first, last, first + timedelta(microseconds=1)):
        stored = await store.put_checkpoint(NS, "", checkpoint("e", created_at=when))
        got = await store.get_checkpoint(NS, "e", stored.checkpoint_id)
        assert got is not None
        assert (stored.created_at, got.created_at) == (when, when)
        assert got.created_at.tzinfo is UTC
    result = await store.prune(NS, T0, batch_size=1)
    assert result.checkpoints_deleted == 2
    rest = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=9)
    assert [r.created_at for r in rest] == [last]


async def test_c2_retry_with_same_request_id_returns_stored_row(store: Store) -> None:
    """A retry with the same request id gets the stored row back and writes nothing."""
    first = await store.put_checkpoint(
        NS, "req-1", checkpoint("e", "c", node_input_json='{"a": 1}')
    )
    retry = await store.put_checkpoint(
        NS, "req-1", checkpoint("e", "c", node_input_json='{"a": 2}')
    )
    assert retry == first
    rows = await store.list_checkpoints(NS, "e", after_sequence=None, descending=False, limit=10)
    assert rows == [first]


@pytest.mark.parametrize(("first_request", "second_request"), [("req-1", "req-2"), ("", "")])
async def test_c2_second_write_with_existing_id_raises_checkpoint_exists(
    store: Store, first_request: str, second_request: str
) -> None:
    """A second write of an existing checkpoint id fails and changes nothing."""
    first = await store.put_checkpoint(
        NS, first_request, checkpoint("e", "c", node_input_json="{}")
    )
    with pytest.raises(CheckpointExists) as info:
        await store.put_checkpoint(NS, second_request, checkpoint("e", "c", node_input_json="[1]"))
    assert info.value.checkpoint_id == "c"
    assert await store.get_checkpoint(NS, "e", "c") == first


async def test_n1_same_ids_in_two_namespaces_are_separate(store: Store) -> None:
    """The same checkpoint and execution ids in two namespaces are two rows, each invisible
    from the other namespace."""
    a = await store.put_checkpoint("team-a", "r", checkpoint("e", "c", node_id="a"))
    b = await store.put_checkpoint("team-b", "r", checkpoint("e", "c", node_id="b"))
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


async def test_c3_latest_is_by_sequence_not_created_at(store: Store) -> None:
    """The latest row is the last written even when its created_at is older (backdated)."""
    await store.put_checkpoint(
        NS, "", checkpoint("e", "new-clock", created_at=T0 + timedelta(days=1))
    )
    last = await store.put_checkpoint(NS, "", checkpoint("e", "backdated", created_at=T0))
    await store.put_checkpoint(NS, "", checkpoint("other", "x", created_at=T0 + timedelta(days=9)))
    latest = await store.get_latest_checkpoint(NS, "e")
    assert latest == last


async def test_c3_latest_can_skip_run_end_rows(store: Store) -> None:
    """With skip_run_end the newest non-run_end row is returned (step_type NULL included)."""
    step = await store.put_checkpoint(NS, "", checkpoint("e", "step", step_type=None))
    end = await store.put_checkpoint(NS, "", checkpoint("e", "end", step_type=RUN_END))
    assert await store.get_latest_checkpoint(NS, "e") == end
    assert await store.get_latest_checkpoint(NS, "e", skip_run_end=True) == step


async def test_c3_missing_execution_has_no_latest(store: Store) -> None:
    """An unknown execution has no latest checkpoint."""
    assert await store.get_latest_checkpoint(NS, "nope") is None
    assert await store.get_latest_checkpoint(NS, "nope", skip_run_end=True) is None


async def test_c4_list_pages_through_250_rows_in_both_directions(store: Store) -> None:
    """Keyset paging by sequence reads every row once, ascending and descending."""
    written = []
    for i in range(250):
        # node_index runs backwards: order must follow the sequence, not node_index.
        written.append(
            await store.put_checkpoint(NS, "", checkpoint("e", f"c{i}", node_index=250 - i))
        )
        if i % 10 == 0:
            await store.put_checkpoint(NS, "", checkpoint("other", f"o{i}"))

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


async def test_c4_list_of_unknown_execution_is_empty(store: Store) -> None:
    """Listing an unknown execution returns no rows."""
    assert (
        await store.list_checkpoints(NS, "x", after_sequence=None, descending=False, limit=5) == []
    )


async def test_c5_get_by_id_requires_the_matching_execution(store: Store) -> None:
    """A checkpoint id is found only under its own execution."""
    stored = await store.put_checkpoint(NS, "", checkpoint("e", "c"))
    assert await store.get_checkpoint(NS, "e", "c") == stored
    assert await store.get_checkpoint(NS, "other", "c") is None
    assert await store.get_checkpoint("ns-b", "e", "c") is None
    assert await store.get_checkpoint(NS, "e", "missing") is None


async def test_c6_delete_execution_removes_everything_and_emits_removed(store: Store) -> None:
    """Delete removes checkpoints, pending row and idempotency rows, and writes one
    'removed' event; other executions are untouched."""
    for i in range(3):
        await store.put_checkpoint(NS, "", checkpoint("e", f"c{i}"))
    recorded = await interrupt(store, "e")
    await store.put_idempotent(NS, "", "e", "k1", "1", NOW)
    await store.put_idempotent(NS, "", "e", "k2", "2", NOW)
    keep = await store.put_checkpoint(NS, "", checkpoint("keep", "k"))
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
    assert await events(store) == [(NS, "added", "e", cp_id), (NS, "removed", "e", cp_id)]


async def test_c6_delete_without_pending_writes_no_event(store: Store) -> None:
    """Deleting an execution that has no pending interrupt writes no event."""
    await store.put_checkpoint(NS, "", checkpoint("e", "c"))
    result = await store.delete_execution(NS, "e")
    assert result.checkpoints_deleted == 1
    assert result.pending_interrupt_deleted is False
    assert result.idempotency_results_deleted == 0
    assert await events(store) == []
    again = await store.delete_execution(NS, "e")
    assert again.checkpoints_deleted == 0


async def test_c3_sequence_is_never_reused_after_delete(store: Store) -> None:
    """Sequences keep rising after the newest rows are deleted (AUTOINCREMENT)."""
    last = await store.put_checkpoint(NS, "", checkpoint("e", "c1"))
    await store.delete_execution(NS, "e")
    again = await store.put_checkpoint(NS, "", checkpoint("e", "c2"))
    assert again.sequence > last.sequence


async def test_c7_prune_with_exact_multiple_of_batch(store: Store) -> None:
    """Prune stops correctly when the row count is an exact multiple of the batch size."""
    for i in range(10):
        await store.put_checkpoint(NS, "", checkpoint("e", f"c{i}"))
    result = await store.prune(NS, T0 + timedelta(seconds=1), batch_size=5)
    assert result.checkpoints_deleted == 10
    with pytest.raises(ValueError, match="batch_size"):
        await store.prune(NS, T0, batch_size=0)


async def test_i1_record_interrupt_writes_checkpoint_pending_and_added_event(store: Store) -> None:
    """Record stores the checkpoint, the pending row (with its sequence) and an 'added' event."""
    result = await interrupt(store, "e")
    assert result.pending_created is True
    assert result.checkpoint.sequence > 0
    assert result.pending.sequence == result.checkpoint.sequence
    assert result.pending.checkpoint_id == result.checkpoint.checkpoint_id
    assert await store.get_latest_checkpoint(NS, "e") == result.checkpoint
    listed = await store.list_pending(NS, before_sequence=None, limit=10, filters=PendingFilter())
    assert listed == [result.pending]
    assert await events(store) == [(NS, "added", "e", result.checkpoint.checkpoint_id)]


async def test_i1_record_interrupt_with_duplicate_checkpoint_writes_nothing(store: Store) -> None:
    """A record whose checkpoint id exists (other request) writes no pending row, no event."""
    await store.put_checkpoint(NS, "req-1", checkpoint("e", "c"))
    interrupted = checkpoint("e", "c", status=CheckpointStatus.INTERRUPTED)
    with pytest.raises(CheckpointExists):
        await store.record_interrupt(NS, "req-2", interrupted, pending("e"))
    assert (
        await store.list_pending(NS, before_sequence=None, limit=5, filters=PendingFilter()) == []
    )
    assert await events(store) == []


async def test_i2_record_twice_keeps_first_pending_and_stores_checkpoint(store: Store) -> None:
    """A second record keeps the first pending row, still stores its checkpoint, and says
    no pending row was created."""
    first = await interrupt(store, "e", reason="first")
    second = await interrupt(store, "e", reason="second")
    assert second.pending_created is False
    assert second.pending == first.pending
    assert second.checkpoint.sequence > first.checkpoint.sequence
    assert await store.get_latest_checkpoint(NS, "e") == second.checkpoint
    assert [e[1] for e in await events(store)] == ["added"]


async def test_i2_record_retry_returns_stored_checkpoint_and_pending(store: Store) -> None:
    """A retried record gets the stored checkpoint and the pending row it created, even
    after that row was claimed."""
    interrupted = checkpoint("e", "c", status=CheckpointStatus.INTERRUPTED)
    first = await store.record_interrupt(NS, "req-1", interrupted, pending("e"))
    retry = await store.record_interrupt(NS, "req-1", interrupted, pending("e"))
    assert retry == first
    claimed = await store.claim_interrupt(NS, "e", "tok", NOW)
    assert claimed == first.pending
    after_claim = await store.record_interrupt(NS, "req-1", interrupted, pending("e"))
    assert after_claim == first


async def test_i2_record_twice_keeps_first_pending_row(store: Store) -> None:
    """A second record keeps the first pending row, still stores its checkpoint, and says so;
    retries of either call answer as the first time."""
    first = await interrupt(store, "e", request_id="req-1", reason="first")
    second = await interrupt(store, "e", request_id="req-2", reason="second")
    assert not second.pending_created
    assert second.pending == first.pending
    assert await store.get_latest_checkpoint(NS, "e") == second.checkpoint
    assert [k for _, k, _, _ in await events(store)] == ["added"]

    cp1 = checkpoint("e", first.checkpoint.checkpoint_id, status=CheckpointStatus.INTERRUPTED)
    retry1 = await store.record_interrupt(NS, "req-1", cp1, pending("e", reason="first"))
    assert retry1 == first
    cp2 = checkpoint("e", second.checkpoint.checkpoint_id, status=CheckpointStatus.INTERRUPTED)
    retry2 = await store.record_interrupt(NS, "req-2", cp2, pending("e", reason="second"))
    assert retry2 == second

    claimed = await store.claim_interrupt(NS, "e", "tok", T0)
    assert claimed == first.pending
    # Retried after the claim: the pending row is rebuilt from the request.
    late = await store.record_interrupt(NS, "req-1", cp1, pending("e", reason="first"))
    assert late.checkpoint == first.checkpoint
    assert late.pending == first.pending
    assert late.pending_created
    assert [k for _, k, _, _ in await events(store)] == ["added", "claimed"]


async def test_i3_claim_exactly_once_among_32_concurrent_tasks(store: Store) -> None:
    """Of 32 concurrent claims exactly one gets the pending row, the others None."""
    for round_ in range(5):
        execution_id = f"e{round_}"
        recorded = await interrupt(store, execution_id)
        results = await asyncio.gather(
            *(store.claim_interrupt(NS, execution_id, f"tok-{i}", NOW) for i in range(32))
        )
        winners = [r for r in results if r is not None]
        assert winners == [recorded.pending]


async def test_i3_exactly_one_of_32_concurrent_claimers_wins(store_spec: StoreSpec) -> None:
    """Over 50 rounds, 32 concurrent claims through two stores (two pools) yield exactly one
    winner per round; every loser gets None; each claim is announced once, in order."""
    a = open_store(store_spec)
    b = open_store(store_spec)
    await a.open()
    await b.open()
    try:
        for round_no in range(50):
            execution = f"e-{round_no}"
            recorded = await interrupt(a, execution)
            claims = [
                (a if i % 2 else b).claim_interrupt(
                    NS, execution, "" if i % 8 == 0 else f"tok-{round_no}-{i}", T0
                )
                for i in range(32)
            ]
            results = await asyncio.gather(*claims)
            winners = [r for r in results if r is not None]
            assert winners == [recorded.pending], f"round {round_no}"
            assert await a.claim_interrupt(NS, execution, "late", T0) is None
        kinds = [k for _, k, _, _ in await events(a)]
        assert kinds == ["added", "claimed"] * 50
    finally:
        await a.close()
        await b.close()


async def test_i3_retry_with_same_claim_token_returns_same_row(store_spec: StoreSpec) -> None:
    """A retried claim with the winner's token gets the same row (also when retries race and
    across stores); other tokens get None; purge_claims ends the retention."""
    a = open_store(store_spec)
    b = open_store(store_spec)
    await a.open()
    await b.open()
    try:
        recorded = await interrupt(a, "e")
        won = await a.claim_interrupt(NS, "e", "tok-1", T0)
        assert won == recorded.pending
        assert await b.claim_interrupt(NS, "e", "tok-1", T0 + timedelta(seconds=5)) == won
        assert await a.claim_interrupt(NS, "e", "tok-2", T0) is None
        assert await a.claim_interrupt(NS, "e", "", T0) is None
        assert await a.claim_interrupt("ns-b", "e", "tok-1", T0) is None  # namespaces (N1)

        again = await interrupt(a, "f")
        racing = await asyncio.gather(
            *((a, b)[i % 2].claim_interrupt(NS, "f", "same", T0) for i in range(12))
        )
        assert racing == [again.pending] * 12

        assert await a.purge_claims(T0 - timedelta(seconds=1)) == 0
        assert await a.purge_claims(T0 + timedelta(seconds=1)) == 2
        assert await a.claim_interrupt(NS, "e", "tok-1", T0) is None
    finally:
        await a.close()
        await b.close()


async def test_i3_claim_retry_with_same_token_returns_same_row(store: Store) -> None:
    """A retried claim with its token gets the same row; another token gets None; one
    'claimed' event is written."""
    recorded = await interrupt(store, "e")
    later = NOW + timedelta(minutes=1)
    first = await store.claim_interrupt(NS, "e", "tok-1", NOW)
    assert first == recorded.pending
    assert await store.claim_interrupt(NS, "e", "tok-1", later) == first
    assert await store.claim_interrupt(NS, "e", "tok-2", later) is None
    assert [e[1] for e in await events(store)] == ["added", "claimed"]


async def test_i3_concurrent_retries_of_one_token_all_get_the_row(store: Store) -> None:
    """Concurrent claims carrying the same token (retries racing) all get the row."""
    recorded = await interrupt(store, "e")
    results = await asyncio.gather(*(store.claim_interrupt(NS, "e", "tok", NOW) for _ in range(8)))
    assert results == [recorded.pending] * 8


async def test_i3_claim_without_token_is_not_remembered(store: Store) -> None:
    """A claim with an empty token works once and is not replayed."""
    recorded = await interrupt(store, "e")
    assert await store.claim_interrupt(NS, "e", "", NOW) == recorded.pending
    assert await store.claim_interrupt(NS, "e", "", NOW) is None


async def test_i3_purge_claims_forgets_old_claims(store: Store) -> None:
    """purge_claims removes claims older than the cutoff; a retry then gets None."""
    await interrupt(store, "old")
    await interrupt(store, "recent")
    await store.claim_interrupt(NS, "old", "tok", NOW)
    await store.claim_interrupt(NS, "recent", "tok", NOW + timedelta(hours=2))
    assert await store.purge_claims(NOW + timedelta(hours=1)) == 1
    assert await store.claim_interrupt(NS, "old", "tok", NOW) is None
    assert await store.claim_interrupt(NS, "recent", "tok", NOW) is not None


async def test_i4_list_pending_newest_first_paged_and_filtered(store: Store) -> None:
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


async def test_d1_put_replaces_and_get_returns_exact_json(store: Store) -> None:
    """Put replaces the cached value; get returns the exact text, a cached null included."""
    assert await store.get_idempotent(NS, "e", "k") is None
    await store.put_idempotent(NS, "", "e", "k", '{"n": 1180591620717411303424}', NOW)
    assert await store.get_idempotent(NS, "e", "k") == '{"n": 1180591620717411303424}'
    await store.put_idempotent(NS, "", "e", "k", "null", NOW)
    await store.put_idempotent(NS, "", "e", "k", "null", NOW)
    assert await store.get_idempotent(NS, "e", "k") == "null"
    assert await store.get_idempotent(NS, "e", "other") is None
