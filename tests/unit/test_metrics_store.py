"""InstrumentedStore: every store operation passes through to the store and is timed by
operation and outcome."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram

from checkpointd.domain import CheckpointRecord, CheckpointStatus
from checkpointd.metrics_store import InstrumentedStore
from checkpointd.store.base import CheckpointExists
from checkpointd.store.interface import Store
from checkpointd.store.sqlite import SQLiteStore
from tests.support.protocols import protocol_methods


def _record(checkpoint_id: str) -> CheckpointRecord:
    return CheckpointRecord(
        execution_id="exec-1",
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=None,
        chain_name="chain",
        node_id="node",
        node_index=0,
        step_type="node",
        status=CheckpointStatus.COMPLETED,
        state_snapshot_json="{}",
        node_input_json="{}",
        node_output_json="{}",
        iteration=0,
        iteration_counters_json="{}",
        interrupt_reason=None,
        interrupt_context_json="{}",
        agent_path=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_every_method_of_the_protocol_is_delegated_explicitly() -> None:
    """No operation falls through untimed: each one Store has, its bases' included, is
    defined here."""
    names = protocol_methods(Store)
    assert names
    for name in names:
        assert name in vars(InstrumentedStore), name
        assert inspect.iscoroutinefunction(getattr(Store, name)) == inspect.iscoroutinefunction(
            getattr(InstrumentedStore, name)
        ), name


async def test_operations_are_timed_by_outcome(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    histogram = Histogram("ops_seconds", "store calls", ("operation", "outcome"), registry=registry)
    store = InstrumentedStore(SQLiteStore(tmp_path / "s.db"), histogram)
    assert isinstance(store, Store)
    await store.open()
    try:
        await store.ping()
        await store.put_checkpoint("default", "", _record("c1"))
        with pytest.raises(CheckpointExists):
            await store.put_checkpoint("default", "", _record("c1"))
        got = await store.get_checkpoint("default", "exec-1", "c1")
        assert got is not None
        assert got.checkpoint_id == "c1"
    finally:
        await store.close()

    def count(operation: str, outcome: str) -> float | None:
        return registry.get_sample_value(
            "ops_seconds_count", {"operation": operation, "outcome": outcome}
        )

    assert count("ping", "ok") == 1
    assert count("put_checkpoint", "ok") == 1
    assert count("put_checkpoint", "error") == 1
    assert count("get_checkpoint", "ok") == 1
    assert count("open", "ok") is None  # open and close are not store operations to time
