-- checkpointd Postgres schema, version 13: the Send targets of a graph checkpoint (contract G8).

-- A task a Send starts has only the Send's index in its task path, so a pause it raises is
-- named by the node the Send targets, which the checkpoint's put names (its pending Sends in
-- order). Kept as a JSON array of node names; empty when the checkpoint has no pending Send.
ALTER TABLE {schema}.graph_checkpoints ADD COLUMN send_nodes TEXT NOT NULL DEFAULT '';
