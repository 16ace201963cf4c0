"""The statements of the Postgres graph store (:mod:`checkpointd.store.postgres.graph`), with
the quoted schema filled in once.

Placeholders are ``$n``; lists (run ids, thread ids) travel as one ``text[]`` parameter, so
a statement's text never depends on a list's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from checkpointd.store.columns import PENDING_COLUMNS

__all__ = ["GraphSql"]

CHECKPOINT_COLUMNS: Final = (
    "c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.body_type, "
    "c.body_data, c.metadata::text AS metadata_json, c.channel_versions::text AS channel_versions, "
    "c.run_id"
)
# A checkpoint row with the values of exactly the versions it names (one primary-key lookup
# each: LATERAL ... LIMIT 1 keeps the planner from hashing the thread's every value) and its pending
# writes: one statement, one round trip. The writes come in LangGraph's writes sort key order,
# the texts bytewise (code point order, as SQLite's BINARY), whatever the database's collation.
TUPLE_COLUMNS: Final = f"""{CHECKPOINT_COLUMNS},
    ARRAY(SELECT ROW(v.key, v.value, b.value_type, b.value_data)
          FROM jsonb_each_text(c.channel_versions) AS v
          CROSS JOIN LATERAL (
            SELECT value_type, value_data FROM {{s}}.graph_blobs AS b
            WHERE b.namespace = c.namespace AND b.thread_id = c.thread_id
              AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key
              AND b.version = v.value
            LIMIT 1) AS b
          ORDER BY v.key) AS blobs,
    ARRAY(SELECT ROW(w.task_id, w.task_path, w.idx, w.channel, w.value_type, w.value_data)
          FROM {{s}}.graph_writes AS w
          WHERE w.namespace = c.namespace AND w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id
          ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx) AS writes"""


class GraphSql:
    """The graph store's SQL text for one schema (what the shared store runs among it: a
    :class:`~checkpointd.graph.store_sql.GraphStoreSql`)."""

    def __init__(self, quoted_schema: str) -> None:
        s = quoted_schema
        key = "namespace = $1 AND thread_id = $2 AND checkpoint_ns = $3"
        tuple_columns = TUPLE_COLUMNS.replace("{s}", s)
        # The interrupts held for the checkpoint (G18) are released by its put, in the same
        # statement: it returns them as a JSON array of [position, task id, interrupt id,
        # chain name, node, reason, context] (NULL when none were held).
        released = f"""released AS (
                DELETE FROM {s}.graph_held_interrupts
                WHERE {key} AND checkpoint_id = $4
                RETURNING position, task_id, interrupt_id, chain_name, node_id, reason,
                    context_json
            )"""
        # The put ends its parent's ($5) pending rows (G10): they are read and locked in the
        # same statement too, as the pending ops' ``of_checkpoint`` reads them. The statement
        # returns a row per parent row (one with NULL columns when there is none), each with
        # what was released.
        upsert = f"""upserted AS (
                INSERT INTO {s}.graph_checkpoints (namespace, thread_id, checkpoint_ns,
                    checkpoint_id, parent_checkpoint_id, body_type, body_data, metadata,
                    channel_versions, run_id, written_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11)
                ON CONFLICT (namespace, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
                    body_type = EXCLUDED.body_type, body_data = EXCLUDED.body_data,
                    metadata = EXCLUDED.metadata, channel_versions = EXCLUDED.channel_versions,
                    run_id = EXCLUDED.run_id, written_at = EXCLUDED.written_at
                RETURNING 1
            ), parent AS (
                SELECT {PENDING_COLUMNS} FROM {s}.pending_interrupts
                WHERE namespace = $1 AND execution_id = $2 AND checkpoint_ns = $3
                    AND checkpoint_id = $5 AND $5 <> '' AND interrupt_id <> '' FOR UPDATE
            )
            SELECT (SELECT json_agg(json_build_array(position, task_id, interrupt_id,
                    chain_name, node_id, reason, context_json))::text FROM released) AS released,
                parent.*
            FROM (SELECT count(*) FROM upserted) AS stored LEFT JOIN parent ON true"""
        self.upsert_checkpoint = f"WITH {released}, {upsert}"
        # The Send targets of the checkpoint's put ($5), which name the pauses they start (G8).
        self.set_send_nodes = (
            f"UPDATE {s}.graph_checkpoints SET send_nodes = $5 WHERE {key} AND checkpoint_id = $4"
        )
        # The checkpoint with its new values in one statement (one round trip): the values
        # as arrays ($12: channels, $13: versions, $14: types, $15: data), a value whose
        # (channel, version) is already stored left as it is.
        self.upsert_checkpoint_with_blobs = f"""
            WITH {released}, blobs AS (
                INSERT INTO {s}.graph_blobs (namespace, thread_id, checkpoint_ns, channel,
                    version, value_type, value_data)
                SELECT $1, $2, $3, u.channel, u.version, u.value_type, u.value_data
                FROM unnest($12::text[], $13::text[], $14::text[], $15::bytea[])
                    AS u (channel, version, value_type, value_data)
                ON CONFLICT DO NOTHING
            ), {upsert}"""
        # langgraph-checkpoint-postgres' rule: special writes replace, others keep the first.
        write_update = (
            "DO UPDATE SET channel = EXCLUDED.channel, value_type = EXCLUDED.value_type, "
            "value_data = EXCLUDED.value_data"
        )
        # A call's writes as arrays ($6: task ids, $7: idx, $8: task paths, $9: channels,
        # $10: types, $11: data; $5 is left to the statement they are put in front of).
        writes_insert = f"""
            INSERT INTO {s}.graph_writes (namespace, thread_id, checkpoint_ns, checkpoint_id,
                task_id, idx, task_path, channel, value_type, value_data)
            SELECT $1, $2, $3, $4, u.task_id, u.idx, u.task_path, u.channel, u.value_type,
                   u.value_data
            FROM unnest($6::text[], $7::integer[], $8::text[], $9::text[], $10::text[],
                        $11::bytea[])
                AS u (task_id, idx, task_path, channel, value_type, value_data)
            ON CONFLICT (namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) """
        self.upsert_writes = writes_insert + write_update
        self.insert_writes = writes_insert + "DO NOTHING"
        self.get_checkpoint = (
            f"SELECT {tuple_columns} FROM {s}.graph_checkpoints AS c "
            f"WHERE c.{key.replace(' AND ', ' AND c.')} AND c.checkpoint_id = $4"
        )
        self.get_latest = (
            f"SELECT {tuple_columns} FROM {s}.graph_checkpoints AS c "
            f"WHERE c.{key.replace(' AND ', ' AND c.')} ORDER BY c.checkpoint_id DESC LIMIT 1"
        )
        self.list_head = (
            f"SELECT {tuple_columns} FROM {s}.graph_checkpoints AS c WHERE c.namespace = $1"
        )
        self.list_order = " ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC"
        thread = "namespace = $1 AND thread_id = ANY($2::text[])"
        self.delete_threads = tuple(
            f"DELETE FROM {s}.{table} WHERE {thread}" for table in ("graph_blobs", "graph_writes")
        )
        self.delete_thread_checkpoints = f"DELETE FROM {s}.graph_checkpoints WHERE {thread}"
        # Values that no checkpoint of their thread and checkpoint_ns names any more.
        self.delete_unnamed_blobs = f"""
            DELETE FROM {s}.graph_blobs AS b
            WHERE b.namespace = $1 AND b.thread_id = $2 AND b.checkpoint_ns = $3
              AND NOT EXISTS (
                SELECT 1 FROM {s}.graph_checkpoints AS c
                WHERE c.namespace = b.namespace AND c.thread_id = b.thread_id
                  AND c.checkpoint_ns = b.checkpoint_ns
                  AND c.channel_versions ->> b.channel = b.version)"""
        self.clear_lost_parents = f"""
            UPDATE {s}.graph_checkpoints AS c SET parent_checkpoint_id = ''
            WHERE c.namespace = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3
              AND c.parent_checkpoint_id <> '' AND NOT EXISTS (
                SELECT 1 FROM {s}.graph_checkpoints AS p
                WHERE p.namespace = c.namespace AND p.thread_id = c.thread_id
                  AND p.checkpoint_ns = c.checkpoint_ns
                  AND p.checkpoint_id = c.parent_checkpoint_id)"""
        # A thread whose graph uses a DeltaChannel (LangGraph leaves these metadata keys):
        # keep_latest leaves it whole, its channels being rebuilt from older writes.
        self.uses_delta_channel = f"""
            SELECT EXISTS (SELECT 1 FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND thread_id = $2 AND (
                metadata ? 'counters_since_delta_snapshot'
                OR metadata ? 'delta_writes_versioned'))"""
        # The DeltaChannel walk (G19). $1-$3: namespace, thread, checkpoint_ns. A chain from
        # $4, nearest first, at most $5 long: a parent is followed while its id is less than
        # its child's (bytewise, as on SQLite).
        self.delta_chain = f"""
            WITH RECURSIVE chain (checkpoint_id, parent_checkpoint_id, channel_versions,
                depth) AS (
                SELECT checkpoint_id, parent_checkpoint_id, channel_versions, 1
                FROM {s}.graph_checkpoints WHERE {key} AND checkpoint_id = $4
                UNION ALL
                SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions,
                    chain.depth + 1
                FROM chain JOIN {s}.graph_checkpoints AS c
                  ON c.namespace = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3
                 AND c.checkpoint_id = chain.parent_checkpoint_id
                WHERE chain.depth < $5
                  AND chain.parent_checkpoint_id COLLATE "C" < chain.checkpoint_id COLLATE "C"
            )
            SELECT checkpoint_id, parent_checkpoint_id, channel_versions::text AS versions
            FROM chain ORDER BY depth"""
        self.delta_newest = (
            f"SELECT checkpoint_id FROM {s}.graph_checkpoints WHERE {key} "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        )
        self.delta_links = f"""
            SELECT checkpoint_id, parent_checkpoint_id, channel_versions::text AS versions
            FROM {s}.graph_checkpoints WHERE {key}"""
        self.delta_channels = f"""
            SELECT DISTINCT jsonb_object_keys(metadata -> 'counters_since_delta_snapshot')
            FROM {s}.graph_checkpoints
            WHERE {key} AND jsonb_typeof(metadata -> 'counters_since_delta_snapshot') = 'object'"""
        # $4, $5: the (channel, version) keys as two arrays; one primary-key lookup each.
        delta_blobs = f"""
            FROM unnest($4::text[], $5::text[]) AS k (channel, version)
            JOIN {s}.graph_blobs AS b
              ON b.namespace = $1 AND b.thread_id = $2 AND b.checkpoint_ns = $3
             AND b.channel = k.channel AND b.version = k.version"""
        self.delta_types = "SELECT b.channel, b.version, b.value_type" + delta_blobs
        self.delta_values = "SELECT b.channel, b.version, b.value_type, b.value_data" + delta_blobs
        # $4: the checkpoint ids, $5: the channels.
        self.delta_writes = f"""
            SELECT checkpoint_id, task_id, task_path, idx, channel, value_type, value_data
            FROM {s}.graph_writes
            WHERE {key} AND checkpoint_id = ANY($4::text[]) AND channel = ANY($5::text[])
            ORDER BY checkpoint_id COLLATE "C", task_path COLLATE "C", task_id COLLATE "C",
                idx"""
        self.checkpoints_of_runs = f"""
            SELECT thread_id, checkpoint_ns, checkpoint_id FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND run_id <> '' AND run_id = ANY($2::text[])"""
        self.delete_checkpoints = f"""
            DELETE FROM {s}.graph_checkpoints
            WHERE {key} AND checkpoint_id = ANY($4::text[])"""
        self.delete_writes_at = f"""
            DELETE FROM {s}.graph_writes WHERE {key} AND checkpoint_id = ANY($4::text[])"""
        self.heads = f"""
            SELECT checkpoint_ns, max(checkpoint_id) AS newest FROM {s}.graph_checkpoints
            WHERE namespace = $1 AND thread_id = $2 GROUP BY checkpoint_ns"""
        # keep_latest: what is older than the newest checkpoint of its checkpoint_ns goes.
        # Writes go by checkpoint id, so writes saved ahead of a newer checkpoint stay.
        self.prune_older_writes = f"DELETE FROM {s}.graph_writes WHERE {key} AND checkpoint_id < $4"
        self.prune_older_checkpoints = (
            f"DELETE FROM {s}.graph_checkpoints WHERE {key} AND checkpoint_id < $4"
        )
        # A copy is written now ($4): the target thread is as idle as its copy is old.
        self.copy_checkpoints = f"""
            INSERT INTO {s}.graph_checkpoints (namespace, thread_id, checkpoint_ns,
                checkpoint_id, parent_checkpoint_id, body_type, body_data, metadata,
                channel_versions, run_id, written_at)
            SELECT namespace, $3, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                body_type, body_data, metadata, channel_versions, run_id, $4
            FROM {s}.graph_checkpoints WHERE namespace = $1 AND thread_id = $2
            ON CONFLICT DO NOTHING"""
        self.copy_blobs = f"""
            INSERT INTO {s}.graph_blobs (namespace, thread_id, checkpoint_ns, channel, version,
                value_type, value_data)
            SELECT namespace, $3, checkpoint_ns, channel, version, value_type, value_data
            FROM {s}.graph_blobs WHERE namespace = $1 AND thread_id = $2
            ON CONFLICT DO NOTHING"""
        self.copy_writes = f"""
            INSERT INTO {s}.graph_writes (namespace, thread_id, checkpoint_ns, checkpoint_id,
                task_id, idx, task_path, channel, value_type, value_data)
            SELECT namespace, $3, checkpoint_ns, checkpoint_id, task_id, idx, task_path,
                channel, value_type, value_data
            FROM {s}.graph_writes WHERE namespace = $1 AND thread_id = $2
            ON CONFLICT DO NOTHING"""
        # A retry racing its first call waits here for it (the key's row lock), then finds
        # its reply.
        lock_request = "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 1))"
        self.lock_request: str | None = lock_request
        # A put of a checkpoint and a write that describes interrupts at it are serialized on
        # the checkpoint (G18): otherwise a write that found no checkpoint could hold its
        # interrupts after the put had released what was held, and they would wait for ever.
        # Taken with the request's lock, in the same round trip; alone without a request id.
        self.lock_checkpoint: str | None = "SELECT pg_advisory_xact_lock(hashtextextended($1, 2))"
        self.lock_request_and_checkpoint: str | None = (
            f"{lock_request}, pg_advisory_xact_lock(hashtextextended($3, 2))"
        )
        # A put knows its reply before it writes, and a failed statement aborts the whole
        # transaction here: so its request is recorded first, under the same locks in the same
        # order, in the statement that takes them. The locks are the CTE the INSERT reads, so
        # they are taken before it; a recorded id inserts nothing and returns no row.
        reserve = (
            f"INSERT INTO {s}.graph_requests (namespace, request_id, kind, fingerprint, "
            "reply_json, applied_at) SELECT $1::text, $2::text, $3::text, $4::text, $5::text, "
            "$6::timestamptz FROM locked ON CONFLICT (namespace, request_id) DO NOTHING RETURNING 1"
        )
        self.reserve_request: str | None = f"WITH locked AS ({lock_request}) {reserve}"
        self.reserve_request_and_checkpoint: str | None = (
            f"WITH locked AS ({lock_request}, pg_advisory_xact_lock(hashtextextended($7, 2))) "
            f"{reserve}"
        )
        self.request_reply = (
            f"SELECT kind, fingerprint, reply_json FROM {s}.graph_requests "
            "WHERE namespace = $1 AND request_id = $2"
        )
        self.record_request = (
            f"INSERT INTO {s}.graph_requests (namespace, request_id, kind, fingerprint, "
            "reply_json, applied_at) VALUES ($1, $2, $3, $4, $5, $6)"
        )
        self.purge_requests = f"DELETE FROM {s}.graph_requests WHERE applied_at < $1"

    def value_keys(self, keys: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
        return ([k[0] for k in keys], [k[1] for k in keys])  # the channels, the versions

    def id_list(self, ids: Sequence[str]) -> Any:
        return list(ids)
