"""The Postgres statements of graph interrupts (:mod:`checkpointd.graph.interrupts`),
run on the graph store's transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

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

__all__ = ["PendingSql", "PostgresPendingOps"]

AppendEvent = Callable[[Any, str, EventKind, PendingRecord], Awaitable[None]]


class PendingSql:
    """The statements, in one schema."""

    def __init__(self, quoted_schema: str) -> None:
        s = quoted_schema
        pending, decisions = f"{s}.pending_interrupts", f"{s}.interrupt_decisions"
        graph = "interrupt_id <> ''"
        self.of_task = (
            f"SELECT {PENDING_COLUMNS} FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            f"AND checkpoint_ns = $3 AND checkpoint_id = $4 AND task_id = $5 AND {graph} "
            "FOR UPDATE"
        )
        self.of_checkpoint = (
            f"SELECT {PENDING_COLUMNS} FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            f"AND checkpoint_ns = $3 AND checkpoint_id = $4 AND {graph} FOR UPDATE"
        )
        self.of_thread = (
            f"SELECT {PENDING_COLUMNS} FROM {pending} "
            f"WHERE namespace = $1 AND execution_id = $2 AND {graph} FOR UPDATE"
        )
        # A graph pause takes its place in the listing order from the checkpoints' identity
        # sequence, so no checkpoint or pause shares a sequence with another.
        self.next_sequence = (
            f"SELECT nextval(pg_get_serial_sequence('{s}.checkpoints', 'sequence'))"
        )
        # A concurrent writer of the same interrupt id inserted first: its row stands (I2).
        self.insert = (
            f"INSERT INTO {pending} (namespace, {PENDING_COLUMNS}, task_id) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
            "ON CONFLICT (namespace, execution_id, interrupt_id) DO NOTHING RETURNING 1"
        )
        self.delete = (
            f"DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            "AND interrupt_id = $3"
        )
        held = f"{s}.graph_held_interrupts"
        held_columns = "task_id, interrupt_id, chain_name, node_id, reason, context_json"
        checkpoint = (
            "namespace = $1 AND thread_id = $2 AND checkpoint_ns = $3 AND checkpoint_id = $4"
        )
        self.has_checkpoint = f"SELECT 1 FROM {s}.graph_checkpoints WHERE {checkpoint}"
        self.send_nodes_of = f"SELECT send_nodes FROM {s}.graph_checkpoints WHERE {checkpoint}"
        self.set_send_nodes = f"UPDATE {s}.graph_checkpoints SET send_nodes = $5 WHERE {checkpoint}"
        self.task_path_of = (
            f"SELECT task_path FROM {s}.graph_writes WHERE {checkpoint} AND task_id = $5 LIMIT 1"
        )
        # A task's descriptions replace the ones it had held (unhold, then hold: $5 is its id;
        # $6-$11 arrays of positions and held_fields; $12 the time).
        self.unhold_task = f"DELETE FROM {held} WHERE {checkpoint} AND task_id = $5"
        self.hold = f"""
            INSERT INTO {held} (namespace, thread_id, checkpoint_ns, checkpoint_id, position,
                held_at, {held_columns})
            SELECT $1, $2, $3, $4, u.position, $12, $5, u.interrupt_id, u.chain_name, u.node_id,
                   u.reason, u.context_json
            FROM unnest($6::integer[], $7::text[], $8::text[], $9::text[], $10::text[],
                        $11::text[])
                AS u (position, interrupt_id, chain_name, node_id, reason, context_json)"""
        self.release = f"DELETE FROM {held} WHERE {checkpoint} RETURNING position, {held_columns}"
        self.drop_held = f"DELETE FROM {held} WHERE namespace = $1 AND thread_id = $2"
        self.delete_decisions = (
            f"DELETE FROM {decisions} WHERE namespace = $1 AND execution_id = $2 AND {graph}"
        )


class PostgresPendingOps:
    """:class:`~checkpointd.graph.interrupts.PendingOps` on one transaction."""

    def __init__(
        self,
        conn: Any,
        sql: PendingSql,
        namespace: str,
        append_event: AppendEvent,
        *,
        task_rows: list[PendingRecord] | None = None,
        released: list[list[Any]] | None = None,
    ) -> None:
        self._conn = conn
        self._sql = sql
        self._namespace = namespace
        self._append_event = append_event
        self._skipped: set[str] = set()
        # The task's rows, already read (and locked) by the statement that wrote its writes.
        self._task_rows = task_rows
        # The held interrupts the checkpoint's put released in its own statement (G18).
        self._released = released

    async def _rows(self, query: str, *params: Any) -> list[PendingRecord]:
        found = await self._conn.fetch(query, *params)
        return [rows.pending_from_row(row, times.utc_out) for row in found]

    async def of_task(self, place: TaskPlace) -> list[PendingRecord]:
        if self._task_rows is not None:
            known, self._task_rows = self._task_rows, None
            return known
        return await self._rows(
            self._sql.of_task,
            self._namespace,
            place.thread_id,
            place.checkpoint_ns,
            place.checkpoint_id,
            place.task_id,
        )

    async def of_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[PendingRecord]:
        return await self._rows(
            self._sql.of_checkpoint, self._namespace, thread_id, checkpoint_ns, checkpoint_id
        )

    async def of_thread(self, thread_id: str) -> list[PendingRecord]:
        return await self._rows(self._sql.of_thread, self._namespace, thread_id)

    async def next_sequence(self) -> int:
        return int(await self._conn.fetchval(self._sql.next_sequence))

    async def insert(self, record: PendingRecord, task_id: str) -> None:
        params = pending_params(record, times.utc_in)
        inserted = await self._conn.fetchval(self._sql.insert, self._namespace, *params, task_id)
        if inserted is None:
            self._skipped.add(record.interrupt_id)

    async def delete(self, record: PendingRecord) -> None:
        await self._conn.execute(
            self._sql.delete, self._namespace, record.execution_id, record.interrupt_id
        )

    async def delete_decisions(self, thread_id: str) -> None:
        await self._conn.execute(self._sql.delete_decisions, self._namespace, thread_id)

    async def event(self, kind: EventKind, record: PendingRecord) -> None:
        if kind is EventKind.ADDED and record.interrupt_id in self._skipped:
            return  # another writer's row stands; it wrote the event
        await self._append_event(self._conn, self._namespace, kind, record)

    async def has_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
        found = await self._conn.fetchval(
            self._sql.has_checkpoint, self._namespace, thread_id, checkpoint_ns, checkpoint_id
        )
        return found is not None

    async def send_nodes_of(self, place: TaskPlace) -> list[str]:
        found = await self._conn.fetchval(
            self._sql.send_nodes_of,
            self._namespace,
            place.thread_id,
            place.checkpoint_ns,
            place.checkpoint_id,
        )
        return send_nodes_from(found or "")

    async def task_path_of(self, place: TaskPlace) -> str | None:
        found = await self._conn.fetchval(
            self._sql.task_path_of,
            self._namespace,
            place.thread_id,
            place.checkpoint_ns,
            place.checkpoint_id,
            place.task_id,
        )
        return None if found is None else str(found)

    async def hold(
        self, place: TaskPlace, described: Sequence[GraphInterrupt], now: datetime
    ) -> None:
        fields = list(zip(*(held_fields(d) for d in described), strict=True))
        key = (
            self._namespace,
            place.thread_id,
            place.checkpoint_ns,
            place.checkpoint_id,
            place.task_id,
        )
        await self._conn.execute(self._sql.unhold_task, *key)
        await self._conn.execute(
            self._sql.hold,
            *key,
            list(range(len(described))),
            *(list(column) for column in fields),
            times.utc_in(now),
        )

    async def release(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, list[GraphInterrupt]]]:
        if self._released is not None:
            known, self._released = self._released, None
            return held_by_task(known)
        found = await self._conn.fetch(
            self._sql.release, self._namespace, thread_id, checkpoint_ns, checkpoint_id
        )
        return held_by_task([tuple(row) for row in found])

    async def drop_held(self, thread_id: str) -> None:
        await self._conn.execute(self._sql.drop_held, self._namespace, thread_id)
