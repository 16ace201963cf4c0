"""Idempotency results (contract D1): the read of a cached result, the same on both backends.
The put stays with each backend's group commit (SQLite: statements in one transaction;
Postgres: one multi-row upsert that records the request ids)."""

from __future__ import annotations

from checkpointd.store.statements import StatementStore

__all__ = ["IdempotencyReads"]


class IdempotencyReads(StatementStore):
    """The idempotency read of :class:`~checkpointd.store.interface.Store`, written once."""

    #: Parameters: namespace, execution id, key; the cached ``result_json``.
    _get_idempotent_sql: str

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        found = await self._query(self._get_idempotent_sql, (namespace, execution_id, key))
        return str(found[0]["result_json"]) if found else None
