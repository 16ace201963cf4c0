-- checkpointd SQLite schema, version 3: request ids of applied idempotency puts.

-- A put with a non-empty request_id records it here in the transaction of its write; a retry
-- that finds its id here is answered like the first call and writes nothing (a late retry
-- never undoes a newer put). Rows older than the claim retention time are purged.
CREATE TABLE applied_requests (
    namespace  TEXT    NOT NULL,
    request_id TEXT    NOT NULL,
    applied_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, request_id)
);

CREATE INDEX applied_requests_by_applied_at ON applied_requests (applied_at);
