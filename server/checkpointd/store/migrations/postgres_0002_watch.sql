-- checkpointd Postgres schema, version 2: what the interrupt watch stream (contract I5) reads.

-- A watcher resuming from its cursor reads its namespace's events after it.
CREATE INDEX interrupt_events_namespace_idx
    ON {schema}.interrupt_events (namespace, cursor);

-- One row: every event with a cursor at or below purged_through is gone (purged for age), so
-- a watcher resuming from an older cursor gets OUT_OF_RANGE even when no event is left.
CREATE TABLE {schema}.interrupt_events_purged (
    id             INTEGER PRIMARY KEY CONSTRAINT interrupt_events_purged_one_row CHECK (id = 1),
    purged_through BIGINT  NOT NULL
);
INSERT INTO {schema}.interrupt_events_purged (id, purged_through) VALUES (1, 0);
