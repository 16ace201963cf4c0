-- checkpointd Postgres schema, version 12: a decision's typed response (contract K3).

-- Beside its verdict, a decision may carry the answer the pause asked for: a decision per
-- action of a LangChain HumanInTheLoopMiddleware pause, or the value interrupt() returns.
-- Kept as JSON ({"actions": [...]} or {"resume": ...}); empty for the verdict alone.
ALTER TABLE {schema}.interrupt_decisions ADD COLUMN response_json TEXT NOT NULL DEFAULT '';
