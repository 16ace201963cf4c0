-- checkpointd SQLite schema, version 10: graph retention (ApplyGraphRetention).

-- When the server wrote each graph checkpoint (microseconds since the epoch, its clock): a
-- thread is idle when its newest one is older than the retention's idle time. Checkpoints
-- stored before this version have 0, read as the time this version was applied
-- (schema_migrations), so none of them looks idle before the idle time has passed since the
-- upgrade; adding the column this way rewrites no row of a large table.
ALTER TABLE graph_checkpoints ADD COLUMN written_at INTEGER NOT NULL DEFAULT 0;

-- The retention's listings (threads by last write, checkpoint_ns by count) read this index
-- alone, never the checkpoints' bodies.
CREATE INDEX graph_checkpoints_by_thread_written
    ON graph_checkpoints (namespace, thread_id, checkpoint_ns, written_at);
