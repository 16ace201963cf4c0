-- checkpointd Postgres schema, version 9: graph interrupts in the pending-interrupt inbox
-- (contracts G8-G11).

-- A thread of a graph runtime (LangGraph) can wait on several interrupts at once (parallel
-- tasks, subgraphs), each answered by its id. A pending row is now one pause of an execution:
-- interrupt_id is empty for the one pause of a fastaiagent run (as before) and the runtime's
-- interrupt id for a graph's; checkpoint_ns is the graph namespace it was recorded in, and
-- task_id the task that raised it (what a later write of that task clears).
ALTER TABLE {schema}.pending_interrupts ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.pending_interrupts ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.pending_interrupts ADD COLUMN task_id TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.pending_interrupts DROP CONSTRAINT pending_interrupts_pkey;
ALTER TABLE {schema}.pending_interrupts
    ADD CONSTRAINT pending_interrupts_pkey PRIMARY KEY (namespace, execution_id, interrupt_id);
-- A graph write finds the pauses its task or its checkpoint ends.
CREATE INDEX pending_interrupts_graph_checkpoint_idx
    ON {schema}.pending_interrupts (namespace, execution_id, checkpoint_ns, checkpoint_id)
    WHERE interrupt_id <> '';

-- A decision is on one pause: (execution, checkpoint, interrupt id).
ALTER TABLE {schema}.interrupt_decisions ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.interrupt_decisions ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.interrupt_decisions DROP CONSTRAINT interrupt_decisions_pkey;
ALTER TABLE {schema}.interrupt_decisions ADD CONSTRAINT interrupt_decisions_pkey
    PRIMARY KEY (namespace, execution_id, checkpoint_id, interrupt_id);

-- Claims and events carry the pause's interrupt id and graph namespace too.
ALTER TABLE {schema}.interrupt_claims ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.interrupt_claims ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.interrupt_events ADD COLUMN interrupt_id TEXT NOT NULL DEFAULT '';
ALTER TABLE {schema}.interrupt_events ADD COLUMN checkpoint_ns TEXT NOT NULL DEFAULT '';
