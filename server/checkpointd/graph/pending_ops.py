"""The statements of graph interrupts (:class:`~checkpointd.graph.interrupts.PendingOps`), the
same on both backends over the statement interface of their transactions: each backend gives
only its SQL (:class:`PendingOpsSql`), its stored time and its outbox's event writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from checkpointd.domain import EventKind, PendingRecord
from checkpointd.graph.interrupts import (
    GraphInterrupt,
    TaskPlace,
    held_by_task,
    held_fields,
    send_nodes_from,
)
from checkpointd.store import rows
from checkpointd.store.columns import TimeWriter, pending_params
from checkpointd.store.rows import TimeReader
from checkpointd.store.statements import EventWriter, Statements

__all__ = ["PendingOpsSql", "StatementPendingOps"]


@dataclass(frozen=True, slots=True)
class PendingOpsSql:
    """A backend's statements of graph interrupts. ``checkpoint`` stands for the parameters
    namespace, thread id, checkpoint_ns, checkpoint id; a pending row's ``execution_id`` is
    its thread id."""

    #: Parameters: checkpoint, task id; the task's graph pending rows.
    of_task: str
    #: Parameters: checkpoint; its graph pending rows.
    of_checkpoint: str
    #: Parameters: namespace, thread id; its graph pending rows.
    of_thread: str
    #: Run before :attr:`next_sequence` when set (SQLite's counter row may not exist yet).
    seed_sequence: str | None
    #: No parameters; a new sequence in the first column.
    next_sequence: str
    #: Parameters: namespace, the pending row's columns, task id; changes no row when a
    #: concurrent writer's row of that interrupt id stands (I2).
    insert: str
    #: Parameters: namespace, execution id, interrupt id.
    delete: str
    #: Parameters: namespace, thread id; the decisions of its graph pauses.
    delete_decisions: str
    #: Parameters: checkpoint; a row when the store holds it.
    has_checkpoint: str
    #: Parameters: checkpoint, task id; the task path of its writes in the first column.
    task_path_of: str
    #: Parameters: checkpoint; its stored Send targets in the first column.
    send_nodes_of: str
    #: Parameters: checkpoint, task id.
    unhold_task: str
    #: Parameters: checkpoint, position, held at, task id, the :func:`held_fields`.
    hold: str
    #: Parameters: checkpoint; deletes the held descriptions and returns each as its position,
    #: task id and :func:`held_fields`.
    release: str
    #: Parameters: namespace, thread id.
    drop_held: str


class StatementPendingOps:
    """:class:`~checkpointd.graph.interrupts.PendingOps` on one transaction's statements.

    ``task_rows``, ``checkpoint_rows`` and ``released``: what the statement that wrote the
    task's writes or the checkpoint already read (Postgres reads and locks them in that
    statement: the task's rows, the put's parent's rows, what it released), answered once
    instead of reading again.
    """

    def __init__(
        self,
        conn: Statements,
        sql: PendingOpsSql,
        namespace: str,
        *,
        read_time: TimeReader,
        write_time: TimeWriter,
        append_event: EventWriter,
        task_rows: list[PendingRecord] | None = None,
        checkpoint_rows: list[PendingRecord] | None = None,
        released: list[list[Any]] | None = None,
    ) -> None:
        self._conn = conn
        self._sql = sql
        self._namespace = namespace
        self._read_time = read_time
        self._write_time = write_time
        self._append_event = append_event
        # Interrupt ids whose insert another writer's row stood in the way of.
        self._skipped: set[str] = set()
        self._task_rows = task_rows
        self._checkpoint_rows = checkpoint_rows
        self._released = released

    async def _rows(self, query: str, params: Sequence[Any]) -> list[PendingRecord]:
        found = await self._conn.fetch(query, params)
        return [rows.pending_from_row(row, self._read_time) for row in found]

    async def _value(self, query: str, params: Sequence[Any]) -> Any:
        """The first column of the first row (None: no row)."""
        found = await self._conn.fetch(query, params)
        return found[0][0] if found else None

    def _checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> tuple[str, ...]:
        return (self._namespace, thread_id, checkpoint_ns, checkpoint_id)

    def _task(self, place: TaskPlace) -> tuple[str, ...]:
        key = self._checkpoint(place.thread_id, place.checkpoint_ns, place.checkpoint_id)
        return (*key, place.task_id)

    async def of_task(self, place: TaskPlace) -> list[PendingRecord]:
        if self._task_rows is not None:
            known, self._task_rows = self._task_rows, None
            return known
        return await self._rows(self._sql.of_task, self._task(place))

    async def of_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[PendingRecord]:
        if self._checkpoint_rows is not None:
            known, self._checkpoint_rows = self._checkpoint_rows, None
            return known
        key = self._checkpoint(thread_id, checkpoint_ns, checkpoint_id)
        return await self._rows(self._sql.of_checkpoint, key)

    async def of_thread(self, thread_id: str) -> list[PendingRecord]:
        return await self._rows(self._sql.of_thread, (self._namespace, thread_id))

    async def next_sequence(self) -> int:
        if self._sql.seed_sequence is not None:
            await self._conn.run(self._sql.seed_sequence)
        return int(await self._value(self._sql.next_sequence, ()))

    async def insert(self, record: PendingRecord, task_id: str) -> None:
        params = (self._namespace, *pending_params(record, self._write_time), task_id)
        if not await self._conn.run(self._sql.insert, params):
            self._skipped.add(record.interrupt_id)

    async def delete(self, record: PendingRecord) -> None:
        params = (self._namespace, record.execution_id, record.interrupt_id)
        await self._conn.run(self._sql.delete, params)

    async def delete_decisions(self, thread_id: str) -> None:
        await self._conn.run(self._sql.delete_decisions, (self._namespace, thread_id))

    async def event(self, kind: EventKind, record: PendingRecord) -> None:
        if kind is EventKind.ADDED and record.interrupt_id in self._skipped:
            return  # another writer's row stands; it wrote the event
        now = datetime.now(UTC)
        await self._append_event(self._conn, self._namespace, kind, record, now)

    async def has_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
        key = self._checkpoint(thread_id, checkpoint_ns, checkpoint_id)
        return bool(await self._conn.fetch(self._sql.has_checkpoint, key))

    async def task_path_of(self, place: TaskPlace) -> str | None:
        found = await self._value(self._sql.task_path_of, self._task(place))
        return None if found is None else str(found)

    async def send_nodes_of(self, place: TaskPlace) -> list[str]:
        key = self._checkpoint(place.thread_id, place.checkpoint_ns, place.checkpoint_id)
        return send_nodes_from(await self._value(self._sql.send_nodes_of, key) or "")

    async def hold(
        self, place: TaskPlace, described: Sequence[GraphInterrupt], now: datetime
    ) -> None:
        key = self._checkpoint(place.thread_id, place.checkpoint_ns, place.checkpoint_id)
        await self._conn.run(self._sql.unhold_task, (*key, place.task_id))
        if not described:
            return
        held_at = self._write_time(now)
        await self._conn.run_many(
            self._sql.hold,
            [
                (*key, position, held_at, place.task_id, *held_fields(interrupt))
                for position, interrupt in enumerate(described)
            ],
        )

    async def release(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, list[GraphInterrupt]]]:
        if self._released is not None:
            known, self._released = self._released, None
            return held_by_task(known)
        key = self._checkpoint(thread_id, checkpoint_ns, checkpoint_id)
        found = await self._conn.fetch(self._sql.release, key)
        return held_by_task([tuple(row) for row in found])

    async def drop_held(self, thread_id: str) -> None:
        await self._conn.run(self._sql.drop_held, (self._namespace, thread_id))
