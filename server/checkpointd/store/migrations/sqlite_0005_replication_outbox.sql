-- checkpointd SQLite schema, version 5: the replication outbox (contracts R1-R4).

-- A checkpoint is in the outbox until a replicator settles it: synced_at is when it was
-- settled (microseconds, like every time here), and sync_error is the reason when it was
-- quarantined rather than synced.
ALTER TABLE checkpoints ADD COLUMN synced_at INTEGER;
ALTER TABLE checkpoints ADD COLUMN sync_error TEXT;

-- Rows written before this version count as synced, so that starting a replicator against an
-- upgraded store does not re-send its whole history (fastaiagent's own outbox migration does
-- the same); only checkpoints written from now on are replicated.
UPDATE checkpoints
    SET synced_at = CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER);

-- Oldest unsettled first, per namespace; only unsettled rows are indexed, so a drained outbox
-- costs nothing. Queries repeat the predicate (synced_at IS NULL) so SQLite uses it.
CREATE INDEX checkpoints_unsynced ON checkpoints (namespace, sequence) WHERE synced_at IS NULL;
