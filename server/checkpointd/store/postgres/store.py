"""The Postgres store: the :class:`~checkpointd.store.interface.Store` over an asyncpg pool.

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
from typing import Any, Final, TypeVar

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
    CheckpointRecord,
    LeaseFence,
)
from checkpointd.store import decisions, times
from checkpointd.store.base import PoolState, StoreError, StoreUnavailable
from checkpointd.store.columns import (
    GROUP_COMMIT_MAX,
)
from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.interface import Store
from checkpointd.store.postgres import errors
from checkpointd.store.postgres.access import PostgresAccess
from checkpointd.store.postgres.core import CheckpointRow
from checkpointd.store.postgres.dsn import describe_target, has_application_name
from checkpointd.store.postgres.interrupts import PostgresInterrupts
from checkpointd.store.postgres.notifier import Listener, PgEventNotifier, PollingNotifier
from checkpointd.store.postgres.sql import Sql, lock_key, notify_channel, quoted_schema
from checkpointd.store.postgres.statements import Conn, PgStatements
from checkpointd.store.schema import Migration, load_migrations
from checkpointd.store.statements import Body

__all__ = ["PostgresStore"]

T = TypeVar("T")

#: Migrations may wait for another replica's migration and may build indexes.
_MIN_MIGRATION_TIMEOUT: Final = 60.0
#: asyncpg's own default: prepared statements kept per connection.
_DEFAULT_STATEMENT_CACHE: Final = 100


def _load_migrations() -> tuple[Migration, ...]:
    return load_migrations("postgres")


class PostgresStore(PostgresInterrupts, Store):
    """A :class:`~checkpointd.store.interface.Store` on PostgreSQL through an asyncpg pool.

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
        self._outbox_sql = self._sql.outbox
        self._checkpoint_sql = self._sql.checkpoints
        self._get_idempotent_sql = self._sql.get_idempotent
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        # Keys: (namespace, checkpoint_id) and (namespace, execution_id, key), so no two rows
        # of one statement collide.
        self._checkpoint_group: GroupCommit[CheckpointRow, CheckpointRecord | None] = GroupCommit(
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
        """Open the pool, then migrate under a transaction-level advisory lock."""
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

    # --- fences (the decision transactions: checkpointd.store.decisions) -------------

    @contextlib.asynccontextmanager
    async def fenced(self, namespace: str, fence: LeaseFence) -> AsyncIterator[bool]:
        """Hold the pause's decision row FOR SHARE while a write under ``fence`` runs (K4): a
        takeover's FOR UPDATE waits for it, on every server of the database. The write takes
        a connection of its own, so at most half the pool holds fences at once."""
        pause = (namespace, fence.execution_id, fence.checkpoint_id, fence.interrupt_id)
        async with self._fence_slots, self._connection() as conn, conn.transaction():
            row = await conn.fetchrow(self._sql.decision_of_pause_shared, *pause)
            current = None if row is None else self._decided(row)
            yield decisions.fence_holds(current, None if row is None else row["lease_token"], fence)

    def access(self) -> PostgresAccess:
        """What the graph store and the execution reader borrow from this store."""
        schema = self._quoted_schema
        return PostgresAccess(
            self._connection,
            schema,
            self._in_transaction,
            self._in_read,
            self._in_snapshot,
            self._append_event_at,
        )

    # --- helpers -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
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
    async def _read_snapshot(self) -> AsyncIterator[Conn]:
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

    async def _in_listing(self, body: Body[T]) -> T:
        # A row may commit with a sequence below one already committed.
        return await self._in_snapshot(body)

    def _translate(self, exc: Exception) -> StoreError | None:
        return errors.translate(exc, timeout=self._timeout, secrets=self._secrets)

    def _describe(self, exc: BaseException) -> str:
        return errors.describe(exc, self._secrets)

    def event_notifier(self) -> PgEventNotifier | PollingNotifier:
        """A notifier that LISTENs on its own connection (opened on the first wait); behind
        a transaction pooler without a listen DSN, one that polls every ``poll_interval``."""
        if self._listen_dsn is None:
            return PollingNotifier(self._poll_interval)
        return PgEventNotifier(self._listen, self._describe, self._timeout)

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
