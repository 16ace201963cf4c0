"""Store timing: :class:`InstrumentedStore` stands in front of a store and times its calls.

Each store operation is observed in ``checkpointd_store_operation_seconds`` by operation (the
method's name) and outcome: ``ok``, ``unavailable`` (:class:`StoreUnavailable`) or ``error``
(anything else raised). ``open`` and ``close`` are passed on untimed; so are the methods that
are not coroutines.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TypeVar

from prometheus_client import Histogram

from checkpointd.domain import (
    CheckpointRecord,
    DecisionChange,
    DecisionRecord,
    DecisionStatus,
    DeleteExecutionResult,
    EventPage,
    LeaseFence,
    Page,
    PendingFilter,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
    SnapshotPage,
)
from checkpointd.store.base import EventNotifier, PoolState, Store, StoreUnavailable

__all__ = ["InstrumentedStore"]

T = TypeVar("T")


class InstrumentedStore(Store):
    """A :class:`Store` that delegates every call to ``store`` and times each operation in
    ``histogram`` (labelled ``operation``, ``outcome``)."""

    def __init__(self, store: Store, histogram: Histogram) -> None:
        self._store = store
        self._histogram = histogram

    @property
    def inner(self) -> Store:
        """The store being timed."""
        return self._store

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await call
            outcome = "ok"
            return result
        except StoreUnavailable:
            outcome = "unavailable"
            raise
        finally:
            self._histogram.labels(operation, outcome).observe(time.perf_counter() - started)

    async def open(self) -> None:
        await self._store.open()

    async def close(self) -> None:
        await self._store.close()

    async def ping(self) -> None:
        await self._timed("ping", self._store.ping())

    def pool_state(self) -> PoolState | None:
        return self._store.pool_state()

    async def count_pending_by_namespace(self) -> dict[str, int]:
        return await self._timed(
            "count_pending_by_namespace", self._store.count_pending_by_namespace()
        )

    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        return await self._timed(
            "put_checkpoint",
            self._store.put_checkpoint(namespace, request_id, checkpoint, fingerprint=fingerprint),
        )

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        return await self._timed(
            "get_checkpoint", self._store.get_checkpoint(namespace, execution_id, checkpoint_id)
        )

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        return await self._timed(
            "get_latest_checkpoint",
            self._store.get_latest_checkpoint(namespace, execution_id, skip_run_end=skip_run_end),
        )

    async def list_checkpoints(
        self,
        namespace: str,
        execution_id: str,
        *,
        after_sequence: int | None,
        descending: bool,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page[CheckpointRecord]:
        return await self._timed(
            "list_checkpoints",
            self._store.list_checkpoints(
                namespace,
                execution_id,
                after_sequence=after_sequence,
                descending=descending,
                limit=limit,
                max_bytes=max_bytes,
            ),
        )

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> DeleteExecutionResult:
        return await self._timed(
            "delete_execution",
            self._store.delete_execution(
                namespace, execution_id, request_id=request_id, now=now, fingerprint=fingerprint
            ),
        )

    async def prune(
        self,
        namespace: str,
        cutoff: datetime,
        *,
        batch_size: int,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> PruneResult:
        return await self._timed(
            "prune",
            self._store.prune(
                namespace,
                cutoff,
                batch_size=batch_size,
                request_id=request_id,
                now=now,
                fingerprint=fingerprint,
            ),
        )

    async def record_interrupt(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        pending: PendingRecord,
        *,
        fingerprint: str = "",
    ) -> RecordInterruptResult:
        return await self._timed(
            "record_interrupt",
            self._store.record_interrupt(
                namespace, request_id, checkpoint, pending, fingerprint=fingerprint
            ),
        )

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        return await self._timed(
            "claim_interrupt",
            self._store.claim_interrupt(namespace, execution_id, claim_token, now),
        )

    async def submit_decision(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        decision: DecisionRecord,
        *,
        fingerprint: str = "",
        interrupt_id: str = "",
    ) -> DecisionChange:
        return await self._timed(
            "submit_decision",
            self._store.submit_decision(
                namespace,
                request_id,
                execution_id,
                decision,
                fingerprint=fingerprint,
                interrupt_id=interrupt_id,
            ),
        )

    async def lease_decision(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        *,
        interrupt_id: str = "",
    ) -> DecisionChange:
        return await self._timed(
            "lease_decision",
            self._store.lease_decision(
                namespace,
                execution_id,
                checkpoint_id,
                lease_token,
                lease_until,
                now,
                interrupt_id=interrupt_id,
            ),
        )

    async def report_resume(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        status: DecisionStatus,
        error: str | None,
        now: datetime,
        *,
        interrupt_id: str = "",
    ) -> DecisionChange:
        return await self._timed(
            "report_resume",
            self._store.report_resume(
                namespace,
                execution_id,
                checkpoint_id,
                lease_token,
                status,
                error,
                now,
                interrupt_id=interrupt_id,
            ),
        )

    async def list_decisions(
        self, namespace: str, *, after_sequence: int, limit: int, open_only: bool
    ) -> list[PendingRecord]:
        return await self._timed(
            "list_decisions",
            self._store.list_decisions(
                namespace, after_sequence=after_sequence, limit=limit, open_only=open_only
            ),
        )

    async def purge_claims(self, claimed_before: datetime) -> int:
        return await self._timed("purge_claims", self._store.purge_claims(claimed_before))

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        return await self._timed(
            "purge_applied_requests", self._store.purge_applied_requests(applied_before)
        )

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        return await self._timed(
            "list_pending",
            self._store.list_pending(
                namespace,
                before_sequence=before_sequence,
                limit=limit,
                filters=filters,
                max_bytes=max_bytes,
            ),
        )

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        await self._timed(
            "put_idempotent",
            self._store.put_idempotent(
                namespace, request_id, execution_id, key, result_json, now, fingerprint=fingerprint
            ),
        )

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        return await self._timed(
            "get_idempotent", self._store.get_idempotent(namespace, execution_id, key)
        )

    async def snapshot_pending(
        self,
        namespace: str,
        filters: PendingFilter,
        *,
        as_of_cursor: int,
        before_sequence: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> SnapshotPage:
        return await self._timed(
            "snapshot_pending",
            self._store.snapshot_pending(
                namespace,
                filters,
                as_of_cursor=as_of_cursor,
                before_sequence=before_sequence,
                limit=limit,
                max_bytes=max_bytes,
            ),
        )

    async def read_events(
        self,
        *,
        after_cursor: int,
        up_to_cursor: int | None,
        limit: int,
        namespace: str | None,
        max_bytes: int | None = None,
    ) -> EventPage:
        return await self._timed(
            "read_events",
            self._store.read_events(
                after_cursor=after_cursor,
                up_to_cursor=up_to_cursor,
                limit=limit,
                namespace=namespace,
                max_bytes=max_bytes,
            ),
        )

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        return await self._timed(
            "purge_events", self._store.purge_events(written_before, batch_size=batch_size)
        )

    def event_notifier(self) -> EventNotifier:
        return self._store.event_notifier()

    def fenced(self, namespace: str, fence: LeaseFence) -> AbstractAsyncContextManager[bool]:
        # Not timed: it spans the write it guards, which is timed on its own.
        return self._store.fenced(namespace, fence)

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        return await self._timed(
            "list_unsynced",
            self._store.list_unsynced(namespace, after_sequence=after_sequence, limit=limit),
        )

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        return await self._timed(
            "settle_checkpoints", self._store.settle_checkpoints(namespace, settlements, now)
        )
