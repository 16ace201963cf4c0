"""The commit floor of a ``put``: the rows the server's ``put`` writes, committed straight
through ``sqlite3`` or ``asyncpg`` in the benchmark process, one row per transaction as the
server commits a lone caller's put.

A server's CPU per ``put`` is a gRPC message plus a commit; the bidi stream floor
(bench/floors.py) measures the first, this the second, so the two together are what a put
would cost a server with nothing of its own in between. Each row is the one a ``put`` of the
benchmark's case writes: its request built as the fastaiagent adapter builds it, read as the
server reads it (``checkpoint_from_proto``, the request's fingerprint), inserted with the
store's own statement (``INSERT ... RETURNING sequence``) on a store the server migrated:

* SQLite: ``BEGIN IMMEDIATE``, the insert, ``COMMIT``, on a connection in WAL mode with
  ``synchronous=FULL`` as the server's writer (its fsync is in the figure, as in the server's).
* Postgres: the insert alone in autocommit, as the server's single-row group commit, on one
  asyncpg connection (the Postgres server's own CPU is in neither figure).

The rows are built before the window opens: only the commit is measured.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint

from checkpointd.convert import checkpoint_from_proto
from checkpointd.domain import CheckpointRecord
from checkpointd.fingerprint import fingerprint
from checkpointd.store import times
from checkpointd.store.columns import checkpoint_params
from checkpointd.store.postgres.sql import Sql, quoted_schema
from checkpointd.store.sqlite import sql as sqlite_sql
from checkpointd_client._convert import checkpoint_to_proto
from checkpointd_client.fastaiagent._models import to_checkpoint
from checkpointd_client.v1 import checkpoint_service_pb2

__all__ = ["NAMESPACE", "PutRow", "postgres_commit", "put_rows", "sqlite_commit"]

#: The namespace the adapter writes to when none is given.
NAMESPACE = "default"


@dataclass(frozen=True)
class PutRow:
    """What the server's put stores for one request: the row, its request id, its
    fingerprint."""

    request_id: str
    record: CheckpointRecord
    fingerprint: str


def put_rows(state: dict[str, Any], count: int) -> list[PutRow]:
    """``count`` rows of one run, each as the server reads a ``put`` of ``state`` from the
    adapter (request id, checkpoint id and fingerprint of its own)."""
    run = f"rawcommit-{uuid.uuid4().hex[:8]}"
    rows = []
    for i in range(count):
        fast = FastCheckpoint(
            execution_id=run,
            node_id=f"n{i}",
            node_index=i,
            state_snapshot=state,
            checkpoint_id=str(uuid.uuid4()),
        )
        request = checkpoint_service_pb2.PutCheckpointRequest(
            namespace=NAMESPACE,
            request_id=uuid.uuid4().hex,
            checkpoint=checkpoint_to_proto(to_checkpoint(fast)),
            view=checkpoint_service_pb2.CHECKPOINT_VIEW_BASIC,
        )
        record = checkpoint_from_proto(
            request.checkpoint, field="checkpoint", now=datetime.now(UTC)
        )
        rows.append(PutRow(request.request_id, record, fingerprint("PutCheckpoint", request)))
    return rows


@contextmanager
def sqlite_commit(path: str, rows: list[PutRow]) -> Iterator[Callable[[int, int], None]]:
    """An operation ``op(worker, i)`` that commits ``rows[i]`` into the SQLite file at
    ``path`` in a transaction of its own."""
    # check_same_thread off: the benchmark's runner calls it from a thread of its own.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row  # as the server's connections
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        assert str(mode).lower() == "wal", mode
        conn.execute("PRAGMA synchronous = FULL")
        params = [
            (
                *checkpoint_params(
                    NAMESPACE, row.request_id, row.record, times.to_us, row.fingerprint
                ),
                NAMESPACE,
                row.request_id,
            )
            for row in rows
        ]

        def op(w: int, i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                written = conn.execute(sqlite_sql.INSERT_CHECKPOINT, params[i]).fetchall()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            assert written, "the row was not written"

        yield op
    finally:
        conn.close()


@asynccontextmanager
async def postgres_commit(
    dsn: str, schema: str, rows: list[PutRow]
) -> AsyncIterator[Callable[[int, int], Any]]:
    """An operation ``await op(worker, i)`` that inserts ``rows[i]`` into ``schema`` in
    autocommit, with the store's single-row statement."""
    statement = Sql(quoted_schema(schema)).insert_checkpoint
    params = [
        checkpoint_params(
            NAMESPACE, row.request_id or None, row.record, times.utc_in, row.fingerprint
        )
        for row in rows
    ]
    conn = await asyncpg.connect(dsn)
    try:

        async def op(w: int, i: int) -> None:
            assert await conn.fetchval(statement, *params[i]) is not None, "not written"

        yield op
    finally:
        await conn.close()
