-- checkpointd SQLite schema, version 2: what the interrupt watch stream (contract I5) reads.

-- Events carry the sequence of their pending row, as on Postgres. Rows written before this
-- version get it from their checkpoint when it still exists.
ALTER TABLE interrupt_events ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;
UPDATE interrupt_events SET sequence = coalesce(
    (SELECT c.sequence FROM checkpoints AS c
     WHERE c.namespace = interrupt_events.namespace
       AND c.checkpoint_id = interrupt_events.checkpoint_id),
    0);

-- A watcher resuming from its cursor reads its namespace's events after it.
CREATE INDEX interrupt_events_by_namespace ON interrupt_events (namespace, cursor);

-- One row: every event with a cursor at or below purged_through is gone (purged for age), so
-- a watcher resuming from an older cursor gets OUT_OF_RANGE even when no event is left.
CREATE TABLE interrupt_events_purged (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    purged_through INTEGER NOT NULL
);
INSERT INTO interrupt_events_purged (id, purged_through) VALUES (1, 0);
