-- checkpointd SQLite schema, version 9: graph interrupts in the pending-interrupt inbox
-- (contracts G8-G11).

-- A thread of a graph runtime (LangGraph) can wait on several interrupts at once (parallel
-- tasks, subgraphs), each answered by its id. A pending row is now one pause of an execution:
-- interrupt_id is empty for the one pause of a fastaiagent run (as before) and the runtime's
-- interrupt id for a graph's; checkpoint_ns is the graph namespace it was recorded in, and
-- task_id the task that raised it (what a later write of that task clears). SQLite cannot
-- change a primary key, so the table is rebuilt.
CREATE TABLE pending_interrupts_v9 (
    namespace     TEXT    NOT NULL,
    execution_id  TEXT    NOT NULL,
    chain_name    TEXT    NOT NULL,
    node_id       TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    context_json  TEXT    NOT NULL,
    agent_path    TEXT,
    created_at    INTEGER NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    sequence      INTEGER NOT NULL,
    interrupt_id  TEXT    NOT NULL DEFAULT '',
    checkpoint_ns TEXT    NOT NULL DEFAULT '',
    task_id       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, execution_id, interrupt_id)
);
INSERT INTO pending_interrupts_v9 (
    namespace, execution_id, chain_name, node_id, reason, context_json, agent_path,
    created_at, checkpoint_id, sequence)
SELECT namespace, execution_id, chain_name, node_id, reason, context_json, agent_path,
       created_at, checkpoint_id, sequence
FROM pending_interrupts;
DROP TABLE pending_interrupts;
ALTER TABLE pending_interrupts_v9 RENAME TO pending_interrupts;
CREATE INDEX pending_interrupts_by_sequence ON pending_interrupts (namespace, sequence);
-- A graph write finds the pauses its task or its checkpoint ends.
CREATE INDEX pending_interrupts_by_graph_checkpoint
    ON pending_interrupts (namespace, execution_id, checkpoint_ns, checkpoint_id)
    WHERE interrupt_id <> '';

-- A decision is on one pause: (execution, checkpoint, interrupt id).
CREATE TABLE interrupt_decisions_v9 (
    namespace           TEXT    NOT NULL,
    execution_id        TEXT    NOT NULL,
    checkpoint_id       TEXT    NOT NULL,
    interrupt_id        TEXT    NOT NULL DEFAULT '',
    checkpoint_ns       TEXT    NOT NULL DEFAULT '',
    request_id          TEXT    NOT NULL DEFAULT '',
    approved            INTEGER NOT NULL,
    metadata_json       TEXT    NOT NULL,
    decided_by          TEXT    NOT NULL,
    decision_reason     TEXT,
    decided_at          INTEGER NOT NULL,
    decision_status     TEXT    NOT NULL
        CHECK (decision_status IN ('decided', 'resuming', 'resumed', 'resume_failed')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    lease_token         TEXT    NOT NULL DEFAULT '',
    lease_expires_at    INTEGER,
    decision_error      TEXT,
    reported_at         INTEGER,
    chain_name          TEXT    NOT NULL,
    node_id             TEXT    NOT NULL,
    reason              TEXT    NOT NULL,
    context_json        TEXT    NOT NULL,
    agent_path          TEXT,
    created_at          INTEGER NOT NULL,
    sequence            INTEGER NOT NULL,
    request_fingerprint TEXT,
    PRIMARY KEY (namespace, execution_id, checkpoint_id, interrupt_id)
);
INSERT INTO interrupt_decisions_v9 (
    namespace, execution_id, checkpoint_id, request_id, approved, metadata_json, decided_by,
    decision_reason, decided_at, decision_status, attempts, lease_token, lease_expires_at,
    decision_error, reported_at, chain_name, node_id, reason, context_json, agent_path,
    created_at, sequence, request_fingerprint)
SELECT namespace, execution_id, checkpoint_id, request_id, approved, metadata_json, decided_by,
       decision_reason, decided_at, decision_status, attempts, lease_token, lease_expires_at,
       decision_error, reported_at, chain_name, node_id, reason, context_json, agent_path,
       created_at, sequence, request_fingerprint
FROM interrupt_decisions;
DROP TABLE interrupt_decisions;
ALTER TABLE interrupt_decisions_v9 RENAME TO interrupt_decisions;
CREATE UNIQUE INDEX interrupt_decisions_by_request_id
    ON interrupt_decisions (namespace, request_id) WHERE request_id <> '';
CREATE INDEX interrupt_decisions_by_sequence ON interrupt_decisions (namespace, sequence);

-- Claims and events carry the pause's interrupt id and graph namespace too.
ALTER TABLE interrupt_claims ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE interrupt_claims ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
ALTER TABLE interrupt_events ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE interrupt_events ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
