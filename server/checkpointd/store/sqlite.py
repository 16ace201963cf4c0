"""The SQLite store: the embedded default backend, one database file, safe across processes.

Durability (contract E1): the file runs in WAL journal mode with ``synchronous=FULL``, so the
WAL is fsynced at every commit and an acknowledged commit survives ``kill -9`` of the server
and a power loss. (``NORMAL`` would survive ``kill -9`` but could lose the last commits on
power loss.)

Concurrency:

* Writes run in explicit ``BEGIN IMMEDIATE`` transactions on one connection in autocommit
  mode (``isolation_level=None``). An :class:`asyncio.Lock` guards that connection, so two
  tasks never interleave their statements in one transaction.
* ``BEGIN IMMEDIATE`` takes SQLite's write lock before the first read, so a transaction never
  reads a row that another process changes before it commits. That makes the read-then-write
  transactions (claim, record interrupt) exactly-once across every process that shares the
  file (contract I3); a process waiting for the lock waits up to ``busy_timeout`` and then
  gets :class:`StoreUnavailable` (retriable), never a half-done write.
* Reads use a second, query-only connection: in WAL mode readers neither block nor are
  blocked by the writer, and each read sees the last committed state.
* Group commit (:mod:`checkpointd.store.group_commit`): ``put_checkpoint`` and
  ``put_idempotent`` queue their write; one task runs the queued writes (at most
  ``_GROUP_COMMIT_MAX``) in a single transaction, so many concurrent writers share one fsync.
  Nothing waits on purpose: when the writer is idle the first write goes at once, alone, and
  whatever arrives while it commits forms the next transaction. Each caller is answered only
  after the transaction holding its row has committed (E1). A write's own failure
  (``CheckpointExists``; a retry finding its row) touches no other write of the transaction:
  SQLite undoes only the failed statement (no savepoint needed), and the transaction goes on.
  An SQLite error (disk full, I/O) rolls the whole transaction back and every write in it
  gets that error; none was acknowledged. The other writes (interrupts, claims, deletes) keep
  a transaction each: they read before they write and emit events, and stay simple.

Every call is bounded by ``timeout`` seconds; past it the call raises
:class:`StoreUnavailable`. SQLite errors that mean the file cannot be reached, locked,
written or grown (busy, locked, read-only, I/O error, full, cannot open) become
:class:`StoreUnavailable` with a short message naming the file and never any SQL.

Times are stored as INTEGER microseconds since the Unix epoch (UTC) and converted exactly,
without floats. The schema is applied by versioned migrations
(``store/migrations/sqlite_NNNN_*.sql``), each in one ``BEGIN IMMEDIATE`` transaction with its
``schema_migrations`` row, so several processes opening a fresh file at once apply each
version exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Final

import aiosqlite

from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    DecisionChange,
    DecisionOutcome,
    DecisionRecord,
    DecisionStatus,
    DeleteExecutionResult,
    EventKind,
    EventPage,
    InterruptEventRecord,
    Page,
    PendingFilter,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
    SnapshotPage,
)
from checkpointd.store import budget, replies, rows
from checkpointd.store.base import (
    CheckpointExists,
    RequestAppliedThenDeleted,
    StoreError,
    StoreUnavailable,
)
from checkpointd.store.group_commit import GroupCommit

__all__ = ["SQLiteStore"]

# --- time ----------------------------------------------------------------------------------

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND: Final = timedelta(microseconds=1)


def _to_us(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime, by exact integer arithmetic."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetimes given to the store must be timezone-aware")
    return (value - _EPOCH) // _ONE_MICROSECOND


def _from_us(value: int) -> datetime:
    """The aware UTC datetime of a number of microseconds since the epoch."""
    return _EPOCH + timedelta(microseconds=value)


def _now_us() -> int:
    return _to_us(datetime.now(UTC))


# --- SQL -----------------------------------------------------------------------------------

#: Larger than any sequence SQLite assigns (its rowids are signed 64-bit).
_MAX_SEQUENCE: Final = 2**63 - 1

_CHECKPOINT_COLUMNS: Final = (
    "sequence, execution_id, checkpoint_id, parent_checkpoint_id, chain_name, node_id, "
    "node_index, step_type, status, state_snapshot_json, node_input_json, node_output_json, "
    "iteration, iteration_counters_json, interrupt_reason, interrupt_context_json, "
    "agent_path, created_at"
)
_PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, created_at, "
    "checkpoint_id, sequence"
)

# One statement: the row is written unless its request id left a tombstone (its rows were
# deleted since: C9); a taken checkpoint id or request id raises IntegrityError. The last two
# parameters are the namespace and the request id again.
_SQL_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (namespace, request_id, execution_id, checkpoint_id, "
    "parent_checkpoint_id, chain_name, node_id, node_index, step_type, status, "
    "state_snapshot_json, node_input_json, node_output_json, iteration, "
    "iteration_counters_json, interrupt_reason, interrupt_context_json, agent_path, created_at) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE NOT EXISTS (SELECT 1 FROM applied_requests "
    "WHERE namespace = ? AND request_id = ? AND kind = 'deleted_write') "
    "RETURNING sequence"
)
_SQL_CHECKPOINT_BY_ID: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND checkpoint_id = ?"
)
# The repeated `request_id <> ''` lets SQLite use the partial unique index.
_SQL_CHECKPOINT_BY_REQUEST_ID: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND request_id = ? AND request_id <> ''"
)
_SQL_GET_CHECKPOINT: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND checkpoint_id = ? AND execution_id = ?"
)
_SQL_LATEST_CHECKPOINT: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? ORDER BY sequence DESC LIMIT 1"
)
_SQL_LATEST_CHECKPOINT_SKIP_STEP_TYPE: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? AND step_type IS NOT ? "
    "ORDER BY sequence DESC LIMIT 1"
)


def _size_of(columns: Sequence[str]) -> str:
    """The stored UTF-8 bytes of these text columns (see :mod:`checkpointd.store.budget`)."""
    return " + ".join(f"coalesce(length(CAST({column} AS BLOB)), 0)" for column in columns)


_CHECKPOINT_SIZE: Final = f"sequence, {_size_of(budget.CHECKPOINT_TEXT_COLUMNS)}"
_PENDING_SIZE: Final = f"sequence, {_size_of(budget.PENDING_TEXT_COLUMNS)}"
_EVENT_SIZE: Final = f"cursor, {_size_of(budget.EVENT_TEXT_COLUMNS)}"


# Keyset listing of one execution, sequence strictly between two bounds (parameters:
# namespace, execution_id, low, high, limit); the _SIZES variants read the stored sizes only,
# first, so that only the rows that fit the byte budget are loaded.
_SQL_LIST_CHECKPOINTS_ASC: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND execution_id = ? "
    "AND sequence > ? AND sequence < ? ORDER BY sequence ASC LIMIT ?"
)
_SQL_LIST_CHECKPOINTS_DESC: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? AND execution_id = ? "
    "AND sequence > ? AND sequence < ? ORDER BY sequence DESC LIMIT ?"
)
_SQL_LIST_CHECKPOINT_SIZES_ASC: Final = _SQL_LIST_CHECKPOINTS_ASC.replace(
    _CHECKPOINT_COLUMNS, _CHECKPOINT_SIZE, 1
)
_SQL_LIST_CHECKPOINT_SIZES_DESC: Final = _SQL_LIST_CHECKPOINTS_DESC.replace(
    _CHECKPOINT_COLUMNS, _CHECKPOINT_SIZE, 1
)
# The replication outbox (R1-R4). `synced_at IS NULL` repeats the partial index's predicate;
# a settled row is never settled again (first wins), which the same predicate enforces.
_SQL_LIST_UNSYNCED: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints "
    "WHERE namespace = ? AND synced_at IS NULL AND sequence > ? ORDER BY sequence ASC LIMIT ?"
)
_SQL_MARK_SYNCED: Final = (
    "UPDATE checkpoints SET synced_at = ? "
    "WHERE namespace = ? AND synced_at IS NULL AND checkpoint_id IN ({ids}) "
    "RETURNING checkpoint_id"
)
_SQL_QUARANTINE: Final = (
    "UPDATE checkpoints SET synced_at = ?, sync_error = ? "
    "WHERE namespace = ? AND synced_at IS NULL AND checkpoint_id = ? "
    "RETURNING checkpoint_id"
)
#: Ids per UPDATE, well under SQLite's bound-parameter limit.
_SETTLE_CHUNK: Final = 500
# A second quarantine of a quarantined row replaces its reason (as the reference does); it
# never turns a synced row into a quarantined one.
_SQL_REQUARANTINE: Final = (
    "UPDATE checkpoints SET sync_error = ? "
    "WHERE namespace = ? AND checkpoint_id = ? AND sync_error IS NOT NULL"
)
_SQL_DELETE_CHECKPOINTS_OF_EXECUTION: Final = (
    "DELETE FROM checkpoints WHERE namespace = ? AND execution_id = ?"
)
# Run just before the delete, in its transaction: the request ids of the rows about to go
# become tombstones (C9). Parameters: applied_at, namespace, execution_id.
_SQL_TOMBSTONE_EXECUTION: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, kind) "
    "SELECT namespace, request_id, ?, 'deleted_write' FROM checkpoints "
    "WHERE namespace = ? AND execution_id = ? AND request_id <> '' "
    "ON CONFLICT (namespace, request_id) DO NOTHING"
)
_SQL_PRUNE_CHECKPOINTS_BATCH: Final = (
    "DELETE FROM checkpoints WHERE sequence IN ("
    "SELECT sequence FROM checkpoints "
    "WHERE namespace = ? AND created_at < ? AND status IN ('completed', 'failed') LIMIT ?) "
    "RETURNING request_id"
)
_SQL_TOMBSTONE: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, kind) "
    "VALUES (?, ?, ?, 'deleted_write') ON CONFLICT (namespace, request_id) DO NOTHING"
)
_SQL_IS_TOMBSTONE: Final = (
    "SELECT 1 FROM applied_requests "
    "WHERE namespace = ? AND request_id = ? AND kind = 'deleted_write'"
)
_SQL_REPLY_OF_REQUEST: Final = (
    "SELECT kind, reply_json FROM applied_requests WHERE namespace = ? AND request_id = ?"
)
_SQL_RECORD_REPLY: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at, kind, reply_json) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, request_id) DO NOTHING"
)

_SQL_PENDING_OF_EXECUTION: Final = (
    f"SELECT {_PENDING_COLUMNS} FROM pending_interrupts WHERE namespace = ? AND execution_id = ?"
)
_SQL_INSERT_PENDING: Final = (
    f"INSERT INTO pending_interrupts (namespace, {_PENDING_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_DELETE_PENDING_OF_EXECUTION: Final = (
    "DELETE FROM pending_interrupts WHERE namespace = ? AND execution_id = ?"
)
# Each pending row with the decision on its pause, when there is one (K1).
_SQL_LIST_PENDING: Final = (
    "SELECT "
    + ", ".join(f"p.{c}" for c in _PENDING_COLUMNS.split(", "))
    + ", "
    + ", ".join(f"d.{c}" for c in rows.DECISION_COLUMNS)
    + " FROM pending_interrupts AS p LEFT JOIN interrupt_decisions AS d "
    "ON d.namespace = p.namespace AND d.execution_id = p.execution_id "
    "AND d.checkpoint_id = p.checkpoint_id "
    "WHERE p.namespace = ? AND p.sequence < ?"
)
# The sizes of the same rows (no decisions), read first so a page loads only what fits (B1).
_SQL_LIST_PENDING_SIZES: Final = (
    f"SELECT {_PENDING_SIZE} FROM pending_interrupts AS p WHERE p.namespace = ? AND p.sequence < ?"
)
_SQL_LIST_PENDING_ABOVE: Final = " AND p.sequence > ?"
_SQL_LIST_PENDING_CHAIN_NAME: Final = " AND p.chain_name = ?"
_SQL_LIST_PENDING_REASON: Final = " AND p.reason = ?"
# A prefix match without LIKE, whose % and _ would be wildcards in the caller's prefix.
_SQL_LIST_PENDING_AGENT_PATH_PREFIX: Final = " AND substr(p.agent_path, 1, length(?)) = ?"
_SQL_LIST_PENDING_ORDER: Final = " ORDER BY p.sequence DESC LIMIT ?"
# The pending row an event carries, under the pending table's column names.
_EVENT_PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, "
    "pending_created_at AS created_at, checkpoint_id, sequence"
)
# A snapshot page is the pending set as it was at the snapshot cursor C (the ? of these two
# conditions): the rows pending now that were not added after C, plus the rows that were
# pending at C and were claimed or removed since, rebuilt from their events (which carry the
# whole row). A row was added after C exactly when its `added` event has a cursor above C.
_SQL_ADDED_AFTER: Final = (
    " AND NOT EXISTS (SELECT 1 FROM interrupt_events AS a WHERE a.namespace = p.namespace "
    "AND a.cursor > ? AND a.kind = 'added' AND a.sequence = p.sequence)"
)
_SQL_SNAPSHOT_GONE: Final = " AND p.cursor > ? AND p.kind IN ('claimed', 'removed')"


def _pending_filters(filters: PendingFilter) -> tuple[str, list[Any]]:
    """The WHERE conditions of the set filters, and their parameters."""
    sql = ""
    params: list[Any] = []
    if filters.chain_name is not None:
        sql += _SQL_LIST_PENDING_CHAIN_NAME
        params.append(filters.chain_name)
    if filters.reason is not None:
        sql += _SQL_LIST_PENDING_REASON
        params.append(filters.reason)
    if filters.agent_path_prefix:
        sql += _SQL_LIST_PENDING_AGENT_PATH_PREFIX
        params += [filters.agent_path_prefix, filters.agent_path_prefix]
    return sql, params


# --- decisions (K1, K2) ---
_DECISION_ROW_COLUMNS: Final = (
    f"{_PENDING_COLUMNS}, {', '.join(rows.DECISION_COLUMNS)}, lease_token, request_id"
)
_SQL_DECISION_OF_PAUSE: Final = (
    f"SELECT {_DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ?"
)
_SQL_DECISION_BY_REQUEST_ID: Final = (
    f"SELECT {_DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND request_id = ? AND request_id <> ''"
)
_SQL_NEWEST_DECISION_OF_EXECUTION: Final = (
    f"SELECT {_DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND execution_id = ? ORDER BY sequence DESC LIMIT 1"
)
_SQL_INSERT_DECISION: Final = (
    "INSERT INTO interrupt_decisions (namespace, request_id, approved, metadata_json, "
    "decided_by, decision_reason, decided_at, decision_status, "
    f"{_PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 'decided', ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_TAKE_LEASE: Final = (
    "UPDATE interrupt_decisions SET decision_status = 'resuming', lease_token = ?, "
    "lease_expires_at = ?, attempts = attempts + ? "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ?"
)
_SQL_REPORT_DECISION: Final = (
    "UPDATE interrupt_decisions SET decision_status = ?, decision_error = ?, reported_at = ? "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ?"
)
_SQL_LIST_DECISIONS: Final = (
    f"SELECT {_DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND sequence > ? ORDER BY sequence LIMIT ?"
)
_SQL_LIST_OPEN_DECISIONS: Final = (
    f"SELECT {_DECISION_ROW_COLUMNS} FROM interrupt_decisions "
    "WHERE namespace = ? AND sequence > ? AND decision_status IN ('decided', 'resuming') "
    "ORDER BY sequence LIMIT ?"
)
_SQL_DELETE_DECISIONS_OF_EXECUTION: Final = (
    "DELETE FROM interrupt_decisions WHERE namespace = ? AND execution_id = ?"
)

_SQL_CLAIM_BY_TOKEN: Final = (
    f"SELECT {_PENDING_COLUMNS} FROM interrupt_claims "
    "WHERE namespace = ? AND execution_id = ? AND claim_token = ?"
)
_SQL_CLAIM_BY_CHECKPOINT: Final = (
    f"SELECT {_PENDING_COLUMNS} FROM interrupt_claims "
    "WHERE namespace = ? AND execution_id = ? AND checkpoint_id = ? LIMIT 1"
)
_SQL_INSERT_CLAIM: Final = (
    f"INSERT INTO interrupt_claims (namespace, claim_token, claimed_at, {_PENDING_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_PURGE_CLAIMS: Final = "DELETE FROM interrupt_claims WHERE claimed_at < ?"
_SQL_PURGE_APPLIED_REQUESTS: Final = "DELETE FROM applied_requests WHERE applied_at < ?"

_SQL_INSERT_EVENT: Final = (
    "INSERT INTO interrupt_events (namespace, kind, execution_id, chain_name, node_id, reason, "
    "context_json, agent_path, pending_created_at, checkpoint_id, sequence, event_at, "
    "decision_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EVENT_COLUMNS: Final = (
    "cursor, namespace, kind, execution_id, chain_name, node_id, reason, context_json, "
    "agent_path, pending_created_at, checkpoint_id, sequence, event_at, decision_json"
)
_SQL_EVENTS: Final = (
    f"SELECT {_EVENT_COLUMNS} FROM interrupt_events "
    "WHERE cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
)
_SQL_EVENTS_OF_NAMESPACE: Final = (
    f"SELECT {_EVENT_COLUMNS} FROM interrupt_events "
    "WHERE namespace = ? AND cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
)
_SQL_EVENT_SIZES: Final = (
    f"SELECT {_EVENT_SIZE} FROM interrupt_events "
    "WHERE cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
)
_SQL_EVENT_SIZES_OF_NAMESPACE: Final = (
    f"SELECT {_EVENT_SIZE} FROM interrupt_events "
    "WHERE namespace = ? AND cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
)
# sqlite_sequence keeps the highest cursor ever assigned, even after every event is purged.
_SQL_EVENT_BOUNDS: Final = (
    "SELECT purged_through, coalesce("
    "(SELECT seq FROM sqlite_sequence WHERE name = 'interrupt_events'), 0) AS latest "
    "FROM interrupt_events_purged WHERE id = 1"
)
_SQL_EVENTS_HEAD: Final = "SELECT cursor, event_at FROM interrupt_events ORDER BY cursor LIMIT ?"
_SQL_PURGE_EVENTS_THROUGH: Final = "DELETE FROM interrupt_events WHERE cursor <= ?"
_SQL_RAISE_PURGED_THROUGH: Final = (
    "UPDATE interrupt_events_purged SET purged_through = max(purged_through, ?) WHERE id = 1"
)
#: How often the notifier looks at ``PRAGMA data_version`` for other processes' commits.
_DATA_VERSION_POLL_SECONDS: Final = 0.05

_SQL_PUT_IDEMPOTENT: Final = (
    "INSERT OR REPLACE INTO idempotency_results "
    "(namespace, execution_id, key, result_json, created_at) VALUES (?, ?, ?, ?, ?)"
)
_SQL_RECORD_APPLIED_REQUEST: Final = (
    "INSERT INTO applied_requests (namespace, request_id, applied_at) VALUES (?, ?, ?) "
    "ON CONFLICT (namespace, request_id) DO NOTHING"
)
_SQL_GET_IDEMPOTENT: Final = (
    "SELECT result_json FROM idempotency_results "
    "WHERE namespace = ? AND execution_id = ? AND key = ?"
)
_SQL_DELETE_IDEMPOTENT_OF_EXECUTION: Final = (
    "DELETE FROM idempotency_results WHERE namespace = ? AND execution_id = ?"
)
_SQL_PRUNE_IDEMPOTENT_BATCH: Final = (
    "DELETE FROM idempotency_results WHERE rowid IN ("
    "SELECT r.rowid FROM idempotency_results AS r "
    "WHERE r.namespace = ? AND r.created_at < ? AND NOT EXISTS ("
    "SELECT 1 FROM pending_interrupts AS p "
    "WHERE p.namespace = r.namespace AND p.execution_id = r.execution_id) LIMIT ?)"
)

_SQL_CREATE_SCHEMA_MIGRATIONS: Final = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
)
_SQL_APPLIED_VERSIONS: Final = "SELECT version FROM schema_migrations ORDER BY version"
_SQL_RECORD_MIGRATION: Final = (
    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
)
_SQL_PING: Final = "SELECT 1 FROM schema_migrations LIMIT 1"
_SQL_COUNT_PENDING: Final = "SELECT namespace, COUNT(*) FROM pending_interrupts GROUP BY namespace"

#: Most writes one group-commit transaction carries.
_GROUP_COMMIT_MAX: Final = 128

# --- migrations ----------------------------------------------------------------------------

_MIGRATION_NAME: Final = re.compile(r"^sqlite_(\d{4})_[a-z0-9_]+\.sql$")


@dataclasses.dataclass(frozen=True, slots=True)
class _Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def _split_statements(script: str) -> tuple[str, ...]:
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


def _load_migrations() -> list[_Migration]:
    """The packaged SQLite migrations, by version: distinct, ascending from 1. A version may
    be missing (numbers are handed out ahead of the changes that take them); a store never
    applies one out of order unless such a gap is filled later."""
    folder = resources.files("checkpointd.store").joinpath("migrations")
    migrations: list[_Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match is None:
            continue
        text = entry.read_text(encoding="utf-8")
        migrations.append(_Migration(int(match.group(1)), entry.name, _split_statements(text)))
    migrations.sort(key=lambda migration: migration.version)
    versions = [m.version for m in migrations]
    if not versions or versions[0] != 1 or len(set(versions)) != len(versions):
        raise StoreError("the packaged SQLite migrations are not numbered 1, 2, 3, ...")
    return migrations


# --- errors --------------------------------------------------------------------------------

# Primary SQLite result codes (sqlite.org/rescode.html); extended codes carry them in the low byte.
_SQLITE_PERM: Final = 3
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_NOMEM: Final = 7
_SQLITE_READONLY: Final = 8
_SQLITE_INTERRUPT: Final = 9
_SQLITE_IOERR: Final = 10
_SQLITE_CORRUPT: Final = 11
_SQLITE_FULL: Final = 13
_SQLITE_CANTOPEN: Final = 14
_SQLITE_PROTOCOL: Final = 15
_SQLITE_NOTADB: Final = 26

#: Codes meaning the database cannot be reached, locked, written or grown right now.
_UNAVAILABLE_CODES: Final = frozenset(
    {
        _SQLITE_PERM,
        _SQLITE_BUSY,
        _SQLITE_LOCKED,
        _SQLITE_NOMEM,
        _SQLITE_READONLY,
        _SQLITE_INTERRUPT,
        _SQLITE_IOERR,
        _SQLITE_FULL,
        _SQLITE_CANTOPEN,
        _SQLITE_PROTOCOL,
    }
)
#: Codes meaning another connection holds the lock this one needs.
_BUSY_CODES: Final = frozenset({_SQLITE_BUSY, _SQLITE_LOCKED})
#: Codes whose SQLite message is fixed text (never SQL nor names from it), safe to show.
_PLAIN_MESSAGE_CODES: Final = _UNAVAILABLE_CODES | {_SQLITE_CORRUPT, _SQLITE_NOTADB}


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _describe(exc: sqlite3.Error) -> str:
    """A short reason for ``exc`` that never contains SQL text."""
    code = _primary_code(exc)
    if code in _PLAIN_MESSAGE_CODES:
        return str(exc)
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else type(exc).__name__


# --- rows ----------------------------------------------------------------------------------


def _checkpoint_from_row(row: sqlite3.Row) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, _from_us)


def _pending_from_row(row: sqlite3.Row) -> PendingRecord:
    return rows.pending_from_row(row, _from_us)


def _decided_from_row(row: sqlite3.Row) -> PendingRecord:
    return rows.pending_from_row(row, _from_us, with_decision=True)


def _pending_params(pending: PendingRecord) -> tuple[Any, ...]:
    """The values of ``_PENDING_COLUMNS``, in order."""
    return (
        pending.execution_id,
        pending.chain_name,
        pending.node_id,
        pending.reason,
        pending.context_json,
        pending.agent_path,
        _to_us(pending.created_at),
        pending.checkpoint_id,
        pending.sequence,
    )


async def _fetch(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    """All rows of a query (fetched to the end, so no statement stays open)."""
    return list(await conn.execute_fetchall(sql, params))


async def _run(conn: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> int:
    """Run one statement; return the number of rows it changed."""
    async with conn.execute(sql, params) as cursor:
        return cursor.rowcount


#: One write of a group transaction: its statements, run on the writer inside the transaction.
_GroupWrite = Callable[[aiosqlite.Connection], Awaitable[Any]]


async def _insert_event(
    conn: aiosqlite.Connection,
    namespace: str,
    kind: EventKind,
    pending: PendingRecord,
    event_at_us: int,
) -> None:
    await _run(
        conn,
        _SQL_INSERT_EVENT,
        (
            namespace,
            kind.value,
            pending.execution_id,
            pending.chain_name,
            pending.node_id,
            pending.reason,
            pending.context_json,
            pending.agent_path,
            _to_us(pending.created_at),
            pending.checkpoint_id,
            pending.sequence,
            event_at_us,
            None if pending.decision is None else rows.decision_to_json(pending.decision),
        ),
    )


def _event_from_row(row: sqlite3.Row) -> InterruptEventRecord:
    return rows.event_from_row(row, _from_us)


class _SQLiteEventNotifier:
    """Wakes the outbox reader when the file changed: ``PRAGMA data_version`` on the events
    connection every 50 ms (it changes when any other connection, in any process, commits),
    and at once when this process commits an event."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._local = asyncio.Event()
        self._local.set()  # the first wait returns at once
        self._version: int | None = None
        store._event_wakeups.add(self._local)

    async def wait(self, max_wait: float) -> None:
        """Return when the file may hold new events, or after ``max_wait`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        if self._version is None:
            # The baseline is taken before the first return, so the caller's first read
            # covers every commit that the next wait would not notice.
            self._version = await self._store._data_version()
        while not self._local.is_set():
            version = await self._store._data_version()
            if version != self._version:
                self._version = version
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(_DATA_VERSION_POLL_SECONDS, remaining)):
                    await self._local.wait()
        self._local.clear()

    async def close(self) -> None:
        """Stop listening to this process's writes."""
        self._store._event_wakeups.discard(self._local)


def _probe_open(path: str) -> None:
    """Raise the sqlite3 error of opening ``path``, if opening it fails."""
    sqlite3.connect(path, isolation_level=None).close()


# --- the store -----------------------------------------------------------------------------


class SQLiteStore:
    """A :class:`~checkpointd.store.base.Store` in one SQLite file.

    ``busy_timeout_ms`` is how long a write waits for another process's write lock before
    the call fails with :class:`StoreUnavailable`; ``timeout`` bounds every call (including
    :meth:`open` and the wait for this process's own writer) in seconds. The caller checks
    the path; the parent directory must exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = 5000,
        timeout: float = 30.0,
    ) -> None:
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must not be negative")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._path = os.fspath(path)
        if self._path in ("", ":memory:"):
            # Each connection would get its own private database: the reader would see nothing.
            raise ValueError("SQLiteStore needs the path of a database file")
        self._busy_timeout_ms = busy_timeout_ms
        self._timeout = timeout
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        # The outbox reader's connection: its multi-statement read transactions and its
        # data_version polls never share a connection with other callers' reads.
        self._events_conn: aiosqlite.Connection | None = None
        self._events_lock = asyncio.Lock()
        self._event_wakeups: set[asyncio.Event] = set()
        self._event_in_transaction = False
        self._cleanups: set[asyncio.Future[None]] = set()
        self._group: GroupCommit[_GroupWrite, Any] = GroupCommit(
            self._commit_group, max_batch=_GROUP_COMMIT_MAX
        )

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"

    # --- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, set WAL and ``synchronous=FULL``, and apply the missing migrations."""
        if self._writer is not None:
            return
        migrations = _load_migrations()
        writer: aiosqlite.Connection | None = None
        reader: aiosqlite.Connection | None = None
        events: aiosqlite.Connection | None = None
        try:
            async with asyncio.timeout(self._timeout):
                writer = await self._connect()
                mode = await self._enter_wal(writer)
                if str(mode[0][0]).lower() != "wal":
                    raise StoreError(
                        f"cannot open SQLite database at {self._path}: "
                        f"WAL journal mode is not available (journal_mode={mode[0][0]})"
                    )
                await _run(writer, "PRAGMA synchronous = FULL", ())
                await self._migrate(writer, migrations)
                reader = await self._connect()
                await _run(reader, "PRAGMA query_only = ON", ())
                await _fetch(reader, _SQL_PING, ())
                events = await self._connect()
                await _run(events, "PRAGMA query_only = ON", ())
        except BaseException as exc:
            for conn in (events, reader, writer):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            if isinstance(exc, TimeoutError):
                raise StoreUnavailable(
                    f"cannot open SQLite database at {self._path}: "
                    f"no answer within {self._timeout:g} s"
                ) from exc
            if isinstance(exc, sqlite3.Error):
                error = StoreUnavailable if _primary_code(exc) in _UNAVAILABLE_CODES else StoreError
                raise error(
                    f"cannot open SQLite database at {self._path}: {_describe(exc)}"
                ) from exc
            raise
        self._writer, self._reader, self._events_conn = writer, reader, events

    @staticmethod
    async def _enter_wal(writer: aiosqlite.Connection) -> list[sqlite3.Row]:
        """Switch the file to WAL, retrying while another process holds it. Switching takes
        an exclusive lock and SQLite answers "database is locked" at once, without its busy
        handler, when processes open a new file together; the caller's timeout bounds the
        retries."""
        while True:
            try:
                return await _fetch(writer, "PRAGMA journal_mode = WAL", ())
            except sqlite3.OperationalError as exc:
                if _primary_code(exc) not in _BUSY_CODES:
                    raise
            await asyncio.sleep(random.uniform(0.005, 0.05))  # jitter, so racers part

    async def close(self) -> None:
        """Close both connections, after the write in progress (if any). Safe to call twice."""
        reader, writer, events = self._reader, self._writer, self._events_conn
        self._reader = self._writer = self._events_conn = None
        if reader is not None:
            await reader.close()
        if events is not None:
            async with self._events_lock:
                await events.close()
        if writer is not None:
            async with self._write_lock:
                await writer.close()

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the file answers a trivial query."""
        async with self._call():
            await _fetch(self._read_conn(), _SQL_PING, ())

    def pool_state(self) -> None:
        """None: the SQLite store holds two fixed connections, not a pool."""
        return None

    async def count_pending_by_namespace(self) -> dict[str, int]:
        """Return the number of pending interrupts in each namespace that has any."""
        async with self._call():
            rows = await _fetch(self._read_conn(), _SQL_COUNT_PENDING, ())
        return {str(row[0]): int(row[1]) for row in rows}

    async def _connect(self) -> aiosqlite.Connection:
        # Probe with plain sqlite3 first: when aiosqlite's own connect fails, its worker
        # thread outlives the call and may report to a closed event loop.
        await asyncio.to_thread(_probe_open, self._path)
        conn = await aiosqlite.connect(
            self._path,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,
        )
        conn.row_factory = sqlite3.Row
        try:
            await _run(conn, f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}", ())
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _migrate(self, conn: aiosqlite.Connection, migrations: list[_Migration]) -> None:
        """Apply each missing migration in its own ``BEGIN IMMEDIATE`` transaction."""
        await _run(conn, "BEGIN IMMEDIATE", ())
        try:
            await _run(conn, _SQL_CREATE_SCHEMA_MIGRATIONS, ())
            await _run(conn, "COMMIT", ())
        except BaseException:
            await conn.rollback()
            raise
        known = migrations[-1].version
        for migration in migrations:
            await _run(conn, "BEGIN IMMEDIATE", ())
            try:
                applied = {row[0] for row in await _fetch(conn, _SQL_APPLIED_VERSIONS, ())}
                if applied and max(applied) > known:
                    raise StoreError(
                        f"cannot open SQLite database at {self._path}: its schema version "
                        f"{max(applied)} is newer than this server knows ({known})"
                    )
                if migration.version not in applied:
                    for statement in migration.statements:
                        await _run(conn, statement, ())
                    await _run(
                        conn, _SQL_RECORD_MIGRATION, (migration.version, migration.name, _now_us())
                    )
                await _run(conn, "COMMIT", ())
            except BaseException:
                await conn.rollback()
                raise

    # --- plumbing ------------------------------------------------------------------------

    def _read_conn(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        return self._reader

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[None]:
        """Bound a call by ``timeout`` and turn SQLite errors into store errors."""
        try:
            async with asyncio.timeout(self._timeout):
                yield
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"SQLite database {self._path} did not answer within {self._timeout:g} s"
            ) from exc
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        except ValueError as exc:
            # aiosqlite's "Connection closed" when close() overtook this call.
            if self._writer is None:
                raise StoreUnavailable(f"SQLite store {self._path} is closed") from exc
            raise

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        code = _primary_code(exc)
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return StoreUnavailable(
                f"SQLite database {self._path} stayed locked by another connection for longer "
                f"than busy_timeout ({self._busy_timeout_ms} ms)"
            )
        if code == _SQLITE_READONLY:
            return StoreUnavailable(f"SQLite database {self._path} is read-only")
        if code == _SQLITE_FULL:
            return StoreUnavailable(f"SQLite database {self._path}: disk or database is full")
        if code in _UNAVAILABLE_CODES:
            return StoreUnavailable(f"SQLite database {self._path}: {_describe(exc)}")
        if isinstance(exc, sqlite3.ProgrammingError) and self._writer is None:
            return StoreUnavailable(f"SQLite store {self._path} is closed")
        return StoreError(f"SQLite database {self._path}: {_describe(exc)}")

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction on the writer, committed when the body
        returns, rolled back when it raises.

        The write lock is held until the transaction has ended. A cancelled caller (its
        ``timeout`` ran out) does not wait for that: the rollback finishes in the background
        after whatever statement the writer is still running, then frees the lock.
        """
        conn = self._writer
        if conn is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        await self._write_lock.acquire()
        try:
            await _fetch(conn, "BEGIN IMMEDIATE", ())
            self._event_in_transaction = False
            yield conn
            await _fetch(conn, "COMMIT", ())
            if self._event_in_transaction:
                for wakeup in self._event_wakeups:
                    wakeup.set()
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._rollback_and_release(conn))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)
            raise
        except BaseException:
            await self._rollback_and_release(conn)
            raise
        else:
            self._write_lock.release()

    async def _append_event(
        self,
        conn: aiosqlite.Connection,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        event_at_us: int,
    ) -> None:
        """Write an outbox event in the writer's transaction; its commit wakes the notifiers."""
        await _insert_event(conn, namespace, kind, pending, event_at_us)
        self._event_in_transaction = True

    async def _rollback_and_release(self, conn: aiosqlite.Connection) -> None:
        """End the writer's transaction, if one is open, and free the write lock."""
        try:
            # A no-op when no transaction is open (BEGIN failed, or COMMIT went through).
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.rollback()
        finally:
            self._write_lock.release()

    async def _commit_group(self, writes: list[_GroupWrite]) -> list[Any]:
        """Run ``writes`` in one transaction; a write's own :class:`StoreError` (a duplicate
        id) is its outcome, and SQLite has undone only that write's failed statement."""
        outcomes: list[Any] = []
        async with self._call(), self._write() as conn:
            for write in writes:
                try:
                    outcomes.append(await write(conn))
                except StoreError as exc:
                    outcomes.append(exc)
        return outcomes

    async def _insert_checkpoint(
        self,
        conn: aiosqlite.Connection,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
    ) -> tuple[CheckpointRecord, bool]:
        """Insert inside the caller's transaction; return the stored row and whether this call
        wrote it (False: a retry of the same request). Raise :class:`CheckpointExists` or
        :class:`RequestAppliedThenDeleted`. One statement when the row is written."""
        created_at_us = _to_us(checkpoint.created_at)
        try:
            rows = await _fetch(
                conn,
                _SQL_INSERT_CHECKPOINT,
                (
                    namespace,
                    request_id,
                    checkpoint.execution_id,
                    checkpoint.checkpoint_id,
                    checkpoint.parent_checkpoint_id,
                    checkpoint.chain_name,
                    checkpoint.node_id,
                    checkpoint.node_index,
                    checkpoint.step_type,
                    checkpoint.status.value,
                    checkpoint.state_snapshot_json,
                    checkpoint.node_input_json,
                    checkpoint.node_output_json,
                    checkpoint.iteration,
                    checkpoint.iteration_counters_json,
                    checkpoint.interrupt_reason,
                    checkpoint.interrupt_context_json,
                    checkpoint.agent_path,
                    created_at_us,
                    namespace,
                    request_id,
                ),
            )
        except sqlite3.IntegrityError:
            rows = []
        if rows:
            stored = dataclasses.replace(
                checkpoint, sequence=int(rows[0][0]), created_at=_from_us(created_at_us)
            )
            return stored, True
        # Nothing written: a taken id, or a tombstone. Writers are serialized, so what these
        # lookups see is what stopped the insert.
        if request_id:
            found = await _fetch(conn, _SQL_CHECKPOINT_BY_REQUEST_ID, (namespace, request_id))
            if found:
                return _checkpoint_from_row(found[0]), False  # a retry, whatever its id
            if await _fetch(conn, _SQL_IS_TOMBSTONE, (namespace, request_id)):
                raise RequestAppliedThenDeleted(request_id)
        if await _fetch(conn, _SQL_CHECKPOINT_BY_ID, (namespace, checkpoint.checkpoint_id)):
            raise CheckpointExists(checkpoint.checkpoint_id)
        raise StoreError(f"SQLite database {self._path}: a checkpoint insert failed a constraint")

    # --- checkpoints ---------------------------------------------------------------------

    async def put_checkpoint(
        self, namespace: str, request_id: str, checkpoint: CheckpointRecord
    ) -> CheckpointRecord:
        """Insert one checkpoint (group commit); a retry with the same request id returns the
        stored row."""
        _to_us(checkpoint.created_at)  # a naive time fails here, not inside the group

        async def write(conn: aiosqlite.Connection) -> CheckpointRecord:
            stored, _ = await self._insert_checkpoint(conn, namespace, request_id, checkpoint)
            return stored

        async with self._call():
            result: CheckpointRecord = await self._group.submit(write)
        return result

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        async with self._call():
            rows = await _fetch(
                self._read_conn(), _SQL_GET_CHECKPOINT, (namespace, checkpoint_id, execution_id)
            )
        return _checkpoint_from_row(rows[0]) if rows else None

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence (optionally not a run_end)."""
        async with self._call():
            if skip_run_end:
                rows = await _fetch(
                    self._read_conn(),
                    _SQL_LATEST_CHECKPOINT_SKIP_STEP_TYPE,
                    (namespace, execution_id, RUN_END),
                )
            else:
                rows = await _fetch(
                    self._read_conn(), _SQL_LATEST_CHECKPOINT, (namespace, execution_id)
                )
        return _checkpoint_from_row(rows[0]) if rows else None

    async def list_checkpoints(
        self,
        namespace: str,
        execution_id: str,
        *,
        after_sequence: int | None,
        descending: bool,
        limit: int,
        max_bytes: int | None = None,
    ) -> Page[CheckpointRecord]:
        """Up to ``limit`` rows ordered by sequence, after ``after_sequence`` in the direction
        of travel, within ``max_bytes`` (sizes first, then only the rows that fit)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        if descending:
            sizes_sql, rows_sql = _SQL_LIST_CHECKPOINT_SIZES_DESC, _SQL_LIST_CHECKPOINTS_DESC
            low, high = 0, _MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_sql, rows_sql = _SQL_LIST_CHECKPOINT_SIZES_ASC, _SQL_LIST_CHECKPOINTS_ASC
            low, high = 0 if after_sequence is None else after_sequence, _MAX_SEQUENCE
        while True:
            async with self._call():
                conn = self._read_conn()
                sizes = await _fetch(
                    conn, sizes_sql, (namespace, execution_id, low, high, limit + 1)
                )
                taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
                if not taken:
                    return Page()
                chosen = [int(row[0]) for row in sizes[:taken]]
                # No new row can fall inside the chosen range (SQLite hands out sequences in
                # commit order), so this reads the chosen rows, less any deleted meanwhile.
                found = await _fetch(
                    conn,
                    rows_sql,
                    (namespace, execution_id, min(chosen) - 1, max(chosen) + 1, taken),
                )
            if found:  # else every chosen row was deleted meanwhile: read on from there
                return Page((_checkpoint_from_row(row) for row in found), more=len(sizes) > taken)

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
    ) -> DeleteExecutionResult:
        """Delete the execution's checkpoints, pending interrupt and idempotency results in one
        transaction, with a ``removed`` event when a pending interrupt went away, tombstones
        for the request ids of the deleted checkpoints, and the reply under ``request_id``
        (a retry returns that reply and deletes nothing: C9)."""
        key = (namespace, execution_id)
        now_us = _now_us() if now is None else _to_us(now)
        async with self._call(), self._write() as conn:
            record = bool(request_id)
            if request_id:
                earlier = await _fetch(conn, _SQL_REPLY_OF_REQUEST, (namespace, request_id))
                if earlier and earlier[0]["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(earlier[0]["reply_json"])
                record = not earlier  # an id already used by another kind of call is kept
            pending_rows = await _fetch(conn, _SQL_PENDING_OF_EXECUTION, key)
            await _run(conn, _SQL_TOMBSTONE_EXECUTION, (now_us, *key))
            checkpoints = await _run(conn, _SQL_DELETE_CHECKPOINTS_OF_EXECUTION, key)
            pending_deleted = await _run(conn, _SQL_DELETE_PENDING_OF_EXECUTION, key) > 0
            idempotency = await _run(conn, _SQL_DELETE_IDEMPOTENT_OF_EXECUTION, key)
            await _run(conn, _SQL_DELETE_DECISIONS_OF_EXECUTION, key)
            if pending_rows:
                pending = _pending_from_row(pending_rows[0])
                await self._append_event(conn, namespace, EventKind.REMOVED, pending, now_us)
            result = DeleteExecutionResult(
                checkpoints_deleted=checkpoints,
                pending_interrupt_deleted=pending_deleted,
                idempotency_results_deleted=idempotency,
            )
            if record:
                reply = (namespace, request_id, now_us, replies.DELETE_EXECUTION)
                await _run(conn, _SQL_RECORD_REPLY, (*reply, replies.encode(result)))
        return result

    async def prune(
        self,
        namespace: str,
        cutoff: datetime,
        *,
        batch_size: int,
        request_id: str = "",
        now: datetime | None = None,
    ) -> PruneResult:
        """Delete completed/failed checkpoints and unprotected idempotency results older than
        ``cutoff``, at most ``batch_size`` rows per transaction; the request ids of the deleted
        checkpoints become tombstones in their batch's transaction. The reply is recorded
        under ``request_id`` once the prune is complete, and a retry returns it (C9)."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        now_us = _now_us() if now is None else _to_us(now)
        if request_id:
            async with self._call():
                earlier = await _fetch(
                    self._read_conn(), _SQL_REPLY_OF_REQUEST, (namespace, request_id)
                )
            if earlier and earlier[0]["kind"] == replies.PRUNE:
                return replies.decode_prune(earlier[0]["reply_json"])
        params = (namespace, _to_us(cutoff), batch_size)
        checkpoints = await self._delete_in_batches(
            _SQL_PRUNE_CHECKPOINTS_BATCH, params, tombstones_at=now_us
        )
        idempotency = await self._delete_in_batches(_SQL_PRUNE_IDEMPOTENT_BATCH, params)
        result = PruneResult(
            checkpoints_deleted=checkpoints, idempotency_results_deleted=idempotency
        )
        if request_id:
            async with self._call(), self._write() as conn:
                reply = (namespace, request_id, now_us, replies.PRUNE, replies.encode(result))
                if not await _run(conn, _SQL_RECORD_REPLY, reply):
                    # A concurrent call with this id finished first: answer like it did.
                    earlier = await _fetch(conn, _SQL_REPLY_OF_REQUEST, (namespace, request_id))
                    if earlier and earlier[0]["kind"] == replies.PRUNE:
                        return replies.decode_prune(earlier[0]["reply_json"])
        return result

    async def _delete_in_batches(
        self, sql: str, params: tuple[str, int, int], *, tombstones_at: int | None = None
    ) -> int:
        """Run a batch DELETE in its own transaction until it deletes less than a batch;
        the writer is free for other callers between batches. With ``tombstones_at`` the
        statement returns the deleted rows' request ids, recorded as tombstones in the same
        transaction."""
        total = 0
        namespace, _, batch_size = params
        while True:
            async with self._call(), self._write() as conn:
                if tombstones_at is None:
                    deleted = await _run(conn, sql, params)
                else:
                    gone = await _fetch(conn, sql, params)
                    deleted = len(gone)
                    ids = [(namespace, row[0], tombstones_at) for row in gone if row[0]]
                    if ids:
                        await conn.executemany(_SQL_TOMBSTONE, ids)
            total += deleted
            if deleted < batch_size:
                return total

    # --- interrupts ----------------------------------------------------------------------

    async def record_interrupt(
        self, namespace: str, request_id: str, checkpoint: CheckpointRecord, pending: PendingRecord
    ) -> RecordInterruptResult:
        """Insert the interrupted checkpoint and, unless the execution has one, the pending
        row and its ``added`` event, in one transaction (contracts I1, I2)."""
        if pending.execution_id != checkpoint.execution_id:
            raise ValueError("the pending row and the checkpoint name different executions")
        key = (namespace, checkpoint.execution_id)
        async with self._call(), self._write() as conn:
            stored, written = await self._insert_checkpoint(conn, namespace, request_id, checkpoint)
            proposed = dataclasses.replace(
                pending,
                checkpoint_id=stored.checkpoint_id,
                sequence=stored.sequence,
                created_at=_from_us(_to_us(pending.created_at)),
            )
            rows = await _fetch(conn, _SQL_PENDING_OF_EXECUTION, key)
            if rows:
                in_place = _pending_from_row(rows[0])
                created = in_place.checkpoint_id == stored.checkpoint_id
                return RecordInterruptResult(stored, in_place, pending_created=created)
            if not written:
                # A retry after the pending row went away (claimed, most likely): report the
                # row as it was claimed when this checkpoint created it.
                claimed = await _fetch(conn, _SQL_CLAIM_BY_CHECKPOINT, (*key, stored.checkpoint_id))
                if claimed:
                    return RecordInterruptResult(
                        stored, _pending_from_row(claimed[0]), pending_created=True
                    )
                return RecordInterruptResult(stored, proposed, pending_created=False)
            await _run(conn, _SQL_INSERT_PENDING, (namespace, *_pending_params(proposed)))
            await self._append_event(conn, namespace, EventKind.ADDED, proposed, _now_us())
            return RecordInterruptResult(stored, proposed, pending_created=True)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Take the execution's pending row; exactly one caller among all processes gets it.
        A retry with the same non-empty token gets the same row again."""
        now_us = _to_us(now)
        by_token = (namespace, execution_id, claim_token)
        async with self._call():
            if claim_token:
                earlier = await _fetch(self._read_conn(), _SQL_CLAIM_BY_TOKEN, by_token)
                if earlier:
                    return _pending_from_row(earlier[0])
            async with self._write() as conn:
                rows = await _fetch(conn, _SQL_PENDING_OF_EXECUTION, (namespace, execution_id))
                if not rows:
                    if not claim_token:
                        return None
                    # Writers are serialized, so this lookup sees any concurrent retry's claim.
                    earlier = await _fetch(conn, _SQL_CLAIM_BY_TOKEN, by_token)
                    return _pending_from_row(earlier[0]) if earlier else None
                pending = _pending_from_row(rows[0])
                await _run(conn, _SQL_DELETE_PENDING_OF_EXECUTION, (namespace, execution_id))
                if claim_token:
                    await _run(
                        conn,
                        _SQL_INSERT_CLAIM,
                        (namespace, claim_token, now_us, *_pending_params(pending)),
                    )
                await self._append_event(conn, namespace, EventKind.CLAIMED, pending, now_us)
                return pending

    # --- decisions -----------------------------------------------------------------------

    async def submit_decision(
        self, namespace: str, request_id: str, execution_id: str, decision: DecisionRecord
    ) -> DecisionChange:
        """Store the one decision on the execution's pending interrupt, with a ``decided``
        event, in one transaction (K1). Writers are serialized, so the first one wins."""
        async with self._call(), self._write() as conn:
            if request_id:
                earlier = await _fetch(conn, _SQL_DECISION_BY_REQUEST_ID, (namespace, request_id))
                if earlier:
                    return DecisionChange(DecisionOutcome.REPEATED, _decided_from_row(earlier[0]))
            found = await _fetch(conn, _SQL_PENDING_OF_EXECUTION, (namespace, execution_id))
            if not found:
                # Resumed since (its pending row claimed): the run's last decision stands.
                last = await _fetch(
                    conn, _SQL_NEWEST_DECISION_OF_EXECUTION, (namespace, execution_id)
                )
                if last:
                    return DecisionChange(DecisionOutcome.CONFLICT, _decided_from_row(last[0]))
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            pending = _pending_from_row(found[0])
            pause = (namespace, execution_id, pending.checkpoint_id)
            winner = await _fetch(conn, _SQL_DECISION_OF_PAUSE, pause)
            if winner:
                same = bool(request_id) and winner[0]["request_id"] == request_id
                outcome = DecisionOutcome.REPEATED if same else DecisionOutcome.CONFLICT
                return DecisionChange(outcome, _decided_from_row(winner[0]))
            decision = dataclasses.replace(
                decision, decided_at=_from_us(_to_us(decision.decided_at))
            )
            await _run(
                conn,
                _SQL_INSERT_DECISION,
                (
                    namespace,
                    request_id,
                    int(decision.approved),
                    decision.metadata_json,
                    decision.decided_by,
                    decision.reason,
                    _to_us(decision.decided_at),
                    *_pending_params(pending),
                ),
            )
            decided = dataclasses.replace(pending, decision=decision)
            await self._append_event(
                conn, namespace, EventKind.DECIDED, decided, _to_us(decision.decided_at)
            )
            return DecisionChange(DecisionOutcome.APPLIED, decided)

    async def lease_decision(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
    ) -> DecisionChange:
        """Take or renew the lease on a pause's decision (K2): a decision nobody holds, or
        whose lease ran out before ``now``, goes to ``lease_token`` until ``lease_until``."""
        pause = (namespace, execution_id, checkpoint_id)
        async with self._call(), self._write() as conn:
            found = await _fetch(conn, _SQL_DECISION_OF_PAUSE, pause)
            if not found:
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            current = _decided_from_row(found[0])
            decision = current.decision
            assert decision is not None
            held_by = found[0]["lease_token"]
            if decision.status.is_final:
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            renew = decision.status is DecisionStatus.RESUMING and held_by == lease_token
            expires = decision.lease_expires_at
            if (
                decision.status is DecisionStatus.RESUMING
                and not renew
                and expires is not None
                and expires > now
            ):
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            await _run(
                conn,
                _SQL_TAKE_LEASE,
                (lease_token, _to_us(lease_until), 0 if renew else 1, *pause),
            )
            found = await _fetch(conn, _SQL_DECISION_OF_PAUSE, pause)
            return DecisionChange(DecisionOutcome.APPLIED, _decided_from_row(found[0]))

    async def report_resume(
        self,
        namespace: str,
        execution_id: str,
        checkpoint_id: str,
        lease_token: str,
        status: DecisionStatus,
        error: str | None,
        now: datetime,
    ) -> DecisionChange:
        """Record how the lease holder carried the decision out, with a ``resumed`` or
        ``resume_failed`` event, in one transaction (K2). A repeat of the stored report is
        REPEATED; a report by anyone but the lease holder, or a different second report, is a
        CONFLICT."""
        pause = (namespace, execution_id, checkpoint_id)
        async with self._call(), self._write() as conn:
            found = await _fetch(conn, _SQL_DECISION_OF_PAUSE, pause)
            if not found:
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            current = _decided_from_row(found[0])
            decision = current.decision
            assert decision is not None
            if found[0]["lease_token"] != lease_token or decision.status is DecisionStatus.DECIDED:
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            if decision.status.is_final:
                outcome = (
                    DecisionOutcome.REPEATED
                    if decision.status is status
                    else DecisionOutcome.CONFLICT
                )
                return DecisionChange(outcome, current)
            now_us = _to_us(now)
            await _run(conn, _SQL_REPORT_DECISION, (status.value, error, now_us, *pause))
            found = await _fetch(conn, _SQL_DECISION_OF_PAUSE, pause)
            reported = _decided_from_row(found[0])
            kind = (
                EventKind.RESUMED if status is DecisionStatus.RESUMED else EventKind.RESUME_FAILED
            )
            await self._append_event(conn, namespace, kind, reported, now_us)
            return DecisionChange(DecisionOutcome.APPLIED, reported)

    async def list_decisions(
        self, namespace: str, *, after_sequence: int, limit: int, open_only: bool
    ) -> list[PendingRecord]:
        """Decided pauses after ``after_sequence``, oldest first (open ones only when asked)."""
        sql = _SQL_LIST_OPEN_DECISIONS if open_only else _SQL_LIST_DECISIONS
        async with self._call():
            found = await _fetch(self._read_conn(), sql, (namespace, after_sequence, limit))
        return [_decided_from_row(row) for row in found]

    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims made before ``claimed_before``; return how many went."""
        async with self._call(), self._write() as conn:
            return await _run(conn, _SQL_PURGE_CLAIMS, (_to_us(claimed_before),))

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """Forget the request ids of idempotency puts applied before ``applied_before``;
        return how many went."""
        async with self._call(), self._write() as conn:
            return await _run(conn, _SQL_PURGE_APPLIED_REQUESTS, (_to_us(applied_before),))

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        """Up to ``limit`` pending rows below ``before_sequence``, newest first, matching
        every set filter (an empty ``agent_path_prefix`` matches every row), within
        ``max_bytes`` (sizes first, then only the rows that fit)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        while True:
            async with self._call():
                conn = self._read_conn()
                sql, params = self._list_pending_query(
                    namespace, before_sequence, limit + 1, filters, sizes=True
                )
                sizes = await _fetch(conn, sql, params)
                taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
                if not taken:
                    return Page()
                chosen = [int(row[0]) for row in sizes[:taken]]
                # Both bounds: no row outside the sized ones is loaded (a pending row gets the
                # sequence of a new checkpoint, so none can appear between them).
                sql, params = self._list_pending_query(
                    namespace, max(chosen) + 1, taken, filters, above=min(chosen) - 1
                )
                found = await _fetch(conn, sql, params)
            if found:
                return Page((_decided_from_row(row) for row in found), more=len(sizes) > taken)

    @staticmethod
    def _list_pending_query(
        namespace: str,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        *,
        above: int | None = None,
        sizes: bool = False,
    ) -> tuple[str, list[Any]]:
        """The pending listing below ``before_sequence`` (and above ``above``), newest first:
        the rows with their decisions, or (``sizes``) each row's sequence and size."""
        sql = _SQL_LIST_PENDING_SIZES if sizes else _SQL_LIST_PENDING
        params: list[Any] = [
            namespace,
            _MAX_SEQUENCE if before_sequence is None else before_sequence,
        ]
        if above is not None:
            sql += _SQL_LIST_PENDING_ABOVE
            params.append(above)
        where, filter_params = _pending_filters(filters)
        sql += where + _SQL_LIST_PENDING_ORDER
        params += [*filter_params, limit]
        return sql, params

    # --- idempotency ---------------------------------------------------------------------

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
    ) -> None:
        """Insert or replace the cached result, with created_at = ``now`` (group commit).
        A non-empty ``request_id`` is recorded in the same transaction; a retry that finds it
        recorded writes nothing (contract D1)."""
        now_us = _to_us(now)
        params = (namespace, execution_id, key, result_json, now_us)

        async def write(conn: aiosqlite.Connection) -> None:
            if request_id and not await _run(
                conn, _SQL_RECORD_APPLIED_REQUEST, (namespace, request_id, now_us)
            ):
                return  # a retry: the first call's write stands
            await _fetch(conn, _SQL_PUT_IDEMPOTENT, params)

        async with self._call():
            await self._group.submit(write)

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        async with self._call():
            rows = await _fetch(
                self._read_conn(), _SQL_GET_IDEMPOTENT, (namespace, execution_id, key)
            )
        return str(rows[0]["result_json"]) if rows else None

    # --- interrupt events ----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _events_read(self) -> AsyncIterator[aiosqlite.Connection]:
        """One read transaction on the events connection: every query in it sees the same
        committed state (WAL readers neither block nor are blocked by writers)."""
        conn = self._events_conn
        if conn is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        await self._events_lock.acquire()
        try:
            await _fetch(conn, "BEGIN", ())
            yield conn
            await _fetch(conn, "COMMIT", ())
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._end_events_read(conn))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)
            raise
        except BaseException:
            await self._end_events_read(conn)
            raise
        else:
            self._events_lock.release()

    async def _end_events_read(self, conn: aiosqlite.Connection) -> None:
        try:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.rollback()
        finally:
            self._events_lock.release()

    async def _data_version(self) -> int:
        """``PRAGMA data_version`` of the events connection: it changes whenever another
        connection (this process's writer, or any other process) commits."""
        conn = self._events_conn
        if conn is None:
            raise StoreUnavailable(f"SQLite store {self._path} is not open")
        async with self._call(), self._events_lock:
            rows = await _fetch(conn, "PRAGMA data_version", ())
        return int(rows[0][0])

    @staticmethod
    async def _event_bounds(conn: aiosqlite.Connection) -> tuple[int, int]:
        rows = await _fetch(conn, _SQL_EVENT_BOUNDS, ())
        purged_through = int(rows[0]["purged_through"])
        return purged_through, max(purged_through, int(rows[0]["latest"]))

    async def snapshot_pending(
        self,
        namespace: str,
        filters: PendingFilter,
        *,
        as_of_cursor: int,
        before_sequence: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> SnapshotPage:
        """A page of the pending set as it was at ``as_of_cursor``, newest first, in one read
        transaction (see ``_SQL_ADDED_AFTER``)."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        where, params = _pending_filters(filters)
        high = _MAX_SEQUENCE if before_sequence is None else before_sequence
        after = as_of_cursor

        def pending_sql(columns: str) -> str:
            return (
                f"SELECT {columns} FROM pending_interrupts AS p "
                f"WHERE p.namespace = ? AND p.sequence < ? AND p.sequence > ?{where}"
                f"{_SQL_ADDED_AFTER}{_SQL_LIST_PENDING_ORDER}"
            )

        def decided_pending_sql() -> str:
            # The rows pending now carry the decision on their pause, as a listing does (K1).
            return _SQL_LIST_PENDING + (
                f" AND p.sequence > ?{where}{_SQL_ADDED_AFTER}{_SQL_LIST_PENDING_ORDER}"
            )

        def gone_sql(columns: str) -> str:
            return (
                f"SELECT {columns} FROM interrupt_events AS p "
                f"WHERE namespace = ? AND sequence < ? AND sequence > ?{where}"
                f"{_SQL_SNAPSHOT_GONE}{_SQL_ADDED_AFTER}{_SQL_LIST_PENDING_ORDER}"
            )

        async with self._call(), self._events_read() as conn:
            purged_through, _ = await self._event_bounds(conn)
            now = await _fetch(
                conn, pending_sql(_PENDING_SIZE), [namespace, high, 0, *params, after, limit + 1]
            )
            gone = await _fetch(
                conn,
                gone_sql(_PENDING_SIZE),
                [namespace, high, 0, *params, after, after, limit + 1],
            )
            sizes = budget.merge_newest_first(
                [(int(r[0]), int(r[1])) for r in now], [(int(r[0]), int(r[1])) for r in gone]
            )
            taken = budget.fit((size for _, size in sizes), limit, max_bytes)
            found: dict[int, PendingRecord] = {}
            if taken:
                low = sizes[taken - 1][0] - 1
                for row in await _fetch(
                    conn, decided_pending_sql(), [namespace, high, low, *params, after, taken]
                ):
                    found[int(row["sequence"])] = _decided_from_row(row)
                for row in await _fetch(
                    conn,
                    gone_sql(_EVENT_PENDING_COLUMNS),
                    [namespace, high, low, *params, after, after, taken],
                ):
                    found.setdefault(int(row["sequence"]), _pending_from_row(row))
        return SnapshotPage(
            rows=[found[sequence] for sequence in sorted(found, reverse=True)],
            more=len(sizes) > taken,
            purged_through=purged_through,
        )

    async def read_events(
        self,
        *,
        after_cursor: int,
        up_to_cursor: int | None,
        limit: int,
        namespace: str | None,
        max_bytes: int | None = None,
    ) -> EventPage:
        """Up to ``limit`` events after ``after_cursor`` (and up to ``up_to_cursor``) within
        ``max_bytes``, with the outbox's bounds, in one read transaction."""
        if limit < 0:
            raise ValueError("limit must not be negative")
        upper = _MAX_SEQUENCE if up_to_cursor is None else up_to_cursor
        rows: list[sqlite3.Row] = []
        more = False
        async with self._call(), self._events_read() as conn:
            purged_through, latest = await self._event_bounds(conn)
            if limit > 0 and upper > after_cursor:
                scope: tuple[str, ...] = ()
                if namespace is None:
                    sizes_sql, rows_sql = _SQL_EVENT_SIZES, _SQL_EVENTS
                else:
                    sizes_sql, rows_sql = _SQL_EVENT_SIZES_OF_NAMESPACE, _SQL_EVENTS_OF_NAMESPACE
                    scope = (namespace,)
                sizes = await _fetch(conn, sizes_sql, (*scope, after_cursor, upper, limit + 1))
                taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
                more = len(sizes) > taken
                if taken:
                    through = int(sizes[taken - 1][0])
                    rows = await _fetch(conn, rows_sql, (*scope, after_cursor, through, taken))
        return EventPage(
            events=[_event_from_row(row) for row in rows],
            purged_through=purged_through,
            latest_cursor=latest,
            more=more,
        )

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events up to the first one written at or after
        ``written_before``, at most ``batch_size`` per transaction."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        cutoff_us = _to_us(written_before)
        purged = 0
        while True:
            async with self._call(), self._write() as conn:
                head = await _fetch(conn, _SQL_EVENTS_HEAD, (batch_size,))
                doomed = 0
                through = 0
                for row in head:
                    if row["event_at"] >= cutoff_us:
                        break
                    doomed += 1
                    through = row["cursor"]
                if doomed:
                    await _run(conn, _SQL_PURGE_EVENTS_THROUGH, (through,))
                    await _run(conn, _SQL_RAISE_PURGED_THROUGH, (through,))
            purged += doomed
            if doomed < batch_size:
                return purged

    def event_notifier(self) -> _SQLiteEventNotifier:
        """A notifier that polls ``PRAGMA data_version`` and hears this process's writes."""
        return _SQLiteEventNotifier(self)

    # --- replication outbox (contracts R1-R4) --------------------------------------------

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled rows with sequence > ``after_sequence``, oldest
        first."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        bound = 0 if after_sequence is None else after_sequence
        async with self._call():
            rows = await _fetch(self._read_conn(), _SQL_LIST_UNSYNCED, (namespace, bound, limit))
        return [_checkpoint_from_row(row) for row in rows]

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle unsettled rows, first-wins, in one transaction; return the ids settled."""
        now_us = _to_us(now)
        settled: set[str] = set()
        async with self._call(), self._write() as conn:
            synced = [cid for cid, reason in settlements if reason is None]
            for start in range(0, len(synced), _SETTLE_CHUNK):
                chunk = synced[start : start + _SETTLE_CHUNK]
                sql = _SQL_MARK_SYNCED.format(ids=",".join("?" * len(chunk)))
                for row in await _fetch(conn, sql, (now_us, namespace, *chunk)):
                    settled.add(str(row["checkpoint_id"]))
            for cid, reason in settlements:
                if reason is not None:
                    hit = await _fetch(conn, _SQL_QUARANTINE, (now_us, reason, namespace, cid))
                    if hit:
                        settled.add(cid)
                    else:
                        await _run(conn, _SQL_REQUARANTINE, (reason, namespace, cid))
        return [cid for cid, _ in settlements if cid in settled]
