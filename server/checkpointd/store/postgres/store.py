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
turning on) and the migration lock is the transaction-level advisory lock it already is.
``LISTEN`` needs a session, so the notifier connects to ``listen_dsn`` (a direct
connection to Postgres) or, without one, polls the outbox every ``poll_interval`` seconds;
the outbox is read by cursor either way, so polling delays events and never loses them.

Connections go back to the pool without asyncpg's session reset (a query on every release):
the store sets no session state (no ``SET``, no ``LISTEN`` on a pooled connection, no session
advisory lock, no cursor outside a transaction), so there is nothing to reset, and a call costs
only its own round trips. An unfinished transaction is still rolled back.

Group commit (:mod:`checkpointd.store.group_commit`): concurrent ``put_checkpoint`` calls
are written by one multi-row ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING``
(one statement, one round trip, one commit for up to ``columns.GROUP_COMMIT_MAX`` rows), and
concurrent ``put_idempotent`` calls by one multi-row upsert (which records their request ids
and skips the rows whose id was already recorded: retries). When the store is idle the first
write goes at once, alone; the writes that arrive meanwhile form the next statement. Each caller
is answered after that statement has committed (E1). A row whose id is already taken is left
out by ``ON CONFLICT DO NOTHING`` (the other rows are written) and its caller then takes the
single-row path: a retry gets the stored row, another request's id :class:`CheckpointExists`.
Rows with the same key never share a statement. A row Postgres refuses fails its statement
as a whole; the group is then written row by row, so that row fails alone.

Round trips are what a call costs the sidecar's CPU (each is a wake of the event loop and a
protocol exchange, counted in tests/store/test_postgres_round_trips.py). Interrupts,
decisions and deletes keep a transaction each, but the event lock goes in the statement of
the event and a new pending row and its event are one statement; a claim (the look for its
token's earlier claim, the claim, its event) is one statement in autocommit.

Connection failures, timeouts and a busy database raise
:class:`~checkpointd.store.base.StoreUnavailable` (retriable) with a short message that names
neither SQL nor the password. A broken connection is discarded and its pool siblings are
expired (asyncpg reconnects them on their next acquire), so after an outage the first call
may fail and the store then recovers by itself once the database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias, TypeVar

import asyncpg
import asyncpg.exceptions
import asyncpg.pool

from checkpointd.config import (
    DEFAULT_PG_POLL_INTERVAL,
    DEFAULT_PG_POOL_MAX,
    DEFAULT_PG_POOL_MIN,
    DEFAULT_PG_SCHEMA,
    DEFAULT_STORE_TIMEOUT,
    dsn_secrets,
)
from checkpointd.domain import (
    RUN_END,
    CheckpointRecord,
    DeleteExecutionResult,
    EventKind,
    EventPage,
    LeaseFence,
    Page,
    PendingFilter,
    PendingRecord,
    PruneResult,
    RecordInterruptResult,
    SnapshotPage,
)
from checkpointd.store import budget, decisions, outbox, replies, retries, rows, times
from checkpointd.store.base import PoolState, StoreError, StoreUnavailable
from checkpointd.store.columns import (
    CHECKPOINT_INSERT_COLUMNS,
    GROUP_COMMIT_MAX,
    MAX_SEQUENCE,
    checkpoint_params,
    decision_json,
    event_params,
    pending_params,
)
from checkpointd.store.decisions import DecisionTransactions
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.postgres import errors
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.dsn import describe_target, has_application_name
from checkpointd.store.postgres.notifier import Listener, PgEventNotifier, PollingNotifier
from checkpointd.store.postgres.sql import Sql, lock_key, notify_channel, quoted_schema
from checkpointd.store.postgres.statements import PgStatements
from checkpointd.store.schema import Migration, load_migrations
from checkpointd.store.statements import Body, Statements

__all__ = ["PostgresStore"]

_Conn: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"

T = TypeVar("T")

#: Lower bound of the first prune batch (the keyset scan then moves forward).
_BEGINNING_OF_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)
#: Rows per transaction when purging expired claims.
_PURGE_BATCH: Final = 1000
#: Attempts when a row we conflicted with vanished before we could read it (a concurrent
#: delete or claim); each attempt is cheap and two are practically always enough.
_RACE_ATTEMPTS: Final = 5
#: Migrations may wait for another replica's migration and may build indexes.
_MIN_MIGRATION_TIMEOUT: Final = 60.0
#: What one row's values can make a multi-row statement fail with (a value or a constraint
#: Postgres refuses), as opposed to the connection or the database failing.
_ROW_ERRORS: Final = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
)
#: asyncpg's own default: prepared statements kept per connection.
_DEFAULT_STATEMENT_CACHE: Final = 100


def _count(status: str) -> int:
    """Return the row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


@dataclass(frozen=True, slots=True)
class _CheckpointRow:
    """A checkpoint on its way into the table: the insert's parameters and the record they
    were made from. The insert returns only the sequence: the stored row is the record with
    it (and its time as written, in UTC), so 2 KB of state never travels back."""

    args: tuple[object, ...]
    record: CheckpointRecord

    def stored(self, sequence: int) -> CheckpointRecord:
        created_at = self.args[_CREATED_AT_PARAM]
        assert isinstance(created_at, datetime)
        return replace(self.record, sequence=sequence, created_at=created_at)


#: Where the write time sits in :func:`~checkpointd.store.columns.checkpoint_params`.
_CREATED_AT_PARAM: Final = CHECKPOINT_INSERT_COLUMNS.split(", ").index("created_at")


def _checkpoint_from_row(row: asyncpg.Record) -> CheckpointRecord:
    return rows.checkpoint_from_row(row, times.utc_out)


def _pending_from_row(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, times.utc_out)


def _decided_from_row(row: asyncpg.Record) -> PendingRecord:
    return rows.pending_from_row(row, times.utc_out, with_decision=True)


def _load_migrations() -> tuple[Migration, ...]:
    return load_migrations("postgres")


class PostgresStore(DecisionTransactions):
    """A :class:`~checkpointd.store.base.Store` on PostgreSQL through an asyncpg pool.

    ``timeout`` (seconds) bounds connecting, acquiring a pooled connection and every
    statement; migrations get at least a minute. Call :meth:`open` before use and
    :meth:`close` afterwards.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_PG_SCHEMA,
        min_pool_size: int = DEFAULT_PG_POOL_MIN,
        max_pool_size: int = DEFAULT_PG_POOL_MAX,
        timeout: float = DEFAULT_STORE_TIMEOUT,
        pooled: bool = False,
        statement_cache_size: int | None = None,
        listen_dsn: str | None = None,
        poll_interval: float = DEFAULT_PG_POLL_INTERVAL,
    ) -> None:
        self._quoted_schema = quoted_schema(schema)
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
        self._fence_slots = asyncio.Semaphore(max(1, max_pool_size // 2))
        self._timeout = timeout
        self._target = describe_target(dsn)
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
        self._migration_lock = lock_key("migrate", schema)
        self._event_lock = lock_key("events", schema)
        self._channel = notify_channel(schema)
        self._sql = Sql(self._quoted_schema)
        self._read_time = times.utc_out
        self._write_time = times.utc_in
        self._decision_sql = self._sql.decisions
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        # Keys: (namespace, checkpoint_id) and (namespace, execution_id, key), so no two rows
        # of one statement collide.
        self._checkpoint_group: GroupCommit[_CheckpointRow, CheckpointRecord | None] = GroupCommit(
            self._insert_checkpoints,
            max_batch=GROUP_COMMIT_MAX,
            key=lambda row: (row.args[0], row.args[2]),
        )
        self._idempotent_group: GroupCommit[tuple[object, ...], bool] = GroupCommit(
            self._put_idempotents,
            max_batch=GROUP_COMMIT_MAX,
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
            if has_application_name(self._dsn)
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
                # The store leaves no session state behind (no SET, no LISTEN, no session
                # lock, no cursor outside a transaction; and behind a transaction pooler the
                # session is not ours): asyncpg's reset query on every release would only
                # cost a round trip per call.
                reset=_keep_session,
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
        """Raise :class:`StoreUnavailable` unless the database answers and takes writes: a
        standby, or a primary demoted by a failover, answers but cannot serve."""
        async with self._connection() as conn:
            read_only = await conn.fetchval(errors.READ_ONLY_QUERY)
            if read_only:
                await errors.read_only_connection(conn)

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

    async def _migrate(self, migrations: Sequence[Migration]) -> None:
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
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        *,
        fingerprint: str = "",
    ) -> CheckpointRecord:
        """Insert one checkpoint and return it with its sequence (see the Store protocol).

        The row goes into the next group-commit statement; when its id is taken, the
        single-row path below tells a retry (the stored row) from a duplicate. Each is an
        ``INSERT ... ON CONFLICT DO NOTHING`` in autocommit: it cannot fail on a duplicate,
        so no transaction is ever left open or aborted, and an acknowledged row is committed.
        """
        row = _CheckpointRow(
            self._checkpoint_args(namespace, request_id, checkpoint, fingerprint), checkpoint
        )
        stored = await self._checkpoint_group.submit(row)
        if stored is not None:
            return stored
        async with self._connection() as conn:
            for _ in range(_RACE_ATTEMPTS):
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *row.args)
                if sequence is not None:
                    return row.stored(sequence)
                stored = await self._existing_checkpoint(
                    conn, namespace, request_id, checkpoint, fingerprint
                )
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
        return None if row is None else _checkpoint_from_row(row)

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
        return None if row is None else _checkpoint_from_row(row)

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
            bound = MAX_SEQUENCE if after_sequence is None else after_sequence
        else:
            sizes_query, query = self._sql.list_ascending_sizes, self._sql.list_ascending
            bound = 0 if after_sequence is None else after_sequence
        async with self._read_snapshot() as conn:
            sizes = await conn.fetch(sizes_query, namespace, execution_id, bound, limit + 1)
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            found = await conn.fetch(query, namespace, execution_id, bound, taken)
        return Page((_checkpoint_from_row(row) for row in found), more=len(sizes) > taken)

    async def delete_execution(
        self,
        namespace: str,
        execution_id: str,
        *,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> DeleteExecutionResult:
        """Delete the execution's checkpoints, pending interrupt and idempotency results in one
        transaction; write a ``removed`` event when a pending interrupt went away.

        The request ids of the deleted checkpoints become tombstones in the same statement.
        A non-empty ``request_id`` is recorded first: a concurrent call with the same id
        waits on that row and, once this one commits, returns its reply (C9).
        """
        applied_at = times.utc_in(datetime.now(UTC) if now is None else now)
        async with self._connection() as conn, conn.transaction():
            record = bool(request_id)
            if request_id and not await conn.fetchval(
                self._sql.record_reply,
                namespace,
                request_id,
                applied_at,
                replies.DELETE_EXECUTION,
                None,
                fingerprint or None,
            ):
                row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
                if row is not None:
                    first = row["request_fingerprint"]
                    retries.check_fingerprint(request_id, first, fingerprint)
                if row is not None and row["kind"] == replies.DELETE_EXECUTION:
                    return replies.decode_delete(row["reply_json"])
                # An id stored without a fingerprint by another kind of call is kept.
                record = False
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
                await self._append_event(
                    conn, namespace, EventKind.REMOVED, _pending_from_row(removed)
                )
        return result

    async def prune(
        self,
        namespace: str,
        cutoff: datetime,
        *,
        batch_size: int,
        request_id: str = "",
        now: datetime | None = None,
        fingerprint: str = "",
    ) -> PruneResult:
        """Delete completed/failed checkpoints and idempotency results older than ``cutoff``.

        Each batch is one statement (its own transaction) of at most ``batch_size`` rows, so
        other callers never wait long; batches repeat until nothing old is left. Each batch
        records the request ids of the checkpoints it deleted as tombstones; the reply is
        recorded under ``request_id`` once the prune is complete, and a retry returns it (C9).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        cutoff = times.utc_in(cutoff)
        applied_at = times.utc_in(datetime.now(UTC) if now is None else now)
        if request_id:
            earlier = await self._prune_reply(namespace, request_id, fingerprint)
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
                    fingerprint or None,
                )
            if not recorded:
                # A concurrent call with this id finished first: answer like it did.
                return await self._prune_reply(namespace, request_id, fingerprint) or result
        return result

    async def _prune_reply(
        self, namespace: str, request_id: str, fingerprint: str
    ) -> PruneResult | None:
        """The reply recorded under ``request_id`` (None: none, or another kind of call's id
        stored without a fingerprint); :class:`RequestIdReused` for another request's id."""
        async with self._connection() as conn:
            row = await conn.fetchrow(self._sql.reply_of_request, namespace, request_id)
        if row is not None:
            retries.check_fingerprint(request_id, row["request_fingerprint"], fingerprint)
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
            resume_at = times.utc_out(row["resume_at"])

    # --- interrupts ----------------------------------------------------------------------

    async def record_interrupt(
        self,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        pending: PendingRecord,
        *,
        fingerprint: str = "",
    ) -> RecordInterruptResult:
        """Insert the interrupted checkpoint and, unless the execution already has one, the
        pending row plus an ``added`` event, all in one transaction (contracts I1, I2)."""
        if pending.execution_id != checkpoint.execution_id:
            raise ValueError("the pending row and its checkpoint name different executions")
        checkpoint_row = _CheckpointRow(
            self._checkpoint_args(namespace, request_id, checkpoint, fingerprint), checkpoint
        )
        async with self._connection() as conn, conn.transaction():
            stored: CheckpointRecord | None = None
            for _ in range(_RACE_ATTEMPTS):
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *checkpoint_row.args)
                if sequence is not None:
                    stored = checkpoint_row.stored(sequence)
                    break
                retried = await self._existing_checkpoint(
                    conn, namespace, request_id, checkpoint, fingerprint
                )
                if retried is not None:
                    return await self._retried_interrupt(conn, namespace, retried, pending)
            if stored is None:
                raise StoreUnavailable("interrupt write kept racing with a delete; retry")

            proposed = replace(
                pending, checkpoint_id=stored.checkpoint_id, sequence=stored.sequence
            )
            new_row = pending_params(proposed, times.utc_in)
            event = (self._event_lock, EventKind.ADDED.value, self._channel)
            for _ in range(_RACE_ATTEMPTS):
                # The row and its ``added`` event in one statement.
                row = await conn.fetchrow(
                    self._sql.insert_pending_with_event, namespace, *new_row, *event
                )
                if row is not None:
                    added = _pending_from_row(row)
                    return RecordInterruptResult(stored, added, pending_created=True)
                # I2: the execution already has a pending row; it stays, the checkpoint too.
                row = await conn.fetchrow(
                    self._sql.pending_by_execution, namespace, pending.execution_id
                )
                if row is not None:
                    return RecordInterruptResult(
                        stored, _pending_from_row(row), pending_created=False
                    )
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
            in_place = _pending_from_row(row)
            created = in_place.checkpoint_id == stored.checkpoint_id
            return RecordInterruptResult(stored, in_place, pending_created=created)
        rebuilt = replace(
            pending,
            created_at=times.utc_in(pending.created_at),
            checkpoint_id=stored.checkpoint_id,
            sequence=stored.sequence,
        )
        return RecordInterruptResult(stored, rebuilt, pending_created=True)

    async def claim_interrupt(
        self, namespace: str, execution_id: str, claim_token: str, now: datetime
    ) -> PendingRecord | None:
        """Atomically take the execution's pending row; exactly one caller gets it (I3).

        A non-empty ``claim_token`` files the claimed row under that token, so a retry with
        the same token gets the same row back until :meth:`purge_claims` forgets it. The look
        for that row, the claim and its ``claimed`` event are one statement (one transaction,
        one round trip); only a claim that takes nothing looks again.
        """
        now = times.utc_in(now)
        async with self._connection() as conn:
            # The claim and its event (and, with a token, the look for the token's earlier
            # claim) are one statement, so one transaction in autocommit.
            event = (self._event_lock, EventKind.CLAIMED.value, self._channel)
            try:
                if claim_token:
                    row = await conn.fetchrow(
                        self._sql.claim_with_token_and_event,
                        namespace,
                        execution_id,
                        claim_token,
                        now,
                        *event,
                    )
                else:
                    row = await conn.fetchrow(
                        self._sql.claim_with_event, namespace, execution_id, *event
                    )
                if row is not None:
                    return _pending_from_row(row)
            except asyncpg.exceptions.UniqueViolationError:
                # This token already holds an earlier claim of this execution, filed by a
                # concurrent retry after the statement's snapshot: everything rolled back, and
                # the look below returns that claim.
                pass
            if not claim_token:
                return None
            row = await conn.fetchrow(
                self._sql.claim_by_token, namespace, execution_id, claim_token
            )
        return None if row is None else _pending_from_row(row)

    # --- decisions -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def fenced(self, namespace: str, fence: LeaseFence) -> AsyncIterator[bool]:
        """Hold the pause's decision row FOR SHARE while a write under ``fence`` runs (K4): a
        takeover's FOR UPDATE waits for it, on every server of the database. The write takes
        a connection of its own, so at most half the pool holds fences at once."""
        pause = (namespace, fence.execution_id, fence.checkpoint_id, fence.interrupt_id)
        async with self._fence_slots, self._connection() as conn, conn.transaction():
            row = await conn.fetchrow(self._sql.decision_of_pause_shared, *pause)
            current = None if row is None else _decided_from_row(row)
            yield decisions.fence_holds(current, None if row is None else row["lease_token"], fence)

    async def purge_claims(self, claimed_before: datetime) -> int:
        """Forget claims older than the retention time, in batches; return how many went."""
        claimed_before = times.utc_in(claimed_before)
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
        applied_before = times.utc_in(applied_before)
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
        bound = MAX_SEQUENCE if before_sequence is None else before_sequence
        sizes_query, params = self._sql.list_pending(filters, sizes=True)
        query, _ = self._sql.list_pending(filters)
        async with self._read_snapshot() as conn:
            sizes = await conn.fetch(sizes_query, namespace, bound, *params, limit + 1)
            taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
            if not taken:
                return Page()
            found = await conn.fetch(query, namespace, bound, *params, taken)
        return Page((_decided_from_row(row) for row in found), more=len(sizes) > taken)

    # --- idempotency ---------------------------------------------------------------------

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Insert or replace the cached result, with created_at = ``now`` (contract D1), in
        the next group-commit statement; a retry of a recorded ``request_id`` writes
        nothing."""
        row = (namespace, execution_id, key, result_json, times.utc_in(now), request_id)
        fresh = await self._idempotent_group.submit((*row, fingerprint or None))
        if request_id and not fresh:
            # A retry (the first call's write stands), or another request's id (C10).
            async with self._connection() as conn:
                first = await conn.fetchval(self._sql.fingerprint_of_applied, namespace, request_id)
            retries.check_fingerprint(request_id, first, fingerprint)

    async def _insert_checkpoints(
        self, batch: list[_CheckpointRow]
    ) -> list[CheckpointRecord | Exception | None]:
        """Write a group of checkpoint rows in one statement (one round trip); None for a row
        whose id was already taken (nothing of it was written). A group of one uses the
        one-row INSERT. When a row's data fails the statement (a value Postgres refuses),
        nothing of it was written, and each row is written alone: the bad one fails alone."""
        if len(batch) == 1:
            only = batch[0]
            async with self._connection() as conn:
                sequence = await conn.fetchval(self._sql.insert_checkpoint, *only.args)
            return [None if sequence is None else only.stored(sequence)]
        columns = [list(column) for column in zip(*(row.args for row in batch), strict=True)]
        async with self._connection() as conn:
            try:
                written = await conn.fetch(self._sql.insert_checkpoints, *columns)
            except _ROW_ERRORS:
                return [await self._insert_alone(conn, row) for row in batch]
        sequences = {(r["namespace"], r["checkpoint_id"]): r["sequence"] for r in written}
        outcomes: list[CheckpointRecord | Exception | None] = []
        for row in batch:
            sequence = sequences.get((row.args[0], row.args[2]))
            outcomes.append(None if sequence is None else row.stored(sequence))
        return outcomes

    async def _insert_alone(
        self, conn: _Conn, row: _CheckpointRow
    ) -> CheckpointRecord | Exception | None:
        """One row of a group whose statement failed on a row's data: its own outcome."""
        try:
            sequence = await conn.fetchval(self._sql.insert_checkpoint, *row.args)
        except _ROW_ERRORS as exc:
            return self._translate(exc) or StoreError("the checkpoint could not be written")
        return None if sequence is None else row.stored(sequence)

    async def _put_idempotents(self, batch: list[tuple[object, ...]]) -> list[bool | Exception]:
        """Upsert a group of idempotency results in one statement (one row: the one-row
        upsert); for each, whether its request id was recorded by this statement (True
        without one). A later row of the group with the request id of an earlier one is left
        out (a retry of it, or another request: its caller compares the fingerprints)."""
        rows: list[tuple[object, ...]] = []
        seen: set[tuple[object, object]] = set()
        for args in batch:
            request = (args[0], args[5])
            if args[5]:
                if request in seen:
                    continue
                seen.add(request)
            rows.append(args)
        fresh: set[tuple[object, object]] = set()
        failed: dict[int, Exception] = {}
        async with self._connection() as conn:
            if len(rows) > 1:
                columns = [list(column) for column in zip(*rows, strict=True)]
                try:
                    recorded = await conn.fetch(self._sql.put_idempotents, *columns)
                    fresh = {(row["namespace"], row["request_id"]) for row in recorded}
                except _ROW_ERRORS:
                    # A row Postgres refuses failed the statement (nothing was written): each
                    # row alone, so that one fails alone.
                    for args in rows:
                        try:
                            if await self._put_idempotent_alone(conn, args):
                                fresh.add((args[0], args[5]))
                        except _ROW_ERRORS as exc:
                            failed[id(args)] = self._translate(exc) or StoreError(
                                "the idempotency result could not be written"
                            )
            elif await self._put_idempotent_alone(conn, rows[0]):
                fresh = {(rows[0][0], rows[0][5])}
        kept = {id(args) for args in rows}
        return [
            failed.get(id(args))
            or (not args[5] or (id(args) in kept and (args[0], args[5]) in fresh))
            for args in batch
        ]

    async def _put_idempotent_alone(self, conn: _Conn, args: tuple[object, ...]) -> bool:
        """One idempotency row by the one-row upsert; whether its request id was recorded by
        it (False without one)."""
        if args[5]:
            return bool(await conn.fetchval(self._sql.put_idempotent_once, *args))
        await conn.execute(self._sql.put_idempotent, *args[:5])
        return False

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        async with self._connection() as conn:
            value: str | None = await conn.fetchval(
                self._sql.get_idempotent, namespace, execution_id, key
            )
        return value

    def graph_access(self) -> PostgresAccess:
        """The pool and schema the graph wing shares with this store."""
        return PostgresAccess(self._connection, self._quoted_schema, self._append_event)

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
                    if errors.is_broken_connection(exc):
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

    @contextlib.asynccontextmanager
    async def _read_snapshot(self) -> AsyncIterator[_Conn]:
        """One read-only REPEATABLE READ transaction: its queries all see one state (a page's
        sizes and its rows, the outbox's bounds and its events)."""
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield conn

    async def _in_transaction(self, body: Body[T]) -> T:
        async with self._connection() as conn:
            statements = PgStatements(conn)
            async with conn.transaction():
                result = await body(statements)
        for callback in statements.callbacks:
            callback()
        return result

    async def _in_read(self, body: Body[T]) -> T:
        async with self._connection() as conn:
            return await body(PgStatements(conn))

    async def _in_snapshot(self, body: Body[T]) -> T:
        async with self._read_snapshot() as conn:
            return await body(PgStatements(conn))

    async def _append_event_at(
        self,
        conn: Statements,
        namespace: str,
        kind: EventKind,
        pending: PendingRecord,
        at: datetime,
    ) -> None:
        # The event's time is the database's (the column's default, now()), not ``at``.
        assert isinstance(conn, PgStatements)
        await self._append_event(conn.connection, namespace, kind, pending)

    def _translate(self, exc: Exception) -> StoreError | None:
        return errors.translate(exc, timeout=self._timeout, secrets=self._secrets)

    def _describe(self, exc: BaseException) -> str:
        return errors.describe(exc, self._secrets)

    @staticmethod
    def _checkpoint_args(
        namespace: str, request_id: str, checkpoint: CheckpointRecord, fingerprint: str
    ) -> tuple[object, ...]:
        return checkpoint_params(
            namespace, request_id or None, checkpoint, times.utc_in, fingerprint
        )

    async def _existing_checkpoint(
        self,
        conn: _Conn,
        namespace: str,
        request_id: str,
        checkpoint: CheckpointRecord,
        fingerprint: str,
    ) -> CheckpointRecord | None:
        """After an insert wrote nothing: see :func:`retries.existing_checkpoint` (None: the
        conflicting row is gone again, and the caller inserts once more)."""

        async def by_request_id() -> tuple[CheckpointRecord, str | None] | None:
            row = await conn.fetchrow(self._sql.checkpoint_by_request_id, namespace, request_id)
            if row is None:
                return None
            return _checkpoint_from_row(row), row["request_fingerprint"]

        async def tombstone() -> tuple[str | None] | None:
            sql = self._sql.tombstone_fingerprint
            row = await conn.fetchrow(sql, namespace, request_id)
            return None if row is None else (row[0],)

        async def by_checkpoint_id() -> bool:
            cid = checkpoint.checkpoint_id
            return await conn.fetchrow(self._sql.checkpoint_by_id, namespace, cid) is not None

        return await retries.existing_checkpoint(
            request_id,
            checkpoint.checkpoint_id,
            fingerprint,
            by_request_id=by_request_id,
            tombstone=tombstone,
            by_checkpoint_id=by_checkpoint_id,
        )

    async def _append_event(
        self, conn: _Conn, namespace: str, kind: EventKind, pending: PendingRecord
    ) -> None:
        """Append an outbox event; must be the last statement of the caller's transaction.

        The advisory lock is held until commit, so events commit in cursor order (see the
        module docstring). Taking it last means its holder never waits for anything else,
        so it cannot deadlock with the row locks other writers hold.
        """
        params = event_params(namespace, kind, pending, times.utc_in)
        await conn.execute(
            self._sql.insert_event,
            *params,
            self._channel,
            decision_json(pending),
            self._event_lock,
        )

    # --- interrupt events ----------------------------------------------------------------

    @staticmethod
    def _fetch(conn: _Conn) -> outbox.Fetch:
        async def fetch(query: str, params: Sequence[Any]) -> list[asyncpg.Record]:
            return await conn.fetch(query, *params)

        return fetch

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
        REPEATABLE READ transaction (see :func:`checkpointd.store.outbox.snapshot_page`;
        events commit in cursor order, so "added after the cursor" is exactly "its ``added``
        event has a higher cursor")."""
        async with self._read_snapshot() as conn:
            return await outbox.snapshot_page(
                self._fetch(conn),
                self._sql.outbox,
                times.utc_out,
                namespace,
                filters,
                as_of_cursor=as_of_cursor,
                before_sequence=before_sequence,
                limit=limit,
                max_bytes=max_bytes,
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
        if limit == 0:
            # Only the bounds (the watch reader's look while no stream is open, once a second
            # on an idle server): one statement sees one state by itself, so it skips the
            # transaction's BEGIN and COMMIT round trips.
            async with self._connection() as conn:
                purged_through, latest = await outbox.event_bounds(
                    self._fetch(conn), self._sql.outbox
                )
            return EventPage(
                events=[], purged_through=purged_through, latest_cursor=latest, more=False
            )
        async with self._read_snapshot() as conn:
            return await outbox.read_event_page(
                self._fetch(conn),
                self._sql.outbox,
                times.utc_out,
                after_cursor=after_cursor,
                up_to_cursor=up_to_cursor,
                limit=limit,
                namespace=namespace,
                max_bytes=max_bytes,
            )

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events up to the first one written at or after
        ``written_before``, at most ``batch_size`` per transaction."""
        cutoff = times.utc_in(written_before)

        async def batch() -> tuple[int, int]:
            async with self._connection() as conn, conn.transaction():

                async def run(query: str, params: Sequence[Any]) -> int:
                    return _count(await conn.execute(query, *params))

                return await outbox.purge_event_batch(
                    self._fetch(conn), run, self._sql.outbox, cutoff, batch_size
                )

        return await outbox.purge_in_batches(batch, batch_size=batch_size)

    def event_notifier(self) -> PgEventNotifier | PollingNotifier:
        """A notifier that LISTENs on its own connection (opened on the first wait); behind
        a transaction pooler without a listen DSN, one that polls every ``poll_interval``."""
        if self._listen_dsn is None:
            return PollingNotifier(self._poll_interval)
        return PgEventNotifier(self._listen, self._describe, self._timeout)

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
        return [_checkpoint_from_row(row) for row in rows]

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
            rows = await conn.fetch(self._sql.settle, namespace, times.utc_in(now), ids, reasons)
        settled = {str(row["checkpoint_id"]) for row in rows}
        return [cid for cid in ids if cid in settled]

    async def _listen(self, on_notify: Listener, on_lost: Listener) -> asyncpg.Connection[Any]:
        """Open a connection outside the pool that LISTENs to this store's event channel."""
        dsn = self._listen_dsn
        if dsn is None:  # event_notifier() polls instead
            raise StoreError("no connection to LISTEN on")
        server_settings = (
            {}
            if has_application_name(dsn)
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
    """The pool's reset: nothing beyond asyncpg's own rollback of an unfinished transaction
    (which it does before calling this). The store sets no session state, so asyncpg's
    default (``RESET ALL``, ``UNLISTEN *``... on every release) would only add a round trip."""
