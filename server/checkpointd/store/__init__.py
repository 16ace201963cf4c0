"""Store backends behind one abstract class, :class:`checkpointd.store.interface.Store`
(not imported here: the errors below are imported by modules that the shared store code
imports in turn): SQLite (embedded default) and Postgres."""

from checkpointd.store.base import CheckpointExists, StoreError, StoreUnavailable

__all__ = ["CheckpointExists", "StoreError", "StoreUnavailable"]
