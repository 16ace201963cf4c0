"""The graph store: the ``GraphStore`` protocol and its domain types.

It holds the checkpoints of graph runtimes such as LangGraph, beside (not inside) the
fastaiagent rows. Three tables per backend, all keyed by namespace first:

* ``graph_checkpoints``: primary key ``(namespace, thread_id, checkpoint_ns,
  checkpoint_id)``; the serialized body (type and bytes, never decoded here), the metadata
  as JSON (what lists filter on), the channel versions as a JSON object of strings (what
  joins the values without decoding the body), the parent id, and the metadata's
  ``run_id`` in a column of its own (what DeleteGraphRuns finds rows by).
* ``graph_blobs``: primary key ``(namespace, thread_id, checkpoint_ns, channel, version)``;
  each value stored once, so a put writes only the channels whose version changed.
* ``graph_writes``: primary key ``(namespace, thread_id, checkpoint_ns, checkpoint_id,
  task_id, idx)``: pending writes, with ``task_path``.
* ``graph_requests``: primary key ``(namespace, request_id)``: the request ids of applied
  mutations with their replies (JSON), so a retry is answered like the first call and
  writes nothing, whatever happened since (C9's rule). The purge forgets them after the
  request-id retention.

A backend reuses its store's connections and transactions (``SQLiteStore.access``,
``PostgresStore.access``) and never opens its own.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from checkpointd.graph import requests as graph_requests
from checkpointd.graph.interrupts import GraphInterrupt, PendingOps, remove_threads
from checkpointd.graph.retention import RetentionMethods

__all__ = [
    "ChainLink",
    "ChannelValue",
    "DeltaAncestor",
    "DeltaCursor",
    "DeltaPage",
    "GraphCheckpoint",
    "GraphListQuery",
    "GraphPage",
    "GraphPosition",
    "GraphStore",
    "GraphTuple",
    "GraphWrite",
    "PruneStrategy",
    "TypedValue",
    "tuple_size",
]


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A serialized value: the serializer's type tag and its bytes."""

    type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelValue:
    """The value of one channel at one version."""

    channel: str
    version: str
    value: TypedValue


@dataclass(frozen=True, slots=True)
class GraphWrite:
    """One pending write of a task."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    value: TypedValue


@dataclass(frozen=True, slots=True)
class GraphCheckpoint:
    """One checkpoint of a thread, without its channel values."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    """Empty for the first checkpoint of a thread."""
    body: TypedValue
    metadata_json: str
    """A JSON object."""
    channel_versions: dict[str, str]
    run_id: str = ""
    """The metadata's ``run_id`` when it is a string, else empty (filled by the servicer)."""
    send_nodes: tuple[str, ...] = ()
    """The node each Send pending in the checkpoint targets, in order, as its put names them:
    they name the pauses of the tasks those Sends start (G8). Not stored."""


@dataclass(frozen=True, slots=True)
class GraphTuple:
    """A checkpoint with the values of the versions it names and its pending writes."""

    checkpoint: GraphCheckpoint
    channel_values: tuple[ChannelValue, ...]
    pending_writes: tuple[GraphWrite, ...]


def tuple_size(found: GraphTuple) -> int:
    """The bytes a tuple holds in its values, body and metadata (what a page budget counts)."""
    return (
        len(found.checkpoint.body.data)
        + len(found.checkpoint.metadata_json)
        + sum(len(v.value.data) for v in found.channel_values)
        + sum(len(w.value.data) for w in found.pending_writes)
    )


@dataclass(frozen=True, slots=True)
class GraphPage:
    """A page of a listing, and whether rows were left for the next one."""

    tuples: list[GraphTuple]
    more: bool


@dataclass(frozen=True, slots=True)
class GraphPosition:
    """Where a listing stands: the last row returned, in listing order."""

    checkpoint_id: str
    thread_id: str
    checkpoint_ns: str


@dataclass(frozen=True, slots=True)
class GraphListQuery:
    """What ListGraphCheckpoints asks for (validated)."""

    thread_id: str
    """Empty: every thread."""
    checkpoint_ns: str | None
    """None: every checkpoint_ns."""
    checkpoint_id: str
    """Empty: every checkpoint."""
    metadata_filter_json: str
    """A JSON object, or empty for none."""
    before_checkpoint_id: str
    """Empty: no bound."""


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One checkpoint of a parent chain, without its body."""

    checkpoint_id: str
    parent_checkpoint_id: str
    channel_versions: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeltaAncestor:
    """One ancestor the walk visited: its writes to the channels still walked and the seeds
    of the channels whose walk ends at it."""

    checkpoint_id: str
    walking: tuple[str, ...]
    """The channels still walked when the walk reached it (what a page resumes with)."""
    writes: tuple[GraphWrite, ...]
    seeds: tuple[ChannelValue, ...]

    def size(self) -> int:
        """The stored bytes it holds (what a page budget counts)."""
        return sum(len(w.value.data) for w in self.writes) + sum(
            len(s.value.data) for s in self.seeds
        )


@dataclass(frozen=True, slots=True)
class DeltaCursor:
    """Where a walk goes on: the next ancestor to visit and the channels still walked."""

    target_id: str
    """The checkpoint whose history is walked (the newest, resolved on the first page)."""
    checkpoint_id: str
    walking: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeltaPage:
    """A page of a walk: its ancestors, nearest first, and where the next page starts."""

    ancestors: list[DeltaAncestor]
    next: DeltaCursor | None
    target_id: str = ""
    """The checkpoint whose history is walked; empty when none was found."""

    def resume_at(self, index: int) -> DeltaCursor:
        """The cursor that resumes this page at its ``index``-th ancestor (when the reply had
        no room for it)."""
        ancestor = self.ancestors[index]
        return DeltaCursor(self.target_id, ancestor.checkpoint_id, ancestor.walking)


class PruneStrategy(Enum):
    """What a prune keeps."""

    KEEP_LATEST = "keep_latest"
    DELETE = "delete"


class GraphStore(RetentionMethods, abc.ABC):
    """Persistence of graph checkpoints, channel values and pending writes: the base class of
    both backends' graph stores, with the writes that are the same on both written here
    (delete a thread, delete runs, copy a thread, prune, and retention through
    :class:`~checkpointd.graph.retention.RetentionMethods`), each one transaction of the
    backend's whose statements its hooks run (``conn`` is the backend's connection in that
    transaction).

    Every mutating method takes a ``request_id``: when it is not empty and was recorded by an
    earlier call of the same namespace, nothing is written and that call's reply is
    returned; otherwise the call applies and records it (with ``now``) in its transaction.
    It also takes the request's ``fingerprint`` (:mod:`checkpointd.fingerprint`; empty: none)
    and records it beside the id: an id recorded with another fingerprint raises
    :class:`~checkpointd.store.base.RequestIdReused` and writes nothing (C10).
    """

    @abc.abstractmethod
    async def put_checkpoint(
        self,
        namespace: str,
        request_id: str,
        checkpoint: GraphCheckpoint,
        new_values: Sequence[ChannelValue],
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Upsert the checkpoint and insert the values not stored yet, in one transaction,
        which also ends the pending interrupts recorded against its parent (G10)."""

    @abc.abstractmethod
    async def put_writes(
        self,
        namespace: str,
        request_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[GraphWrite],
        now: datetime,
        *,
        fingerprint: str = "",
        task_id: str = "",
        interrupts: Sequence[GraphInterrupt] = (),
    ) -> None:
        """Store pending writes: all upserted when every idx is negative, else each inserted
        unless its key is stored. In the same transaction the task's (``task_id``) pending
        interrupts at the checkpoint become the described ``interrupts`` (G8, G10; see
        :mod:`checkpointd.graph.interrupts`)."""

    @abc.abstractmethod
    async def get_tuple(
        self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> GraphTuple | None:
        """The checkpoint (the newest of the thread's checkpoint_ns when ``checkpoint_id`` is
        empty) with its values and writes; None when there is none."""

    @abc.abstractmethod
    async def list_tuples(
        self,
        namespace: str,
        query: GraphListQuery,
        *,
        after: GraphPosition | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> GraphPage:
        """Up to ``limit`` matching tuples after ``after``, newest first; the page stops once
        its tuples hold more than ``max_bytes`` (always at least one), so a page of large
        checkpoints never loads much more than one reply's worth (B1)."""

    @abc.abstractmethod
    async def delta_history(
        self,
        namespace: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        channels: Sequence[str],
        *,
        cursor: DeltaCursor | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> DeltaPage:
        """One page of the DeltaChannel history walk of the checkpoint (the newest when
        ``checkpoint_id`` is empty) for ``channels``, from its parent or from ``cursor``, in
        one read (:func:`checkpointd.graph.delta.history`, G19)."""

    @abc.abstractmethod
    async def purge_requests(self, applied_before: datetime) -> int:
        """Forget the request ids recorded before ``applied_before``; return how many."""

    # --- the hooks of the shared writes ------------------------------------------------

    @abc.abstractmethod
    async def _transaction(
        self,
        namespace: str,
        request_id: str,
        kind: str,
        fingerprint: str,
        now: datetime,
        apply: Callable[[Any], Awaitable[int]],
    ) -> int:
        """Run ``apply`` in one transaction unless ``request_id`` was applied before; return
        its count (or the recorded one)."""

    @abc.abstractmethod
    def _pending(self, conn: Any, namespace: str) -> PendingOps:
        """The graph interrupts' statements on this transaction (G8-G10)."""

    @abc.abstractmethod
    async def _delete_threads(self, conn: Any, namespace: str, thread_ids: Sequence[str]) -> int:
        """Delete the threads' checkpoints, values and writes; return the checkpoints."""

    @abc.abstractmethod
    async def _delete_runs(self, conn: Any, namespace: str, run_ids: Sequence[str]) -> int:
        """Delete the runs' checkpoints and writes and the values left unnamed."""

    @abc.abstractmethod
    async def _copy_thread(
        self, conn: Any, namespace: str, source: str, target: str, now: datetime
    ) -> int:
        """Copy the source thread's rows to the target; return the checkpoints copied."""

    @abc.abstractmethod
    async def _keep_newest(self, conn: Any, namespace: str, thread_ids: Sequence[str]) -> int:
        """Keep the newest checkpoint of each checkpoint_ns of each thread."""

    async def _remove_pauses(self, conn: Any, namespace: str, thread_ids: list[str]) -> None:
        """A deleted thread's pauses and decisions go with it (G10), retention's too."""
        await remove_threads(self._pending(conn, namespace), thread_ids)

    # --- the writes both backends share -------------------------------------------------

    async def delete_thread(
        self,
        namespace: str,
        request_id: str,
        thread_id: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Delete the thread's checkpoints, values and writes in one transaction; return the
        checkpoints deleted."""

        async def apply(conn: Any) -> int:
            deleted = await self._delete_threads(conn, namespace, [thread_id])
            # The pauses' events last: the Postgres outbox wants them at the end.
            await self._remove_pauses(conn, namespace, [thread_id])
            return deleted

        kind = graph_requests.DELETE_THREAD
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def delete_runs(
        self,
        namespace: str,
        request_id: str,
        run_ids: Sequence[str],
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Delete the checkpoints of these runs with their writes and the values no
        remaining checkpoint names, in one transaction; return the checkpoints deleted."""

        async def apply(conn: Any) -> int:
            return await self._delete_runs(conn, namespace, run_ids) if run_ids else 0

        kind = graph_requests.DELETE_RUNS
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def copy_thread(
        self,
        namespace: str,
        request_id: str,
        source: str,
        target: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Copy the source thread's rows to the target, keeping the target's rows with the
        same keys, in one transaction; return the checkpoints copied."""

        async def apply(conn: Any) -> int:
            return await self._copy_thread(conn, namespace, source, target, now)

        kind = graph_requests.COPY_THREAD
        return await self._transaction(namespace, request_id, kind, fingerprint, now, apply)

    async def prune(
        self,
        namespace: str,
        request_id: str,
        thread_ids: Sequence[str],
        strategy: PruneStrategy,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> int:
        """Keep the newest checkpoint of each checkpoint_ns of each thread, or delete the
        threads, in one transaction; return the checkpoints deleted.

        ``KEEP_LATEST`` leaves whole a thread whose graph uses a DeltaChannel (a checkpoint's
        metadata has ``counters_since_delta_snapshot`` or ``delta_writes_versioned``): its
        channels are rebuilt from the writes of older checkpoints."""

        async def apply(conn: Any) -> int:
            if strategy is not PruneStrategy.DELETE:
                return await self._keep_newest(conn, namespace, thread_ids)
            deleted = await self._delete_threads(conn, namespace, thread_ids)
            await self._remove_pauses(conn, namespace, list(thread_ids))
            return deleted

        return await self._transaction(
            namespace, request_id, graph_requests.PRUNE, fingerprint, now, apply
        )
