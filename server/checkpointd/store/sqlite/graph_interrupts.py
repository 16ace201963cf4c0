"""The SQLite statements of graph interrupts (:mod:`checkpointd.graph.interrupts`), run
on the writer inside the graph store's transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final

from checkpointd.domain import EventKind, PendingRecord
from checkpointd.graph.interrupts import (
    GraphInterrupt,
    TaskPlace,
    held_by_task,
    held_fields,
    send_nodes_from,
)
from checkpointd.store import rows, times
from checkpointd.store.columns import PENDING_COLUMNS, pending_params
from checkpointd.store.sqlite.on_thread import Statements

__all__ = ["SQLitePendingOps"]

_GRAPH: Final = "interrupt_id <> ''"
OF_TASK: Final = (
    f"SELECT {PENDING_COLUMNS} FROM pending_interrupts WHERE namespace = ? AND execution_id = ? "
    f"AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? AND {_GRAPH}"
)
OF_CHECKPOINT: Final = (
    f"SELECT {PENDING_COLUMNS} FROM pending_interrupts WHERE namespace = ? AND execution_id = ? "
    f"AND checkpoint_ns = ? AND checkpoint_id = ? AND {_GRAPH}"
)
OF_THREAD: Final = (
    f"SELECT {PENDING_COLUMNS} FROM pending_interrupts "
    f"WHERE namespace = ? AND execution_id = ? AND {_GRAPH}"
)
INSERT: Final = (
    f"INSERT INTO pending_interrupts (namespace, {PENDING_COLUMNS}, task_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE: Final = (
    "DELETE FROM pending_interrupts WHERE namespace = ? AND execution_id = ? AND interrupt_id = ?"
)
DELETE_DECISIONS: Final = (
    f"DELETE FROM interrupt_decisions WHERE namespace = ? AND execution_id = ? AND {_GRAPH}"
)
# A graph pause takes its place in the listing order from the checkpoints' AUTOINCREMENT
# counter, so no checkpoint or pause ever shares a sequence with another (writers are
# serialized: the read and the bump are one statement in the write transaction).
SEED_SEQUENCE: Final = (
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'checkpoints', 0 "
    "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'checkpoints')"
)
NEXT_SEQUENCE: Final = (
    "UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'checkpoints' RETURNING seq"
)

HAS_CHECKPOINT: Final = (
    "SELECT 1 FROM graph_checkpoints WHERE namespace = ? AND thread_id = ? "
    "AND checkpoint_ns = ? AND checkpoint_id = ?"
)
TASK_PATH_OF: Final = (
    "SELECT task_path FROM graph_writes WHERE namespace = ? AND thread_id = ? "
    "AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? LIMIT 1"
)
SEND_NODES_OF: Final = (
    "SELECT send_nodes FROM graph_checkpoints WHERE namespace = ? AND thread_id = ? "
    "AND checkpoint_ns = ? AND checkpoint_id = ?"
)
_HELD_COLUMNS: Final = "task_id, interrupt_id, chain_name, node_id, reason, context_json"
UNHOLD_TASK: Final = (
    "DELETE FROM graph_held_interrupts WHERE namespace = ? AND thread_id = ? "
    "AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ?"
)
HOLD: Final = (
    "INSERT INTO graph_held_interrupts (namespace, thread_id, checkpoint_ns, checkpoint_id, "
    f"position, held_at, {_HELD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
RELEASE: Final = (
    "DELETE FROM graph_held_interrupts WHERE namespace = ? AND thread_id = ? "
    f"AND checkpoint_ns = ? AND checkpoint_id = ? RETURNING position, {_HELD_COLUMNS}"
)
DROP_HELD: Final = "DELETE FROM graph_held_interrupts WHERE namespace = ? AND thread_id = ?"

AppendEvent = Callable[[Statements, str, EventKind, PendingRecord, int], Awaitable[None]]


class SQLitePendingOps:
    """:class:`~checkpointd.graph.interrupts.PendingOps` on one write transaction."""

    def __init__(self, conn: Statements, namespace: str, append_event: AppendEvent) -> None:
        self._conn = conn
        self._namespace = namespace
        self._append_event = append_event

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[PendingRecord]:
        found: list[sqlite3.Row] = await self._conn.fetch(sql, params)
        return [rows.pending_from_row(row, times.from_us) for row in found]

    async def of_task(self, place: TaskPlace) -> list[PendingRecord]:
        return await self._rows(
            OF_TASK,
            (
                self._namespace,
                place.thread_id,
                place.checkpoint_ns,
                place.checkpoint_id,
                place.task_id,
            ),
        )

    async def of_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[PendingRecord]:
        return await self._rows(
            OF_CHECKPOINT, (self._namespace, thread_id, checkpoint_ns, checkpoint_id)
        )

    async def of_thread(self, thread_id: str) -> list[PendingRecord]:
        return await self._rows(OF_THREAD, (self._namespace, thread_id))

    async def next_sequence(self) -> int:
        await self._conn.run(SEED_SEQUENCE)
        found = await self._conn.fetch(NEXT_SEQUENCE)
        return int(found[0][0])

    async def insert(self, record: PendingRecord, task_id: str) -> None:
        params = (self._namespace, *pending_params(record, times.to_us), task_id)
        await self._conn.run(INSERT, params)

    async def delete(self, record: PendingRecord) -> None:
        await self._conn.run(DELETE, (self._namespace, record.execution_id, record.interrupt_id))

    async def delete_decisions(self, thread_id: str) -> None:
        await self._conn.run(DELETE_DECISIONS, (self._namespace, thread_id))

    async def event(self, kind: EventKind, record: PendingRecord) -> None:
        await self._append_event(self._conn, self._namespace, kind, record, times.now_us())

    async def has_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
        found = await self._conn.fetch(
            HAS_CHECKPOINT, (self._namespace, thread_id, checkpoint_ns, checkpoint_id)
        )
        return bool(found)

    async def task_path_of(self, place: TaskPlace) -> str | None:
        found = await self._conn.fetch(
            TASK_PATH_OF,
            (
                self._namespace,
                place.thread_id,
                place.checkpoint_ns,
                place.checkpoint_id,
                place.task_id,
            ),
        )
        return str(found[0][0]) if found else None

    async def send_nodes_of(self, place: TaskPlace) -> list[str]:
        found = await self._conn.fetch(
            SEND_NODES_OF,
            (self._namespace, place.thread_id, place.checkpoint_ns, place.checkpoint_id),
        )
        return send_nodes_from(found[0][0] if found else "")

    async def hold(
        self, place: TaskPlace, described: Sequence[GraphInterrupt], now: datetime
    ) -> None:
        key = (
            self._namespace,
            place.thread_id,
            place.checkpoint_ns,
            place.checkpoint_id,
        )
        await self._conn.run(UNHOLD_TASK, (*key, place.task_id))
        await self._conn.run_many(
            HOLD,
            [
                (*key, position, times.to_us(now), place.task_id, *held_fields(interrupt))
                for position, interrupt in enumerate(described)
            ],
        )

    async def release(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, list[GraphInterrupt]]]:
        found: list[sqlite3.Row] = await self._conn.fetch(
            RELEASE, (self._namespace, thread_id, checkpoint_ns, checkpoint_id)
        )
        return held_by_task([tuple(row) for row in found])

    async def drop_held(self, thread_id: str) -> None:
        await self._conn.run(DROP_HELD, (self._namespace, thread_id))
