-- checkpointd Postgres schema, version 10: graph retention (ApplyGraphRetention).

-- When the server wrote each graph checkpoint (its clock): a thread is idle when its newest
-- one is older than the retention's idle time. Checkpoints stored before this version count
-- as written now, so none of them looks idle before the idle time has passed since the
-- upgrade.
ALTER TABLE {schema}.graph_checkpoints
    ADD COLUMN written_at TIMESTAMPTZ NOT NULL DEFAULT now();

-- The retention's listings (threads by last write, checkpoint_ns by count) read this index
-- alone, never the checkpoints' bodies.
CREATE INDEX graph_checkpoints_by_thread_written
    ON {schema}.graph_checkpoints (namespace, thread_id, checkpoint_ns, written_at);
