-- checkpointd Postgres schema, version 1.
--
-- Applied by PostgresStore.open() inside one transaction that holds an advisory lock derived
-- from the schema name, and recorded in {schema}.schema_migrations. {schema} is replaced by
-- the validated, double-quoted schema name; nothing else is substituted.
--
-- JSON columns are TEXT on purpose: the store returns exactly the text the client sent
-- (contract J1); JSONB would reorder keys and normalise numbers.
-- Every table carries the namespace (contract N1) as the first column of its keys.

CREATE TABLE {schema}.checkpoints (
    sequence                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace               TEXT        NOT NULL,
    execution_id            TEXT        NOT NULL,
    checkpoint_id           TEXT        NOT NULL,
    -- Request id of the write that stored the row (NULL when the caller sent none): a retry
    -- with the same id gets the stored row back instead of ALREADY_EXISTS (contract C2).
    request_id              TEXT,
    parent_checkpoint_id    TEXT,
    chain_name              TEXT        NOT NULL,
    node_id                 TEXT        NOT NULL,
    node_index              BIGINT      NOT NULL,
    step_type               TEXT,
    status                  TEXT        NOT NULL
        CONSTRAINT checkpoints_status_check CHECK (status IN ('completed', 'interrupted', 'failed')),
    state_snapshot_json     TEXT        NOT NULL,
    node_input_json         TEXT        NOT NULL,
    node_output_json        TEXT        NOT NULL,
    iteration               BIGINT      NOT NULL,
    iteration_counters_json TEXT        NOT NULL,
    interrupt_reason        TEXT,
    interrupt_context_json  TEXT        NOT NULL,
    agent_path              TEXT,
    created_at              TIMESTAMPTZ NOT NULL,
    CONSTRAINT checkpoints_namespace_checkpoint_id_key UNIQUE (namespace, checkpoint_id)
);

-- Latest, list (both directions) and delete of one execution.
CREATE INDEX checkpoints_execution_idx
    ON {schema}.checkpoints (namespace, execution_id, sequence);

-- Prune by age.
CREATE INDEX checkpoints_created_at_idx
    ON {schema}.checkpoints (namespace, created_at);

-- At most one pending interrupt per execution; sequence and checkpoint_id are those of the
-- interrupted checkpoint written with it.
CREATE TABLE {schema}.pending_interrupts (
    namespace     TEXT        NOT NULL,
    execution_id  TEXT        NOT NULL,
    chain_name    TEXT        NOT NULL,
    node_id       TEXT        NOT NULL,
    reason        TEXT        NOT NULL,
    context_json  TEXT        NOT NULL,
    agent_path    TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    checkpoint_id TEXT        NOT NULL,
    sequence      BIGINT      NOT NULL,
    PRIMARY KEY (namespace, execution_id)
);

-- List pending, newest first, paged by sequence; the agent_path prefix filter rides on it.
CREATE INDEX pending_interrupts_sequence_idx
    ON {schema}.pending_interrupts (namespace, sequence);

-- The same listing filtered by chain name or by reason (contract I4).
CREATE INDEX pending_interrupts_chain_name_idx
    ON {schema}.pending_interrupts (namespace, chain_name, sequence);
CREATE INDEX pending_interrupts_reason_idx
    ON {schema}.pending_interrupts (namespace, reason, sequence);

-- A claimed pending row, kept under the claimer's token so a retried claim gets the same
-- row again (contract I3) until purged after the retention time.
CREATE TABLE {schema}.interrupt_claims (
    namespace     TEXT        NOT NULL,
    execution_id  TEXT        NOT NULL,
    claim_token   TEXT        NOT NULL,
    chain_name    TEXT        NOT NULL,
    node_id       TEXT        NOT NULL,
    reason        TEXT        NOT NULL,
    context_json  TEXT        NOT NULL,
    agent_path    TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    checkpoint_id TEXT        NOT NULL,
    sequence      BIGINT      NOT NULL,
    claimed_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, execution_id, claim_token)
);

-- Purge of claims past their retention time (across namespaces).
CREATE INDEX interrupt_claims_claimed_at_idx
    ON {schema}.interrupt_claims (claimed_at);

-- Cached results of idempotent side effects (contract D1).
CREATE TABLE {schema}.idempotency_results (
    namespace    TEXT        NOT NULL,
    execution_id TEXT        NOT NULL,
    key          TEXT        NOT NULL,
    result_json  TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, execution_id, key)
);

-- Prune by age.
CREATE INDEX idempotency_results_created_at_idx
    ON {schema}.idempotency_results (namespace, created_at);

-- Outbox of pending-interrupt changes for the watch stream (contract I5), written in the
-- same transaction as the change. Writers take a second advisory lock just before inserting
-- here, as the last statement of their transaction, so cursors commit in cursor order and a
-- reader that has seen cursor N never later finds a smaller cursor appear.
CREATE TABLE {schema}.interrupt_events (
    cursor             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace          TEXT        NOT NULL,
    kind               TEXT        NOT NULL
        CONSTRAINT interrupt_events_kind_check CHECK (kind IN ('added', 'claimed', 'removed')),
    execution_id       TEXT        NOT NULL,
    chain_name         TEXT        NOT NULL,
    node_id            TEXT        NOT NULL,
    reason             TEXT        NOT NULL,
    context_json       TEXT        NOT NULL,
    agent_path         TEXT,
    pending_created_at TIMESTAMPTZ NOT NULL,
    checkpoint_id      TEXT        NOT NULL,
    -- Sequence of the pending row, so an event carries a complete pending record.
    sequence           BIGINT      NOT NULL,
    event_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Retention of old events.
CREATE INDEX interrupt_events_event_at_idx
    ON {schema}.interrupt_events (event_at);
