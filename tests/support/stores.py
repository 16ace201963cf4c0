"""Store helpers shared by the store tests: a store opened from a StoreSpec, the outbox as
the store reports it, an older schema standing for an older server, and a spy on a group
commit's batches, and rows written as an older server wrote them."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from checkpointd.store.group_commit import GroupCommit
from checkpointd.store.interface import Store
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.sidecar import StoreSpec

__all__ = [
    "OLD_CHECKPOINT",
    "events",
    "insert_raw",
    "open_store",
    "pin_schema",
    "record_batch_sizes",
]

#: A completed checkpoint row as every schema version stores it (format it with namespace,
#: request_id, execution_id and checkpoint_id; see :func:`insert_raw` for ``@s`` and ``@t``).
OLD_CHECKPOINT = (
    "INSERT INTO @scheckpoints (namespace, request_id, execution_id, checkpoint_id, "
    "chain_name, node_id, node_index, status, state_snapshot_json, node_input_json, "
    "node_output_json, iteration, iteration_counters_json, interrupt_context_json, created_at) "
    "VALUES ('{namespace}', {request_id}, '{execution_id}', '{checkpoint_id}', 'c', 'n', 0, "
    "'completed', '{{}}', '{{}}', '{{}}', 0, '{{}}', '{{}}', @t)"
)


def open_store(spec: StoreSpec) -> SQLiteStore | PostgresStore:
    """A store (not yet opened) on the database of ``spec``, reached directly."""
    if spec.backend == "sqlite":
        return SQLiteStore(spec.url.removeprefix("sqlite://"))
    return PostgresStore(spec.url, schema=spec.pg_schema)


async def events(store: Store, namespace: str | None = None) -> list[tuple[str, str, str, str]]:
    """(namespace, kind, execution_id, checkpoint_id) of every event in the outbox, in
    cursor order, read through the store."""
    page = await store.read_events(
        after_cursor=0, up_to_cursor=None, limit=100_000, namespace=namespace
    )
    return [
        (e.namespace, e.kind.value, e.pending.execution_id, e.pending.checkpoint_id)
        for e in page.events
    ]


def pin_schema(monkeypatch: pytest.MonkeyPatch, backend: str, versions: int) -> None:
    """Make the stores of ``backend`` opened from now on apply only their first ``versions``
    migrations, as an older server would; ``monkeypatch.undo()`` lifts it."""
    package = "sqlite" if backend == "sqlite" else "postgres"
    module = importlib.import_module(f"checkpointd.store.{package}.store")
    every = module._load_migrations()
    monkeypatch.setattr(module, "_load_migrations", lambda: every[:versions])


def record_batch_sizes(group: GroupCommit[Any, Any]) -> list[int]:
    """Wrap a store's group commit so the test sees the size of every batch it commits."""
    sizes: list[int] = []

    def recorded(
        commit: Callable[[list[Any]], Awaitable[Sequence[Any]]],
    ) -> Callable[[list[Any]], Awaitable[Sequence[Any]]]:
        async def recording(items: list[Any]) -> Sequence[Any]:
            sizes.append(len(items))
            return await commit(items)

        return recording

    # Both commits: a batch of the group's task, and a lone write's in its caller's task.
    group._commit = recorded(group._commit)
    group._inline = recorded(group._inline)
    return sizes


async def insert_raw(args: dict[str, str], statements: Sequence[str]) -> None:
    """Run SQL on the store of ``args`` (see ``tests.store.test_group_commit._open_args``)
    directly, as a server of a pinned older schema would have written: the store code of
    today writes today's columns. In each statement ``@s`` is the table prefix, ``@t`` a
    time and ``@y`` true, in the backend's spelling."""

    def spelled(statement: str, schema: str, time: str, yes: str) -> str:
        return statement.replace("@s", schema).replace("@t", time).replace("@y", yes)

    if args["backend"] == "sqlite":
        import sqlite3

        with sqlite3.connect(args["path"]) as conn:
            for statement in statements:
                conn.execute(spelled(statement, "", "0", "1"))
        return
    import asyncpg

    pg = await asyncpg.connect(args["dsn"])
    try:
        for statement in statements:
            await pg.execute(spelled(statement, f'"{args["schema"]}".', "now()", "true"))
    finally:
        await pg.close()
