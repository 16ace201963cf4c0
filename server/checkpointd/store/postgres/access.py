"""What the parts that share the Postgres store's database borrow from it: its pool and its
schema.

The graph store borrows connections from the store's pool (the same error translation, the same
PgBouncer rules: unprepared statements when pooled, no session state) and writes in the
store's schema.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from checkpointd.store.statements import EventWriter, RunsBody

__all__ = ["PostgresAccess"]


@dataclass(frozen=True, slots=True)
class PostgresAccess:
    """The Postgres store's machinery, lent to the parts that share its database."""

    connection: Callable[[], AbstractAsyncContextManager[Any]]
    """Lends a pooled connection; driver failures become store errors."""
    quoted_schema: str
    """The schema of the store's tables, quoted."""
    transaction: RunsBody
    """One transaction on a pooled connection, its after-commit callbacks called once it
    has committed."""
    read: RunsBody
    """Reads on a pooled connection, each statement seeing the last committed state."""
    snapshot: RunsBody
    """Reads in one read-only REPEATABLE READ transaction: every statement sees one state."""
    append_event: EventWriter
    """Appends a pending-interrupt event on a transaction's
    :class:`~checkpointd.store.postgres.statements.PgStatements`; the last statements of the
    transaction."""
