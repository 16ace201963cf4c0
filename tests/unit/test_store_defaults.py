"""A store built without settings behaves as the server's defaults say."""

from __future__ import annotations

import inspect

from checkpointd.config import Settings
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore


def _defaults(cls: type) -> dict[str, object]:
    return {
        name: p.default
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_store_constructor_defaults_are_the_settings_defaults() -> None:
    """The timeout, SQLite busy timeout and Postgres pool, schema and poll interval default to
    the values Settings documents, so a store made in a test or a tool acts like the server's."""
    settings = Settings(store="sqlite:///tmp/unused.db")
    assert _defaults(SQLiteStore) == {
        "busy_timeout_ms": settings.sqlite_busy_timeout_ms,
        "timeout": settings.store_timeout,
    }
    postgres = _defaults(PostgresStore)
    assert {k: postgres[k] for k in ("schema", "min_pool_size", "max_pool_size", "timeout")} == {
        "schema": settings.pg_schema,
        "min_pool_size": settings.pg_pool_min,
        "max_pool_size": settings.pg_pool_max,
        "timeout": settings.store_timeout,
    }
    assert postgres["poll_interval"] == settings.pg_poll_interval
