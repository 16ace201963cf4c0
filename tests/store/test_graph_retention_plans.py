"""G12: the retention's listings read an index alone (never the checkpoints' bodies), and the
values a cut leaves unnamed are found with one read of the kept checkpoints' versions, not
one per value, on Postgres and SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from checkpointd.store.postgres import PostgresStore
from checkpointd.store.postgres.graph_retention import RetentionSql
from checkpointd.store.schema import load_migrations
from checkpointd.store.sqlite import graph_retention as rsql
from checkpointd.store.sqlite.sql import CREATE_SCHEMA_MIGRATIONS, split_statements

CUTOFF = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
async def store(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_dsn, schema=pg_schema)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.mark.postgres
async def test_g12_retention_plans_on_postgres(store: PostgresStore, pg_dsn: str) -> None:
    """On 200 threads of 50 checkpoints: the listings scan graph_checkpoints_by_thread_written
    (index only once vacuumed); the unnamed values' delete hashes the kept names."""
    s = f'"{store.schema}"'
    raw = await asyncpg.connect(pg_dsn, timeout=10)
    try:
        await raw.execute(
            f"""INSERT INTO {s}.graph_checkpoints
                SELECT 'ns', 't' || (i % 200), '', lpad(i::text, 8, '0'), '', 'json',
                       decode(repeat('7b', 2000), 'hex'), '{{}}',
                       jsonb_build_object('a', i::text), '', now()
                FROM generate_series(1, 10000) AS i"""
        )
        await raw.execute(
            f"""INSERT INTO {s}.graph_blobs
                SELECT 'ns', 't' || (i % 200), '', 'a', i::text, 'json', '\\x31'
                FROM generate_series(1, 10000) AS i"""
        )
        await raw.execute(f"VACUUM ANALYZE {s}.graph_checkpoints")
        await raw.execute(f"ANALYZE {s}.graph_blobs")
        sql = RetentionSql(s)
        # On a table this small Postgres may rightly read it whole; what is proved is that
        # the index alone answers the listings (no body is read), as on a large table.
        await raw.execute("SET enable_seqscan = off")
        for name, query, args in [
            ("idle_threads", sql.idle_threads, ("ns", "", CUTOFF, 100)),
            ("crowded", sql.crowded, ("ns", "", "", 5, 100)),
        ]:
            plan = "\n".join(r[0] for r in await raw.fetch("EXPLAIN " + query, *args))
            # Index only, unless another session's open transaction kept VACUUM from
            # marking the pages all-visible (the suite runs in parallel on one cluster).
            assert "graph_checkpoints_by_thread_written" in plan, f"{name}:\n{plan}"
            assert "Seq Scan" not in plan, f"{name}:\n{plan}"
        plan = "\n".join(
            r[0] for r in await raw.fetch("EXPLAIN " + sql.delete_unnamed_values, "ns", "t7", "")
        )
        assert "hashed SubPlan" in plan, plan
        assert "Seq Scan on graph_blobs" not in plan, plan
    finally:
        await raw.close()


def test_g12_retention_plans_on_sqlite(tmp_path: Path) -> None:
    """The listings read the covering index; the kept names are a list built once."""
    conn = sqlite3.connect(tmp_path / "plans.db")
    try:
        conn.execute(CREATE_SCHEMA_MIGRATIONS)
        for migration in load_migrations("sqlite"):
            for statement in split_statements(migration.sql):
                conn.execute(statement)
        conn.executemany(
            "INSERT INTO graph_checkpoints VALUES "
            "('ns', ?, '', ?, '', 'json', zeroblob(2000), '{}', ?, '', 0, '')",
            [(f"t{i % 200}", f"{i:08d}", f'{{"a": "{i}"}}') for i in range(10000)],
        )
        conn.execute("ANALYZE")
        cases: list[tuple[str, str, Any]] = [
            (
                "idle_threads",
                rsql.IDLE_THREADS,
                {"namespace": "ns", "after": "", "cutoff": 1, "limit": 100},
            ),
            ("crowded", rsql.CROWDED, ("ns", "", "", 5, 100)),
        ]
        for name, query, args in cases:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, args)]
            assert any(
                "COVERING INDEX graph_checkpoints_by_thread_written" in step for step in plan
            ), f"{name}: {plan}"
        plan = [
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN " + rsql.DELETE_UNNAMED_VALUES, ("ns", "t7", "") * 2
            )
        ]
        assert any(step.startswith("LIST SUBQUERY") for step in plan), plan
        assert not any("CORRELATED" in step for step in plan), plan
    finally:
        conn.close()
