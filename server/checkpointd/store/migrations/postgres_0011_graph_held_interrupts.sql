-- checkpointd Postgres schema, version 11: a graph pause waits for its checkpoint (contract G18).

-- LangGraph (durability "async") may send a task's __interrupt__ writes before the put of the
-- checkpoint they belong to. The writes are stored as they come; the saver's descriptions of
-- their interrupts are held here, and become pending rows (with their "added" events) in the
-- transaction that stores that checkpoint, so no pause is listed, watched or decided before
-- the checkpoint a resume reads exists.
CREATE TABLE {schema}.graph_held_interrupts (
    namespace     TEXT    NOT NULL,
    thread_id     TEXT    NOT NULL,
    checkpoint_ns TEXT    NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    task_id       TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    interrupt_id  TEXT    NOT NULL,
    chain_name    TEXT    NOT NULL,
    node_id       TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    context_json  TEXT    NOT NULL,
    held_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, position)
);
