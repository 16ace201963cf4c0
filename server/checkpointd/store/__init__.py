"""Store backends behind one protocol: SQLite (embedded default) and Postgres."""

from checkpointd.store.base import CheckpointExists, Store, StoreError, StoreUnavailable

__all__ = ["CheckpointExists", "Store", "StoreError", "StoreUnavailable"]
