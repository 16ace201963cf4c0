"""R1 on both stores: what an upgrade to the outbox (schema version 5) puts in it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.store.test_group_commit import _checkpoint, _make_store, _open_args
from tests.support.sidecar import StoreSpec
from tests.support.stores import OLD_CHECKPOINT, insert_raw, pin_schema

NS = "default"


async def test_r1_upgrade_counts_stored_rows_as_synced_and_later_writes_enter_the_outbox(
    store_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stored by a version-4 store are settled by the migration (a replicator started
    after the upgrade does not re-send history, as in the reference's own migration); rows
    written afterwards are listed, and settle once."""
    args = _open_args(store_spec)
    pin_schema(monkeypatch, store_spec.backend, 4)
    old = _make_store(args)
    await old.open()
    await old.close()
    monkeypatch.undo()
    no_request_id = "''" if args["backend"] == "sqlite" else "NULL"  # each backend's "none"
    row = {"namespace": NS, "request_id": no_request_id, "execution_id": "e"}
    await insert_raw(args, [OLD_CHECKPOINT.format(**row, checkpoint_id="before")])

    upgraded = _make_store(args)
    await upgraded.open()
    try:
        assert await upgraded.list_unsynced(NS, after_sequence=None, limit=10) == []
        await upgraded.put_checkpoint(NS, "", _checkpoint("e", "after"))
        listed = await upgraded.list_unsynced(NS, after_sequence=None, limit=10)
        assert [r.checkpoint_id for r in listed] == ["after"]
        now = datetime.now(UTC)
        settle = [("before", None), ("after", None)]
        assert await upgraded.settle_checkpoints(NS, settle, now) == ["after"]
        assert await upgraded.settle_checkpoints(NS, settle, now) == []
        assert await upgraded.list_unsynced(NS, after_sequence=None, limit=10) == []
    finally:
        await upgraded.close()
