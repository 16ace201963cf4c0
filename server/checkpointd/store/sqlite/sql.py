"""The SQLite store's statements: the SQL text of :class:`~checkpointd.store.sqlite.SQLiteStore`.

Times are INTEGER microseconds since the Unix epoch; placeholders are ``?``. Column lists and
parameter orders come from :mod:`checkpointd.store.columns`, shared with Postgres.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from checkpointd.store import filters
from checkpointd.store.base import StoreError
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
from checkpointd.store.outbox import OutboxSql


def _size_of(columns: Sequence[str]) -> str:
    """The stored UTF-8 bytes of these text columns (see :mod:`checkpointd.store.budget`)."""
    return " + ".join(f"coalesce(length(CAST({column} AS BLOB)), 0)" for column in columns)


CHECKPOINT_SIZE, PENDING_SIZE, EVENT_SIZE = sizes(_size_of)

#: A prefix match without LIKE, whose % and _ would be wildcards in the caller's prefix.
PREFIX: Final = filters.PrefixMatch("substr(p.agent_path, 1, length(?)) = ?", uses=2)

# One statement: the row is written unless its request id left a tombstone (its rows were
# deleted since: C9); a taken checkpoint id or request id raises IntegrityError. The last two
# parameters are the namespace and the request id again.
INSERT_CHECKPOINT: Final = (
    f"INSERT INTO checkpoints ({CHECKPOINT_INSERT_COLUMNS}) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE NOT EXISTS (SELECT 1 FROM applied_requests "
    "WHERE namespace = ? AND request_id = ? AND kind = 'deleted_write') "
    "RETURNING sequence"
)
CHECKPOINT_BY_ID: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND checkpoint_id = ?"
)
# The repeated `request_id <> ''` lets SQLite use the partial unique index.
CHECKPOINT_BY_REQUEST_ID: Final = (
    f"SELECT {CHECKPOINT_COLUMNS}, request_fingerprint FROM checkpoints "
    "WHERE namespace = ? AND request_id = ? AND request_id <> ''"
)
GET_CHECKPOINT: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND checkpoint_id = ? AND execution_id = ?"
)
LATEST_CHECKPOINT: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? ORDER BY sequence DESC LIMIT 1"
)
LATEST_CHECKPOINT_SKIP_STEP_TYPE: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? AND step_type IS NOT ? "
    "ORDER BY sequence DESC LIMIT 1"
)


# Keyset listing of one execution, sequence strictly between two bounds (parameters:
# namespace, execution_id, low, high, limit); the SIZES variants read the stored sizes only,
# first, so that only the rows that fit the byte budget are loaded.
LIST_CHECKPOINTS_ASC: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND execution_id = ? "
    "AND sequence > ? AND sequence < ? ORDER BY sequence ASC LIMIT ?"
)
LIST_CHECKPOINTS_DESC: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND execution_id = ? "
    "AND sequence > ? AND sequence < ? ORDER BY sequence DESC LIMIT ?"
)
LIST_CHECKPOINT_SIZES_ASC: Final = LIST_CHECKPOINTS_ASC.replace(
    CHECKPOINT_COLUMNS, CHECKPOINT_SIZE, 1
)
LIST_CHECKPOINT_SIZES_DESC: Final = LIST_CHECKPOINTS_DESC.replace(
    CHECKPOINT_COLUMNS, CHECKPOINT_SIZE, 1
)
# The replication outbox (R1-R4). `synced_at IS NULL` repeats the partial index's predicate;
# a settled row is never settled again (first wins), which the same predicate enforces.
LIST_UNSYNCED: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND synced_at IS NULL AND sequence > ? ORDER BY sequence ASC LIMIT ?"
)
MARK_SYNCED: Final = (
    "UPDATE checkpoints SET synced_at = ? "
    "WHERE namespace = ? AND synced_at IS NULL AND checkpoint_id IN ({ids}) "
    "RETURNING checkpoint_id"
)
QUARANTINE: Final = (
    "UPDATE checkpoints SET synced_at = ?, sync_error = ? "
    "WHERE namespace = ? AND synced_at IS NULL AND checkpoint_id = ? "
    "RETURNING checkpoint_id"
)
#: Ids per UPDATE, well under SQLite's bound-parameter limit.
SETTLE_CHUNK: Final = 500
# A second quarantine of a quarantined row replaces its reason (as the reference does); it
# never turns a synced row into a quarantined one.
REQUARANTINE: Final = (
    "UPDATE checkpoints SET sync_error = ? "
    "WHERE namespace = ? AND checkpoint_id = ? AND sync_error IS NOT NULL"
)
DELETE_CHECKPOINTS_OF_EXECUTION: Final = (
    "DELETE FROM checkpoints WHERE namespace = ? AND execution_id = ?"
)
# Run just before the delete, in its transaction: the request ids of the rows about to go
# become tombstones (C9). Parameters: applied_at, namespace, execution_id.
TOMBSTONE_EXECUTION: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, kind, request_fingerprint) "
    "SELECT namespace, request_id, ?, 'deleted_write', request_fingerprint FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? AND request_id <> '' "
    "ON CONFLICT (namespace, request_id) DO NOTHING"
)
PRUNE_CHECKPOINTS_BATCH: Final = (
    "DELETE FROM checkpoints WHERE sequence IN ("
    "SELECT sequence FROM checkpoints "
    "WHERE namespace = ? AND created_at < ? AND status IN ('completed', 'failed') LIMIT ?) "
    "RETURNING request_id, request_fingerprint"
)
TOMBSTONE: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, kind, request_fingerprint) "
    "VALUES (?, ?, ?, 'deleted_write', ?) ON CONFLICT (namespace, request_id) DO NOTHING"
)
IS_TOMBSTONE: Final = (
    "SELECT request_fingerprint FROM applied_requests "
    "WHERE namespace = ? AND request_id = ? AND kind = 'deleted_write'"
)
REPLY_OF_REQUEST: Final = (
    "SELECT kind, reply_json, request_fingerprint FROM applied_requests "
    "WHERE namespace = ? AND request_id = ?"
)
RECORD_REPLY: Final = (
    "INSERT INTO applied_requests "
    "(namespace, request_id, applied_at, kind, reply_json, request_fingerprint) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, request_id) DO NOTHING"
)
# Parameters: namespace, request_id, reply_json (numbered: the order of CheckpointSql's).
SET_REPLY: Final = (
    "UPDATE applied_requests SET reply_json = ?3 WHERE namespace = ?1 AND request_id = ?2"
)
CHECKPOINTS: Final = CheckpointSql(
    get_checkpoint=GET_CHECKPOINT,
    latest=LATEST_CHECKPOINT,
    latest_skip_step_type=LATEST_CHECKPOINT_SKIP_STEP_TYPE,
    checkpoint_by_id=CHECKPOINT_BY_ID,
    checkpoint_by_request_id=CHECKPOINT_BY_REQUEST_ID,
    tombstone_fingerprint=IS_TOMBSTONE,
    list_ascending=LIST_CHECKPOINTS_ASC,
    list_descending=LIST_CHECKPOINTS_DESC,
    list_ascending_sizes=LIST_CHECKPOINT_SIZES_ASC,
    list_descending_sizes=LIST_CHECKPOINT_SIZES_DESC,
    list_unsynced=LIST_UNSYNCED,
    reply_of_request=REPLY_OF_REQUEST,
    record_reply=RECORD_REPLY,
    set_reply=SET_REPLY,
)

# A fastaiagent run's one pause has the empty interrupt id; a graph's pauses have theirs (G8).
PENDING_OF_EXECUTION: Final = (
    f"SELECT {PENDING_COLUMNS} FROM pending_interrupts "
    "WHERE namespace = ? AND execution_id = ? AND interrupt_id = ''"
)
PENDING_OF_PAUSE: Final = (
    f"SELECT {PENDING_COLUMNS} FROM pending_interrupts "
    "WHERE namespace = ? AND execution_id = ? AND interrupt_id = ?"
)
INSERT_PENDING: Final = (
    f"INSERT INTO pending_interrupts (namespace, {PENDING_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_PENDING_OF_EXECUTION: Final = (
    "DELETE FROM pending_interrupts WHERE namespace = ? AND execution_id = ? AND interrupt_id = ''"
)

# --- decisions (K1, K2) ---
DECISION_OF_PAUSE: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? AND interrupt_id = ?"
)
#: A failed decision a new one replaces (K3), by its pause.
DELETE_DECISION_OF_PAUSE: Final = (
    "DELETE FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? AND interrupt_id = ?"
)
DECISION_BY_REQUEST_ID: Final = (
    f"SELECT {DECISION_ROW_COLUMNS}, request_fingerprint FROM interrupt_decisions "
    "WHERE namespace = ? AND request_id = ? AND request_id <> ''"
)
NEWEST_DECISION_OF_EXECUTION: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? AND interrupt_id = ? "
    "ORDER BY sequence DESC LIMIT 1"
)
INSERT_DECISION: Final = (
    "INSERT INTO interrupt_decisions (namespace, request_id, approved, metadata_json, "
    "decided_by, decision_reason, decided_at, decision_status, "
    f"{PENDING_COLUMNS}, request_fingerprint, response_json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, 'decided', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    f"RETURNING {DECISION_ROW_COLUMNS}"
)
TAKE_LEASE: Final = (
    "UPDATE interrupt_decisions SET decision_status = 'resuming', lease_token = ?, "
    "lease_expires_at = ?, attempts = attempts + ? "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? AND interrupt_id = ? "
    f"RETURNING {DECISION_ROW_COLUMNS}"
)
REPORT_DECISION: Final = (
    "UPDATE interrupt_decisions SET decision_status = ?, decision_error = ?, reported_at = ? "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? AND interrupt_id = ? "
    f"RETURNING {DECISION_ROW_COLUMNS}"
)
LIST_DECISIONS: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND sequence > ? ORDER BY sequence LIMIT ?"
)
LIST_OPEN_DECISIONS: Final = (
    f"SELECT {DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND sequence > ? AND decision_status IN ('decided', 'resuming') "
    "ORDER BY sequence LIMIT ?"
)
#: The decision transactions' statements: ``BEGIN IMMEDIATE`` has taken the write lock, so
#: the plain reads are the locked ones.
DECISIONS: Final = DecisionSql(
    decision_by_request_id=DECISION_BY_REQUEST_ID,
    pending_of_pause_locked=PENDING_OF_PAUSE,
    newest_decision_of_execution=NEWEST_DECISION_OF_EXECUTION,
    decision_of_pause=DECISION_OF_PAUSE,
    decision_of_pause_locked=DECISION_OF_PAUSE,
    delete_decision_of_pause=DELETE_DECISION_OF_PAUSE,
    insert_decision=INSERT_DECISION,
    take_lease=TAKE_LEASE,
    report_decision=REPORT_DECISION,
    list_decisions=LIST_DECISIONS,
    list_open_decisions=LIST_OPEN_DECISIONS,
)
DELETE_DECISIONS_OF_EXECUTION: Final = (
    "DELETE FROM interrupt_decisions WHERE namespace = ? AND execution_id = ? AND interrupt_id = ''"
)

CLAIM_BY_TOKEN: Final = (
    f"SELECT {PENDING_COLUMNS} FROM interrupt_claims "
    "WHERE namespace = ? AND execution_id = ? AND claim_token = ?"
)
CLAIM_BY_CHECKPOINT: Final = (
    f"SELECT {PENDING_COLUMNS} FROM interrupt_claims "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? LIMIT 1"
)
INSERT_CLAIM: Final = (
    f"INSERT INTO interrupt_claims (namespace, claim_token, claimed_at, {PENDING_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
PURGE_CLAIMS: Final = "DELETE FROM interrupt_claims WHERE claimed_at < ?"
PURGE_APPLIED_REQUESTS: Final = "DELETE FROM applied_requests WHERE applied_at < ?"

# Parameters: columns.event_params, then event_at and decision_json.
INSERT_EVENT: Final = (
    f"INSERT INTO interrupt_events ({EVENT_INSERT_COLUMNS}, event_at, decision_json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
PUT_IDEMPOTENT: Final = (
    "INSERT OR REPLACE INTO idempotency_results "
    "(namespace, execution_id, key, result_json, created_at) VALUES (?, ?, ?, ?, ?)"
)
RECORD_APPLIED_REQUEST: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, request_fingerprint) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (namespace, request_id) DO NOTHING"
)
FINGERPRINT_OF_APPLIED: Final = (
    "SELECT request_fingerprint FROM applied_requests WHERE namespace = ? AND request_id = ?"
)
GET_IDEMPOTENT: Final = (
    "SELECT result_json FROM idempotency_results "
    "WHERE namespace = ? AND execution_id = ? AND key = ?"
)
DELETE_IDEMPOTENT_OF_EXECUTION: Final = (
    "DELETE FROM idempotency_results WHERE namespace = ? AND execution_id = ?"
)
PRUNE_IDEMPOTENT_BATCH: Final = (
    "DELETE FROM idempotency_results WHERE rowid IN ("
    "SELECT r.rowid FROM idempotency_results AS r "
    "WHERE r.namespace = ? AND r.created_at < ? AND NOT EXISTS ("
    "SELECT 1 FROM pending_interrupts AS p "
    "WHERE p.namespace = r.namespace AND p.execution_id = r.execution_id) LIMIT ?)"
)

CREATE_SCHEMA_MIGRATIONS: Final = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
)
APPLIED_VERSIONS: Final = "SELECT version FROM schema_migrations ORDER BY version"
RECORD_MIGRATION: Final = (
    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
)
PING: Final = "SELECT 1 FROM schema_migrations LIMIT 1"
COUNT_PENDING: Final = "SELECT namespace, COUNT(*) FROM pending_interrupts GROUP BY namespace"


#: The outbox (I5) and the snapshot of a watch. sqlite_sequence keeps the highest cursor ever
#: assigned, even after every event is purged.
OUTBOX: Final = OutboxSql(
    pending_table="pending_interrupts",
    events_table="interrupt_events",
    decisions_table="interrupt_decisions",
    pending_size=PENDING_SIZE,
    event_size=EVENT_SIZE,
    prefix=PREFIX,
    number=lambda sql: sql,
    bounds=(
        "SELECT purged_through, coalesce("
        "(SELECT seq FROM sqlite_sequence WHERE name = 'interrupt_events'), 0) AS latest "
        "FROM interrupt_events_purged WHERE id = 1"
    ),
    purge_through="DELETE FROM interrupt_events WHERE cursor <= ?",
    raise_purged_through=(
        "UPDATE interrupt_events_purged SET purged_through = max(purged_through, ?) WHERE id = 1"
    ),
)


def split_statements(script: str) -> tuple[str, ...]:
    """Split a migration script into statements (``executescript`` would commit our
    transaction, so each statement runs on its own inside it)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    rest = "".join(
        line for line in buffer.splitlines() if line.strip() and not line.lstrip().startswith("--")
    )
    if rest:
        raise StoreError("a SQLite migration script ends with an incomplete statement")
    return tuple(statements)
