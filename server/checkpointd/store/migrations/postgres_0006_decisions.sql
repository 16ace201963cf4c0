-- checkpointd Postgres schema, version 6: decisions on pending interrupts (contracts K1, K2).

-- One decision per pause, a pause being the interrupted checkpoint a pending row was written
-- with. The row outlives the pending row (the resume claims that) so the worker carrying the
-- decision out can be replaced when it dies: it holds a lease (lease_token, lease_expires_at)
-- that another worker may take once it has run out. The pending row is copied as it was
-- decided, for the events that follow its claim.
CREATE TABLE {schema}.interrupt_decisions (
    namespace        TEXT        NOT NULL,
    execution_id     TEXT        NOT NULL,
    checkpoint_id    TEXT        NOT NULL,
    request_id       TEXT        NOT NULL DEFAULT '',
    approved         BOOLEAN     NOT NULL,
    metadata_json    TEXT        NOT NULL,
    decided_by       TEXT        NOT NULL,
    decision_reason  TEXT,
    decided_at       TIMESTAMPTZ NOT NULL,
    decision_status  TEXT        NOT NULL
        CONSTRAINT interrupt_decisions_status_check
        CHECK (decision_status IN ('decided', 'resuming', 'resumed', 'resume_failed')),
    attempts         INTEGER     NOT NULL DEFAULT 0,
    lease_token      TEXT        NOT NULL DEFAULT '',
    lease_expires_at TIMESTAMPTZ,
    decision_error   TEXT,
    reported_at      TIMESTAMPTZ,
    chain_name       TEXT        NOT NULL,
    node_id          TEXT        NOT NULL,
    reason           TEXT        NOT NULL,
    context_json     TEXT        NOT NULL,
    agent_path       TEXT,
    created_at       TIMESTAMPTZ NOT NULL,
    sequence         BIGINT      NOT NULL,
    PRIMARY KEY (namespace, execution_id, checkpoint_id)
);

-- A retried SubmitDecision is found by its request id.
CREATE UNIQUE INDEX interrupt_decisions_request_id_idx
    ON {schema}.interrupt_decisions (namespace, request_id) WHERE request_id <> '';

-- ListDecisions pages by the pause's sequence (oldest first).
CREATE INDEX interrupt_decisions_sequence_idx ON {schema}.interrupt_decisions (namespace, sequence);

-- The outbox learns the decision events, and carries the decision with each of them.
ALTER TABLE {schema}.interrupt_events DROP CONSTRAINT interrupt_events_kind_check;
ALTER TABLE {schema}.interrupt_events ADD CONSTRAINT interrupt_events_kind_check
    CHECK (kind IN ('added', 'claimed', 'removed', 'decided', 'resumed', 'resume_failed'));
ALTER TABLE {schema}.interrupt_events ADD COLUMN decision_json TEXT;
