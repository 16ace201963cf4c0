"""A pytest plugin that runs fastaiagent's own tests with checkpointd standing in for its
``SQLiteCheckpointer``.

Loaded with ``-p fastaiagent_standin`` into a pytest run over fastaiagent 1.94.0's sdist tests
(see ``test_fastaiagent_suite.py``). Before the tests are collected it replaces
``fastaiagent.checkpointers.sqlite.SQLiteCheckpointer`` with :class:`SidecarStandIn`, a
``SidecarCheckpointer`` on the server named by ``$CHECKPOINTD_PEER_TARGET``. Every store the
tests build, and every default store fastaiagent builds for a chain or agent, then lives in
checkpointd: one namespace per database path, so two stores opened on one path (a "restart")
share their data as two ``SQLiteCheckpointer`` on one file do.

The tests inspect a store with ``store._conn().fetchall(sql)`` against the reference's
columns. For that the stand-in offers a read-only view: the namespace's rows, read straight
from checkpointd's database (``$CHECKPOINTD_PEER_STORE_URL``, and for Postgres
``$CHECKPOINTD_PEER_PG_SCHEMA``), laid out under the reference's table and column names in an
in-memory SQLite database on each query. Statements that write raise.

This module is imported by name from a process whose ``tests`` package is fastaiagent's, so it
imports nothing from ours.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from checkpointd_client import RetryPolicy
from checkpointd_client.fastaiagent import SidecarCheckpointer

_TARGET = os.environ["CHECKPOINTD_PEER_TARGET"]
_BACKEND = os.environ["CHECKPOINTD_PEER_BACKEND"]
_STORE_URL = os.environ["CHECKPOINTD_PEER_STORE_URL"]
_PG_SCHEMA = os.environ.get("CHECKPOINTD_PEER_PG_SCHEMA", "checkpointd")

# The reference's layout (fastaiagent.ui.db), filled from checkpointd's tables; rowid is the
# store's sequence, which is what the reference's rowid orders by.
_VIEW_SCHEMA = """
CREATE TABLE checkpoints (
    id TEXT, checkpoint_id TEXT, parent_checkpoint_id TEXT, chain_name TEXT,
    execution_id TEXT, node_id TEXT, node_index INTEGER, step_type TEXT, status TEXT,
    state_snapshot TEXT, node_input TEXT, node_output TEXT, iteration INTEGER,
    iteration_counters TEXT, interrupt_reason TEXT, interrupt_context TEXT, agent_path TEXT,
    created_at TEXT, project_id TEXT, synced INTEGER, sync_error TEXT);
CREATE TABLE pending_interrupts (
    execution_id TEXT, chain_name TEXT, node_id TEXT, reason TEXT, context TEXT,
    agent_path TEXT, created_at TEXT, project_id TEXT);
CREATE TABLE idempotency_cache (
    execution_id TEXT, function_key TEXT, result TEXT, created_at TEXT, project_id TEXT);
"""

_CHECKPOINTS = (
    "SELECT sequence, checkpoint_id, parent_checkpoint_id, chain_name, execution_id, node_id, "
    "node_index, step_type, status, state_snapshot_json, node_input_json, node_output_json, "
    "iteration, iteration_counters_json, interrupt_reason, interrupt_context_json, agent_path, "
    "created_at, synced_at IS NOT NULL, sync_error FROM {t}checkpoints WHERE namespace = {p}"
)
_PENDING = (
    "SELECT execution_id, chain_name, node_id, reason, context_json, agent_path, created_at "
    "FROM {t}pending_interrupts WHERE namespace = {p}"
)
_IDEMPOTENCY = (
    "SELECT execution_id, key, result_json, created_at FROM {t}idempotency_results "
    "WHERE namespace = {p}"
)


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return datetime.fromtimestamp(int(value) / 1_000_000, tz=UTC).isoformat()


def _read_store(namespace: str) -> tuple[list[tuple[Any, ...]], ...]:
    """The namespace's checkpoints, pending interrupts and idempotency rows, as stored."""
    queries = (_CHECKPOINTS, _PENDING, _IDEMPOTENCY)
    if _BACKEND == "sqlite":
        conn = sqlite3.connect(_STORE_URL.removeprefix("sqlite://"), timeout=30)
        try:
            return tuple(
                [tuple(r) for r in conn.execute(q.format(t="", p="?"), (namespace,))]
                for q in queries
            )
        finally:
            conn.close()

    import asyncpg

    async def read() -> tuple[list[tuple[Any, ...]], ...]:
        conn = await asyncpg.connect(_STORE_URL, timeout=10)
        try:
            out = []
            for q in queries:
                rows = await conn.fetch(q.format(t=f'"{_PG_SCHEMA}".', p="$1"), namespace)
                out.append([tuple(r) for r in rows])
            return tuple(out)
        finally:
            await conn.close()

    # On a thread of its own: the caller may be inside a running event loop (an async test).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, read()).result()


class _ReadOnlyView:
    """``SQLiteHelper``'s read methods over a fresh copy of the namespace's rows."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def _snapshot(self) -> sqlite3.Connection:
        checkpoints, pending, idempotency = _read_store(self._namespace)
        mem = sqlite3.connect(":memory:")
        mem.row_factory = sqlite3.Row
        mem.executescript(_VIEW_SCHEMA)
        for r in checkpoints:
            mem.execute(
                "INSERT INTO checkpoints (rowid, id, checkpoint_id, parent_checkpoint_id, "
                "chain_name, execution_id, node_id, node_index, step_type, status, "
                "state_snapshot, node_input, node_output, iteration, iteration_counters, "
                "interrupt_reason, interrupt_context, agent_path, created_at, project_id, "
                "synced, sync_error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
                (r[0], r[1], *r[1:17], _iso(r[17]), int(bool(r[18])), r[19]),
            )
        for r in pending:
            mem.execute(
                "INSERT INTO pending_interrupts VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (*r[:6], _iso(r[6])),
            )
        for r in idempotency:
            mem.execute(
                "INSERT INTO idempotency_cache VALUES (?, ?, ?, ?, NULL)", (*r[:3], _iso(r[3]))
            )
        return mem

    def fetchall(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        mem = self._snapshot()
        try:
            return [dict(r) for r in mem.execute(sql, params).fetchall()]
        finally:
            mem.close()

    def fetchone(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Any = ()) -> Any:
        raise NotImplementedError("the checkpointd stand-in's SQL view is read-only")

    def close(self) -> None:
        return None


class SidecarStandIn(SidecarCheckpointer):
    """``SQLiteCheckpointer(db_path)`` served by checkpointd: one namespace per path."""

    def __init__(self, db_path: str | None = None, **_: Any) -> None:
        if db_path is None:
            from fastaiagent._internal.config import get_config

            db_path = str(get_config().resolved_checkpoint_db_path)
        self.db_path = db_path
        # An in-memory database is private to the store that opened it.
        key = f"{db_path}#{uuid.uuid4()}" if str(db_path) == ":memory:" else str(db_path)
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        super().__init__(_TARGET, namespace=f"fa-{digest}", retry=RetryPolicy(max_attempts=5))

    def _conn(self) -> _ReadOnlyView:
        return _ReadOnlyView(self._namespace)


def pytest_configure(config: pytest.Config) -> None:
    """Swap the class in before any test module imports it, wherever fastaiagent has already
    bound the name (``fastaiagent.SQLiteCheckpointer`` included)."""
    import sys

    import fastaiagent
    import fastaiagent.checkpointers.sqlite as module

    original = module.SQLiteCheckpointer
    for name, loaded in list(sys.modules.items()):
        if (name == "fastaiagent" or name.startswith("fastaiagent.")) and getattr(
            loaded, "SQLiteCheckpointer", None
        ) is original:
            loaded.SQLiteCheckpointer = SidecarStandIn  # type: ignore[attr-defined]
    installed: object = fastaiagent.SQLiteCheckpointer
    assert installed is SidecarStandIn
