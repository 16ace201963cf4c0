"""G1: a get reads only its checkpoint's rows. The graph store's reads plan as index lookups
on a store of long threads, on Postgres and SQLite, so their cost does not grow with a
thread's history."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from checkpointd.graph.records import GraphListQuery
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.postgres.graph import PostgresGraphStore
from checkpointd.store.postgres.graph_sql import GraphSql
from checkpointd.store.schema import load_migrations
from checkpointd.store.sqlite import graph_sql as gsql
from checkpointd.store.sqlite.sql import split_statements

TABLES = ("graph_checkpoints", "graph_blobs", "graph_writes")


@pytest.fixture
async def store(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_dsn, schema=pg_schema)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.mark.postgres
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
        page, params = PostgresGraphStore(store.access())._list_statement(
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


def test_g1_sqlite_graph_reads_look_up_only_their_checkpoint_rows(tmp_path: Path) -> None:
    """On SQLite too: the checkpoint, each value by (channel, version) and the writes are
    primary-key searches; the thread's other values are never scanned."""
    conn = sqlite3.connect(tmp_path / "plans.db")
    try:
        for migration in load_migrations("sqlite"):
            for statement in split_statements(migration.sql):
                conn.execute(statement)
        conn.executemany(
            "INSERT INTO graph_blobs VALUES ('ns', ?, '', 'a', ?, 'json', x'31')",
            [(f"t{i % 50}", str(i)) for i in range(5000)],
        )
        conn.execute("ANALYZE")
        cases = [
            ("blobs", gsql.BLOBS_OF, ('{"a": "7"}', "ns", "t7", "")),
            ("latest", gsql.GET_LATEST, ("ns", "t7", "")),
            ("get", gsql.GET_CHECKPOINT, ("ns", "t7", "", "c7")),
            ("writes", gsql.WRITES_OF, ("ns", "t7", "", "c7")),
        ]
        for name, query, args in cases:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, args)]
            searches = [step for step in plan if step.startswith("SEARCH")]
            assert searches, f"{name}: {plan}"
            assert not [s for s in plan if s.startswith("SCAN graph_")], f"{name}: {plan}"
            if name == "blobs":
                assert "channel=? AND version=?" in searches[0], plan
    finally:
        conn.close()
