"""The Postgres store: the :class:`~checkpointd.store.base.Store` protocol over an asyncpg pool.

Every table lives in one configurable schema (validated, always quoted) and carries the
namespace as the first column of its keys, so every query of the hot path is an index range
scan. The schema is created and migrated by :meth:`PostgresStore.open` from the versioned
``migrations/postgres_NNNN_*.sql`` files; the migration transaction holds an advisory lock
derived from the schema name, so replicas that start together apply each version once.

Interrupt events (the watch outbox) are written as the last statement of their transaction,
right after taking a second advisory lock derived from the schema name. Identity values are
handed out at insert, not at commit, so without that lock a writer could commit cursor 8
before another commits cursor 7 and a watcher reading "cursor > 7" would skip 7 for ever.
Holding the lock from the event insert to the commit makes commit order equal cursor order.

Each event insert also sends ``NOTIFY`` on a channel derived from the schema name; Postgres
delivers it at commit and coalesces repeats. The watch reader ``LISTEN``s on one dedicated
connection (see :meth:`PostgresStore.event_notifier`) and polls as a fallback, so a lost
notification delays an event by at most the poll interval and never loses it.

Behind a transaction pooler (PgBouncer with ``pool_mode = transaction``: ``pooled=True``)
nothing may rely on the session outliving a transaction: every statement runs unprepared
unless a statement cache size is given (asyncpg with ``statement_cache_size=0`` sends its
Parse again in the same Sync as the Bind, so the pooler cannot split them; PgBouncer 1.21+
with ``max_prepared_statements`` can keep named statements, and then a cache is worth
turning on), connections are handed back without asyncpg's session reset (there is no
session of ours to reset), and the migration lock is the transaction-level advisory lock it
already is. ``LISTEN`` needs a session, so the notifier connects to ``listen_dsn`` (a direct
connection to Postgres) or, without one, polls the outbox every ``poll_interval`` seconds;
the outbox is read by cursor either way, so polling delays events and never loses them.

Group commit (:mod:`checkpointd.store.group_commit`): concurrent ``put_checkpoint`` calls
are written by one multi-row ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING``
(one statement, one round trip, one commit for up to ``_GROUP_COMMIT_MAX`` rows), and
concurrent ``put_idempotent`` calls by one multi-row upsert (which records their request ids
and skips the rows whose id was already recorded: retries). When the store is idle the first
write goes at once, alone; the writes that arrive meanwhile form the next statement. Each caller
is answered after that statement has committed (E1). A row whose id is already taken is left
out by ``ON CONFLICT DO NOTHING`` (the other rows are written) and its caller then takes the
single-row path: a retry gets the stored row, another request's id :class:`CheckpointExists`.
Rows with the same key never share a statement. Interrupts, claims and deletes keep a
transaction each.

Connection failures, timeouts and a busy database raise
:class:`~checkpointd.store.base.StoreUnavailable` (retriable) with a short message that names
neither SQL nor the password. A broken connection is discarded and its pool siblings are
expired (asyncpg reconnects them on their next acquire), so after an outage the first call
may fail and the store then recovers by itself once the database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.resources
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
import asyncpg.exceptions
import asyncpg.pool

from checkpointd.config import dsn_secrets
from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    CheckpointStatus,
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
    PoolState,
    RequestAppliedThenDeleted,
    StoreError,
    StoreUnavailable,
)
from checkpointd.store.group_commit import GroupCommit

__all__ = ["PostgresStore"]

log = logging.getLogger(__name__)

_Conn: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"

_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_MIGRATION_FILE: Final = re.compile(r"postgres_(\d{4})_([a-z0-9_]+)\.sql")
_MAX_BIGINT: Final = 2**63 - 1
#: Lower bound of the first prune batch (the keyset scan then moves forward).
_BEGINNING_OF_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)
#: Rows per transaction when purging expired claims.
_PURGE_BATCH: Final = 1000
#: Attempts when a row we conflicted with vanished before we could read it (a concurrent
#: delete or claim); each attempt is cheap and two are practically always enough.
_RACE_ATTEMPTS: Final = 5
#: Migrations may wait for another replica's migration and may build indexes.
_MIN_MIGRATION_TIMEOUT: Final = 60.0
#: Most rows one group-commit statement writes.
_GROUP_COMMIT_MAX: Final = 128

# Column lists, in one place so every SELECT/RETURNING builds the same records.
_CHECKPOINT_COLUMNS: Final = (
    "sequence, execution_id, checkpoint_id, request_id, parent_checkpoint_id, chain_name, "
    "node_id, node_index, step_type, status, state_snapshot_json, node_input_json, "
    "node_output_json, iteration, iteration_counters_json, interrupt_reason, "
    "interrupt_context_json, agent_path, created_at"
)
_PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, created_at, "
    "checkpoint_id, sequence"
)
_EVENT_COLUMNS: Final = (
    "cursor, namespace, kind, execution_id, chain_name, node_id, reason, context_json, "
    "agent_path, pending_created_at, checkpoint_id, sequence, event_at, decision_json"
)
_DECISION_ROW_COLUMNS: Final = (
    f"{_PENDING_COLUMNS}, {', '.join(rows.DECISION_COLUMNS)}, lease_token, request_id"
)
# The pending row an event carries, under the pending table's column names.
_EVENT_PENDING_COLUMNS: Final = (
    "execution_id, chain_name, node_id, reason, context_json, agent_path, "
    "pending_created_at AS created_at, checkpoint_id, sequence"
)


def _size_of(columns: Sequence[str]) -> str:
    """The stored bytes of these text columns (see :mod:`checkpointd.store.budget`);
    octet_length reads a TOASTed value's size without decompressing it."""
    return " + ".join(f"coalesce(octet_length({column}), 0)" for column in columns)


_CHECKPOINT_SIZE: Final = f"sequence, {_size_of(budget.CHECKPOINT_TEXT_COLUMNS)}"
_PENDING_SIZE: Final = f"sequence, {_size_of(budget.PENDING_TEXT_COLUMNS)}"
_EVENT_SIZE: Final = f"cursor, {_size_of(budget.EVENT_TEXT_COLUMNS)}"


def _numbered(sql: str) -> str:
    """``?`` placeholders as ``$1``, ``$2``, ... in order (the statements built here hold no
    other question mark)."""
    parts = sql.split("?")
    out = [parts[0]]
    for number, part in enumerate(parts[1:], start=1):
        out.append(f"${number}{part}")
    return "".join(out)


def _pending_filters(filters: PendingFilter) -> tuple[str, list[object]]:
    """The WHERE conditions of the set filters (``?`` placeholders), and their parameters."""
    sql = ""
    params: list[object] = []
    if filters.chain_name is not None:
        sql += " AND p.chain_name = ?"
        params.append(filters.chain_name)
    if filters.reason is not None:
        sql += " AND p.reason = ?"
        params.append(filters.reason)
    if filters.agent_path_prefix:
        sql += " AND starts_with(p.agent_path, ?)"
        params.append(filters.agent_path_prefix)
    return sql, params


#: Seconds of silence after which the LISTEN connection is checked with a trivial query.
_LISTEN_CHECK_SECONDS: Final = 30.0
#: Least seconds between two attempts to open the LISTEN connection.
_LISTEN_RETRY_SECONDS: Final = 1.0
#: Seconds between two outbox reads when no LISTEN connection is possible (pooled store
#: without a listen DSN): the longest an event waits before watchers get it.
_POOLED_POLL_SECONDS: Final = 0.5
#: asyncpg's own default: prepared statements kept per connection.
_DEFAULT_STATEMENT_CACHE: Final = 100
_PRUNABLE: Final = ", ".join(
    f"'{s.value}'" for s in (CheckpointStatus.COMPLETED, CheckpointStatus.FAILED)
)


def _validate_schema(schema: str) -> str:
    """Return ``schema`` double-quoted, or raise ValueError when it is not a plain identifier."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"invalid Postgres schema name {schema!r}: use 1 to 63 characters of letters, "
            "digits and '_', not starting with a digit"
        )
    return f'"{schema}"'


def _notify_channel(schema: str) -> str:
    """The NOTIFY channel of the outbox of ``schema`` (short enough for any schema name)."""
    digest = hashlib.blake2b(f"checkpointd:events:{schema}".encode(), digest_size=8).hexdigest()
    return f"checkpointd_events_{digest}"


def _lock_key(purpose: str, schema: str) -> int:
    """Derive a stable signed 64-bit advisory lock key for ``purpose`` in ``schema``."""
    digest = hashlib.blake2b(f"checkpointd:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True, slots=True)
class _Migration:
    version: int
    name: str
    sql: str


def _load_migrations() -> tuple[_Migration, ...]:
    """Read the packaged ``postgres_NNNN_name.sql`` files: distinct versions, ascending from
    1 (a number may be missing: numbers are handed out ahead of the changes that take them)."""
    folder = importlib.resources.files("checkpointd.store").joinpath("migrations")
    found: list[_Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.fullmatch(entry.name)
        if match is not None:
            found.append(_Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if not versions or versions[0] != 1 or len(set(versions)) != len(versions):
        raise RuntimeError(
            "packaged Postgres migrations must be numbered 1, 2, 3, ... without repeats; found "
            f"{[m.version for m in found]}"
        )
    return tuple(found)


def _describe_target(dsn: str) -> str:
    """Return ``host:port/database`` of a DSN, without user or password."""
    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
        if not hosts:
            hosts = ",".join(parse_qs(parts.query).get("host", [])) or "localhost"
        if "," not in hosts and not re.search(r":\d+$", hosts):
            hosts += ":5432"
        database = unquote(parts.path.lstrip("/"))
    except ValueError:
        return "the configured server"
    return f"{hosts}/{database}" if database else hosts


def _has_application_name(dsn: str) -> bool:
    try:
        return "application_name" in parse_qs(urlsplit(dsn).query)
    except ValueError:
        return False


def _is_broken_connection(exc: Exception) -> bool:
    """Whether ``exc`` means the connection it came from is unusable (server gone, socket
    error, protocol out of step), as opposed to a timeout that asyncpg cancels cleanly."""
    E = asyncpg.exceptions  # noqa: N806 (a module alias)
    if isinstance(exc, TimeoutError):
        return False
    if isinstance(exc, E.InterfaceError):
        return "clos" in str(exc)  # "connection is closed", "pool is closing", ...
    return isinstance(
        exc,
        OSError
        | E.PostgresConnectionError
        | E.AdminShutdownError
        | E.CrashShutdownError
        | E.CannotConnectNowError
        # A FATAL message that arrived while the connection sat idle (its backend was
        # terminated) leaves the protocol waiting for a reply that never comes.
        | E.InternalClientError,
    )


def _utc_in(value: datetime) -> datetime:
    """Check a datetime going into the database is timezone-aware; return it in UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetimes given to the store must be timezone-aware")
    return _as_utc(value)


def _utc_out(value: datetime) -> datetime:
    """Return a timestamptz read from the database as an aware UTC datetime."""
    if value.tzinfo is None:
        # asyncpg stores the aware datetime.min/max as -infinity/infinity and reads those
        # back as the naive datetime.min/max; they stand for exactly those instants in UTC.
        return value.replace(tzinfo=UTC)
    return _as_utc(value)


def _as_utc(value: datetime) -> datetime:
    # astimezone() shifts through local arithmetic that overflows at the edges of the
    # datetime range (0001-01-01 in UTC fails with "year 0 is out of range"); a value that
    # is already at offset zero only needs its tzinfo normalised.
    if value.utcoffset() == timedelta(0):
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _count(status: str) -> int:
    """Return the row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


def _checkpoint(row: asyncpg.Record) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, _utc_out)


def _pending(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, _utc_out)


def _decided(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, _utc_out, with_decision=True)


def _event(row: asyncpg.Record) -> InterruptEventRecord:
    return rows.event_from_row(row, _utc_out)


class _Sql:
    """Every statement of the store, with the quoted schema name filled in once."""

    def __init__(self, s: str) -> None:
        cp, pending, claims = f"{s}.checkpoints", f"{s}.pending_interrupts", f"{s}.interrupt_claims"
        idem, events = f"{s}.idempotency_results", f"{s}.interrupt_events"
        decisions = f"{s}.interrupt_decisions"
        self._decisions_table = decisions
        applied = f"{s}.applied_requests"
        cols, pcols = _CHECKPOINT_COLUMNS, _PENDING_COLUMNS

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
            INSERT INTO {cp} (
                namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id,
                chain_name, node_id, node_index, step_type, status, state_snapshot_json,
                node_input_json, node_output_json, iteration, iteration_counters_json,
                interrupt_reason, interrupt_context_json, agent_path, created_at
            )
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
                   $8::bigint, $9::text, $10::text, $11::text, $12::text, $13::text,
                   $14::bigint, $15::text, $16::text, $17::text, $18::text, $19::timestamptz
            WHERE $4::text IS NULL
               OR NOT EXISTS ({tombstone.format(ns="$1::text", rid="$4::text")})
            ON CONFLICT DO NOTHING
            RETURNING {cols}"""
        # Group commit: the rows of many put_checkpoint calls, one array per column (the
        # statement text never changes, so it stays prepared).
        self.insert_checkpoints = f"""
            INSERT INTO {cp} (
                namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id,
                chain_name, node_id, node_index, step_type, status, state_snapshot_json,
                node_input_json, node_output_json, iteration, iteration_counters_json,
                interrupt_reason, interrupt_context_json, agent_path, created_at
            )
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                                 $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],
                                 $11::text[], $12::text[], $13::text[], $14::bigint[],
                                 $15::text[], $16::text[], $17::text[], $18::text[],
                                 $19::timestamptz[])
                AS u (namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id,
                      chain_name, node_id, node_index, step_type, status, state_snapshot_json,
                      node_input_json, node_output_json, iteration, iteration_counters_json,
                      interrupt_reason, interrupt_context_json, agent_path, created_at)
            WHERE u.request_id IS NULL
               OR NOT EXISTS ({tombstone.format(ns="u.namespace", rid="u.request_id")})
            ON CONFLICT DO NOTHING
            RETURNING namespace, {cols}"""
        self.checkpoint_by_id = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND checkpoint_id = $2"
        )
        self.checkpoint_by_request_id = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND request_id = $2"
        )
        self.is_tombstone = tombstone.format(ns="$1", rid="$2")
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
        # Keyset listing (parameters: namespace, execution_id, bound, limit), and the same
        # listing of stored sizes only, read first so that only the rows that fit the byte
        # budget are loaded (see checkpointd.store.budget).
        self.list_ascending = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "AND sequence > $3 ORDER BY sequence LIMIT $4"
        )
        self.list_descending = (
            f"SELECT {cols} FROM {cp} WHERE namespace = $1 AND execution_id = $2 "
            "AND sequence < $3 ORDER BY sequence DESC LIMIT $4"
        )
        self.list_ascending_sizes = self.list_ascending.replace(cols, _CHECKPOINT_SIZE, 1)
        self.list_descending_sizes = self.list_descending.replace(cols, _CHECKPOINT_SIZE, 1)
        # The request ids of the deleted rows become tombstones in the same statement (C9).
        self.delete_checkpoints = f"""
            WITH gone AS (
                DELETE FROM {cp} WHERE namespace = $1 AND execution_id = $2
                RETURNING request_id
            ), kept AS (
                INSERT INTO {applied} (namespace, request_id, applied_at, kind)
                SELECT $1::text, request_id, $3::timestamptz, '{replies.DELETED_WRITE}' FROM gone
                WHERE request_id IS NOT NULL
                ON CONFLICT (namespace, request_id) DO NOTHING
            )
            SELECT count(*) FROM gone"""
        self.reply_of_request = (
            f"SELECT kind, reply_json FROM {applied} WHERE namespace = $1 AND request_id = $2"
        )
        # Parameters: namespace, request_id, applied_at, kind, reply_json.
        self.record_reply = f"""
            INSERT INTO {applied} (namespace, request_id, applied_at, kind, reply_json)
            VALUES ($1, $2, $3, $4, $5)
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
                RETURNING request_id
            ), kept AS (
                INSERT INTO {applied} (namespace, request_id, applied_at, kind)
                SELECT $1::text, request_id, $5::timestamptz, '{replies.DELETED_WRITE}' FROM gone
                WHERE request_id IS NOT NULL
                ON CONFLICT (namespace, request_id) DO NOTHING
            )
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted,
                   (SELECT max(created_at) FROM doomed) AS resume_at"""

        # --- pending interrupts and claims ---
        self.insert_pending = f"""
            INSERT INTO {pending} (
                namespace, execution_id, chain_name, node_id, reason, context_json,
                agent_path, created_at, checkpoint_id, sequence
            ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
            ON CONFLICT (namespace, execution_id) DO NOTHING
            RETURNING {pcols}"""
        self.pending_by_execution = (
            f"SELECT {pcols} FROM {pending} WHERE namespace = $1 AND execution_id = $2"
        )
        self.delete_pending = (
            f"DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2 RETURNING {pcols}"
        )
        # The claim (contract I3): one statement takes the row and files it under the token.
        # Concurrent DELETEs of one row serialize on its row lock; the losers re-check it
        # after the winner commits, find it gone, and return nothing.
        self.claim_with_token = f"""
            WITH taken AS (
                DELETE FROM {pending} WHERE namespace = $1 AND execution_id = $2
                RETURNING {pcols}
            ), kept AS (
                INSERT INTO {claims} (
                    namespace, execution_id, claim_token, chain_name, node_id, reason,
                    context_json, agent_path, created_at, checkpoint_id, sequence, claimed_at
                )
                SELECT $1, execution_id, $3::text, chain_name, node_id, reason, context_json,
                       agent_path, created_at, checkpoint_id, sequence, $4::timestamptz
                FROM taken
            )
            SELECT {pcols} FROM taken"""
        self.claim_by_token = (
            f"SELECT {pcols} FROM {claims} "
            "WHERE namespace = $1 AND execution_id = $2 AND claim_token = $3"
        )
        self.purge_claims = f"""
            WITH doomed AS (
                SELECT ctid FROM {claims} WHERE claimed_at < $1 LIMIT $2
            ), gone AS (
                DELETE FROM {claims}
                WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND claimed_at < $1
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted"""
        self.purge_applied_requests = f"""
            WITH doomed AS (
                SELECT ctid FROM {applied} WHERE applied_at < $1 LIMIT $2
            ), gone AS (
                DELETE FROM {applied}
                WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND applied_at < $1
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM doomed) AS candidates,
                   (SELECT count(*) FROM gone) AS deleted"""
        # The NOTIFY rides on the insert (one round trip); Postgres sends it at commit.
        self.insert_event = f"""
            WITH added AS (
                INSERT INTO {events} (
                    namespace, kind, execution_id, chain_name, node_id, reason, context_json,
                    agent_path, pending_created_at, checkpoint_id, sequence, decision_json
                ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $13)
                RETURNING cursor
            )
            SELECT pg_notify($12, '') FROM added"""

        # --- decisions (K1, K2) ---
        dcols = _DECISION_ROW_COLUMNS
        self.decision_of_pause = (
            f"SELECT {dcols} FROM {decisions} "
            "WHERE namespace = $1 AND execution_id = $2 AND checkpoint_id = $3"
        )
        self.decision_of_pause_locked = self.decision_of_pause + " FOR UPDATE"
        self.newest_decision_of_execution = (
            f"SELECT {dcols} FROM {decisions} WHERE namespace = $1 AND execution_id = $2 "
            "ORDER BY sequence DESC LIMIT 1"
        )
        self.decision_by_request_id = (
            f"SELECT {dcols} FROM {decisions} "
            "WHERE namespace = $1 AND request_id = $2 AND request_id <> ''"
        )
        self.pending_by_execution_locked = (
            f"SELECT {pcols} FROM {pending} WHERE namespace = $1 AND execution_id = $2 FOR UPDATE"
        )
        self.insert_decision = f"""
            INSERT INTO {decisions} (
                namespace, request_id, approved, metadata_json, decided_by, decision_reason,
                decided_at, decision_status, {pcols}
            ) VALUES ($1, $2, $3, $4, $5, $6, $7, 'decided',
                      $8, $9, $10, $11, $12, $13, $14, $15, $16)
            ON CONFLICT DO NOTHING
            RETURNING {dcols}"""
        self.take_lease = f"""
            UPDATE {decisions} SET decision_status = 'resuming', lease_token = $4,
                lease_expires_at = $5, attempts = attempts + $6
            WHERE namespace = $1 AND execution_id = $2 AND checkpoint_id = $3
            RETURNING {dcols}"""
        self.report_decision = f"""
            UPDATE {decisions} SET decision_status = $4, decision_error = $5, reported_at = $6
            WHERE namespace = $1 AND execution_id = $2 AND checkpoint_id = $3
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
            f"DELETE FROM {decisions} WHERE namespace = $1 AND execution_id = $2"
        )
        purged = f"{s}.interrupt_events_purged"
        self.event_bounds = (
            "SELECT purged_through, greatest(purged_through, "
            f"coalesce((SELECT max(cursor) FROM {events}), 0)) AS latest "
            f"FROM {purged} WHERE id = 1"
        )
        self.events = (
            f"SELECT {_EVENT_COLUMNS} FROM {events} "
            "WHERE cursor > $1 AND cursor <= $2 ORDER BY cursor LIMIT $3"
        )
        self.events_of_namespace = (
            f"SELECT {_EVENT_COLUMNS} FROM {events} "
            "WHERE namespace = $4 AND cursor > $1 AND cursor <= $2 ORDER BY cursor LIMIT $3"
        )
        self.events_head = f"SELECT cursor, event_at FROM {events} ORDER BY cursor LIMIT $1"
        self.purge_events_through = f"DELETE FROM {events} WHERE cursor <= $1"
        self.raise_purged_through = (
            f"UPDATE {purged} SET purged_through = greatest(purged_through, $1) WHERE id = 1"
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
        # request id.
        self.put_idempotent_once = f"""
            WITH fresh AS (
                INSERT INTO {applied} (namespace, request_id, applied_at)
                VALUES ($1, $6, $5)
                ON CONFLICT (namespace, request_id) DO NOTHING
                RETURNING 1
            )
            INSERT INTO {idem} (namespace, execution_id, key, result_json, created_at)
            SELECT $1::text, $2::text, $3::text, $4::text, $5::timestamptz
            WHERE EXISTS (SELECT 1 FROM fresh)
            ON CONFLICT (namespace, execution_id, key)
            DO UPDATE SET result_json = EXCLUDED.result_json, created_at = EXCLUDED.created_at"""
        # A group: rows with an empty request id are upserted; the others only when their
        # request id was recorded by this statement (the caller sends each id once).
        self.put_idempotents = f"""
            WITH u AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
                                     $5::timestamptz[], $6::text[])
                    AS u (namespace, execution_id, key, result_json, created_at, request_id)
            ), fresh AS (
                INSERT INTO {applied} (namespace, request_id, applied_at)
                SELECT namespace, request_id, created_at FROM u WHERE request_id <> ''
                ON CONFLICT (namespace, request_id) DO NOTHING
                RETURNING namespace, request_id
            )
            INSERT INTO {idem} (namespace, execution_id, key, result_json, created_at)
            SELECT u.namespace, u.execution_id, u.key, u.result_json, u.created_at FROM u
            WHERE u.request_id = '' OR EXISTS (
                SELECT 1 FROM fresh AS f
                WHERE f.namespace = u.namespace AND f.request_id = u.request_id
            )
            ON CONFLICT (namespace, execution_id, key)
            DO UPDATE SET result_json = EXCLUDED.result_json, created_at = EXCLUDED.created_at"""
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

        self.pending_table = pending
        # Each pending row with the decision on its pause, when there is one (K1).
        self.decided_pending_columns = ", ".join(
            [f"p.{c}" for c in _PENDING_COLUMNS.split(", ")]
            + [f"d.{c}" for c in rows.DECISION_COLUMNS]
        )
        self.decision_join = (
            f"LEFT JOIN {decisions} AS d ON d.namespace = p.namespace "
            "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id"
        )
        self.events_table = events
        self._list_pending: dict[tuple[bool, bool, bool, bool], str] = {}
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

    def list_pending(
        self, chain_name: bool, reason: bool, agent_path_prefix: bool, *, sizes: bool = False
    ) -> str:
        """The pending listing with only the set filters, so each of the eight variants gets
        its own plan (a catch-all ``$n IS NULL OR ...`` could not use the filter indexes in
        a generic plan). Parameters: namespace, before_sequence, limit, then the set filters
        in this order. With ``sizes``: the sequence and stored size of each row instead."""
        key = (chain_name, reason, agent_path_prefix, sizes)
        query = self._list_pending.get(key)
        if query is None:
            where = ["p.namespace = $1", "p.sequence < $2"]
            for column, is_set in (("chain_name", chain_name), ("reason", reason)):
                if is_set:
                    where.append(f"p.{column} = ${len(where) + 2}")
            if agent_path_prefix:
                where.append(f"starts_with(p.agent_path, ${len(where) + 2})")
            if sizes:
                query = (
                    f"SELECT {_PENDING_SIZE} FROM {self.pending_table} AS p "
                    f"WHERE {' AND '.join(where)} ORDER BY p.sequence DESC LIMIT $3"
                )
            else:
                query = (
                    f"SELECT {self.decided_pending_columns} FROM {self.pending_table} AS p "
                    f"{self.decision_join} "
                    f"WHERE {' AND '.join(where)} ORDER BY p.sequence DESC LIMIT $3"
                )
            self._list_pending[key] = query
        return query


class PostgresStore:
    """A :class:`~checkpointd.store.base.Store` on PostgreSQL through an asyncpg pool.

    ``timeout`` (seconds) bounds connecting, acquiring a pooled connection and every
    statement; migrations get at least a minute. Call :meth:`open` before use and
    :meth:`close` afterwards.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "checkpointd",
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        timeout: float = 10.0,
        pooled: bool = False,
        statement_cache_size: int | None = None,
        listen_dsn: str | None = None,
        poll_interval: float = _POOLED_POLL_SECONDS,
    ) -> None:
        self._quoted_schema = _validate_schema(schema)
        if statement_cache_size is not None and statement_cache_size < 0:
            raise ValueError(
                f"statement_cache_size must not be negative, got {statement_cache_size}"
            )
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        if min_pool_size < 0 or max_pool_size < 1 or min_pool_size > max_pool_size:
            raise ValueError(
                f"invalid pool sizes min={min_pool_size}, max={max_pool_size}: "
                "need 0 <= min <= max and max >= 1"
            )
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._dsn = dsn
        self._schema = schema
        self._min_pool_size = min_pool_size
        self._max_pool_size = max_pool_size
        self._timeout = timeout
        self._target = _describe_target(dsn)
        self._pooled = pooled
        # A transaction pooler may hand each transaction another server session, where a
        # statement prepared by the previous one does not exist: no cache unless asked for.
        self._statement_cache_size = (
            statement_cache_size
            if statement_cache_size is not None
            else (0 if pooled else _DEFAULT_STATEMENT_CACHE)
        )
        # LISTEN needs a session of its own: the store URL's unless a pooler is in the way.
        self._listen_dsn = listen_dsn or (None if pooled else dsn)
        self._poll_interval = poll_interval
        self._secrets = sorted(
            set(dsn_secrets(dsn)) | set(dsn_secrets(listen_dsn or "")), key=len, reverse=True
        )
        self._migration_lock = _lock_key("migrate", schema)
        self._event_lock = _lock_key("events", schema)
        self._channel = _notify_channel(schema)
        self._sql = _Sql(self._quoted_schema)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        # Keys: (namespace, checkpoint_id) and (namespace, execution_id, key), so no two rows
        # of one statement collide.
        self._checkpoint_group: GroupCommit[tuple[object, ...], CheckpointRecord | None] = (
            GroupCommit(
                self._insert_checkpoints,
                max_batch=_GROUP_COMMIT_MAX,
                key=lambda args: (args[0], args[2]),
            )
        )
        self._idempotent_group: GroupCommit[tuple[object, ...], None] = GroupCommit(
            self._put_idempotents,
            max_batch=_GROUP_COMMIT_MAX,
            key=lambda args: (args[0], args[1], args[2]),
        )

    @property
    def schema(self) -> str:
        """The schema holding this store's tables (unquoted)."""
        return self._schema

    # --- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and apply the schema migrations (idempotent, safe when replicas race)."""
        if self._pool is not None:
            return
        migrations = _load_migrations()
        server_settings = (
            {}
            if _has_application_name(self._dsn)
            else {
                # Names the store's sessions in pg_stat_activity (truncated by Postgres to 63).
                "application_name": f"checkpointd:{self._schema}",
            }
        )
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_pool_size,
                max_size=self._max_pool_size,
                timeout=self._timeout,
                command_timeout=self._timeout,
                server_settings=server_settings,
                statement_cache_size=self._statement_cache_size,
                # Behind a transaction pooler the session is not ours: asyncpg's reset (a
                # query on every release) would only cost a round trip.
                reset=_keep_session if self._pooled else None,
            )
        except Exception as exc:
            raise StoreUnavailable(
                f"cannot connect to Postgres at {self._target}: {self._describe(exc)}"
            ) from exc
        self._pool = pool
        try:
            await self._migrate(migrations)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Release every connection, forcibly after ``timeout``. Safe to call twice."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), timeout=self._timeout)
        except asyncio.CancelledError:
            pool.terminate()
            raise
        except Exception:  # a connection would not close in time: cut them all
            pool.terminate()

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database answers a trivial query."""
        async with self._connection() as conn:
            await conn.fetchval("SELECT 1")

    def pool_state(self) -> PoolState | None:
        """The asyncpg pool's size, idle connections and maximum; None while closed."""
        pool = self._pool
        if pool is None:
            return None
        return PoolState(
            size=pool.get_size(), idle=pool.get_idle_size(), max_size=pool.get_max_size()
        )

    async def count_pending_by_namespace(self) -> dict[str, int]:
        """Return the number of pending interrupts in each namespace that has any."""
        async with self._connection() as conn:
            rows = await conn.fetch(self._sql.count_pending)
        return {str(row[0]): int(row[1]) for row in rows}

    async def _migrate(self, migrations: Sequence[_Migration]) -> None:
        timeout = max(self._timeout, _MIN_MIGRATION_TIMEOUT)
        table = self._sql.migrations_table
        async with self._connection() as conn, conn.transaction():
            # Replicas starting together queue here; each then sees what the previous applied.
            # The lock is transaction-level (released by the commit), never a session lock,
            # so it holds through a transaction pooler, which keeps one transaction on one
            # server session but may move the next one elsewhere.
            await conn.execute(self._sql.advisory_lock, self._migration_lock, timeout=timeout)
            # Look before creating: CREATE ... IF NOT EXISTS needs the CREATE privilege even
            # when the object exists, and a runtime role may lack it once the schema is set up.
            if not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", self._schema
            ):
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._quoted_schema}")
            if await conn.fetchval("SELECT to_regclass($1)", table) is None:
                await conn.execute(
                    f"""CREATE TABLE IF NOT EXISTS {table} (
                        version    INTEGER     PRIMARY KEY,
                        name       TEXT        NOT NULL,
                        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                    )"""
                )
            applied = {row["version"] for row in await conn.fetch(f"SELECT version FROM {table}")}
            for migration in migrations:
                if migration.version in applied:
                    continue
                script = migration.sql.replace("{schema}", self._quoted_schema)
                await conn.execute(script, timeout=timeout)
                await conn.execute(
                    f"INSERT INTO {table} (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )

    # --- checkpoints ---------------------------------------------------------------------

    async def put_checkpoint(
        self, namespace: str, request_id: str, checkpoint: CheckpointRecord
    ) -> CheckpointRecord:
        """Insert one checkpoint and return it with its sequence (see the Store protocol).

        The row goes into the next group-commit statement; when its id is taken, the
        single-row path below tells a retry (the stored row) from a duplicate. Each is an
        ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit: it cannot fail on a duplicate,
        so no transaction is ever left open or aborted, and an acknowledged row is committed.
        """
        args = self._checkpoint_args(namespace, request_id, checkpoint)
        stored = await self._checkpoint_group.submit(args)
        if stored is not None:
            return stored
        async with self._connection() as conn:
            for _ in range(_RACE_ATTEMPTS):
                row = await conn.fetchrow(self._sql.insert_checkpoint, *args)
                if row is not None:
                    return _checkpoint(row)
                stored = await self._existing_checkpoint(conn, namespace, request_id, checkpoint)
                if stored is not None:
                    return stored
        raise StoreUnavailable("checkpoint write kept racing with a delete; retry")

    async def get_checkpoint(
        self, namespace: str, execution_id: str, checkpoint_id: str
    ) -> CheckpointRecord | None:
        """Return the checkpoint with this id if it belongs to this execution."""
        async with self._connection() as conn:
            row = await conn.fetchrow(
                self._sql.get_checkpoint, namespace, checkpoint_id, execution_id
            )
        return None if row is None else _checkpoint(row)

    async def get_latest_checkpoint(
        self, namespace: str, execution_id: str, *, skip_run_end: bool = False
    ) -> CheckpointRecord | None:
        """Return the execution's row with the highest sequence (optionally not a run_end)."""
        async with self._connection() as conn:
            if skip_run_end:
                row = await conn.fetchrow(
                    self._sql.latest_skip_run_end, namespace, execution_id, RUN_END
                )
            else:
                row = await conn.fetchrow(self._sql.latest, namespace, execution_id)
        return None if row is None else _checkpoint(row)

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
        """Up to ``limit`` rows of the execution ordered by sequence (keyset paging), within
        ``max_bytes``: sizes first, then only the rows that fit, in one REPEATABLE READ
        transaction (so the second read returns exactly the rows the first one sized)."""
        if limit <= 0:
            return Page()
        if descending:
            sizes_query, query = self._sql.list_descending_sizes, self._sql.list_descending
            bound = _MAX_BIGINT if after_sequence is None else after_sequence
        else:
            sizes_query, query = self._sql.list_ascending_sizes, self._sql.list_ascending
            bound = 0 if after_sequence is None else after_sequence
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            sizes = await conn.fetch(sizes_query, namespace, execution_id, bound, limit + 1)
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            found = await conn.fetch(query, namespace, execution_id, bound, taken)
        return Page((_checkpoint(row) for row in found), more=len(sizes) > taken)

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
    ) -> DeleteExecutionResult:
        """Delete the execution's checkpoints, pending interrupt and idempotency results in one
        transaction; write a ``removed`` event when a pending interrupt went away.

        The request ids of the deleted checkpoints become tombstones in the same statement.
        A non-empty ``request_id`` is recorded first: a concurrent call with the same id
        waits on that row and, once this one commits, returns its reply (C9).
        """
        applied_at = _utc_in(datetime.now(UTC) if now is None else now)
        async with self._connection() as conn, conn.transaction():
            record = bool(request_id)
            if request_id and not await conn.fetchval(
                self._sql.record_reply,
                namespace,
                request_id,
                applied_at,
                replies.DELETE_EXECUTION,
                None,
            ):
                row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
                if row is not None and row["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(row["reply_json"])
                record = False  # an id already used by another kind of call is kept
            checkpoints = int(
                await conn.fetchval(
                    self._sql.delete_checkpoints, namespace, execution_id, applied_at
                )
            )
            removed = await conn.fetchrow(self._sql.delete_pending, namespace, execution_id)
            results = _count(
                await conn.execute(self._sql.delete_idempotent, namespace, execution_id)
            )
            await conn.execute(self._sql.delete_decisions, namespace, execution_id)
            result = DeleteExecutionResult(
                checkpoints_deleted=checkpoints,
                pending_interrupt_deleted=removed is not None,
                idempotency_results_deleted=results,
            )
            if record:
                await conn.execute(
                    self._sql.set_reply, namespace, request_id, replies.encode(result)
                )
            if removed is not None:
                await self._write_event(conn, namespace, EventKind.REMOVED, _pending(removed))
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
        """Delete completed/failed checkpoints and idempotency results older than ``cutoff``.

        Each batch is one statement (its own transaction) of at most ``batch_size`` rows, so
        other callers never wait long; batches repeat until nothing old is left. Each batch
        records the request ids of the checkpoints it deleted as tombstones; the reply is
        recorded under ``request_id`` once the prune is complete, and a retry returns it (C9).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        cutoff = _utc_in(cutoff)
        applied_at = _utc_in(datetime.now(UTC) if now is None else now)
        if request_id:
            earlier = await self._prune_reply(namespace, request_id)
            if earlier is not None:
                return earlier
        checkpoints = await self._prune_loop(
            self._sql.prune_checkpoints, namespace, cutoff, batch_size, applied_at
        )
        results = await self._prune_loop(self._sql.prune_idempotent, namespace, cutoff, batch_size)
        result = PruneResult(checkpoints_deleted=checkpoints, idempotency_results_deleted=results)
        if request_id:
            async with self._connection() as conn:
                recorded = await conn.fetchval(
                    self._sql.record_reply,
                    namespace,
                    request_id,
                    applied_at,
                    replies.PRUNE,
                    replies.encode(result),
                )
            if not recorded:
                # A concurrent call with this id finished first: answer like it did.
                return await self._prune_reply(namespace, request_id) or result
        return result

    async def _prune_reply(self, namespace: str, request_id: str) -> PruneResult | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
        if row is None or row["kind"] != replies.PRUNE:
            return None
        return replies.decode_prune(row["reply_json"])

    async def _prune_loop(
        self, query: str, namespace: str, cutoff: datetime, batch_size: int, *extra: object
    ) -> int:
        deleted = 0
        resume_at = _BEGINNING_OF_TIME
        while True:
            async with self._connection() as conn:
                row = await conn.fetchrow(query, namespace, resume_at, cutoff, batch_size, *extra)
            if row is None:  # cannot happen: an aggregate query returns one row
                raise StoreError("prune batch returned no counts")
            deleted += int(row["deleted"])
            if row["candidates"] < batch_size:
                return deleted
            resume_at = _utc_out(row["resume_at"])

    # --- interrupts ----------------------------------------------------------------------

    async def record_interrupt(
        self, namespace: str, request_id: str, checkpoint: CheckpointRecord, pending: PendingRecord
    ) -> RecordInterruptResult:
        """Insert the interrupted checkpoint and, unless the execution already has one, the
        pending row plus an ``added`` event, all in one transaction (contracts I1, I2)."""
        if pending.execution_id != checkpoint.execution_id:
            raise ValueError("the pending row and its checkpoint name different executions")
        args = self._checkpoint_args(namespace, request_id, checkpoint)
        async with self._connection() as conn, conn.transaction():
            stored: CheckpointRecord | None = None
            for _ in range(_RACE_ATTEMPTS):
                row = await conn.fetchrow(self._sql.insert_checkpoint, *args)
                if row is not None:
                    stored = _checkpoint(row)
                    break
                retried = await self._existing_checkpoint(conn, namespace, request_id, checkpoint)
                if retried is not None:
                    return await self._retried_interrupt(conn, namespace, retried, pending)
            if stored is None:
                raise StoreUnavailable("interrupt write kept racing with a delete; retry")

            for _ in range(_RACE_ATTEMPTS):
                row = await conn.fetchrow(
                    self._sql.insert_pending,
                    namespace,
                    pending.execution_id,
                    pending.chain_name,
                    pending.node_id,
                    pending.reason,
                    pending.context_json,
                    pending.agent_path,
                    _utc_in(pending.created_at),
                    stored.checkpoint_id,
                    stored.sequence,
                )
                if row is not None:
                    added = _pending(row)
                    await self._write_event(conn, namespace, EventKind.ADDED, added)
                    return RecordInterruptResult(stored, added, pending_created=True)
                # I2: the execution already has a pending row; it stays, the checkpoint too.
                row = await conn.fetchrow(
                    self._sql.pending_by_execution, namespace, pending.execution_id
                )
                if row is not None:
                    return RecordInterruptResult(stored, _pending(row), pending_created=False)
                # It was claimed between our insert and our read: insert again.
        raise StoreUnavailable("interrupt write kept racing with claims; retry")

    async def _retried_interrupt(
        self, conn: _Conn, namespace: str, stored: CheckpointRecord, pending: PendingRecord
    ) -> RecordInterruptResult:
        """Answer a retried record_interrupt: the stored checkpoint and the pending row now in
        place. When none is (it was claimed since), the row the first call wrote is rebuilt
        from the request."""
        row = await conn.fetchrow(self._sql.pending_by_execution, namespace, stored.execution_id)
        if row is not None:
            in_place = _pending(row)
            created = in_place.checkpoint_id == stored.checkpoint_id
            return RecordInterruptResult(stored, in_place, pending_created=created)
        rebuilt = replace(
            pending,
            created_at=_utc_in(pending.created_at),
            checkpoint_id=stored.checkpoint_id,
            sequence=stored.sequence,
        )
        return RecordInterruptResult(stored, rebuilt, pending_created=True)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Atomically take the execution's pending row; exactly one caller gets it (I3).

        A non-empty ``claim_token`` files the claimed row under that token, so a retry with
        the same token gets the same row back until :meth:`purge_claims` forgets it.
        """
        now = _utc_in(now)
        async with self._connection() as conn:
            if claim_token:
                row = await conn.fetchrow(
                    self._sql.claim_by_token, namespace, execution_id, claim_token
                )
                if row is not None:
                    return _pending(row)
            try:
                async with conn.transaction():
                    if claim_token:
                        row = await conn.fetchrow(
                            self._sql.claim_with_token, namespace, execution_id, claim_token, now
                        )
                    else:
                        row = await conn.fetchrow(self._sql.delete_pending, namespace, execution_id)
                    if row is not None:
                        claimed = _pending(row)
                        await self._write_event(conn, namespace, EventKind.CLAIMED, claimed)
                        return claimed
            except asyncpg.exceptions.UniqueViolationError:
                # This token already holds an earlier claim of this execution, filed by a
                # concurrent retry after our first look: everything rolled back, and the
                # look below returns that claim.
                pass
            if not claim_token:
                return None
            row = await conn.fetchrow(
                self._sql.claim_by_token, namespace, execution_id, claim_token
            )
        return None if row is None else _pending(row)

    # --- decisions -----------------------------------------------------------------------

    async def submit_decision(
        self, namespace: str, request_id: str, execution_id: str, decision: DecisionRecord
    ) -> DecisionChange:
        """Store the one decision on the execution's pending interrupt, with a ``decided``
        event, in one transaction (K1). Concurrent deciders queue on the pending row's lock;
        each later one then finds the winner."""
        async with self._connection() as conn, conn.transaction():
            if request_id:
                row = await conn.fetchrow(self._sql.decision_by_request_id, namespace, request_id)
                if row is not None:
                    return DecisionChange(DecisionOutcome.REPEATED, _decided(row))
            row = await conn.fetchrow(
                self._sql.pending_by_execution_locked, namespace, execution_id
            )
            if row is None:
                # Resumed since (its pending row claimed): the run's last decision stands.
                last = await conn.fetchrow(
                    self._sql.newest_decision_of_execution, namespace, execution_id
                )
                if last is not None:
                    return DecisionChange(DecisionOutcome.CONFLICT, _decided(last))
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            pending = _pending(row)
            pause = (namespace, execution_id, pending.checkpoint_id)
            winner = await conn.fetchrow(self._sql.decision_of_pause, *pause)
            if winner is not None:
                same = bool(request_id) and winner["request_id"] == request_id
                outcome = DecisionOutcome.REPEATED if same else DecisionOutcome.CONFLICT
                return DecisionChange(outcome, _decided(winner))
            row = await conn.fetchrow(
                self._sql.insert_decision,
                namespace,
                request_id,
                decision.approved,
                decision.metadata_json,
                decision.decided_by,
                decision.reason,
                _utc_in(decision.decided_at),
                pending.execution_id,
                pending.chain_name,
                pending.node_id,
                pending.reason,
                pending.context_json,
                pending.agent_path,
                _utc_in(pending.created_at),
                pending.checkpoint_id,
                pending.sequence,
            )
            if row is None:
                # Only a concurrent call with this request id, on another pause, can get here.
                raise StoreUnavailable("the decision raced with another; retry")
            decided = _decided(row)
            await self._write_event(conn, namespace, EventKind.DECIDED, decided)
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
        """Take or renew the lease on a pause's decision (K2); see the Store protocol."""
        pause = (namespace, execution_id, checkpoint_id)
        async with self._connection() as conn, conn.transaction():
            row = await conn.fetchrow(self._sql.decision_of_pause_locked, *pause)
            if row is None:
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            current = _decided(row)
            decision = current.decision
            assert decision is not None
            if decision.status.is_final:
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            renew = decision.status is DecisionStatus.RESUMING and row["lease_token"] == lease_token
            expires = decision.lease_expires_at
            if (
                decision.status is DecisionStatus.RESUMING
                and not renew
                and expires is not None
                and expires > now
            ):
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            row = await conn.fetchrow(
                self._sql.take_lease, *pause, lease_token, _utc_in(lease_until), 0 if renew else 1
            )
            assert row is not None  # the row is locked
            return DecisionChange(DecisionOutcome.APPLIED, _decided(row))

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
        """Record how the lease holder carried the decision out, with its event (K2); see
        the Store protocol."""
        pause = (namespace, execution_id, checkpoint_id)
        async with self._connection() as conn, conn.transaction():
            row = await conn.fetchrow(self._sql.decision_of_pause_locked, *pause)
            if row is None:
                return DecisionChange(DecisionOutcome.NOT_FOUND, None)
            current = _decided(row)
            decision = current.decision
            assert decision is not None
            if row["lease_token"] != lease_token or decision.status is DecisionStatus.DECIDED:
                return DecisionChange(DecisionOutcome.CONFLICT, current)
            if decision.status.is_final:
                outcome = (
                    DecisionOutcome.REPEATED
                    if decision.status is status
                    else DecisionOutcome.CONFLICT
                )
                return DecisionChange(outcome, current)
            row = await conn.fetchrow(
                self._sql.report_decision, *pause, status.value, error, _utc_in(now)
            )
            assert row is not None  # the row is locked
            reported = _decided(row)
            kind = (
                EventKind.RESUMED if status is DecisionStatus.RESUMED else EventKind.RESUME_FAILED
            )
            await self._write_event(conn, namespace, kind, reported)
            return DecisionChange(DecisionOutcome.APPLIED, reported)

    async def list_decisions(
        self, namespace: str, *, after_sequence: int, limit: int, open_only: bool
    ) -> list[PendingRecord]:
        """Decided pauses after ``after_sequence``, oldest first (open ones only when asked)."""
        query = self._sql.list_open_decisions if open_only else self._sql.list_decisions
        async with self._connection() as conn:
            found = await conn.fetch(query, namespace, after_sequence, limit)
        return [_decided(row) for row in found]

    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims older than the retention time, in batches; return how many went."""
        claimed_before = _utc_in(claimed_before)
        purged = 0
        while True:
            async with self._connection() as conn:
                row = await conn.fetchrow(self._sql.purge_claims, claimed_before, _PURGE_BATCH)
            if row is None:  # cannot happen: an aggregate query returns one row
                raise StoreError("claim purge returned no counts")
            purged += int(row["deleted"])
            if row["candidates"] < _PURGE_BATCH:
                return purged

    async def purge_applied_requests(self, applied_before: datetime) -> int:
        """Forget the request ids of idempotency puts applied before ``applied_before``, in
        batches; return how many went."""
        applied_before = _utc_in(applied_before)
        purged = 0
        while True:
            async with self._connection() as conn:
                row = await conn.fetchrow(
                    self._sql.purge_applied_requests, applied_before, _PURGE_BATCH
                )
            if row is None:  # cannot happen: an aggregate query returns one row
                raise StoreError("applied request purge returned no counts")
            purged += int(row["deleted"])
            if row["candidates"] < _PURGE_BATCH:
                return purged

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        """Up to ``limit`` pending rows with sequence < ``before_sequence``, newest first,
        matching every set filter (the agent_path filter is a plain prefix match; an empty
        prefix matches everything), within ``max_bytes``: sizes first, then only the rows
        that fit, in one REPEATABLE READ transaction."""
        if limit <= 0:
            return Page()
        prefix = filters.agent_path_prefix or None
        shape = (filters.chain_name is not None, filters.reason is not None, prefix is not None)
        bound = _MAX_BIGINT if before_sequence is None else before_sequence
        set_filters = [f for f in (filters.chain_name, filters.reason, prefix) if f is not None]
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            sizes = await conn.fetch(
                self._sql.list_pending(*shape, sizes=True),
                namespace,
                bound,
                limit + 1,
                *set_filters,
            )
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            found = await conn.fetch(
                self._sql.list_pending(*shape), namespace, bound, taken, *set_filters
            )
        return Page((_decided(row) for row in found), more=len(sizes) > taken)

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
        """Insert or replace the cached result, with created_at = ``now`` (contract D1), in
        the next group-commit statement; a retry of a recorded ``request_id`` writes
        nothing."""
        await self._idempotent_group.submit(
            (namespace, execution_id, key, result_json, _utc_in(now), request_id)
        )

    async def _insert_checkpoints(
        self, batch: list[tuple[object, ...]]
    ) -> list[CheckpointRecord | None]:
        """Write a group of checkpoint rows in one statement; None for a row whose id was
        already taken (nothing of it was written). A group of one uses the one-row INSERT."""
        if len(batch) == 1:
            async with self._connection() as conn:
                row = await conn.fetchrow(self._sql.insert_checkpoint, *batch[0])
            return [None if row is None else _checkpoint(row)]
        columns = [list(column) for column in zip(*batch, strict=True)]
        async with self._connection() as conn:
            rows = await conn.fetch(self._sql.insert_checkpoints, *columns)
        written = {(row["namespace"], row["checkpoint_id"]): _checkpoint(row) for row in rows}
        return [written.get((args[0], args[2])) for args in batch]

    async def _put_idempotents(self, batch: list[tuple[object, ...]]) -> list[None]:
        """Upsert a group of idempotency results in one statement (one row: the one-row
        upsert). A later row of the group with the request id of an earlier one is a retry
        of it and is left out."""
        rows: list[tuple[object, ...]] = []
        seen: set[tuple[object, object]] = set()
        for args in batch:
            request = (args[0], args[5])
            if args[5]:
                if request in seen:
                    continue
                seen.add(request)
            rows.append(args)
        async with self._connection() as conn:
            if len(rows) > 1:
                columns = [list(column) for column in zip(*rows, strict=True)]
                await conn.execute(self._sql.put_idempotents, *columns)
            elif rows[0][5]:
                await conn.execute(self._sql.put_idempotent_once, *rows[0])
            else:
                await conn.execute(self._sql.put_idempotent, *rows[0][:5])
        return [None] * len(batch)

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        async with self._connection() as conn:
            value: str | None = await conn.fetchval(
                self._sql.get_idempotent, namespace, execution_id, key
            )
        return value

    # --- helpers -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Conn]:
        """Lend a pooled connection; turn driver failures into store errors."""
        pool = self._pool
        if pool is None:
            raise StoreUnavailable("the Postgres store is not open")
        try:
            async with pool.acquire(timeout=self._timeout) as conn:
                try:
                    yield conn
                except Exception as exc:
                    if _is_broken_connection(exc):
                        # Whatever broke this connection (a server restart, a failover, an
                        # administrator) has most likely broken its idle siblings too, and
                        # asyncpg may not have noticed yet: replace them all on their next
                        # acquire, so an outage costs one failed call rather than one per
                        # pooled connection.
                        with contextlib.suppress(asyncpg.exceptions.InterfaceError):
                            conn.terminate()  # unless asyncpg already took it back
                        await pool.expire_connections()
                    raise
        except StoreError:
            raise
        except Exception as exc:
            translated = self._translate(exc)
            if translated is None:
                raise
            raise translated from exc

    def _translate(self, exc: Exception) -> StoreError | None:
        """Map a driver or socket error to a store error whose message has no SQL or secret;
        None for errors that are not the database's (bugs, bad arguments)."""
        E = asyncpg.exceptions  # noqa: N806 (a module alias)
        if isinstance(exc, TimeoutError | E.QueryCanceledError):
            return StoreUnavailable(f"Postgres did not answer within {self._timeout:g}s")
        if isinstance(
            exc,
            OSError
            | E.PostgresConnectionError
            | E.OperatorInterventionError  # admin shutdown, crash recovery, cannot connect now
            | E.InsufficientResourcesError,  # too many connections, disk full, out of memory
        ):
            return StoreUnavailable(f"Postgres is unavailable: {self._describe(exc)}")
        if isinstance(exc, E.TransactionRollbackError):  # serialization failure, deadlock
            return StoreUnavailable(
                f"Postgres aborted a conflicting transaction: {self._describe(exc)}"
            )
        if isinstance(exc, E.InternalClientError):
            return StoreUnavailable(
                f"Postgres is unavailable: the connection broke ({type(exc).__name__})"
            )
        if _is_broken_connection(exc):
            return StoreUnavailable(f"Postgres is unavailable: {self._describe(exc)}")
        if isinstance(exc, E.PostgresError):
            return StoreError(f"Postgres error {exc.sqlstate} ({type(exc).__name__})")
        if isinstance(exc, E.InterfaceError):
            return StoreError(f"Postgres client error ({type(exc).__name__})")
        return None

    def _describe(self, exc: BaseException) -> str:
        """Return ``Type: first line of message``, shortened and without the password."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if len(text) > 200:
            text = text[:197] + "..."
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

    @staticmethod
    def _checkpoint_args(
        namespace: str, request_id: str, cp: CheckpointRecord
    ) -> tuple[object, ...]:
        return (
            namespace,
            cp.execution_id,
            cp.checkpoint_id,
            request_id or None,
            cp.parent_checkpoint_id,
            cp.chain_name,
            cp.node_id,
            cp.node_index,
            cp.step_type,
            str(cp.status),
            cp.state_snapshot_json,
            cp.node_input_json,
            cp.node_output_json,
            cp.iteration,
            cp.iteration_counters_json,
            cp.interrupt_reason,
            cp.interrupt_context_json,
            cp.agent_path,
            _utc_in(cp.created_at),
        )

    async def _existing_checkpoint(
        self, conn: _Conn, namespace: str, request_id: str, checkpoint: CheckpointRecord
    ) -> CheckpointRecord | None:
        """After an insert wrote nothing: the stored row when this is a retry of the call that
        wrote it (found by request id, whatever its checkpoint id);
        :class:`RequestAppliedThenDeleted` when that row was deleted since;
        :class:`CheckpointExists` when another request wrote the checkpoint id; None when the
        conflicting row is gone again (the caller inserts once more)."""
        if request_id:
            row = await conn.fetchrow(self._sql.checkpoint_by_request_id, namespace, request_id)
            if row is not None:
                return _checkpoint(row)
            if await conn.fetchval(self._sql.is_tombstone, namespace, request_id):
                raise RequestAppliedThenDeleted(request_id)
        row = await conn.fetchrow(self._sql.checkpoint_by_id, namespace, checkpoint.checkpoint_id)
        if row is None:
            return None
        raise CheckpointExists(checkpoint.checkpoint_id)

    async def _write_event(
        self, conn: _Conn, namespace: str, kind: EventKind, pending: PendingRecord
    ) -> None:
        """Append an outbox event; must be the last statement of the caller's transaction.

        The advisory lock is held until commit, so events commit in cursor order (see the
        module docstring). Taking it last means its holder never waits for anything else,
        so it cannot deadlock with the row locks other writers hold.
        """
        await conn.execute(self._sql.advisory_lock, self._event_lock)
        await conn.execute(
            self._sql.insert_event,
            namespace,
            kind.value,
            pending.execution_id,
            pending.chain_name,
            pending.node_id,
            pending.reason,
            pending.context_json,
            pending.agent_path,
            pending.created_at,
            pending.checkpoint_id,
            pending.sequence,
            self._channel,
            None if pending.decision is None else rows.decision_to_json(pending.decision),
        )

    # --- interrupt events ----------------------------------------------------------------

    async def _event_bounds(self, conn: _Conn) -> tuple[int, int]:
        row = await conn.fetchrow(self._sql.event_bounds)
        if row is None:  # cannot happen: migration 2 writes the row
            raise StoreError("the interrupt_events_purged row is missing")
        return int(row["purged_through"]), int(row["latest"])

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
        """A page of the pending set as it was at ``as_of_cursor``, newest first, in one
        REPEATABLE READ transaction: the rows pending now that were not added after that
        cursor, plus the rows claimed or removed after it, rebuilt from their events (which
        carry the whole row). Events commit in cursor order, so "added after the cursor" is
        exactly "its ``added`` event has a higher cursor"."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        where, params = _pending_filters(filters)
        high = _MAX_BIGINT if before_sequence is None else before_sequence
        after = as_of_cursor
        events = self._sql.events_table
        added_after = (
            f" AND NOT EXISTS (SELECT 1 FROM {events} AS a WHERE a.namespace = p.namespace "
            "AND a.cursor > ? AND a.kind = 'added' AND a.sequence = p.sequence)"
        )

        def pending_sql(columns: str) -> str:
            return _numbered(
                f"SELECT {columns} FROM {self._sql.pending_table} AS p "
                f"WHERE p.namespace = ? AND p.sequence < ? AND p.sequence > ?{where}{added_after} "
                "ORDER BY p.sequence DESC LIMIT ?"
            )

        def decided_pending_sql() -> str:
            # The rows pending now carry the decision on their pause, as a listing does (K1).
            return _numbered(
                f"SELECT {self._sql.decided_pending_columns} FROM {self._sql.pending_table} AS p "
                f"{self._sql.decision_join} "
                f"WHERE p.namespace = ? AND p.sequence < ? AND p.sequence > ?{where}{added_after} "
                "ORDER BY p.sequence DESC LIMIT ?"
            )

        def gone_sql(columns: str) -> str:
            return _numbered(
                f"SELECT {columns} FROM {events} AS p "
                f"WHERE namespace = ? AND sequence < ? AND sequence > ?{where} "
                f"AND p.cursor > ? AND p.kind IN ('claimed', 'removed'){added_after} "
                "ORDER BY sequence DESC LIMIT ?"
            )

        found: dict[int, PendingRecord] = {}
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            purged_through, _ = await self._event_bounds(conn)
            now = await conn.fetch(
                pending_sql(_PENDING_SIZE), namespace, high, 0, *params, after, limit + 1
            )
            gone = await conn.fetch(
                gone_sql(_PENDING_SIZE), namespace, high, 0, *params, after, after, limit + 1
            )
            sizes = budget.merge_newest_first(
                [(int(r[0]), int(r[1])) for r in now], [(int(r[0]), int(r[1])) for r in gone]
            )
            taken = budget.fit((size for _, size in sizes), limit, max_bytes)
            if taken:
                low = sizes[taken - 1][0] - 1
                for row in await conn.fetch(
                    decided_pending_sql(), namespace, high, low, *params, after, taken
                ):
                    found[int(row["sequence"])] = _decided(row)
                for row in await conn.fetch(
                    gone_sql(_EVENT_PENDING_COLUMNS),
                    namespace,
                    high,
                    low,
                    *params,
                    after,
                    after,
                    taken,
                ):
                    found.setdefault(int(row["sequence"]), _pending(row))
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
        ``max_bytes``, with the outbox's bounds, in one REPEATABLE READ transaction."""
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        upper = _MAX_BIGINT if up_to_cursor is None else up_to_cursor
        rows: list[asyncpg.Record] = []
        more = False
        events = self._sql.events_table
        scope = "" if namespace is None else " AND namespace = $4"
        extra: tuple[object, ...] = () if namespace is None else (namespace,)
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            purged_through, latest = await self._event_bounds(conn)
            if limit > 0 and upper > after_cursor:
                sizes = await conn.fetch(
                    f"SELECT {_EVENT_SIZE} FROM {events} WHERE cursor > $1 AND cursor <= $2"
                    f"{scope} ORDER BY cursor LIMIT $3",
                    after_cursor,
                    upper,
                    limit + 1,
                    *extra,
                )
                taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
                more = len(sizes) > taken
                if taken:
                    through = int(sizes[taken - 1][0])
                    query = self._sql.events if namespace is None else self._sql.events_of_namespace
                    rows = await conn.fetch(query, after_cursor, through, taken, *extra)
        return EventPage(
            events=[_event(row) for row in rows],
            purged_through=purged_through,
            latest_cursor=latest,
            more=more,
        )

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events up to the first one written at or after
        ``written_before``, at most ``batch_size`` per transaction."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        cutoff = _utc_in(written_before)
        purged = 0
        while True:
            async with self._connection() as conn, conn.transaction():
                head = await conn.fetch(self._sql.events_head, batch_size)
                doomed = 0
                through = 0
                for row in head:
                    if row["event_at"] >= cutoff:
                        break
                    doomed += 1
                    through = int(row["cursor"])
                if doomed:
                    purged += _count(await conn.execute(self._sql.purge_events_through, through))
                    await conn.execute(self._sql.raise_purged_through, through)
            if doomed < batch_size:
                return purged

    def event_notifier(self) -> _PgEventNotifier | _PollingNotifier:
        """A notifier that LISTENs on its own connection (opened on the first wait); behind
        a transaction pooler without a listen DSN, one that polls every ``poll_interval``."""
        if self._listen_dsn is None:
            return _PollingNotifier(self._poll_interval)
        return _PgEventNotifier(self)

    # --- replication outbox (contracts R1-R4) --------------------------------------------

    async def list_unsynced(
        self, namespace: str, *, after_sequence: int | None, limit: int
    ) -> list[CheckpointRecord]:
        """Return up to ``limit`` unsettled rows with sequence > ``after_sequence``, oldest
        first."""
        if limit <= 0:
            return []
        bound = 0 if after_sequence is None else after_sequence
        async with self._connection() as conn:
            rows = await conn.fetch(self._sql.list_unsynced, namespace, bound, limit)
        return [_checkpoint(row) for row in rows]

    async def settle_checkpoints(
        self, namespace: str, settlements: Sequence[tuple[str, str | None]], now: datetime
    ) -> list[str]:
        """Settle unsettled rows, first-wins, in one transaction; return the ids settled."""
        if not settlements:
            return []
        ids = [cid for cid, _ in settlements]
        reasons = [reason for _, reason in settlements]
        async with self._connection() as conn, conn.transaction():
            if any(reason is not None for reason in reasons):
                await conn.execute(self._sql.requarantine, namespace, ids, reasons)
            rows = await conn.fetch(self._sql.settle, namespace, _utc_in(now), ids, reasons)
        settled = {str(row["checkpoint_id"]) for row in rows}
        return [cid for cid in ids if cid in settled]

    async def _listen(self, on_notify: Any, on_lost: Any) -> asyncpg.Connection[Any]:
        """Open a connection outside the pool that LISTENs to this store's event channel."""
        dsn = self._listen_dsn
        if dsn is None:  # event_notifier() polls instead
            raise StoreError("no connection to LISTEN on")
        server_settings = (
            {}
            if _has_application_name(dsn)
            else {"application_name": f"checkpointd:{self._schema}:listen"}
        )
        conn: asyncpg.Connection[Any] = await asyncpg.connect(
            dsn,
            timeout=self._timeout,
            server_settings=server_settings,
            statement_cache_size=self._statement_cache_size,
        )
        try:
            await conn.add_listener(self._channel, on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(on_lost)
        return conn


async def _keep_session(_: object) -> None:
    """The pool's reset behind a transaction pooler: nothing beyond asyncpg's own rollback of
    an unfinished transaction (which it does before calling this)."""


class _PollingNotifier:
    """Wakes the outbox reader every ``interval`` seconds (at most ``max_wait``): for a store
    reached only through a transaction pooler, where ``LISTEN`` cannot work. The reader reads
    by cursor, so an event waits at most one interval and is never missed."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._first = True

    async def wait(self, max_wait: float) -> None:
        """Return after ``min(interval, max_wait)`` seconds (at once the first time)."""
        if self._first:
            self._first = False
            return
        await asyncio.sleep(min(self._interval, max_wait))

    async def close(self) -> None:
        """Nothing to release."""


class _PgEventNotifier:
    """Wakes the outbox reader on ``NOTIFY``: one dedicated ``LISTEN`` connection, re-opened
    (at most once a second) when it is lost, and checked after 30 s of silence. While it is
    down, or when a notification is lost, the caller's ``max_wait`` is the fallback poll."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._conn: asyncpg.Connection[Any] | None = None
        self._heard = asyncio.Event()
        self._heard.set()  # the first wait returns at once
        self._next_attempt = 0.0
        self._checked_at = 0.0
        self._warned = False

    def _on_notify(self, *_: object) -> None:
        self._heard.set()
        self._checked_at = asyncio.get_running_loop().time()

    def _on_lost(self, *_: object) -> None:
        self._heard.set()  # read once more; the next wait opens a new connection

    async def wait(self, max_wait: float) -> None:
        """Return on a notification (or a re-opened LISTEN), or after ``max_wait`` seconds."""
        await self._keep_listening()
        if self._conn is None:
            # Not listening: poll, and try to listen again, once per retry interval.
            max_wait = min(max_wait, _LISTEN_RETRY_SECONDS)
        if not self._heard.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_wait):
                    await self._heard.wait()
        self._heard.clear()

    async def _keep_listening(self) -> None:
        now = asyncio.get_running_loop().time()
        conn = self._conn
        if conn is not None and not conn.is_closed():
            if now - self._checked_at < _LISTEN_CHECK_SECONDS:
                return
            try:
                await conn.fetchval("SELECT 1", timeout=self._store._timeout)
            except Exception:
                conn.terminate()
            else:
                self._checked_at = now
                return
        self._conn = None
        if now < self._next_attempt:
            return
        self._next_attempt = now + _LISTEN_RETRY_SECONDS
        try:
            conn = await self._store._listen(self._on_notify, self._on_lost)
        except Exception as exc:
            if not self._warned:
                log.warning(
                    "cannot LISTEN for interrupt events (%s); polling until it can",
                    self._store._describe(exc),
                )
                self._warned = True
            return
        if self._warned:
            log.info("listening for interrupt events again")
            self._warned = False
        self._conn, self._checked_at = conn, now
        self._heard.set()  # events may have committed while nobody listened

    async def close(self) -> None:
        """Close the LISTEN connection. Safe to call twice."""
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=self._store._timeout)
        except Exception:
            conn.terminate()
