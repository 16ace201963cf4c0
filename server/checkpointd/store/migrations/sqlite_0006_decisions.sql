-- checkpointd SQLite schema, version 6: decisions on pending interrupts (contracts K1, K2).

-- One decision per pause, a pause being the interrupted checkpoint a pending row was written
-- with. The row outlives the pending row (the resume claims that) so the worker carrying the
-- decision out can be replaced when it dies: it holds a lease (lease_token, lease_expires_at)
-- that another worker may take once it has run out. The pending row is copied as it was
-- decided, for the events that follow its claim.
CREATE TABLE interrupt_decisions (
    namespace        TEXT    NOT NULL,
    execution_id     TEXT    NOT NULL,
    checkpoint_id    TEXT    NOT NULL,
    request_id       TEXT    NOT NULL DEFAULT '',
    approved         INTEGER NOT NULL,
    metadata_json    TEXT    NOT NULL,
    decided_by       TEXT    NOT NULL,
    decision_reason  TEXT,
    decided_at       INTEGER NOT NULL,
    decision_status  TEXT    NOT NULL
        CHECK (decision_status IN ('decided', 'resuming', 'resumed', 'resume_failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    lease_token      TEXT    NOT NULL DEFAULT '',
    lease_expires_at INTEGER,
    decision_error   TEXT,
    reported_at      INTEGER,
    chain_name       TEXT    NOT NULL,
    node_id          TEXT    NOT NULL,
    reason           TEXT    NOT NULL,
    context_json     TEXT    NOT NULL,
    agent_path       TEXT,
    created_at       INTEGER NOT NULL,
    sequence         INTEGER NOT NULL,
    PRIMARY KEY (namespace, execution_id, checkpoint_id)
);

-- A retried SubmitDecision is found by its request id.
CREATE UNIQUE INDEX interrupt_decisions_by_request_id
    ON interrupt_decisions (namespace, request_id) WHERE request_id <> '';

-- ListDecisions pages by the pause's sequence (oldest first).
CREATE INDEX interrupt_decisions_by_sequence ON interrupt_decisions (namespace, sequence);

-- The outbox learns the decision events, and carries the decision with each of them. SQLite
-- cannot change a CHECK constraint, so the table is rebuilt; the highest cursor ever handed
-- out (sqlite_sequence) carries over, so no cursor is reused even when every event was purged.
CREATE TABLE interrupt_events_v6 (
    cursor             INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace          TEXT    NOT NULL,
    kind               TEXT    NOT NULL CHECK (kind IN (
        'added', 'claimed', 'removed', 'decided', 'resumed', 'resume_failed')),
    execution_id       TEXT    NOT NULL,
    chain_name         TEXT    NOT NULL,
    node_id            TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    context_json       TEXT    NOT NULL,
    agent_path         TEXT,
    pending_created_at INTEGER NOT NULL,
    checkpoint_id      TEXT    NOT NULL,
    event_at           INTEGER NOT NULL,
    sequence           INTEGER NOT NULL DEFAULT 0,
    decision_json      TEXT
);
INSERT INTO interrupt_events_v6 (
    cursor, namespace, kind, execution_id, chain_name, node_id, reason, context_json,
    agent_path, pending_created_at, checkpoint_id, event_at, sequence)
SELECT cursor, namespace, kind, execution_id, chain_name, node_id, reason, context_json,
       agent_path, pending_created_at, checkpoint_id, event_at, sequence
FROM interrupt_events;
DELETE FROM sqlite_sequence WHERE name = 'interrupt_events_v6';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'interrupt_events_v6', seq FROM sqlite_sequence WHERE name = 'interrupt_events';
DROP TABLE interrupt_events;
ALTER TABLE interrupt_events_v6 RENAME TO interrupt_events;
CREATE INDEX interrupt_events_by_namespace ON interrupt_events (namespace, cursor);
