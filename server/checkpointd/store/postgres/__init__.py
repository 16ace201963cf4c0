"""The Postgres backend: the store over an asyncpg pool (see :mod:`.store`)."""

from checkpointd.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
