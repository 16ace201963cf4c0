-- checkpointd SQLite schema, version 1.
--
-- Applied by checkpointd.store.sqlite inside one BEGIN IMMEDIATE transaction together with
-- its schema_migrations row, so replicas that open a fresh file at once apply it exactly once.
-- Every table carries the namespace (contract N1). Times are INTEGER microseconds since the
-- Unix epoch, UTC. JSON columns hold the caller's JSON text unchanged (contract J1).

-- One row per checkpoint. sequence is the store-assigned write order (contract C3/C4);
-- AUTOINCREMENT guarantees it is never reused, even after the newest rows are deleted.
CREATE TABLE checkpoints (
    sequence                INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace               TEXT    NOT NULL,
    execution_id            TEXT    NOT NULL,
    checkpoint_id           TEXT    NOT NULL,
    request_id              TEXT    NOT NULL DEFAULT '',
    parent_checkpoint_id    TEXT,
    chain_name              TEXT    NOT NULL,
    node_id                 TEXT    NOT NULL,
    node_index              INTEGER NOT NULL,
    step_type               TEXT,
    status                  TEXT    NOT NULL CHECK (status IN ('completed', 'interrupted', 'failed')),
    state_snapshot_json     TEXT    NOT NULL,
    node_input_json         TEXT    NOT NULL,
    node_output_json        TEXT    NOT NULL,
    iteration               INTEGER NOT NULL,
    iteration_counters_json TEXT    NOT NULL,
    interrupt_reason        TEXT,
    interrupt_context_json  TEXT    NOT NULL,
    agent_path              TEXT,
    created_at              INTEGER NOT NULL,
    UNIQUE (namespace, checkpoint_id)
);

-- Latest, list and delete of one execution.
CREATE INDEX checkpoints_by_execution ON checkpoints (namespace, execution_id, sequence);

-- Prune by age.
CREATE INDEX checkpoints_by_created_at ON checkpoints (namespace, created_at);

-- At most one pending interrupt per execution (contract I2); sequence and checkpoint_id are
-- those of the interrupted checkpoint written with it.
CREATE TABLE pending_interrupts (
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
    PRIMARY KEY (namespace, execution_id)
);

-- List pending, newest first (contract I4).
CREATE INDEX pending_interrupts_by_sequence ON pending_interrupts (namespace, sequence);

-- Claims remembered under their token so a retried claim gets the same row (contract I3).
-- The columns after claim_token are those of the claimed pending_interrupts row.
CREATE TABLE interrupt_claims (
    namespace     TEXT    NOT NULL,
    execution_id  TEXT    NOT NULL,
    claim_token   TEXT    NOT NULL,
    chain_name    TEXT    NOT NULL,
    node_id       TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    context_json  TEXT    NOT NULL,
    agent_path    TEXT,
    created_at    INTEGER NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    sequence      INTEGER NOT NULL,
    claimed_at    INTEGER NOT NULL,
    PRIMARY KEY (namespace, execution_id, claim_token)
);

-- Purge of claims past their retention time.
CREATE INDEX interrupt_claims_by_claimed_at ON interrupt_claims (claimed_at);

-- Cached results of idempotent functions (contract D1).
CREATE TABLE idempotency_results (
    namespace    TEXT    NOT NULL,
    execution_id TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    result_json  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, execution_id, key)
);

-- Prune by age.
CREATE INDEX idempotency_results_by_created_at ON idempotency_results (namespace, created_at);

-- The outbox of pending-interrupt events for the watch stream (contracts I1, I5): written in
-- the transaction that made the change, so an event exists exactly when its change committed.
-- cursor is monotonic per store and never reused.
CREATE TABLE interrupt_events (
    cursor             INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace          TEXT    NOT NULL,
    kind               TEXT    NOT NULL CHECK (kind IN ('added', 'claimed', 'removed')),
    execution_id       TEXT    NOT NULL,
    chain_name         TEXT    NOT NULL,
    node_id            TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    context_json       TEXT    NOT NULL,
    agent_path         TEXT,
    pending_created_at INTEGER NOT NULL,
    checkpoint_id      TEXT    NOT NULL,
    event_at           INTEGER NOT NULL
);
