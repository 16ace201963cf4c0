-- checkpointd SQLite schema, version 8: the graph wing (LangGraph checkpoints).

-- One row per checkpoint of a thread. The body is the serializer's type and bytes, never
-- decoded by the server; channel_versions (a JSON object of strings) says which stored
-- values the checkpoint reads; run_id is the metadata's, for DeleteGraphRuns.
CREATE TABLE graph_checkpoints (
    namespace            TEXT NOT NULL,
    thread_id            TEXT NOT NULL,
    checkpoint_ns        TEXT NOT NULL,
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT NOT NULL,
    body_type            TEXT NOT NULL,
    body_data            BLOB NOT NULL,
    metadata_json        TEXT NOT NULL,
    channel_versions     TEXT NOT NULL,
    run_id               TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, thread_id, checkpoint_ns, checkpoint_id)
) WITHOUT ROWID;

-- A cross-thread listing reads newest first by checkpoint id.
CREATE INDEX graph_checkpoints_by_id ON graph_checkpoints (namespace, checkpoint_id);
-- DeleteGraphRuns finds a run's checkpoints without a scan.
CREATE INDEX graph_checkpoints_by_run ON graph_checkpoints (namespace, run_id)
    WHERE run_id <> '';

-- Channel values, stored once per version: a put writes only the channels that changed.
CREATE TABLE graph_blobs (
    namespace     TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    channel       TEXT NOT NULL,
    version       TEXT NOT NULL,
    value_type    TEXT NOT NULL,
    value_data    BLOB NOT NULL,
    PRIMARY KEY (namespace, thread_id, checkpoint_ns, channel, version)
) WITHOUT ROWID;

-- Pending writes of the tasks of a checkpoint.
CREATE TABLE graph_writes (
    namespace     TEXT    NOT NULL,
    thread_id     TEXT    NOT NULL,
    checkpoint_ns TEXT    NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    task_id       TEXT    NOT NULL,
    idx           INTEGER NOT NULL,
    task_path     TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    value_type    TEXT    NOT NULL,
    value_data    BLOB    NOT NULL,
    PRIMARY KEY (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;

-- Request ids of applied graph mutations with the requests' fingerprints ('': none given)
-- and their replies (JSON): a retry is answered like the first call and writes nothing,
-- whatever happened since; the id on another request is refused (C10).
CREATE TABLE graph_requests (
    namespace   TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    reply_json  TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, request_id)
) WITHOUT ROWID;
CREATE INDEX graph_requests_by_applied_at ON graph_requests (applied_at);
