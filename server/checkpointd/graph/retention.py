"""Retention of graph threads (ApplyGraphRetention, ``--graph-retention``), the same in both
backends: the rule, the counts, and the one loop that applies a rule to a namespace.

Two rules, either or both:

* ``idle_for``: a thread whose newest checkpoint was written (``written_at``, the server's
  clock) longer ago is deleted whole, every ``checkpoint_ns``;
* ``keep_newest``: of each ``checkpoint_ns`` of every other thread only the newest K
  checkpoints stay, with their pending writes and every channel value one of them names
  (values are stored per version, and a checkpoint names versions that older checkpoints
  wrote, so a value goes only once no kept checkpoint names it). A kept checkpoint whose
  parent went names none, as PruneGraphThreads leaves it.

Neither cuts a thread paused on an interrupt (the backends' ``PAUSED`` predicate says which:
one SQL predicate per backend), and ``keep_newest`` leaves whole a thread whose graph uses a
DeltaChannel (its channels are rebuilt from the writes of older checkpoints).

The work goes in short transactions, as PruneCheckpoints' does: whole idle threads, several
to a transaction up to ``batch_size`` checkpoints (a larger thread alone), and the cuts of
``keep_newest`` at most ``batch_size`` checkpoints each, oldest first, the values no longer
named going in the transaction of the last cut. Between two transactions what is left is
readable: a kept checkpoint never lacks a value or a write it had. Each transaction checks
its threads again (still idle, not paused), so a thread that a run wrote to since it was
listed is left alone. A dry run makes the same statements and rolls each transaction back
(a cut larger than a batch is then one transaction, since its steps would see the same rows
again); its counts are those of a real run on the store as it is.

A request id is checked before the first transaction and its reply recorded after the last
(:func:`~checkpointd.graph.requests.recorded_reply` decides, as for every graph
mutation); a dry run neither checks nor records one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from typing import Protocol

from checkpointd.graph import requests as graph_requests

__all__ = [
    "INTERRUPT_CHANNEL",
    "RetentionBackend",
    "RetentionCounts",
    "RetentionMethods",
    "RetentionRule",
    "RetentionTransaction",
]

#: The channel of LangGraph's interrupt writes (langgraph.constants.INTERRUPT).
INTERRUPT_CHANNEL = "__interrupt__"


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """What a retention run deletes; at least one rule."""

    idle_for: timedelta | None = None
    """Delete the threads whose newest checkpoint is older than this; None: no such rule."""
    keep_newest: int = 0
    """Keep this many newest checkpoints per thread and checkpoint_ns; 0: no such rule."""

    def __post_init__(self) -> None:
        if self.idle_for is not None and self.idle_for <= timedelta(0):
            raise ValueError("idle_for must be positive")
        if self.keep_newest < 0:
            raise ValueError("keep_newest must not be negative")
        if self.idle_for is None and not self.keep_newest:
            raise ValueError("a retention rule needs idle_for or keep_newest")


@dataclass(frozen=True, slots=True)
class RetentionCounts:
    """What a retention run deleted (or, dry, would delete) and what it left alone."""

    threads_deleted: int = 0
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    channel_values_deleted: int = 0
    paused_threads_kept: int = 0
    delta_threads_kept: int = 0

    def __add__(self, other: RetentionCounts) -> RetentionCounts:
        return RetentionCounts(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )

    @property
    def deleted_anything(self) -> bool:
        return bool(self.checkpoints_deleted or self.writes_deleted or self.channel_values_deleted)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RetentionCounts:
        data = json.loads(text)
        return cls(**{f.name: int(data.get(f.name, 0)) for f in fields(cls)})


PAUSED_KEPT = RetentionCounts(paused_threads_kept=1)
DELTA_KEPT = RetentionCounts(delta_threads_kept=1)


class RetentionTransaction(Protocol):
    """The statements of a backend inside one write transaction."""

    async def is_paused(self, namespace: str, thread_id: str) -> bool:
        """Whether the thread waits on an interrupt (the backend's ``PAUSED`` predicate)."""
        ...

    async def is_idle(self, namespace: str, thread_id: str, cutoff: datetime) -> bool:
        """Whether the thread has checkpoints and none written at or after ``cutoff``."""
        ...

    async def uses_delta_channel(self, namespace: str, thread_id: str) -> bool:
        """Whether a checkpoint of the thread has DeltaChannel metadata."""
        ...

    async def delete_idle_thread(
        self, namespace: str, thread_id: str, cutoff: datetime
    ) -> RetentionCounts:
        """Delete the thread whole if it is still idle and not paused (zero counts if not)."""
        ...

    async def cut(
        self, namespace: str, thread_id: str, checkpoint_ns: str, keep: int, most: int | None
    ) -> tuple[RetentionCounts, bool]:
        """Delete the oldest checkpoints of the thread's checkpoint_ns beyond its newest
        ``keep``, at most ``most`` (None: all), with their writes; when none beyond is left,
        also the values no remaining checkpoint names. Returns the counts and whether the
        cut is complete."""
        ...


class RetentionBackend(Protocol):
    """What one backend lends the retention loop."""

    async def idle_threads(
        self, namespace: str, cutoff: datetime, after: str, limit: int
    ) -> list[tuple[str, int]]:
        """Up to ``limit`` threads after ``after`` (by id) whose newest checkpoint was written
        before ``cutoff``, with their number of checkpoints, read outside a transaction."""
        ...

    async def crowded(
        self, namespace: str, keep: int, after: tuple[str, str], limit: int
    ) -> list[tuple[str, str, int]]:
        """Up to ``limit`` (thread_id, checkpoint_ns, checkpoints) after ``after`` with more
        than ``keep`` checkpoints, in that order."""
        ...

    def transaction(self, *, rollback: bool) -> AbstractAsyncContextManager[RetentionTransaction]:
        """One write transaction, committed when the body returns unless ``rollback``."""
        ...

    async def recorded(self, namespace: str, request_id: str) -> tuple[str, str, str] | None:
        """The (kind, fingerprint, reply_json) recorded under the request id, if any."""
        ...

    async def record(
        self, namespace: str, request_id: str, reply: tuple[str, str, str], now: datetime
    ) -> bool:
        """Record the reply (kind, fingerprint, reply_json, as :meth:`recorded` returns it);
        False when the id was recorded meanwhile (a concurrent call)."""
        ...

    async def next_namespace(self, after: str) -> str | None:
        """The first namespace after ``after`` that has graph checkpoints."""
        ...


class RetentionMethods:
    """The retention methods of a :class:`~checkpointd.graph.store.GraphStore`, the same on
    both backends over the backend's :class:`RetentionBackend`."""

    _retention: RetentionBackend

    async def retention_namespaces(self) -> list[str]:
        """Every namespace with graph checkpoints: one index seek each, not a scan."""
        found: list[str] = []
        after = ""
        while (namespace := await self._retention.next_namespace(after)) is not None:
            found.append(namespace)
            after = namespace
        return found

    async def apply_retention(
        self,
        namespace: str,
        request_id: str,
        rule: RetentionRule,
        now: datetime,
        *,
        batch_size: int,
        dry_run: bool = False,
        fingerprint: str = "",
    ) -> RetentionCounts:
        """Apply ``rule`` to the namespace (see the module's text), in short transactions;
        return the counts."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        backend = self._retention
        kind = graph_requests.APPLY_RETENTION
        if dry_run:
            request_id = ""
        if request_id:
            earlier = await backend.recorded(namespace, request_id)
            if earlier is not None:
                reply = graph_requests.recorded_reply(request_id, kind, fingerprint, earlier)
                if reply is not None:
                    return RetentionCounts.from_json(reply)
                # The id of another kind of call, unfingerprinted: apply, as once.
                request_id = ""
        run = _Run(backend, namespace, rule, now, batch_size, dry_run)
        counts = RetentionCounts()
        if rule.idle_for is not None:
            counts += await run.expire_idle()
        if rule.keep_newest:
            counts += await run.keep_newest(rule.keep_newest)
        reply_row = (kind, fingerprint, counts.to_json())
        if request_id and not await backend.record(namespace, request_id, reply_row, now):
            earlier = await backend.recorded(namespace, request_id)
            if earlier is not None:  # a concurrent call with this id finished first
                reply = graph_requests.recorded_reply(request_id, kind, fingerprint, earlier)
                if reply is not None:
                    return RetentionCounts.from_json(reply)
        return counts


class _Run:
    """One retention run over one namespace."""

    def __init__(
        self,
        backend: RetentionBackend,
        namespace: str,
        rule: RetentionRule,
        now: datetime,
        batch_size: int,
        dry_run: bool,
    ) -> None:
        self._backend = backend
        self._namespace = namespace
        self._cutoff: datetime | None = None
        if rule.idle_for is not None:
            try:
                self._cutoff = now - rule.idle_for
            except OverflowError:  # longer ago than any write
                self._cutoff = datetime.min.replace(tzinfo=now.tzinfo)
        self._batch = batch_size
        self._dry = dry_run
        self._last_kept = ""

    async def expire_idle(self) -> RetentionCounts:
        """Delete the idle threads that are not paused, several per transaction."""
        assert self._cutoff is not None
        counts = RetentionCounts()
        after = ""
        while True:
            found = await self._backend.idle_threads(
                self._namespace, self._cutoff, after, self._batch
            )
            group: list[str] = []
            size = 0
            for thread_id, checkpoints in found:
                group.append(thread_id)
                size += checkpoints
                if size >= self._batch:
                    counts += await self._delete_idle(group)
                    group, size = [], 0
            if group:
                counts += await self._delete_idle(group)
            if len(found) < self._batch:
                return counts
            after = found[-1][0]

    async def _delete_idle(self, thread_ids: Sequence[str]) -> RetentionCounts:
        assert self._cutoff is not None
        counts = RetentionCounts()
        async with self._backend.transaction(rollback=self._dry) as tx:
            for thread_id in thread_ids:
                if await tx.is_paused(self._namespace, thread_id):
                    counts += PAUSED_KEPT
                else:
                    counts += await tx.delete_idle_thread(self._namespace, thread_id, self._cutoff)
        return counts

    async def keep_newest(self, keep: int) -> RetentionCounts:
        """Cut each crowded checkpoint_ns to its newest ``keep``: small cuts share a
        transaction up to the batch size, a larger one is made in batch-size steps."""
        counts = RetentionCounts()
        after = ("", "")  # thread ids are never empty: every row comes after this
        while True:
            found = await self._backend.crowded(self._namespace, keep, after, self._batch)
            group: list[tuple[str, str]] = []
            size = 0
            for thread_id, checkpoint_ns, checkpoints in found:
                beyond = checkpoints - keep
                if beyond > self._batch and not self._dry:
                    if group:
                        counts += await self._cut_group(group, keep)
                        group, size = [], 0
                    counts += await self._cut_in_steps(thread_id, checkpoint_ns, keep)
                    continue
                group.append((thread_id, checkpoint_ns))
                size += beyond
                if size >= self._batch:
                    counts += await self._cut_group(group, keep)
                    group, size = [], 0
            if group:
                counts += await self._cut_group(group, keep)
            if len(found) < self._batch:
                return counts
            after = (found[-1][0], found[-1][1])

    async def _left_whole(self, tx: RetentionTransaction, thread_id: str) -> RetentionCounts | None:
        """None to cut the thread, else what to count for leaving it whole: a paused thread
        or one whose graph uses a DeltaChannel counts once however many checkpoint_ns it has
        (its units come one after another); a thread the idle rule deletes is not cut again
        (in a dry run it is still there) and was counted by that rule."""
        idle = self._cutoff is not None and await tx.is_idle(
            self._namespace, thread_id, self._cutoff
        )
        if await tx.is_paused(self._namespace, thread_id):
            reason = RetentionCounts() if idle else PAUSED_KEPT
        elif idle:
            return RetentionCounts()
        elif await tx.uses_delta_channel(self._namespace, thread_id):
            reason = DELTA_KEPT
        else:
            return None
        if thread_id == self._last_kept:
            return RetentionCounts()
        self._last_kept = thread_id
        return reason

    async def _cut_group(self, units: Sequence[tuple[str, str]], keep: int) -> RetentionCounts:
        counts = RetentionCounts()
        async with self._backend.transaction(rollback=self._dry) as tx:
            for thread_id, checkpoint_ns in units:
                reason = await self._left_whole(tx, thread_id)
                if reason is not None:
                    counts += reason
                    continue
                cut, _ = await tx.cut(self._namespace, thread_id, checkpoint_ns, keep, None)
                counts += cut
        return counts

    async def _cut_in_steps(self, thread_id: str, checkpoint_ns: str, keep: int) -> RetentionCounts:
        counts = RetentionCounts()
        while True:
            async with self._backend.transaction(rollback=False) as tx:
                reason = await self._left_whole(tx, thread_id)
                if reason is not None:
                    return counts + reason
                cut, done = await tx.cut(
                    self._namespace, thread_id, checkpoint_ns, keep, self._batch
                )
            counts += cut
            if done:
                return counts
