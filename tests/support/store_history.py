"""Send a store back in time, as a failover that lost commits or a restored backup does: the
interrupt events from a cursor on are gone (with the pending rows they added), and the store
numbers its next event with that cursor again. Both backends, bypassing the server."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tests.conftest import run_sql
from tests.support.sidecar import StoreSpec

__all__ = ["lose_events_from"]


def lose_events_from(spec: StoreSpec, cursor: int, executions: Sequence[str]) -> None:
    """Delete the events from ``cursor`` on and the pending rows of ``executions`` (whose
    recording was lost with them); the next event the store writes gets ``cursor``."""
    if spec.backend == "sqlite":
        with sqlite3.connect(spec.url.removeprefix("sqlite://"), timeout=30) as conn:
            conn.execute("DELETE FROM interrupt_events WHERE cursor >= ?", (cursor,))
            conn.executemany(
                "DELETE FROM pending_interrupts WHERE execution_id = ?",
                [(execution,) for execution in executions],
            )
            conn.execute(
                "UPDATE sqlite_sequence SET seq = ? WHERE name = 'interrupt_events'",
                (cursor - 1,),
            )
        return
    schema = f'"{spec.pg_schema}"'
    run_sql(
        spec.url,
        "BEGIN",
        f"DELETE FROM {schema}.interrupt_events WHERE cursor >= {int(cursor)}",
        *(
            f"DELETE FROM {schema}.pending_interrupts WHERE execution_id = '{execution}'"
            for execution in executions
        ),
        f"ALTER TABLE {schema}.interrupt_events ALTER COLUMN cursor RESTART WITH {int(cursor)}",
        "COMMIT",
    )
