"""Request ids of idempotency puts on both stores: a retry is answered like the first call
and is never a second write (D1), also inside one group-commit batch; ids are forgotten after
their retention time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.stores import record_batch_sizes

NS = "default"
T0 = datetime(2025, 6, 1, 9, 0, 0, 250000, tzinfo=UTC)


def _record_batch_sizes(store: SQLiteStore | PostgresStore) -> list[int]:
    """The sizes of the batches of the store's idempotency group commit."""
    return record_batch_sizes(
        store._group if isinstance(store, SQLiteStore) else store._idempotent_group
    )


async def test_d1_retry_after_a_newer_put_is_a_no_op(store: SQLiteStore | PostgresStore) -> None:
    """A late retry of a put, after newer puts of the same key (with and without a request
    id), writes nothing: the newest value stays."""
    await store.put_idempotent(NS, "req-1", "e", "charge", '{"v": 1}', T0)
    await store.put_idempotent(NS, "req-2", "e", "charge", '{"v": 2}', T0)
    await store.put_idempotent(NS, "req-1", "e", "charge", '{"v": 1}', T0)  # the retry
    assert await store.get_idempotent(NS, "e", "charge") == '{"v": 2}'
    await store.put_idempotent(NS, "", "e", "charge", '{"v": 3}', T0)
    await store.put_idempotent(NS, "req-2", "e", "charge", '{"v": 2}', T0)
    await store.put_idempotent(NS, "req-1", "e", "charge", '{"v": 1}', T0)
    assert await store.get_idempotent(NS, "e", "charge") == '{"v": 3}'
    # A request id is per namespace: the same id in another namespace is a first call.
    await store.put_idempotent("other", "req-1", "e", "charge", '"x"', T0)
    assert await store.get_idempotent("other", "e", "charge") == '"x"'


async def test_d1_same_request_id_twice_in_one_concurrent_batch_stores_once(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Writes sharing a request id that are committed together behave as a first call and
    its retries: only the first is written, whatever key the others name."""
    sizes = _record_batch_sizes(store)
    await asyncio.gather(
        store.put_idempotent(NS, "filler", "e", "filler", "0", T0),  # busies the writer
        store.put_idempotent(NS, "req", "e", "k1", '"first"', T0),
        store.put_idempotent(NS, "req", "e", "k2", '"other key"', T0),
        store.put_idempotent(NS, "req", "e", "k1", '"same key"', T0),
        store.put_idempotent(NS, "", "e", "k3", '"plain"', T0),
    )
    assert sizes[0] == 1, sizes
    assert sizes[1] >= 3, f"the writes did not share a batch: {sizes}"
    assert await store.get_idempotent(NS, "e", "k1") == '"first"'
    assert await store.get_idempotent(NS, "e", "k2") is None
    assert await store.get_idempotent(NS, "e", "k3") == '"plain"'
    assert await store.get_idempotent(NS, "e", "filler") == "0"


async def test_d1_empty_request_id_is_a_plain_upsert(store: SQLiteStore | PostgresStore) -> None:
    """Without a request id every put is written (the last one wins) and no id is kept."""
    for value in ("1", "2", "1"):
        await store.put_idempotent(NS, "", "e", "k", value, T0)
        assert await store.get_idempotent(NS, "e", "k") == value
    await asyncio.gather(*(store.put_idempotent(NS, "", "e", f"k{i}", "7", T0) for i in range(5)))
    for i in range(5):
        assert await store.get_idempotent(NS, "e", f"k{i}") == "7"
    assert await store.purge_applied_requests(T0 + timedelta(days=365)) == 0


async def test_d1_purge_removes_old_applied_request_ids(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Purging forgets the ids applied before the cutoff (a later retry of one is then a new
    write) and keeps the newer ones."""
    await store.put_idempotent(NS, "old", "e", "a", '"old"', T0)
    await store.put_idempotent(NS, "new", "e", "b", '"new"', T0 + timedelta(hours=1))
    await store.put_idempotent(NS, "", "e", "a", '"newer a"', T0 + timedelta(hours=2))
    await store.put_idempotent(NS, "", "e", "b", '"newer b"', T0 + timedelta(hours=2))
    assert await store.purge_applied_requests(T0) == 0  # strictly before the cutoff
    assert await store.purge_applied_requests(T0 + timedelta(minutes=1)) == 1
    assert await store.purge_applied_requests(T0 + timedelta(minutes=1)) == 0
    await store.put_idempotent(NS, "old", "e", "a", '"old"', T0 + timedelta(hours=3))
    await store.put_idempotent(NS, "new", "e", "b", '"new"', T0 + timedelta(hours=3))
    assert await store.get_idempotent(NS, "e", "a") == '"old"'  # forgotten: written again
    assert await store.get_idempotent(NS, "e", "b") == '"newer b"'  # still a retry
    assert await store.purge_applied_requests(T0 + timedelta(days=1)) == 2
