"""The Postgres statements of graph interrupts (:mod:`checkpointd.graph.interrupts`), which
:class:`~checkpointd.graph.pending_ops.StatementPendingOps` runs on the graph store's
transaction."""

from __future__ import annotations

from checkpointd.graph.pending_ops import PendingOpsSql
from checkpointd.store.columns import PENDING_COLUMNS

__all__ = ["pending_ops_sql"]


def pending_ops_sql(quoted_schema: str) -> PendingOpsSql:
    """The statements, in one schema. The rows a write changes are read ``FOR UPDATE``."""
    s = quoted_schema
    pending, decisions = f"{s}.pending_interrupts", f"{s}.interrupt_decisions"
    graph = "interrupt_id <> ''"
    pending_of = (
        f"SELECT {PENDING_COLUMNS} FROM {pending} WHERE namespace = $1 AND execution_id = $2"
    )
    held = f"{s}.graph_held_interrupts"
    held_columns = "task_id, interrupt_id, chain_name, node_id, reason, context_json"
    checkpoint = "namespace = $1 AND thread_id = $2 AND checkpoint_ns = $3 AND checkpoint_id = $4"
    return PendingOpsSql(
        of_task=(
            f"{pending_of} AND checkpoint_ns = $3 AND checkpoint_id = $4 AND task_id = $5 "
            f"AND {graph} FOR UPDATE"
        ),
        of_checkpoint=(
            f"{pending_of} AND checkpoint_ns = $3 AND checkpoint_id = $4 AND {graph} FOR UPDATE"
        ),
        of_thread=f"{pending_of} AND {graph} FOR UPDATE",
        # A graph pause takes its place in the listing order from the checkpoints' identity
        # sequence, so no checkpoint or pause shares a sequence with another.
        seed_sequence=None,
        next_sequence=f"SELECT nextval(pg_get_serial_sequence('{s}.checkpoints', 'sequence'))",
        # A concurrent writer of the same interrupt id inserted first: its row stands (I2).
        insert=(
            f"INSERT INTO {pending} (namespace, {PENDING_COLUMNS}, task_id) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) "
            "ON CONFLICT (namespace, execution_id, interrupt_id) DO NOTHING RETURNING 1"
        ),
        delete=(
            f"DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            "AND interrupt_id = $3"
        ),
        delete_decisions=(
            f"DELETE FROM {decisions} WHERE namespace = $1 AND execution_id = $2 AND {graph}"
        ),
        has_checkpoint=f"SELECT 1 FROM {s}.graph_checkpoints WHERE {checkpoint}",
        task_path_of=(
            f"SELECT task_path FROM {s}.graph_writes WHERE {checkpoint} AND task_id = $5 LIMIT 1"
        ),
        send_nodes_of=f"SELECT send_nodes FROM {s}.graph_checkpoints WHERE {checkpoint}",
        unhold_task=f"DELETE FROM {held} WHERE {checkpoint} AND task_id = $5",
        hold=(
            f"INSERT INTO {held} (namespace, thread_id, checkpoint_ns, checkpoint_id, position, "
            f"held_at, {held_columns}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        ),
        release=f"DELETE FROM {held} WHERE {checkpoint} RETURNING position, {held_columns}",
        drop_held=f"DELETE FROM {held} WHERE namespace = $1 AND thread_id = $2",
    )
