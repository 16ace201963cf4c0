"""asyncpg and socket errors as store errors, with messages that hold no SQL or secret."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import asyncpg.exceptions

from checkpointd.store.base import StoreError, StoreUnavailable

__all__ = [
    "READ_ONLY_QUERY",
    "describe",
    "is_broken_connection",
    "read_only_connection",
    "translate",
]


def is_broken_connection(exc: Exception) -> bool:
    """Whether ``exc`` means the connection it came from is unusable (server gone, socket
    error, protocol out of step), as opposed to a timeout that asyncpg cancels cleanly."""
    E = asyncpg.exceptions  # noqa: N806 (a module alias)
    if isinstance(exc, TimeoutError):
        return False
    if isinstance(exc, E.InterfaceError):
        return "clos" in str(exc)  # "connection is closed", "pool is closing", ...
    return isinstance(
        exc,
        OSError
        | E.PostgresConnectionError
        | E.AdminShutdownError
        | E.CrashShutdownError
        | E.CannotConnectNowError
        # A connection to a standby, or to a primary demoted under it by a failover: a new
        # connection may find the new primary (target_session_attrs=read-write).
        | E.ReadOnlySQLTransactionError
        # A FATAL message that arrived while the connection sat idle (its backend was
        # terminated) leaves the protocol waiting for a reply that never comes.
        | E.InternalClientError,
    )


#: True where this connection cannot write: a standby (in recovery) or a session that is read
#: only (a primary being demoted, ``default_transaction_read_only``).
READ_ONLY_QUERY = "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'"


async def read_only_connection(conn: Any) -> NoReturn:
    """Drop ``conn`` (the next connection may reach the new primary) and raise the
    :class:`StoreUnavailable` a write on it would have raised."""
    conn.terminate()
    raise StoreUnavailable(
        "Postgres takes no writes on this connection (a standby, or a primary demoted by a "
        "failover); name every node with target_session_attrs=read-write"
    )


def describe(exc: BaseException, secrets: Sequence[str]) -> str:
    """Return ``Type: first line of message``, shortened and without the ``secrets``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    for secret in secrets:
        text = text.replace(secret, "***")
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def translate(exc: Exception, *, timeout: float, secrets: Sequence[str]) -> StoreError | None:
    """Map a driver or socket error to a store error; None for errors that are not the
    database's (bugs, bad arguments)."""
    E = asyncpg.exceptions  # noqa: N806 (a module alias)
    if isinstance(exc, TimeoutError | E.QueryCanceledError):
        return StoreUnavailable(f"Postgres did not answer within {timeout:g}s")
    if isinstance(
        exc,
        OSError
        | E.PostgresConnectionError
        | E.OperatorInterventionError  # admin shutdown, crash recovery, cannot connect now
        | E.InsufficientResourcesError,  # too many connections, disk full, out of memory
    ):
        return StoreUnavailable(f"Postgres is unavailable: {describe(exc, secrets)}")
    if isinstance(exc, E.ReadOnlySQLTransactionError):
        return StoreUnavailable(
            "Postgres takes no writes on this connection (a standby, or a primary demoted by "
            "a failover); name every node with target_session_attrs=read-write: "
            f"{describe(exc, secrets)}"
        )
    if isinstance(exc, E.TransactionRollbackError):  # serialization failure, deadlock
        return StoreUnavailable(
            f"Postgres aborted a conflicting transaction: {describe(exc, secrets)}"
        )
    if isinstance(exc, E.InternalClientError):
        return StoreUnavailable(
            f"Postgres is unavailable: the connection broke ({type(exc).__name__})"
        )
    if is_broken_connection(exc):
        return StoreUnavailable(f"Postgres is unavailable: {describe(exc, secrets)}")
    if isinstance(exc, E.PostgresError):
        return StoreError(f"Postgres error {exc.sqlstate} ({type(exc).__name__})")
    if isinstance(exc, E.InterfaceError):
        return StoreError(f"Postgres client error ({type(exc).__name__})")
    return None
