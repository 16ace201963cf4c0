"""The SQLite statements of graph interrupts (:mod:`checkpointd.graph.interrupts`), which
:class:`~checkpointd.graph.pending_ops.StatementPendingOps` runs on the writer inside the
graph store's transaction."""

from __future__ import annotations

from typing import Final

from checkpointd.graph.pending_ops import PendingOpsSql
from checkpointd.store.columns import PENDING_COLUMNS

__all__ = ["PENDING_OPS_SQL"]

_GRAPH: Final = "interrupt_id <> ''"
_PENDING_OF: Final = f"SELECT {PENDING_COLUMNS} FROM pending_interrupts WHERE namespace = ? "
_CHECKPOINT: Final = "namespace = ? AND thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
_HELD_COLUMNS: Final = "task_id, interrupt_id, chain_name, node_id, reason, context_json"

PENDING_OPS_SQL: Final = PendingOpsSql(
    of_task=(
        f"{_PENDING_OF}AND execution_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
        f"AND task_id = ? AND {_GRAPH}"
    ),
    of_checkpoint=(
        f"{_PENDING_OF}AND execution_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
        f"AND {_GRAPH}"
    ),
    of_thread=f"{_PENDING_OF}AND execution_id = ? AND {_GRAPH}",
    # A graph pause takes its place in the listing order from the checkpoints' AUTOINCREMENT
    # counter, so no checkpoint or pause ever shares a sequence with another (writers are
    # serialized: the read and the bump are one statement in the write transaction).
    seed_sequence=(
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'checkpoints', 0 "
        "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'checkpoints')"
    ),
    next_sequence=(
        "UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'checkpoints' RETURNING seq"
    ),
    insert=(
        f"INSERT INTO pending_interrupts (namespace, {PENDING_COLUMNS}, task_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ),
    delete=(
        "DELETE FROM pending_interrupts "
        "WHERE namespace = ? AND execution_id = ? AND interrupt_id = ?"
    ),
    delete_decisions=(
        f"DELETE FROM interrupt_decisions WHERE namespace = ? AND execution_id = ? AND {_GRAPH}"
    ),
    has_checkpoint=f"SELECT 1 FROM graph_checkpoints WHERE {_CHECKPOINT}",
    task_path_of=f"SELECT task_path FROM graph_writes WHERE {_CHECKPOINT} AND task_id = ? LIMIT 1",
    send_nodes_of=f"SELECT send_nodes FROM graph_checkpoints WHERE {_CHECKPOINT}",
    unhold_task=f"DELETE FROM graph_held_interrupts WHERE {_CHECKPOINT} AND task_id = ?",
    hold=(
        "INSERT INTO graph_held_interrupts (namespace, thread_id, checkpoint_ns, checkpoint_id, "
        f"position, held_at, {_HELD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ),
    release=(
        f"DELETE FROM graph_held_interrupts WHERE {_CHECKPOINT} RETURNING position, {_HELD_COLUMNS}"
    ),
    drop_held="DELETE FROM graph_held_interrupts WHERE namespace = ? AND thread_id = ?",
)
