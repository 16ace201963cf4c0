"""The SQLite backend: the embedded default backend (see :mod:`.store`)."""

from checkpointd.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
