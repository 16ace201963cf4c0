-- checkpointd Postgres schema, version 4: request ids outlive deletes (contract C9).

-- A checkpoint's request id names one call: a retry is found by it, whatever filled the
-- checkpoint id (the client, or the server when it was empty). Before this version a retry
-- of a write whose checkpoint id the server filled stored a second row with the same request
-- id; the first row keeps the id, the others lose it, so the index below can be unique.
UPDATE {schema}.checkpoints SET request_id = NULL WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence,
               row_number() OVER (PARTITION BY namespace, request_id ORDER BY sequence) AS n
        FROM {schema}.checkpoints
        WHERE request_id IS NOT NULL
    ) AS numbered
    WHERE n > 1
);

-- The lookup of a retry, and what keeps two concurrent writes of one request to one row
-- (the inserts use ON CONFLICT DO NOTHING, which covers this index too).
CREATE UNIQUE INDEX checkpoints_request_id_key
    ON {schema}.checkpoints (namespace, request_id) WHERE request_id IS NOT NULL;

-- applied_requests now remembers more than idempotency puts, each for the request-id
-- retention (the purge forgets rows by applied_at):
-- * idempotency_put: an applied PutIdempotencyResult (contract D1);
-- * deleted_write: a PutCheckpoint or RecordInterrupt whose checkpoint DeleteExecution or
--   PruneCheckpoints removed; its late retry writes nothing (a tombstone);
-- * delete_execution, prune: the reply of that call (reply_json), returned to its retry.
ALTER TABLE {schema}.applied_requests
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'idempotency_put'
        CONSTRAINT applied_requests_kind_check
        CHECK (kind IN ('idempotency_put', 'deleted_write', 'delete_execution', 'prune')),
    ADD COLUMN reply_json TEXT;
