"""Contract M1: the Postgres store behind a transaction-pooling PgBouncer, in the setups the
parametrized suite does not cover (it runs with a direct LISTEN connection): watching by
polling when there is no direct connection, and replicas migrating together through the
pooler. Real PgBouncer, real Postgres, real server processes."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import asyncpg
import pytest

from checkpointd.store.schema import load_migrations
from checkpointd_client import CheckpointdClient
from tests.contract.conftest import NO_RETRY
from tests.contract.test_watch import _outbox, _record, _seen, watching
from tests.support.pgbouncer import PgBouncer
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = pytest.mark.postgres


def _pooled(pg_dsn: str, pg_schema: str, bouncer: PgBouncer, *args: str) -> StoreSpec:
    return StoreSpec(
        "pgbouncer",
        pg_dsn,
        pg_schema=pg_schema,
        server_url=bouncer.url(),
        server_args=("--pg-pooler", "transaction", *args),
    )


def _query(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def test_m1_without_a_listen_dsn_watchers_poll_and_miss_no_event(
    pg_dsn: str, pg_schema: str, pgbouncer: PgBouncer
) -> None:
    """Behind the pooler with no direct connection, the server opens no LISTEN session and
    a watcher still gets every event of concurrent records and claims, in cursor order."""
    spec = _pooled(pg_dsn, pg_schema, pgbouncer, "--pg-poll-interval", "0.2")
    server = Sidecar(spec).start()
    try:
        assert "pg_watch=poll-0.2s" in server.log_path.read_text()
        total = 40
        failures: list[BaseException] = []

        def write(worker: int) -> None:
            try:
                with CheckpointdClient(server.target, retry=NO_RETRY) as c:
                    for i in range(total // 2):
                        _record(c, f"poll-{worker}-{i}")
                        if i % 3 == 0:
                            c.claim_interrupt(f"poll-{worker}-{i}")
            except BaseException as exc:
                failures.append(exc)

        with watching(server.target) as stream:
            _, start = stream.snapshot()
            threads = [threading.Thread(target=write, args=(w,)) for w in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failures, failures
            outbox = _outbox(spec, start)
            assert len(outbox) == total + 2 * len(range(0, total // 2, 3))
            seen = stream.events_until(lambda e: e.cursor >= outbox[-1][0])
        assert _seen(seen) == outbox
        listeners = _query(
            pg_dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            f"checkpointd:{pg_schema}:listen",
        )
        assert listeners[0][0] == 0
    finally:
        server.close()


def test_m1_replicas_starting_together_through_the_pooler_migrate_once(
    pg_dsn: str, pg_schema: str, pgbouncer: PgBouncer
) -> None:
    """Four servers starting at once on a new schema, all through PgBouncer, all start; each
    migration is applied exactly once (the lock is transaction-level, which the pooler keeps
    on one server session) and every server then serves the same store."""
    spec = _pooled(pg_dsn, pg_schema, pgbouncer)
    servers = [Sidecar(spec) for _ in range(4)]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda s: s.start(), servers))
        versions = _query(
            pg_dsn, f'SELECT version, count(*) FROM "{pg_schema}".schema_migrations GROUP BY 1'
        )
        assert versions
        assert all(row[1] == 1 for row in versions)
        packaged = [m.version for m in load_migrations("postgres")]  # numbers may have gaps
        assert sorted(row[0] for row in versions) == packaged
        with CheckpointdClient(servers[0].target, retry=NO_RETRY) as first:
            _record(first, "shared-run")
        with CheckpointdClient(servers[3].target, retry=NO_RETRY) as last:
            assert last.claim_interrupt("shared-run").execution_id == "shared-run"
    finally:
        for server in servers:
            server.close()
