"""The Postgres store's statements: the SQL text of
:class:`~checkpointd.store.postgres.PostgresStore`, with the quoted schema name filled in once.

Placeholders are ``$n``; statements built from shared pieces are written with ``?`` and
numbered by :func:`numbered`. Column lists and parameter orders come from
:mod:`checkpointd.store.columns`, shared with SQLite.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

from checkpointd.domain import CheckpointStatus
from checkpointd.store import replies
from checkpointd.store.checkpoints import CheckpointSql
from checkpointd.store.columns import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_INSERT_COLUMNS,
    DECISION_ROW_COLUMNS,
    EVENT_INSERT_COLUMNS,
    PENDING_COLUMNS,
    sizes,
)
from checkpointd.store.decisions import DecisionSql
from checkpointd.store.filters import PrefixMatch
from checkpointd.store.outbox import OutboxSql

__all__ = ["PREFIX", "Sql", "lock_key", "notify_channel", "numbered", "quoted_schema"]

_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PRUNABLE: Final = ", ".join(
    f"'{s.value}'" for s in (CheckpointStatus.COMPLETED, CheckpointStatus.FAILED)
)


def _size_of(columns: Sequence[str]) -> str:
    """The stored bytes of these text columns (see :mod:`checkpointd.store.budget`);
    octet_length reads a TOASTed value's size without decompressing it."""
    return " + ".join(f"coalesce(octet_length({column}), 0)" for column in columns)


CHECKPOINT_SIZE, PENDING_SIZE, EVENT_SIZE = sizes(_size_of)

PREFIX: Final = PrefixMatch("starts_with(p.agent_path, ?)", uses=1)


def numbered(sql: str) -> str:
    """``?`` placeholders as ``$1``, ``$2``, ... in order (the statements built here hold no
    other question mark)."""
    parts = sql.split("?")
    out = [parts[0]]
    for number, part in enumerate(parts[1:], start=1):
        out.append(f"${number}{part}")
    return "".join(out)


def quoted_schema(schema: str) -> str:
    """Return ``schema`` double-quoted, or raise ValueError when it is not a plain identifier."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"invalid Postgres schema name {schema!r}: use 1 to 63 characters of letters, "
            "digits and '_', not starting with a digit"
        )
    return f'"{schema}"'


def notify_channel(schema: str) -> str:
    """The NOTIFY channel of the outbox of ``schema`` (short enough for any schema name)."""
    digest = hashlib.blake2b(f"checkpointd:events:{schema}".encode(), digest_size=8).hexdigest()
    return f"checkpointd_events_{digest}"


def lock_key(purpose: str, schema: str) -> int:
    """Derive a stable signed 64-bit advisory lock key for ``purpose`` in ``schema``."""
    digest = hashlib.blake2b(f"checkpointd:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _purge_batch(table: str, column: str) -> str:
    """One batch of a purge: delete at most $2 rows of ``table`` whose ``column`` is before
    $1. ``candidates`` (not ``deleted``) says whether another batch is needed, so rows a
    concurrent purge took first never end the loop early."""
    return f"""
            WITH doomed AS (
                SELECT ctid FROM {table} WHERE {column} < $1 LIMIT $2
            ), gone AS (
                DELETE FROM {table}
                WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND {column} < $1
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted"""


class Sql:
    """Every statement of the store, with the quoted schema name filled in once."""

    def __init__(self, s: str) -> None:
        cp, pending, claims = f"{s}.checkpoints", f"{s}.pending_interrupts", f"{s}.interrupt_claims"
        idem, events = f"{s}.idempotency_results", f"{s}.interrupt_events"
        decisions = f"{s}.interrupt_decisions"
        applied = f"{s}.applied_requests"
        cols, pcols = CHECKPOINT_COLUMNS, PENDING_COLUMNS

        self.migrations_table = f"{s}.schema_migrations"
        self.advisory_lock = "SELECT pg_advisory_xact_lock($1)"

        # --- checkpoints ---
        # A row is written unless its checkpoint id or its request id is taken (ON CONFLICT
        # without a target covers both unique keys) or its request id left a tombstone (the
        # rows it wrote were deleted since: C9). One statement, one round trip. The tombstone
        # is read in the statement's snapshot: a retry whose statement starts before the
        # delete of its row commits, and reaches the conflict check after that delete, can
        # still write (a retry racing the delete itself; any later retry is refused).
        tombstone = (
            f"SELECT 1 FROM {applied} AS a WHERE a.namespace = {{ns}} "
            f"AND a.request_id = {{rid}} AND a.kind = '{replies.DELETED_WRITE}'"
        )
        self.insert_checkpoint = f"""
            INSERT INTO {cp} ({CHECKPOINT_INSERT_COLUMNS})
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
                   $8::bigint, $9::text, $10::text, $11::text, $12::text, $13::text,
                   $14::bigint, $15::text, $16::text, $17::text, $18::text, $19::timestamptz,
                   $20::text
            WHERE $4::text IS NULL
               OR NOT EXISTS ({tombstone.format(ns="$1::text", rid="$4::text")})
            ON CONFLICT DO NOTHING
            RETURNING sequence"""
        # Group commit: the rows of many put_checkpoint calls, one array per column (the
        # statement text never changes, so it stays prepared).
        self.insert_checkpoints = f"""
            INSERT INTO {cp} ({CHECKPOINT_INSERT_COLUMNS})
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                                 $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],
                                 $11::text[], $12::text[], $13::text[], $14::bigint[],
                                 $15::text[], $16::text[], $17::text[], $18::text[],
                                 $19::timestamptz[], $20::text[])
                AS u (namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id,
                      chain_name, node_id, node_index, step_type, status, state_snapshot_json,
                      node_input_json, node_output_json, iteration, iteration_counters_json,
                      interrupt_reason, interrupt_context_json, agent_path, created_at,
                      request_fingerprint)
            WHERE u.request_id IS NULL
               OR NOT EXISTS ({tombstone.format(ns="u.namespace", rid="u.request_id")})
            ON CONFLICT DO NOTHING
            RETURNING namespace, checkpoint_id, sequence"""
        self.checkpoint_by_id = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND checkpoint_id = $2"
        )
        self.checkpoint_by_request_id = (
            f"SELECT {cols}, request_fingerprint FROM {cp} WHERE namespace = $1 AND request_id = $2"
        )
        # The fingerprint of the id's tombstone, in a 1-row answer (none: no tombstone).
        self.tombstone_fingerprint = tombstone.format(ns="$1", rid="$2").replace(
            "SELECT 1 ", "SELECT a.request_fingerprint ", 1
        )
        self.get_checkpoint = (
            f"SELECT {cols} FROM {cp} "
            "WHERE namespace = $1 AND checkpoint_id = $2 AND execution_id = $3"
        )
        self.latest = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "ORDER BY sequence DESC LIMIT 1"
        )
        self.latest_skip_run_end = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "AND step_type IS DISTINCT FROM $3 ORDER BY sequence DESC LIMIT 1"
        )
        # Keyset listing (parameters: namespace, execution_id, above, below, limit), and the
        # same listing of stored sizes only, read first so that only the rows that fit the
        # byte budget are loaded (see checkpointd.store.budget).
        self.list_ascending = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "AND sequence > $3 AND sequence < $4 ORDER BY sequence LIMIT $5"
        )
        self.list_descending = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "AND sequence > $3 AND sequence < $4 ORDER BY sequence DESC LIMIT $5"
        )
        self.list_ascending_sizes = self.list_ascending.replace(cols, CHECKPOINT_SIZE, 1)
        self.list_descending_sizes = self.list_descending.replace(cols, CHECKPOINT_SIZE, 1)

        # The request ids of the deleted rows (``gone``) become tombstones in the same
        # statement (C9), applied at the parameter given.
        def tombstones(applied_at: str) -> str:
            return f"""kept AS (
                INSERT INTO {applied} (namespace, request_id, applied_at, kind, request_fingerprint)
                SELECT $1::text, request_id, {applied_at}::timestamptz, '{replies.DELETED_WRITE}',
                       request_fingerprint
                FROM gone
                WHERE request_id IS NOT NULL
                ON CONFLICT (namespace, request_id) DO NOTHING
            )"""

        self.delete_checkpoints = f"""
            WITH gone AS (
                DELETE FROM {cp} WHERE namespace = $1 AND execution_id = $2
                RETURNING request_id, request_fingerprint
            ), {tombstones("$3")}
            SELECT count(*) FROM gone"""
        self.reply_of_request = (
            f"SELECT kind, reply_json, request_fingerprint FROM {applied} "
            "WHERE namespace = $1 AND request_id = $2"
        )
        self.fingerprint_of_applied = (
            f"SELECT request_fingerprint FROM {applied} WHERE namespace = $1 AND request_id = $2"
        )
        # Parameters: namespace, request_id, applied_at, kind, reply_json, fingerprint.
        self.record_reply = f"""
            INSERT INTO {applied} (namespace, request_id, applied_at, kind, reply_json,
                                   request_fingerprint)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (namespace, request_id) DO NOTHING
            RETURNING 1"""
        self.set_reply = (
            f"UPDATE {applied} SET reply_json = $3 WHERE namespace = $1 AND request_id = $2"
        )
        # One prune batch. `candidates` (not `deleted`) decides whether another batch is
        # needed, so rows a concurrent delete took first never end the loop early; the scan
        # resumes at the newest created_at of this batch, so interrupted rows it stepped
        # over are not read again.
        self.prune_checkpoints = f"""
            WITH doomed AS (
                SELECT sequence, created_at FROM {cp}
                WHERE namespace = $1 AND created_at >= $2 AND created_at < $3
                  AND status IN ({_PRUNABLE})
                ORDER BY created_at
                LIMIT $4
            ), gone AS (
                DELETE FROM {cp}
                WHERE sequence = ANY (ARRAY(SELECT sequence FROM doomed))
                RETURNING request_id, request_fingerprint
            ), {tombstones("$5")}
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted,
                   (SELECT max(created_at) FROM doomed) AS resume_at"""

        # --- pending interrupts and claims ---
        self.insert_pending = f"""
            INSERT INTO {pending} (
                namespace, execution_id, chain_name, node_id, reason, context_json,
                agent_path, created_at, checkpoint_id, sequence, interrupt_id, checkpoint_ns
            ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
            ON CONFLICT (namespace, execution_id, interrupt_id) DO NOTHING
            RETURNING {pcols}"""
        # A fastaiagent run's one pause has the empty interrupt id; a graph's have theirs.
        fastaiagent = "interrupt_id = ''"
        self.pending_by_execution = (
            f"SELECT {pcols} FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            f"AND {fastaiagent}"
        )
        self.delete_pending = (
            f"DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            f"AND {fastaiagent} RETURNING {pcols}"
        )
        # The claim (contract I3): one statement takes the row and files it under the token.
        # Concurrent DELETEs of one row serialize on its row lock; the losers re-check it
        # after the winner commits, find it gone, and return nothing.
        take = f"DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2 AND {fastaiagent}"
        keep = f"""
            INSERT INTO {claims} (
                namespace, execution_id, claim_token, chain_name, node_id, reason,
                context_json, agent_path, created_at, checkpoint_id, sequence, claimed_at,
                interrupt_id, checkpoint_ns
            )
            SELECT $1, execution_id, $3::text, chain_name, node_id, reason, context_json,
                   agent_path, created_at, checkpoint_id, sequence, $4::timestamptz,
                   interrupt_id, checkpoint_ns
            FROM taken"""
        self.claim_by_token = (
            f"SELECT {pcols} FROM {claims} "
            "WHERE namespace = $1 AND execution_id = $2 AND claim_token = $3"
        )
        # A pending row written or claimed (``taken``) with its event, in one statement (one
        # round trip; a claim runs it in autocommit, one transaction): the event lock is taken
        # once the row is written or locked by the delete, as last as in a transaction (see
        # the store's module docstring), and only when there is a row; the event's cursor is
        # drawn after the lock.
        taken_cols = ", ".join(f"t.{c}" for c in pcols.split(", "))

        def with_event(ctes: str, first: int, then: str = "") -> str:
            lock, kind, channel = f"${first}", f"${first + 1}", f"${first + 2}"
            return f"""
            WITH {ctes}, locked AS MATERIALIZED (
                SELECT pg_advisory_xact_lock({lock}::bigint) FROM taken
            ), added AS (
                INSERT INTO {events} ({EVENT_INSERT_COLUMNS}, decision_json)
                SELECT $1, {kind}::text, {taken_cols}, NULL FROM taken AS t, locked
                RETURNING cursor
            )
            SELECT {pcols}, (SELECT count(pg_notify({channel}::text, '')) FROM added)
            FROM taken{then}"""

        self.claim_with_event = with_event(f"taken AS ({take} RETURNING {pcols})", first=3)
        # With a token: the token's earlier claim, when the statement's snapshot has one (a
        # retry), is the answer and nothing is taken.
        self.claim_with_token_and_event = with_event(
            f"earlier AS ({self.claim_by_token}), "
            f"taken AS ({take} AND NOT EXISTS (SELECT 1 FROM earlier) RETURNING {pcols}), "
            f"kept AS ({keep})",
            first=5,
            then=f" UNION ALL SELECT {pcols}, 0 FROM earlier",
        )
        self.insert_pending_with_event = with_event(f"taken AS ({self.insert_pending})", first=13)
        self.purge_claims = _purge_batch(claims, "claimed_at")
        self.purge_applied_requests = _purge_batch(applied, "applied_at")
        # The NOTIFY rides on the insert (one round trip); Postgres sends it at commit.
        # The event lock ($16, see the store's module docstring) is taken in the same
        # statement, one round trip for both: the event row is formed from the lock's
        # (materialized) row, so its cursor is drawn only once the lock is held.
        self.insert_event = f"""
            WITH locked AS MATERIALIZED (SELECT pg_advisory_xact_lock($16::bigint)),
            added AS (
                INSERT INTO {events} ({EVENT_INSERT_COLUMNS}, decision_json)
                SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $15 FROM locked
                RETURNING cursor
            )
            SELECT pg_notify($14, '') FROM added"""

        # --- decisions (K1, K2) ---
        dcols = DECISION_ROW_COLUMNS
        self.delete_decision_of_pause = (
            f"DELETE FROM {decisions} "
            "WHERE namespace = $1 AND execution_id = $2 AND checkpoint_id = $3 "
            "AND interrupt_id = $4"
        )
        self.decision_of_pause = (
            f"SELECT {dcols} FROM {decisions} "
            "WHERE namespace = $1 AND execution_id = $2 AND checkpoint_id = $3 "
            "AND interrupt_id = $4"
        )
        self.decision_of_pause_locked = self.decision_of_pause + " FOR UPDATE"
        self.decision_of_pause_shared = self.decision_of_pause + " FOR SHARE"
        self.newest_decision_of_execution = (
            f"SELECT {dcols} FROM {decisions} WHERE namespace = $1 AND execution_id = $2 "
            "AND interrupt_id = $3 ORDER BY sequence DESC LIMIT 1"
        )
        self.decision_by_request_id = (
            f"SELECT {dcols}, request_fingerprint FROM {decisions} "
            "WHERE namespace = $1 AND request_id = $2 AND request_id <> ''"
        )
        self.pending_of_pause_locked = (
            f"SELECT {pcols} FROM {pending} WHERE namespace = $1 AND execution_id = $2 "
            "AND interrupt_id = $3 FOR UPDATE"
        )
        self.insert_decision = f"""
            INSERT INTO {decisions} (
                namespace, request_id, approved, metadata_json, decided_by, decision_reason,
                decided_at, decision_status, {pcols}, request_fingerprint, response_json
            ) VALUES ($1, $2, $3, $4, $5, $6, $7, 'decided',
                      $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
            ON CONFLICT DO NOTHING
            RETURNING {dcols}"""
        self.take_lease = f"""
            UPDATE {decisions} SET decision_status = 'resuming', lease_token = $1,
                lease_expires_at = $2, attempts = attempts + $3
            WHERE namespace = $4 AND execution_id = $5 AND checkpoint_id = $6
                AND interrupt_id = $7
            RETURNING {dcols}"""
        self.report_decision = f"""
            UPDATE {decisions} SET decision_status = $1, decision_error = $2, reported_at = $3
            WHERE namespace = $4 AND execution_id = $5 AND checkpoint_id = $6
                AND interrupt_id = $7
            RETURNING {dcols}"""
        self.list_decisions = (
            f"SELECT {dcols} FROM {decisions} WHERE namespace = $1 AND sequence > $2 "
            "ORDER BY sequence LIMIT $3"
        )
        self.list_open_decisions = (
            f"SELECT {dcols} FROM {decisions} WHERE namespace = $1 AND sequence > $2 "
            "AND decision_status IN ('decided', 'resuming') ORDER BY sequence LIMIT $3"
        )
        self.delete_decisions = (
            f"DELETE FROM {decisions} WHERE namespace = $1 AND execution_id = $2 AND {fastaiagent}"
        )
        #: The decision transactions' statements (the pause's rows read FOR UPDATE).
        self.decisions = DecisionSql(
            decision_by_request_id=self.decision_by_request_id,
            pending_of_pause_locked=self.pending_of_pause_locked,
            newest_decision_of_execution=self.newest_decision_of_execution,
            decision_of_pause=self.decision_of_pause,
            decision_of_pause_locked=self.decision_of_pause_locked,
            delete_decision_of_pause=self.delete_decision_of_pause,
            insert_decision=self.insert_decision,
            take_lease=self.take_lease,
            report_decision=self.report_decision,
            list_decisions=self.list_decisions,
            list_open_decisions=self.list_open_decisions,
        )
        purged = f"{s}.interrupt_events_purged"
        #: The outbox (I5) and the snapshot of a watch.
        self.outbox = OutboxSql(
            pending_table=pending,
            events_table=events,
            decisions_table=decisions,
            pending_size=PENDING_SIZE,
            event_size=EVENT_SIZE,
            prefix=PREFIX,
            number=numbered,
            bounds=(
                "SELECT purged_through, greatest(purged_through, "
                f"coalesce((SELECT max(cursor) FROM {events}), 0)) AS latest "
                f"FROM {purged} WHERE id = 1"
            ),
            purge_through=f"DELETE FROM {events} WHERE cursor <= $1",
            raise_purged_through=(
                f"UPDATE {purged} SET purged_through = greatest(purged_through, $1) WHERE id = 1"
            ),
        )

        # --- idempotency results ---
        self.put_idempotent = f"""
            INSERT INTO {idem} (namespace, execution_id, key, result_json, created_at)
            VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (namespace, execution_id, key)
            DO UPDATE SET result_json = EXCLUDED.result_json, created_at = EXCLUDED.created_at"""
        # With a request id (contract D1): the id is recorded in the statement of the upsert,
        # which runs only when the id is new; a retry finds it (a concurrent first call's
        # insert is waited for) and writes nothing. Parameters as put_idempotent, then $6 the
        # request id and $7 its fingerprint. Answers whether the id was new (C10: if not,
        # the caller compares the stored fingerprint).
        self.put_idempotent_once = f"""
            WITH fresh AS (
                INSERT INTO {applied} (namespace, request_id, applied_at, request_fingerprint)
                VALUES ($1, $6, $5, $7)
                ON CONFLICT (namespace, request_id) DO NOTHING
                RETURNING 1
            ), put AS (
                INSERT INTO {idem} (namespace, execution_id, key, result_json, created_at)
                SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz
                WHERE EXISTS (SELECT 1 FROM fresh)
                ON CONFLICT (namespace, execution_id, key)
                DO UPDATE SET result_json = EXCLUDED.result_json,
                              created_at = EXCLUDED.created_at
            )
            SELECT EXISTS (SELECT 1 FROM fresh)"""
        # A group: rows with an empty request id are upserted; the others only when their
        # request id was recorded by this statement (the caller sends each id once). Answers
        # the ids it recorded.
        self.put_idempotents = f"""
            WITH u AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
                                     $5::timestamptz[], $6::text[], $7::text[])
                    AS u (namespace, execution_id, key, result_json, created_at, request_id,
                          request_fingerprint)
            ), fresh AS (
                INSERT INTO {applied} (namespace, request_id, applied_at, request_fingerprint)
                SELECT namespace, request_id, created_at, request_fingerprint
                FROM u WHERE request_id <> ''
                ON CONFLICT (namespace, request_id) DO NOTHING
                RETURNING namespace, request_id
            ), put AS (
                INSERT INTO {idem} (namespace, execution_id, key, result_json, created_at)
                SELECT u.namespace, u.execution_id, u.key, u.result_json, u.created_at FROM u
                WHERE u.request_id = '' OR EXISTS (
                    SELECT 1 FROM fresh AS f
                    WHERE f.namespace = u.namespace AND f.request_id = u.request_id
                )
                ON CONFLICT (namespace, execution_id, key)
                DO UPDATE SET result_json = EXCLUDED.result_json,
                              created_at = EXCLUDED.created_at
            )
            SELECT namespace, request_id FROM fresh"""
        self.get_idempotent = (
            f"SELECT result_json FROM {idem} "
            "WHERE namespace = $1 AND execution_id = $2 AND key = $3"
        )
        self.delete_idempotent = f"DELETE FROM {idem} WHERE namespace = $1 AND execution_id = $2"
        # Like prune_checkpoints; rows of an execution with a pending interrupt are kept
        # (contract C7). The table has no single-column key, so the batch is deleted by ctid
        # (a TID scan); a row that a concurrent put_idempotent refreshed has moved to a new
        # ctid with a new created_at, and both re-checks below let it survive.
        self.prune_idempotent = f"""
            WITH doomed AS (
                SELECT i.ctid, i.created_at FROM {idem} AS i
                WHERE i.namespace = $1 AND i.created_at >= $2 AND i.created_at < $3
                  AND NOT EXISTS (
                      SELECT 1 FROM {pending} AS p
                      WHERE p.namespace = $1 AND p.execution_id = i.execution_id
                  )
                ORDER BY i.created_at
                LIMIT $4
            ), gone AS (
                DELETE FROM {idem}
                WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND created_at < $3
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted,
                   (SELECT max(created_at) FROM doomed) AS resume_at"""

        self.count_pending = f"SELECT namespace, count(*) FROM {pending} GROUP BY namespace"

        # --- replication outbox (R1-R4) ---
        # `synced_at IS NULL` keeps a settled row settled (first wins): a concurrent settle
        # waits for the first one's row lock, re-checks the predicate and skips the row.
        self.list_unsynced = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND synced_at IS NULL "
            "AND sequence > $2 ORDER BY sequence LIMIT $3"
        )
        self.settle = f"""
            UPDATE {cp} AS c SET synced_at = $2, sync_error = v.reason
            FROM unnest($3::text[], $4::text[]) AS v (cid, reason)
            WHERE c.namespace = $1 AND c.checkpoint_id = v.cid AND c.synced_at IS NULL
            RETURNING c.checkpoint_id"""
        # Run first, in the settle's transaction: a second quarantine of a quarantined row
        # replaces its reason (as the reference does); a synced row is never touched.
        self.requarantine = f"""
            UPDATE {cp} AS c SET sync_error = v.reason
            FROM unnest($2::text[], $3::text[]) AS v (cid, reason)
            WHERE c.namespace = $1 AND c.checkpoint_id = v.cid AND v.reason IS NOT NULL
              AND c.sync_error IS NOT NULL"""
        #: What the checkpoint bodies shared with SQLite run (checkpointd.store.checkpoints).
        self.checkpoints = CheckpointSql(
            get_checkpoint=self.get_checkpoint,
            latest=self.latest,
            latest_skip_step_type=self.latest_skip_run_end,
            checkpoint_by_id=self.checkpoint_by_id,
            checkpoint_by_request_id=self.checkpoint_by_request_id,
            tombstone_fingerprint=self.tombstone_fingerprint,
            list_ascending=self.list_ascending,
            list_descending=self.list_descending,
            list_ascending_sizes=self.list_ascending_sizes,
            list_descending_sizes=self.list_descending_sizes,
            list_unsynced=self.list_unsynced,
            reply_of_request=self.reply_of_request,
            record_reply=self.record_reply,
            set_reply=self.set_reply,
        )
