"""The test PgBouncer: a start that fails (here its port taken before it binds it) is retried
on a fresh port in the same directory, and the retry comes up."""

from __future__ import annotations

import socket

import asyncpg
import pytest

from tests.support import pgbouncer as support
from tests.support.pgbouncer import PgBouncer, find_pgbouncer

pytestmark = pytest.mark.postgres


async def test_a_failed_start_is_retried_on_a_fresh_port(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if find_pgbouncer() is None:
        pytest.skip("pgbouncer is not installed")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    free_port = support._free_port
    monkeypatch.setattr(support, "_free_port", lambda: next(ports, None) or free_port())
    try:
        with PgBouncer(pg_dsn) as bouncer:
            assert bouncer.port != taken.getsockname()[1]
            # Transaction pooling: no prepared statements.
            conn = await asyncpg.connect(bouncer.url(), statement_cache_size=0, timeout=10)
            try:
                assert await conn.fetchval("SELECT 1") == 1
            finally:
                await conn.close()
    finally:
        taken.close()
