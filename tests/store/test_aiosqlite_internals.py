"""The aiosqlite internals the SQLite store's fast path uses (store/sqlite/on_thread.py) are
there, and behave as it expects, in the aiosqlite the server's range admits.

``OnThread`` puts ``(future, function)`` on ``Connection._tx`` and reads ``._connection`` and
``._running``, as aiosqlite 0.22's own ``Connection._execute`` does. A private API can change in
any release, so pyproject.toml keeps aiosqlite within 0.22 (``make test-compat`` runs the floor,
0.22.0; the dev lock the newest 0.22) and these tests say what a wider range must still give.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import threading
import tomllib
from importlib.metadata import version
from pathlib import Path

import aiosqlite
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _declared_range() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [spec] = [d for d in project["dependencies"] if Requirement(d).name == "aiosqlite"]
    return Requirement(spec)


def test_the_server_admits_only_the_aiosqlite_series_these_internals_were_read_from():
    """The range is bounded above (a new series may move the internals) and the installed
    aiosqlite is in it."""
    declared = _declared_range()
    assert any(s.operator == "<" for s in declared.specifier), declared
    assert declared.specifier.contains(version("aiosqlite")), (declared, version("aiosqlite"))


def test_execute_queues_a_future_and_a_function_on_tx():
    """aiosqlite's own _execute still does what OnThread._submit copies: it refuses a closed
    connection by ``_running`` and ``_connection``, and queues ``(future, function)``."""
    source = inspect.getsource(aiosqlite.Connection._execute)
    assert "self._tx.put_nowait((future, function))" in source
    assert "if not self._running or not self._connection:" in source


async def test_a_function_queued_on_tx_runs_on_the_connections_thread(tmp_path):
    """Queued as OnThread queues it, a function gets the raw sqlite3 connection on aiosqlite's
    thread and its result through the future; after close the connection says it is closed
    the way OnThread checks."""
    conn = await aiosqlite.connect(tmp_path / "internals.db")
    try:
        raw = conn._connection
        assert isinstance(raw, sqlite3.Connection)
        assert conn._running
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, int]] = loop.create_future()

        def work() -> tuple[int, int]:
            row = raw.execute("SELECT 41 + 1").fetchone()
            return row[0], threading.get_ident()

        conn._tx.put_nowait((future, work))
        answer, thread = await asyncio.wait_for(future, 10)
        assert answer == 42
        assert thread != threading.get_ident()
    finally:
        await conn.close()
    assert not conn._running or conn._connection is None
