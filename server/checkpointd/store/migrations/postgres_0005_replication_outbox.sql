-- checkpointd Postgres schema, version 5: the replication outbox (contracts R1-R4).

-- A checkpoint is in the outbox until a replicator settles it: synced_at is when it was
-- settled, and sync_error is the reason when it was quarantined rather than synced.
ALTER TABLE {schema}.checkpoints
    ADD COLUMN synced_at TIMESTAMPTZ,
    ADD COLUMN sync_error TEXT;

-- Rows written before this version count as synced, so that starting a replicator against an
-- upgraded store does not re-send its whole history (fastaiagent's own outbox migration does
-- the same); only checkpoints written from now on are replicated.
UPDATE {schema}.checkpoints SET synced_at = now();

-- Oldest unsettled first, per namespace; only unsettled rows are indexed, so a drained outbox
-- costs nothing.
CREATE INDEX checkpoints_unsynced_idx
    ON {schema}.checkpoints (namespace, sequence) WHERE synced_at IS NULL;
