"""The SQL text a backend gives the graph store written once over its statements
(:class:`GraphStoreSql`), the parameters those statements bind (a put's writes as rows, a
checkpoint's lock key) and the records the rows they read become (the DeltaChannel walk's
too)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from checkpointd.graph.delta import ChannelKey, DeltaReads
from checkpointd.graph.records import (
    ChainLink,
    ChannelValue,
    GraphCheckpoint,
    GraphTuple,
    GraphWrite,
    TypedValue,
)
from checkpointd.store.statements import Statements

__all__ = [
    "GraphStoreSql",
    "SqlDeltaReads",
    "checkpoint_from_row",
    "checkpoint_key",
    "link_from_row",
    "tuple_from_rows",
    "write_from_row",
    "write_rows",
]


class GraphStoreSql(Protocol):
    """A backend's SQL text of what :class:`~checkpointd.graph.store.GraphStore` runs for it,
    each statement with its parameters in this order. ``key`` stands for namespace, thread
    id, checkpoint_ns."""

    #: Key, checkpoint id: the checkpoint's row (what the backend's ``_tuple`` reads).
    get_checkpoint: str
    #: Key: the row of the newest checkpoint.
    get_latest: str

    #: Namespace, request id: the kind, fingerprint and reply JSON recorded with it.
    request_reply: str
    #: Namespace, request id, kind, fingerprint, reply JSON, applied at.
    record_request: str
    #: Applied before: forgets the request ids recorded earlier.
    purge_requests: str
    #: Namespace, request id: waits for a concurrent call of the same id (None where every
    #: write transaction is serialized anyway, as SQLite's ``BEGIN IMMEDIATE``).
    lock_request: str | None
    #: A :func:`checkpoint_key`: serializes the puts on one checkpoint (G18).
    lock_checkpoint: str | None
    #: Namespace, request id, a :func:`checkpoint_key`: both locks in one statement.
    lock_request_and_checkpoint: str | None
    #: Namespace, request id, kind, fingerprint, reply JSON, applied at: the request's lock,
    #: then its record unless its id is recorded; returns a row when it recorded. A put's
    #: look-up, locks and record in one round trip (``once_recorded_first`` of
    #: :mod:`checkpointd.graph.requests`). None where a failed write does not undo its whole
    #: transaction (SQLite's group commit keeps the other writes' rows), so a record made
    #: before a write could outlive it.
    reserve_request: str | None
    #: The same, with a :func:`checkpoint_key` seventh: its lock (G18) after the request's.
    reserve_request_and_checkpoint: str | None
    #: Namespace, thread id, checkpoint_ns, checkpoint id, the Send targets' column.
    set_send_nodes: str
    #: Namespace, source thread, target thread, written at.
    copy_checkpoints: str
    #: Namespace, source thread, target thread.
    copy_blobs: str
    #: Namespace, source thread, target thread.
    copy_writes: str
    #: Namespace, thread id: a true first column when a checkpoint names a DeltaChannel.
    uses_delta_channel: str
    #: Namespace, thread id: each checkpoint_ns with its newest checkpoint id.
    heads: str
    #: Key, checkpoint id: deletes the writes of the older checkpoints.
    prune_older_writes: str
    #: Key, checkpoint id: deletes the older checkpoints.
    prune_older_checkpoints: str
    #: Key: empties the parent id of a checkpoint whose parent is gone.
    clear_lost_parents: str
    #: Key: deletes the values no checkpoint names.
    delete_unnamed_blobs: str

    # The DeltaChannel walk (G19), read by :class:`SqlDeltaReads`.
    #: Key: the id of the newest checkpoint.
    delta_newest: str
    #: Key, start id, most links: the chain of parents from the start, nearest first.
    delta_chain: str
    #: Key: every checkpoint's link.
    delta_links: str
    #: Key: the channels a checkpoint's metadata names as DeltaChannels.
    delta_channels: str
    #: Key, :meth:`value_keys`: the value type of each stored (channel, version).
    delta_types: str
    #: Key, :meth:`value_keys`: each stored (channel, version) value.
    delta_values: str
    #: Key, :meth:`id_list` of checkpoint ids, :meth:`id_list` of channels: their writes.
    delta_writes: str

    def value_keys(self, keys: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
        """The parameters that bind (channel, version) keys."""

    def id_list(self, ids: Sequence[str]) -> Any:
        """The parameter that binds a list of ids."""


class SqlDeltaReads(DeltaReads):
    """The DeltaChannel walk's reads in one thread and checkpoint_ns (``key``), on one
    connection, in the backend's SQL."""

    def __init__(self, conn: Statements, sql: GraphStoreSql, key: tuple[str, str, str]) -> None:
        self._conn = conn
        self._sql = sql
        self._key = key

    async def newest(self) -> str | None:
        found = await self._conn.fetch(self._sql.delta_newest, self._key)
        return str(found[0]["checkpoint_id"]) if found else None

    async def chain(self, start: str, limit: int) -> list[ChainLink]:
        rows = await self._conn.fetch(self._sql.delta_chain, (*self._key, start, limit))
        return [link_from_row(row) for row in rows]

    async def stored_types(self, keys: Sequence[ChannelKey]) -> dict[ChannelKey, str]:
        params = (*self._key, *self._sql.value_keys(keys))
        rows = await self._conn.fetch(self._sql.delta_types, params)
        return {(r["channel"], r["version"]): r["value_type"] for r in rows}

    async def values(self, keys: Sequence[ChannelKey]) -> dict[ChannelKey, TypedValue]:
        params = (*self._key, *self._sql.value_keys(keys))
        rows = await self._conn.fetch(self._sql.delta_values, params)
        return {
            (r["channel"], r["version"]): TypedValue(r["value_type"], bytes(r["value_data"]))
            for r in rows
        }

    async def writes(
        self, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[tuple[str, GraphWrite]]:
        sql = self._sql
        params = (*self._key, sql.id_list(checkpoint_ids), sql.id_list(channels))
        rows = await self._conn.fetch(sql.delta_writes, params)
        return [(r["checkpoint_id"], write_from_row(tuple(r)[1:])) for r in rows]

    async def links(self) -> list[ChainLink]:
        return [link_from_row(r) for r in await self._conn.fetch(self._sql.delta_links, self._key)]

    async def delta_channels(self) -> set[str]:
        return {r[0] for r in await self._conn.fetch(self._sql.delta_channels, self._key)}


def write_rows(writes: Sequence[GraphWrite]) -> list[tuple[Any, ...]]:
    """A put's writes as rows of task id, idx, task path, channel, value type, value data."""
    return [(w.task_id, w.idx, w.task_path, w.channel, w.value.type, w.value.data) for w in writes]


def checkpoint_key(namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """What a checkpoint's lock is taken on (each part's length first: no two keys collide)."""
    parts = (namespace, thread_id, checkpoint_ns, checkpoint_id)
    return "/".join(f"{len(part)}:{part}" for part in parts)


def checkpoint_from_row(row: Any) -> GraphCheckpoint:
    """A checkpoint's row (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
    body_type, body_data, metadata_json, channel_versions, run_id) as its record."""
    return GraphCheckpoint(
        thread_id=row["thread_id"],
        checkpoint_ns=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_checkpoint_id=row["parent_checkpoint_id"],
        body=TypedValue(row["body_type"], bytes(row["body_data"])),
        metadata_json=row["metadata_json"],
        channel_versions=json.loads(row["channel_versions"]),
        run_id=row["run_id"],
    )


def tuple_from_rows(
    checkpoint: GraphCheckpoint,
    values: Iterable[Sequence[Any]],
    writes: Iterable[Sequence[Any]],
) -> GraphTuple:
    """The checkpoint with its values' rows (channel, version, value type, value data) and its
    writes' rows (task id, task path, idx, channel, value type, value data)."""
    return GraphTuple(
        checkpoint,
        tuple(
            ChannelValue(channel, version, TypedValue(kind, bytes(data)))
            for channel, version, kind, data in values
        ),
        tuple(write_from_row(row) for row in writes),
    )


def write_from_row(row: Sequence[Any]) -> GraphWrite:
    """A write's row (task id, task path, idx, channel, value type, value data) as its record."""
    task_id, task_path, idx, channel, kind, data = row
    return GraphWrite(task_id, task_path, int(idx), channel, TypedValue(kind, bytes(data)))


def link_from_row(row: Sequence[Any]) -> ChainLink:
    """A checkpoint's row of the DeltaChannel walk (checkpoint id, parent id, channel versions
    as JSON) as its chain link."""
    checkpoint_id, parent_checkpoint_id, versions = row
    return ChainLink(checkpoint_id, parent_checkpoint_id, json.loads(versions))
