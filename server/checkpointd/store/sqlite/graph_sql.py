"""The statements of the SQLite graph store (:mod:`checkpointd.store.sqlite.graph`).

Placeholders are ``?`` (``?n`` where a statement takes its parameters in the order the shared
writes of :mod:`checkpointd.graph.store` give them); lists (run ids, thread ids) travel as one
JSON array read with ``json_each``, so a statement's text never depends on a list's length.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from checkpointd.graph.store_sql import GraphStoreSql

__all__ = ["STORE_SQL"]

CHECKPOINT_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, body_type, body_data, "
    "metadata_json, channel_versions, run_id"
)
_KEY: Final = "namespace = ? AND thread_id = ? AND checkpoint_ns = ?"

UPSERT_CHECKPOINT: Final = f"""
INSERT INTO graph_checkpoints (namespace, {CHECKPOINT_COLUMNS}, written_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    body_type = excluded.body_type,
    body_data = excluded.body_data,
    metadata_json = excluded.metadata_json,
    channel_versions = excluded.channel_versions,
    run_id = excluded.run_id,
    written_at = excluded.written_at
"""

#: The Send targets of a checkpoint its put names (G8), beside its upsert.
SET_SEND_NODES: Final = (
    "UPDATE graph_checkpoints SET send_nodes = ?5 WHERE namespace = ?1 AND thread_id = ?2 "
    "AND checkpoint_ns = ?3 AND checkpoint_id = ?4"
)

INSERT_BLOB: Final = """
INSERT INTO graph_blobs
    (namespace, thread_id, checkpoint_ns, channel, version, value_type, value_data)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
"""

_WRITE_INSERT: Final = """
INSERT INTO graph_writes (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
                          task_path, channel, value_type, value_data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
"""
# langgraph-checkpoint-postgres' rule: special writes replace, others keep the first.
UPSERT_WRITE: Final = (
    _WRITE_INSERT + "DO UPDATE SET channel = excluded.channel, value_type = excluded.value_type, "
    "value_data = excluded.value_data"
)
INSERT_WRITE: Final = _WRITE_INSERT + "DO NOTHING"

GET_CHECKPOINT: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM graph_checkpoints WHERE {_KEY} AND checkpoint_id = ?"
)
GET_LATEST: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM graph_checkpoints WHERE {_KEY} "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)

# The values of exactly the versions a checkpoint names: one primary-key lookup each
# (CROSS JOIN keeps the versions outside, so the thread's other values are never read).
BLOBS_OF: Final = """
SELECT b.channel, b.version, b.value_type, b.value_data
FROM json_each(?) AS v
CROSS JOIN graph_blobs AS b
WHERE b.namespace = ? AND b.thread_id = ? AND b.checkpoint_ns = ?
  AND b.channel = v.key AND b.version = v.value
ORDER BY b.channel
"""
WRITES_OF: Final = f"""
SELECT task_id, task_path, idx, channel, value_type, value_data
FROM graph_writes WHERE {_KEY} AND checkpoint_id = ?
ORDER BY task_path, task_id, idx
"""

LIST_HEAD: Final = f"SELECT {CHECKPOINT_COLUMNS} FROM graph_checkpoints AS c WHERE namespace = ?"
# Every top-level entry of the filter is in the metadata with the same JSON type and value.
METADATA_CONTAINS: Final = """NOT EXISTS (
    SELECT 1 FROM json_each(?) AS f
    WHERE NOT EXISTS (
        SELECT 1 FROM json_each(c.metadata_json) AS m
        WHERE m.key = f.key AND m.type = f.type AND m.value IS f.value))"""
AFTER_POSITION: Final = "(checkpoint_id, thread_id, checkpoint_ns) < (?, ?, ?)"
LIST_ORDER: Final = " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT ?"

_THREAD: Final = "namespace = ? AND thread_id = ?"
COUNT_THREAD: Final = f"SELECT count(*) FROM graph_checkpoints WHERE {_THREAD}"
DELETE_THREAD: Final = tuple(
    f"DELETE FROM {table} WHERE {_THREAD}"
    for table in ("graph_checkpoints", "graph_blobs", "graph_writes")
)

CHECKPOINTS_OF_RUNS: Final = """
SELECT thread_id, checkpoint_ns, checkpoint_id FROM graph_checkpoints
WHERE namespace = ? AND run_id <> '' AND run_id IN (SELECT value FROM json_each(?))
"""
DELETE_CHECKPOINT: Final = f"DELETE FROM graph_checkpoints WHERE {_KEY} AND checkpoint_id = ?"
DELETE_WRITES_OF: Final = f"DELETE FROM graph_writes WHERE {_KEY} AND checkpoint_id = ?"
# Values that no checkpoint of their thread and checkpoint_ns names any more.
DELETE_UNNAMED_BLOBS: Final = f"""
DELETE FROM graph_blobs WHERE {_KEY} AND NOT EXISTS (
    SELECT 1 FROM graph_checkpoints AS c, json_each(c.channel_versions) AS v
    WHERE c.namespace = graph_blobs.namespace AND c.thread_id = graph_blobs.thread_id
      AND c.checkpoint_ns = graph_blobs.checkpoint_ns
      AND v.key = graph_blobs.channel AND v.value = graph_blobs.version)
"""
# A kept checkpoint whose parent went no longer names it (langgraph-checkpoint-postgres').
CLEAR_LOST_PARENTS: Final = f"""
UPDATE graph_checkpoints SET parent_checkpoint_id = ''
WHERE {_KEY} AND parent_checkpoint_id <> '' AND NOT EXISTS (
    SELECT 1 FROM graph_checkpoints AS p
    WHERE p.namespace = graph_checkpoints.namespace AND p.thread_id = graph_checkpoints.thread_id
      AND p.checkpoint_ns = graph_checkpoints.checkpoint_ns
      AND p.checkpoint_id = graph_checkpoints.parent_checkpoint_id)
"""

# A thread whose graph uses a DeltaChannel: LangGraph leaves these metadata keys on its
# checkpoints. keep_latest leaves such a thread whole: its channels are rebuilt from the
# writes of older checkpoints (langgraph-checkpoint-postgres refuses to prune them).
USES_DELTA_CHANNEL: Final = f"""
SELECT 1 FROM graph_checkpoints WHERE {_THREAD} AND (
    json_type(metadata_json, '$.counters_since_delta_snapshot') IS NOT NULL
    OR json_type(metadata_json, '$.delta_writes_versioned') IS NOT NULL)
LIMIT 1
"""

# The DeltaChannel walk (G19). ?1-?3: namespace, thread, checkpoint_ns. A chain from ?4,
# nearest first, at most ?5 long: a parent is followed while its id is less than its child's.
DELTA_CHAIN: Final = """
WITH RECURSIVE chain (checkpoint_id, parent_checkpoint_id, channel_versions, depth) AS (
    SELECT checkpoint_id, parent_checkpoint_id, channel_versions, 1 FROM graph_checkpoints
    WHERE namespace = ?1 AND thread_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4
    UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions, chain.depth + 1
    FROM chain JOIN graph_checkpoints AS c
      ON c.namespace = ?1 AND c.thread_id = ?2 AND c.checkpoint_ns = ?3
     AND c.checkpoint_id = chain.parent_checkpoint_id
    WHERE chain.depth < ?5 AND chain.parent_checkpoint_id < chain.checkpoint_id
)
SELECT checkpoint_id, parent_checkpoint_id, channel_versions FROM chain ORDER BY depth
"""
DELTA_LINKS: Final = (
    "SELECT checkpoint_id, parent_checkpoint_id, channel_versions FROM graph_checkpoints "
    "WHERE namespace = ?1 AND thread_id = ?2 AND checkpoint_ns = ?3"
)
DELTA_CHANNELS: Final = """
SELECT DISTINCT d.key FROM graph_checkpoints AS c,
    json_each(c.metadata_json, '$.counters_since_delta_snapshot') AS d
WHERE c.namespace = ?1 AND c.thread_id = ?2 AND c.checkpoint_ns = ?3
  AND json_type(c.metadata_json, '$.counters_since_delta_snapshot') = 'object'
"""
# ?4: a JSON array of [channel, version] pairs; one primary-key lookup each.
_DELTA_BLOBS: Final = """
FROM json_each(?4) AS k CROSS JOIN graph_blobs AS b
WHERE b.namespace = ?1 AND b.thread_id = ?2 AND b.checkpoint_ns = ?3
  AND b.channel = json_extract(k.value, '$[0]') AND b.version = json_extract(k.value, '$[1]')
"""
DELTA_TYPES: Final = "SELECT b.channel, b.version, b.value_type" + _DELTA_BLOBS
DELTA_VALUES: Final = "SELECT b.channel, b.version, b.value_type, b.value_data" + _DELTA_BLOBS
# ?4: the checkpoint ids, ?5: the channels, both JSON arrays.
DELTA_WRITES: Final = """
SELECT checkpoint_id, task_id, task_path, idx, channel, value_type, value_data
FROM graph_writes
WHERE namespace = ?1 AND thread_id = ?2 AND checkpoint_ns = ?3
  AND checkpoint_id IN (SELECT value FROM json_each(?4))
  AND channel IN (SELECT value FROM json_each(?5))
ORDER BY checkpoint_id, task_path, task_id, idx
"""

NAMESPACES_OF_THREAD: Final = (
    f"SELECT checkpoint_ns, max(checkpoint_id) FROM graph_checkpoints WHERE {_THREAD} "
    "GROUP BY checkpoint_ns"
)
# keep_latest: what is older than the newest checkpoint of its checkpoint_ns goes. Writes go
# by checkpoint id, so writes saved ahead of a newer checkpoint stay.
PRUNE_OLDER_WRITES: Final = f"DELETE FROM graph_writes WHERE {_KEY} AND checkpoint_id < ?"
PRUNE_OLDER_CHECKPOINTS: Final = f"DELETE FROM graph_checkpoints WHERE {_KEY} AND checkpoint_id < ?"

# A copy is written now (?4): the target thread is as idle as its copy is old.
COPY_CHECKPOINTS: Final = """
INSERT INTO graph_checkpoints (namespace, thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, body_type, body_data, metadata_json, channel_versions, run_id,
    written_at)
SELECT namespace, ?3, checkpoint_ns, checkpoint_id, parent_checkpoint_id, body_type, body_data,
       metadata_json, channel_versions, run_id, ?4
FROM graph_checkpoints WHERE namespace = ?1 AND thread_id = ?2
ON CONFLICT DO NOTHING
"""
COPY_BLOBS: Final = """
INSERT INTO graph_blobs (namespace, thread_id, checkpoint_ns, channel, version, value_type,
    value_data)
SELECT namespace, ?3, checkpoint_ns, channel, version, value_type, value_data
FROM graph_blobs WHERE namespace = ?1 AND thread_id = ?2
ON CONFLICT DO NOTHING
"""
COPY_WRITES: Final = """
INSERT INTO graph_writes (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
    task_path, channel, value_type, value_data)
SELECT namespace, ?3, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
       value_type, value_data
FROM graph_writes WHERE namespace = ?1 AND thread_id = ?2
ON CONFLICT DO NOTHING
"""

REQUEST_REPLY: Final = (
    "SELECT kind, fingerprint, reply_json FROM graph_requests "
    "WHERE namespace = ? AND request_id = ?"
)
RECORD_REQUEST: Final = (
    "INSERT INTO graph_requests (namespace, request_id, kind, fingerprint, reply_json, "
    "applied_at) VALUES (?, ?, ?, ?, ?, ?)"
)
PURGE_REQUESTS: Final = "DELETE FROM graph_requests WHERE applied_at < ?"


class _StoreSql:
    """:class:`~checkpointd.graph.store_sql.GraphStoreSql` on SQLite: no locks, every write
    transaction being ``BEGIN IMMEDIATE``."""

    get_checkpoint = GET_CHECKPOINT
    get_latest = GET_LATEST
    request_reply = REQUEST_REPLY
    record_request = RECORD_REQUEST
    purge_requests = PURGE_REQUESTS
    lock_request: str | None = None
    lock_checkpoint: str | None = None
    lock_request_and_checkpoint: str | None = None
    reserve_request: str | None = None
    reserve_request_and_checkpoint: str | None = None
    set_send_nodes = SET_SEND_NODES
    copy_checkpoints = COPY_CHECKPOINTS
    copy_blobs = COPY_BLOBS
    copy_writes = COPY_WRITES
    uses_delta_channel = USES_DELTA_CHANNEL
    heads = NAMESPACES_OF_THREAD
    prune_older_writes = PRUNE_OLDER_WRITES
    prune_older_checkpoints = PRUNE_OLDER_CHECKPOINTS
    clear_lost_parents = CLEAR_LOST_PARENTS
    delete_unnamed_blobs = DELETE_UNNAMED_BLOBS
    delta_newest = GET_LATEST
    delta_chain = DELTA_CHAIN
    delta_links = DELTA_LINKS
    delta_channels = DELTA_CHANNELS
    delta_types = DELTA_TYPES
    delta_values = DELTA_VALUES
    delta_writes = DELTA_WRITES

    def value_keys(self, keys: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
        return (json.dumps(keys),)  # one JSON array of [channel, version] pairs

    def id_list(self, ids: Sequence[str]) -> Any:
        return json.dumps(list(ids))


STORE_SQL: Final[GraphStoreSql] = _StoreSql()
