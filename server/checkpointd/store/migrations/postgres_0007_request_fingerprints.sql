-- checkpointd Postgres schema, version 7: request fingerprints (contract C10).

-- Beside every stored request id, the fingerprint of the request that used it
-- (checkpointd.fingerprint: its method and a hash of its content). A request that comes with
-- a stored id and another fingerprint is not a retry: it is refused (REQUEST_ID_REUSED) and
-- writes nothing. Ids stored before this version have no fingerprint (NULL) and answer a
-- request with their id as before, as a retry; they go with the request-id retention.
-- Nullable columns without a default: adding them rewrites no table.
ALTER TABLE {schema}.checkpoints ADD COLUMN request_fingerprint TEXT;
ALTER TABLE {schema}.applied_requests ADD COLUMN request_fingerprint TEXT;
ALTER TABLE {schema}.interrupt_decisions ADD COLUMN request_fingerprint TEXT;
