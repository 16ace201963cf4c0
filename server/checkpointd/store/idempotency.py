"""Idempotency results (contract D1), what is the same on both backends: the read of a cached
result, and the put's signature with its answer to a request id recorded before. The write
stays with each backend's group commit (SQLite: statements in one transaction; Postgres: one
multi-row upsert that records the request ids)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime

from checkpointd.store import retries
from checkpointd.store.statements import Statements, StatementStore

__all__ = ["IdempotencyResults", "IdempotentPut", "refuse_reused_request_id"]


@dataclass(frozen=True, slots=True)
class IdempotentPut:
    """A result to cache under the execution's ``key``, and the request that sends it: its
    request id names the call (D1), its fingerprint tells a retry from another request under
    that id (C10)."""

    namespace: str
    request_id: str
    execution_id: str
    key: str
    result_json: str
    now: datetime
    fingerprint: str


async def refuse_reused_request_id(
    conn: Statements, fingerprint_of_applied: str, put: IdempotentPut
) -> None:
    """The request id of ``put`` was recorded before: a retry, whose first call's write
    stands, or another request's id, refused with
    :class:`~checkpointd.store.base.RequestIdReused` (C10). ``fingerprint_of_applied`` reads
    the fingerprint recorded with the id (parameters: namespace, request id)."""
    first = await conn.fetch(fingerprint_of_applied, (put.namespace, put.request_id))
    retries.check_fingerprint(put.request_id, first[0][0] if first else None, put.fingerprint)


class IdempotencyResults(StatementStore):
    """The idempotency read and put of :class:`~checkpointd.store.interface.Store`: the read
    written once, the put declared once, its write the backend's."""

    #: Parameters: namespace, execution id, key; the cached ``result_json``.
    _get_idempotent_sql: str

    async def get_idempotent(self, namespace: str, execution_id: str, key: str) -> str | None:
        """Return the cached JSON text, or None when there is none."""
        found = await self._query(self._get_idempotent_sql, (namespace, execution_id, key))
        return str(found[0]["result_json"]) if found else None

    async def put_idempotent(
        self,
        namespace: str,
        request_id: str,
        execution_id: str,
        key: str,
        result_json: str,
        now: datetime,
        *,
        fingerprint: str = "",
    ) -> None:
        """Insert or replace the cached result, with created_at = ``now`` (D1).

        With a non-empty ``request_id`` the id is recorded in ``applied_requests`` (with
        ``applied_at = now``) in the same transaction; when it was already recorded nothing
        is written: a retry is answered like the first call, so a late retry never undoes a
        newer put. An empty ``request_id`` is a plain upsert.
        """
        put = IdempotentPut(namespace, request_id, execution_id, key, result_json, now, fingerprint)
        await self._put_idempotent(put)

    @abc.abstractmethod
    async def _put_idempotent(self, put: IdempotentPut) -> None:
        """Cache the result of ``put`` (see :meth:`put_idempotent`); when its request id was
        recorded before, write nothing and :func:`refuse_reused_request_id`."""
