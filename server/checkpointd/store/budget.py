"""Reading listings within a byte budget (contract B1), the same way in both backends.

A page is read in two steps: first the sequence (or cursor) and the stored size of each
candidate row, which costs a few integers per row whatever the rows hold; then only the rows
that fit both the row limit and the byte budget. So a page of large rows never loads more
than the budget (plus, always, one row, so that paging moves on even when a single row is
larger than the budget). :func:`read_page` is that read, for the checkpoint and pending
listings.

Sizes are the UTF-8 bytes of a row's text columns plus :data:`ROW_OVERHEAD_BYTES`, an upper
bound of what the fixed-size fields and the protobuf framing add, so a page that fits here
also fits the reply the servicer builds from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from checkpointd.domain import PendingRecord

if TYPE_CHECKING:
    from checkpointd.store.statements import Statements

__all__ = [
    "CHECKPOINT_TEXT_COLUMNS",
    "EVENT_TEXT_COLUMNS",
    "PENDING_TEXT_COLUMNS",
    "ROW_OVERHEAD_BYTES",
    "fit",
    "merge_newest_first",
    "pending_bytes",
    "read_page",
]

#: A listing's statement and parameters for the sequences above ``above`` and below
#: ``below``, at most ``limit`` rows.
Listing = Callable[[int, int, int], tuple[str, Sequence[Any]]]

#: More than the tags, lengths, integers, enums and timestamps of one row in a reply.
ROW_OVERHEAD_BYTES: Final = 256

CHECKPOINT_TEXT_COLUMNS: Final = (
    "execution_id",
    "checkpoint_id",
    "parent_checkpoint_id",
    "chain_name",
    "node_id",
    "step_type",
    "status",
    "state_snapshot_json",
    "node_input_json",
    "node_output_json",
    "iteration_counters_json",
    "interrupt_reason",
    "interrupt_context_json",
    "agent_path",
)
PENDING_TEXT_COLUMNS: Final = (
    "execution_id",
    "chain_name",
    "node_id",
    "reason",
    "context_json",
    "agent_path",
    "checkpoint_id",
)
#: An event carries its pending row.
EVENT_TEXT_COLUMNS: Final = PENDING_TEXT_COLUMNS


def fit(sizes: Iterable[int], limit: int, max_bytes: int | None) -> int:
    """How many of the leading rows, of these stored sizes, fit ``limit`` rows and
    ``max_bytes`` (None: no byte budget). At least one row when there is one."""
    taken = 0
    used = 0
    for size in sizes:
        if taken >= limit:
            break
        used += size + ROW_OVERHEAD_BYTES
        if max_bytes is not None and used > max_bytes and taken:
            break
        taken += 1
    return taken


def merge_newest_first(
    *sources: Sequence[tuple[int, int]],
) -> list[tuple[int, int]]:
    """(sequence, size) pairs of several sources, highest sequence first, each sequence once."""
    merged: dict[int, int] = {}
    for source in sources:
        for sequence, size in source:
            merged.setdefault(sequence, size)
    return sorted(merged.items(), reverse=True)


def pending_bytes(pending: PendingRecord) -> int:
    """About what a pending row (or the event carrying it) holds in memory: its text plus the
    fixed overhead, counted against a watch stream's byte budget."""
    return (
        len(pending.execution_id)
        + len(pending.chain_name)
        + len(pending.node_id)
        + len(pending.reason)
        + len(pending.context_json)
        + len(pending.agent_path or "")
        + len(pending.checkpoint_id)
        + ROW_OVERHEAD_BYTES
    )


async def read_page(
    conn: Statements,
    sizes: Listing,
    found: Listing,
    *,
    above: int,
    below: int,
    limit: int,
    max_bytes: int | None,
) -> tuple[list[Any], bool] | None:
    """The rows of a page between ``above`` and ``below`` (exclusive), ordered by sequence,
    and whether rows were left for the next page: first each candidate's sequence and size
    (``sizes``, its first two columns), then only the rows that fit (``found``), read by the
    range of their sequences, so no other row can take a chosen one's place.

    None when every chosen row was deleted between the two reads: the caller reads again
    (:meth:`~checkpointd.store.statements.StatementStore._listing_page`).
    That cannot happen in one snapshot; without one, a backend whose sequences are handed
    out in commit order (SQLite) still reads only chosen rows, as no new row can fall
    inside their range.
    """
    statement, params = sizes(above, below, limit + 1)
    candidates = await conn.fetch(statement, params)
    taken = fit((int(row[1]) for row in candidates), limit, max_bytes)
    if not taken:
        return [], False
    chosen = [int(row[0]) for row in candidates[:taken]]
    statement, params = found(min(chosen) - 1, max(chosen) + 1, taken)
    rows = await conn.fetch(statement, params)
    if not rows:
        return None
    return rows, len(candidates) > taken
