"""G1 on Postgres: a get reads only its checkpoint's rows. The graph wing's reads plan as
index scans on a store of long threads, so their cost does not grow with a thread's history
(the plans of SQLite's statements are fixed by the same primary keys)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from checkpointd.store.graph import GraphListQuery
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.postgres.graph import PostgresGraphStore
from checkpointd.store.postgres.graph_sql import GraphSql

pytestmark = pytest.mark.postgres

TABLES = ("graph_checkpoints", "graph_blobs", "graph_writes")


@pytest.fixture
async def store(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_dsn, schema=pg_schema)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_g1_graph_reads_use_indexes_whatever_the_history(
    store: PostgresStore, pg_dsn: str
) -> None:
    """Get by id, get the newest and a thread's first page are index scans on 50 threads of
    200 checkpoints, each with two versioned channels and a write."""
    s = f'"{store.schema}"'
    raw = await asyncpg.connect(pg_dsn, timeout=10)
    try:
        await raw.execute(
            f"""INSERT INTO {s}.graph_checkpoints
                SELECT 'ns', 't' || (i % 50), '', lpad(i::text, 8, '0'), '', 'json', '\\x7b7d',
                       jsonb_build_object('step', i),
                       jsonb_build_object('a', i::text, 'b', (i / 10)::text), ''
                FROM generate_series(1, 10000) AS i"""
        )
        await raw.execute(
            f"""INSERT INTO {s}.graph_blobs
                SELECT 'ns', 't' || (i % 50), '', 'a', i::text, 'json', '\\x31'
                FROM generate_series(1, 10000) AS i"""
        )
        await raw.execute(
            f"""INSERT INTO {s}.graph_writes
                SELECT 'ns', 't' || (i % 50), '', lpad(i::text, 8, '0'), 'task', 0, '', 'a',
                       'json', '\\x31'
                FROM generate_series(1, 10000) AS i"""
        )
        await raw.execute(f"ANALYZE {s}.graph_checkpoints, {s}.graph_blobs, {s}.graph_writes")
        sql = GraphSql(f'"{store.schema}"')
        page, params = PostgresGraphStore(store.graph_access())._list_statement(
            "ns", GraphListQuery("t7", "", "", "", ""), None, 16
        )
        cases = [
            ("get_checkpoint", sql.get_checkpoint, ("ns", "t7", "", "00005007")),
            ("get_latest", sql.get_latest, ("ns", "t7", "")),
            ("list_thread", page, tuple(params)),
        ]
        for name, query, args in cases:
            plan = "\n".join(r[0] for r in await raw.fetch("EXPLAIN " + query, *args))
            for table in TABLES:
                assert f"Seq Scan on {table}" not in plan, f"{name} scans {table}:\n{plan}"
            conditions = [line for line in plan.splitlines() if "Index Cond" in line]
            # The checkpoint by its thread (or its id); each value by its channel and version
            # (not every value of the thread); the writes by their checkpoint.
            assert any(
                "thread_id = 't7'" in line or "checkpoint_id = '00005007'" in line
                for line in conditions
            ), plan
            assert any(
                "channel = v.key" in line and "version = v.value" in line for line in conditions
            ), plan
            assert any("checkpoint_id = c.checkpoint_id" in line for line in conditions), plan
    finally:
        await raw.close()
