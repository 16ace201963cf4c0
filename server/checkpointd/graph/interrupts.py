"""Graph interrupts in the pending-interrupt inbox (contracts G8-G10), the same on both
backends.

A graph thread (LangGraph) may wait on several interrupts at once. The server never decodes
a graph value, so the saver describes each interrupt it writes (:class:`GraphInterrupt`),
and the graph store keeps one pending row per interrupt id of a thread, in the shared
``pending_interrupts`` table (``execution_id`` = thread id, ``interrupt_id`` non-empty,
``task_id`` the task that raised it), with the shared outbox events:

* :func:`sync_task`, in the transaction of a PutGraphWrites: the task's pending rows at its
  checkpoint become exactly the described ones. A described id the thread already has keeps
  its row (and its decision); a new one is ``added``; a row of the task that is no longer
  described is over (the task ran past it: resumed, completed or failed) and is deleted with
  a ``claimed`` event.
  :func:`write_task` runs it for a PutGraphWrites, unless the task describes interrupts at a
  checkpoint the store does not hold yet (G18): LangGraph may send a pause's writes before the
  put of its checkpoint, and a pause is published only once a resume can read that
  checkpoint, so the descriptions are held (``graph_held_interrupts``) instead.
* :func:`checkpoint_stored`, in the transaction of a PutGraphCheckpoint: the rows recorded
  against its parent (same thread and checkpoint_ns) are over, ``claimed``; the descriptions
  held for the checkpoint itself are released into rows, ``added``, as :func:`sync_task`
  would have made them.
* :func:`remove_threads`, in the transaction of a thread delete: the rows go with a
  ``removed`` event, and the decisions of the thread's graph pauses and its held
  descriptions with them.

Each backend supplies the few statements (:class:`PendingOps`); all changes to rows come
before the events, as the Postgres outbox wants its events last in a transaction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Protocol

from checkpointd.domain import EventKind, PendingRecord

__all__ = [
    "GraphInterrupt",
    "PendingOps",
    "TaskPlace",
    "checkpoint_stored",
    "held_by_task",
    "held_fields",
    "remove_threads",
    "send_nodes_column",
    "send_nodes_from",
    "send_target",
    "sync_task",
    "write_task",
]


@dataclass(frozen=True, slots=True)
class GraphInterrupt:
    """One interrupt a task wrote, as its saver describes it (validated)."""

    interrupt_id: str
    chain_name: str
    node_id: str
    reason: str
    context_json: str
    """A JSON object."""


@dataclass(frozen=True, slots=True)
class TaskPlace:
    """Where a task's writes go: its thread, namespace, checkpoint and task id."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str


def held_fields(interrupt: GraphInterrupt) -> tuple[str, str, str, str, str]:
    """A held description's columns after its task id: interrupt id, chain name, node,
    reason, context (the backends' ``graph_held_interrupts`` rows)."""
    return (
        interrupt.interrupt_id,
        interrupt.chain_name,
        interrupt.node_id,
        interrupt.reason,
        interrupt.context_json,
    )


def held_by_task(found: Sequence[Sequence[Any]]) -> list[tuple[str, list[GraphInterrupt]]]:
    """Released held rows ``(position, task id, *held_fields)``, grouped by task in the
    order they were described."""
    tasks: dict[str, list[tuple[int, GraphInterrupt]]] = {}
    for position, task_id, interrupt_id, chain_name, node_id, reason, context in found:
        described = GraphInterrupt(interrupt_id, chain_name, node_id, reason, context)
        tasks.setdefault(str(task_id), []).append((int(position), described))
    return [
        (task_id, [interrupt for _, interrupt in sorted(held, key=lambda h: h[0])])
        for task_id, held in sorted(tasks.items())
    ]


class PendingOps(Protocol):
    """The statements a backend runs in the caller's transaction."""

    async def of_task(self, place: TaskPlace) -> list[PendingRecord]:
        """The graph pending rows the task recorded at its checkpoint."""
        ...

    async def of_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[PendingRecord]:
        """The graph pending rows recorded against a checkpoint."""
        ...

    async def of_thread(self, thread_id: str) -> list[PendingRecord]:
        """Every graph pending row of a thread."""
        ...

    async def next_sequence(self) -> int:
        """A new sequence, from the one the store gives checkpoints (the listing order)."""
        ...

    async def insert(self, record: PendingRecord, task_id: str) -> None:
        """Insert a pending row."""
        ...

    async def delete(self, record: PendingRecord) -> None:
        """Delete a pending row."""
        ...

    async def delete_decisions(self, thread_id: str) -> None:
        """Delete the decisions of the thread's graph pauses."""
        ...

    async def event(self, kind: EventKind, record: PendingRecord) -> None:
        """Append an outbox event about the row."""
        ...

    async def has_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
        """Whether the store holds the checkpoint."""
        ...

    async def task_path_of(self, place: TaskPlace) -> str | None:
        """The task path the task's writes at its checkpoint were stored with, if any."""
        ...

    async def send_nodes_of(self, place: TaskPlace) -> list[str]:
        """The Send targets the put of the task's checkpoint named (empty: none)."""
        ...

    async def hold(
        self, place: TaskPlace, described: Sequence[GraphInterrupt], now: datetime
    ) -> None:
        """Make the task's held descriptions at its checkpoint exactly ``described``."""
        ...

    async def release(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> list[tuple[str, list[GraphInterrupt]]]:
        """Delete the descriptions held for a checkpoint; each task's, in their order."""
        ...

    async def drop_held(self, thread_id: str) -> None:
        """Delete every description held for the thread."""
        ...


async def _task_changes(
    ops: PendingOps,
    place: TaskPlace,
    described: Sequence[GraphInterrupt],
    now: datetime,
) -> tuple[list[PendingRecord], list[PendingRecord]]:
    """Change the task's pending rows at its checkpoint to the described ones; the rows ended
    and the rows added, whose events the caller appends after every row change."""
    current = await ops.of_task(place)
    if not current and not described:
        return [], []  # the common case: ordinary writes of a task that never paused here
    named = {d.interrupt_id for d in described}
    ended = [row for row in current if row.interrupt_id not in named]
    present = (
        {row.interrupt_id for row in await ops.of_thread(place.thread_id)} if described else set()
    )
    added: list[PendingRecord] = []
    for interrupt in described:
        if interrupt.interrupt_id in present:
            continue
        record = PendingRecord(
            execution_id=place.thread_id,
            chain_name=interrupt.chain_name,
            node_id=interrupt.node_id,
            reason=interrupt.reason,
            context_json=interrupt.context_json,
            agent_path=None,
            created_at=now,
            checkpoint_id=place.checkpoint_id,
            sequence=await ops.next_sequence(),
            interrupt_id=interrupt.interrupt_id,
            checkpoint_ns=place.checkpoint_ns,
        )
        await ops.insert(record, place.task_id)
        added.append(record)
    for row in ended:
        await ops.delete(row)
    return ended, added


async def _events(ops: PendingOps, ended: list[PendingRecord], added: list[PendingRecord]) -> None:
    for row in ended:
        await ops.event(EventKind.CLAIMED, row)
    for record in added:
        await ops.event(EventKind.ADDED, record)


async def sync_task(
    ops: PendingOps,
    place: TaskPlace,
    described: Sequence[GraphInterrupt],
    now: datetime,
) -> None:
    """Make the task's pending rows at its checkpoint the described ones (see the module)."""
    await _events(ops, *await _task_changes(ops, place, described, now))


async def write_task(
    ops: PendingOps,
    place: TaskPlace,
    described: Sequence[GraphInterrupt],
    now: datetime,
    task_path: str = "",
) -> None:
    """A PutGraphWrites: :func:`sync_task`, or hold the described interrupts when their
    checkpoint is not stored yet (G18; they are released by :func:`checkpoint_stored`). A
    Send task's interrupts (by ``task_path``) are named by the Send targets the stored
    checkpoint's put gave."""
    if described and not await ops.has_checkpoint(
        place.thread_id, place.checkpoint_ns, place.checkpoint_id
    ):
        await ops.hold(place, described, now)
        return
    if described and _SEND_TASK_PATH.fullmatch(task_path):
        described = _named(described, task_path, await ops.send_nodes_of(place))
    await sync_task(ops, place, described, now)


#: The task path of a task a Send started: the push marker, the packet's index among the
#: checkpoint's pending Sends and (LangGraph 0.3 and later) a 0 for "not a call".
_SEND_TASK_PATH: Final = re.compile(r"~__pregel_push, (\d+)(?:, 0+)?")


def send_nodes_column(send_nodes: Sequence[str]) -> str:
    """The stored form of a checkpoint's Send targets (a JSON array; empty for none)."""
    return json.dumps(list(send_nodes)) if send_nodes else ""


def send_nodes_from(column: str) -> list[str]:
    """The Send targets of a stored checkpoint (:func:`send_nodes_column`'s form)."""
    return [str(name) for name in json.loads(column)] if column else []


def send_target(task_path: str | None, send_nodes: Sequence[str]) -> str | None:
    """The node a Send task at ``task_path`` runs, by the checkpoint's Send targets; None
    when the path is not a Send task's or the index is not among them."""
    match = _SEND_TASK_PATH.fullmatch(task_path or "")
    if match is None:
        return None
    index = int(match.group(1))
    return send_nodes[index] or None if index < len(send_nodes) else None


def _named(
    described: Sequence[GraphInterrupt], task_path: str | None, send_nodes: Sequence[str]
) -> list[GraphInterrupt]:
    """``described`` with the node its Send task runs, where the checkpoint's put named it:
    the saver may describe the pause before it knows (its path holds only the Send's index)."""
    node = send_target(task_path, send_nodes)
    if node is None:
        return list(described)
    return [replace(interrupt, node_id=node) for interrupt in described]


async def checkpoint_stored(
    ops: PendingOps,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str,
    now: datetime,
    send_nodes: Sequence[str] = (),
) -> None:
    """A PutGraphCheckpoint: end the pending rows recorded against its parent, and publish
    the interrupts held for the checkpoint itself, in the transaction that stored it (named
    by ``send_nodes``, the put's Send targets, where a Send task raised them)."""
    ended: list[PendingRecord] = []
    if parent_checkpoint_id:
        ended = await ops.of_checkpoint(thread_id, checkpoint_ns, parent_checkpoint_id)
        for row in ended:
            await ops.delete(row)
    added: list[PendingRecord] = []
    for task_id, described in await ops.release(thread_id, checkpoint_ns, checkpoint_id):
        place = TaskPlace(thread_id, checkpoint_ns, checkpoint_id, task_id)
        if send_nodes:
            described = _named(described, await ops.task_path_of(place), send_nodes)
        task_ended, task_added = await _task_changes(ops, place, described, now)
        ended += task_ended
        added += task_added
    await _events(ops, ended, added)


async def remove_threads(ops: PendingOps, thread_ids: Sequence[str]) -> None:
    """Delete the threads' pending rows (``removed`` events) and their graph decisions."""
    gone: list[PendingRecord] = []
    for thread_id in dict.fromkeys(thread_ids):
        rows = await ops.of_thread(thread_id)
        for row in rows:
            await ops.delete(row)
        await ops.delete_decisions(thread_id)
        await ops.drop_held(thread_id)
        gone.extend(rows)
    for row in gone:
        await ops.event(EventKind.REMOVED, row)
