"""The interrupt-event outbox (contract I5), the pending listing and the pending snapshot of a
watch, as both backends read them: the same statements but for table names and placeholders,
the same loops. Each backend opens the transaction (its own isolation and locking) and hands in a
``fetch`` that runs one statement in it; :class:`OutboxReads` is the store's methods over them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checkpointd.domain import EventPage, Page, PendingFilter, PendingRecord, SnapshotPage
from checkpointd.store import budget, filters, rows
from checkpointd.store.base import StoreError
from checkpointd.store.columns import (
    DECIDED_PENDING_COLUMNS,
    EVENT_COLUMNS,
    EVENT_PENDING_COLUMNS,
    MAX_SEQUENCE,
)
from checkpointd.store.filters import conditions
from checkpointd.store.statements import Statements, StatementStore

__all__ = [
    "Fetch",
    "OutboxReads",
    "OutboxSql",
    "event_bounds",
    "purge_event_batch",
    "purge_in_batches",
    "read_event_page",
    "snapshot_page",
]

#: Run one statement with its parameters in the caller's transaction; return its rows.
Fetch = Callable[[str, Sequence[Any]], Awaitable[Sequence[rows.Row]]]
#: Run one statement; return how many rows it changed.
Run = Callable[[str, Sequence[Any]], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class OutboxSql:
    """A backend's outbox statements, built from its table names, its stored-size
    expressions and its placeholders (``number`` turns ``?`` into the backend's own)."""

    pending_table: str
    events_table: str
    decisions_table: str
    pending_size: str
    event_size: str
    prefix: filters.PrefixMatch
    number: Callable[[str], str]
    #: purged_through, latest: the outbox's bounds (latest may lag purged_through).
    bounds: str
    #: Parameters: cursor.
    purge_through: str
    raise_purged_through: str

    def events(self, columns: str, *, of_namespace: bool) -> str:
        """Events (or their sizes) after a cursor and up to another, oldest first.
        Parameters: [namespace,] after, up to, limit."""
        scope = "namespace = ? AND " if of_namespace else ""
        return self.number(
            f"SELECT {columns} FROM {self.events_table} "
            f"WHERE {scope}cursor > ? AND cursor <= ? ORDER BY cursor LIMIT ?"
        )

    @property
    def events_head(self) -> str:
        """The oldest events' cursors and times. Parameters: limit."""
        return self.number(
            f"SELECT cursor, event_at FROM {self.events_table} ORDER BY cursor LIMIT ?"
        )

    def _added_after(self) -> str:
        # A row was added after the snapshot cursor exactly when its `added` event has a
        # cursor above it (events commit in cursor order).
        return (
            f" AND NOT EXISTS (SELECT 1 FROM {self.events_table} AS a "
            "WHERE a.namespace = p.namespace AND a.cursor > ? AND a.kind = 'added' "
            "AND a.sequence = p.sequence)"
        )

    def pending(self, where: str, *, sizes: bool, added_before_cursor: bool = False) -> str:
        """The rows pending now, newest first; each with the decision on its pause, as a
        listing returns it (K1), or (``sizes``) its sequence and size. With
        ``added_before_cursor``: only those not added after a cursor (a snapshot's).
        Parameters: namespace, below, above, filters..., [cursor,] limit."""
        if sizes:
            selection = f"SELECT {self.pending_size} FROM {self.pending_table} AS p"
        else:
            selection = (
                f"SELECT {DECIDED_PENDING_COLUMNS} FROM {self.pending_table} AS p "
                f"LEFT JOIN {self.decisions_table} AS d ON d.namespace = p.namespace "
                "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id "
                "AND d.interrupt_id = p.interrupt_id"
            )
        added = self._added_after() if added_before_cursor else ""
        return self.number(
            f"{selection} WHERE p.namespace = ? AND p.sequence < ? AND p.sequence > ?"
            f"{where}{added} ORDER BY p.sequence DESC LIMIT ?"
        )

    def snapshot_gone(self, where: str, *, sizes: bool) -> str:
        """The rows pending at the cursor and claimed or removed since, rebuilt from their
        events (which carry the whole row). Parameters: namespace, below, above,
        filters..., cursor, cursor, limit."""
        columns = self.pending_size if sizes else EVENT_PENDING_COLUMNS
        return self.number(
            f"SELECT {columns} FROM {self.events_table} AS p "
            f"WHERE namespace = ? AND sequence < ? AND sequence > ?{where} "
            f"AND p.cursor > ? AND p.kind IN ('claimed', 'removed'){self._added_after()} "
            "ORDER BY p.sequence DESC LIMIT ?"
        )


async def event_bounds(fetch: Fetch, sql: OutboxSql) -> tuple[int, int]:
    """The outbox's purged-through cursor and its latest cursor (never below the former)."""
    found = await fetch(sql.bounds, ())
    if not found:  # cannot happen: migration 2 writes the row
        raise StoreError("the interrupt_events_purged row is missing")
    purged_through = int(found[0]["purged_through"])
    return purged_through, max(purged_through, int(found[0]["latest"]))


async def read_event_page(
    fetch: Fetch,
    sql: OutboxSql,
    read_time: rows.TimeReader,
    *,
    after_cursor: int,
    up_to_cursor: int | None,
    limit: int,
    namespace: str | None,
    max_bytes: int | None,
) -> EventPage:
    """Up to ``limit`` events after ``after_cursor`` (and up to ``up_to_cursor``) within
    ``max_bytes`` (sizes first, then only the events that fit), with the outbox's bounds;
    the caller runs it in one read transaction."""
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    upper = MAX_SEQUENCE if up_to_cursor is None else up_to_cursor
    found: Sequence[rows.Row] = []
    more = False
    purged_through, latest = await event_bounds(fetch, sql)
    if limit > 0 and upper > after_cursor:
        scope: tuple[str, ...] = () if namespace is None else (namespace,)
        of_namespace = namespace is not None
        sizes = await fetch(
            sql.events(sql.event_size, of_namespace=of_namespace),
            (*scope, after_cursor, upper, limit + 1),
        )
        taken = budget.fit((int(row[1]) for row in sizes), limit, max_bytes)
        more = len(sizes) > taken
        if taken:
            through = int(sizes[taken - 1][0])
            found = await fetch(
                sql.events(EVENT_COLUMNS, of_namespace=of_namespace),
                (*scope, after_cursor, through, taken),
            )
    return EventPage(
        events=[rows.event_from_row(row, read_time) for row in found],
        purged_through=purged_through,
        latest_cursor=latest,
        more=more,
    )


async def purge_event_batch(
    fetch: Fetch, run: Run, sql: OutboxSql, cutoff: Any, batch_size: int
) -> tuple[int, int]:
    """Delete the oldest events up to the first one written at or after ``cutoff`` (in the
    backend's time form), at most ``batch_size``, in the caller's write transaction; return
    how many were due and how many this batch deleted."""
    due = 0
    through = 0
    for row in await fetch(sql.events_head, (batch_size,)):
        if row["event_at"] >= cutoff:
            break
        due += 1
        through = int(row["cursor"])
    deleted = 0
    if due:
        deleted = await run(sql.purge_through, (through,))
        await run(sql.raise_purged_through, (through,))
    return due, deleted


async def purge_in_batches(
    batch: Callable[[], Awaitable[tuple[int, int]]], *, batch_size: int
) -> int:
    """Run purge batches (each its own transaction) until one finds less than a batch due;
    return how many events went."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    purged = 0
    while True:
        due, deleted = await batch()
        purged += deleted
        if due < batch_size:
            return purged


async def snapshot_page(
    fetch: Fetch,
    sql: OutboxSql,
    read_time: rows.TimeReader,
    namespace: str,
    pending_filters: PendingFilter,
    *,
    as_of_cursor: int,
    before_sequence: int | None,
    limit: int,
    max_bytes: int | None,
) -> SnapshotPage:
    """A page of the pending set as it was at ``as_of_cursor``, newest first: the rows pending
    now that were not added after it, plus the rows claimed or removed after it; the caller
    runs it in one read transaction."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    where, params = filters.conditions(pending_filters, sql.prefix)
    high = MAX_SEQUENCE if before_sequence is None else before_sequence
    after = as_of_cursor
    purged_through, _ = await event_bounds(fetch, sql)
    now = await fetch(
        sql.pending(where, sizes=True, added_before_cursor=True),
        [namespace, high, 0, *params, after, limit + 1],
    )
    gone = await fetch(
        sql.snapshot_gone(where, sizes=True),
        [namespace, high, 0, *params, after, after, limit + 1],
    )
    sizes = budget.merge_newest_first(
        [(int(r[0]), int(r[1])) for r in now], [(int(r[0]), int(r[1])) for r in gone]
    )
    taken = budget.fit((size for _, size in sizes), limit, max_bytes)
    found: dict[int, PendingRecord] = {}
    if taken:
        low = sizes[taken - 1][0] - 1
        for row in await fetch(
            sql.pending(where, sizes=False, added_before_cursor=True),
            [namespace, high, low, *params, after, taken],
        ):
            found[int(row["sequence"])] = rows.pending_from_row(row, read_time, with_decision=True)
        for row in await fetch(
            sql.snapshot_gone(where, sizes=False),
            [namespace, high, low, *params, after, after, taken],
        ):
            found.setdefault(int(row["sequence"]), rows.pending_from_row(row, read_time))
    return SnapshotPage(
        rows=[found[sequence] for sequence in sorted(found, reverse=True)],
        more=len(sizes) > taken,
        purged_through=purged_through,
    )


class OutboxReads(StatementStore):
    """The outbox and pending-listing methods of :class:`~checkpointd.store.interface.Store`
    over the backend's :class:`OutboxSql`: each outbox read one read transaction
    (every statement sees one state), each purge batch one write transaction."""

    _outbox_sql: OutboxSql

    async def snapshot_pending(
        self,
        namespace: str,
        filters: PendingFilter,
        *,
        as_of_cursor: int,
        before_sequence: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> SnapshotPage:
        """Return a page of the pending rows matching the filters as they were when the
        outbox's latest cursor was ``as_of_cursor``: those with sequence < ``before_sequence``
        (all when None), newest first, at most ``limit`` of them and within ``max_bytes``.

        Paged this way, a snapshot read in many pages at different times is still the pending
        set at one cursor, so the events with a higher cursor are exactly the changes made
        after it. Each page is one consistent read (one read transaction, see
        :func:`snapshot_page`): rows pending now whose ``added`` event has a cursor above
        ``as_of_cursor`` are left out (they were added later; events commit in cursor order),
        and rows whose ``claimed``/``removed`` event is above it, and whose ``added`` event is
        not, are put back from that event (which carries the whole row). Every change of the
        pending set writes its event in the same transaction (I1), so nothing else can differ.
        A page is only right while those events are kept: when the result's
        ``purged_through`` is above ``as_of_cursor`` the caller must start a new snapshot.
        """

        async def body(conn: Statements) -> SnapshotPage:
            return await snapshot_page(
                conn.fetch,
                self._outbox_sql,
                self._read_time,
                namespace,
                filters,
                as_of_cursor=as_of_cursor,
                before_sequence=before_sequence,
                limit=limit,
                max_bytes=max_bytes,
            )

        return await self._in_snapshot(body)

    async def list_pending(
        self,
        namespace: str,
        *,
        before_sequence: int | None,
        limit: int,
        filters: PendingFilter,
        max_bytes: int | None = None,
    ) -> Page[PendingRecord]:
        """Return up to ``limit`` pending rows with sequence < ``before_sequence`` (all when
        None), newest (highest sequence) first, matching every set filter (an empty
        ``agent_path_prefix`` matches every row), within ``max_bytes`` as
        :meth:`~checkpointd.store.checkpoints.CheckpointReads.list_checkpoints` reads them."""
        sql = self._outbox_sql
        where, params = conditions(filters, sql.prefix)

        def listing(sizes: bool) -> budget.Listing:
            statement = sql.pending(where, sizes=sizes)
            return lambda low, high, count: (statement, [namespace, high, low, *params, count])

        found, more = await self._listing_page(
            listing(True),
            listing(False),
            above=0,
            below=MAX_SEQUENCE if before_sequence is None else before_sequence,
            limit=limit,
            max_bytes=max_bytes,
        )
        return Page((self._decided(row) for row in found), more=more)

    async def read_events(
        self,
        *,
        after_cursor: int,
        up_to_cursor: int | None,
        limit: int,
        namespace: str | None,
        max_bytes: int | None = None,
    ) -> EventPage:
        """Return up to ``limit`` events with ``after_cursor < cursor <= up_to_cursor`` (no
        upper bound when None), ascending, of one namespace (every namespace when None),
        together with the outbox's bounds, all read in one consistent snapshot (one read
        transaction). ``limit`` 0 reads only the bounds. Only the leading events whose sizes
        fit ``max_bytes`` are read (at least one), as
        :meth:`~checkpointd.store.checkpoints.CheckpointReads.list_checkpoints` reads rows;
        ``more`` says whether events up to ``up_to_cursor`` were left out.

        Events commit in cursor order, so once a reader has seen cursor N no event with a
        smaller cursor can appear later.
        """
        if limit == 0:
            # Only the bounds (the watch reader's look while no stream is open, once a second
            # on an idle server): one statement sees one state by itself, so it needs no
            # transaction (on Postgres, no BEGIN and COMMIT round trips).
            purged_through, latest = await self._in_read(
                lambda conn: event_bounds(conn.fetch, self._outbox_sql)
            )
            return EventPage(
                events=[], purged_through=purged_through, latest_cursor=latest, more=False
            )

        async def body(conn: Statements) -> EventPage:
            return await read_event_page(
                conn.fetch,
                self._outbox_sql,
                self._read_time,
                after_cursor=after_cursor,
                up_to_cursor=up_to_cursor,
                limit=limit,
                namespace=namespace,
                max_bytes=max_bytes,
            )

        return await self._in_snapshot(body)

    async def purge_events(self, written_before: datetime, *, batch_size: int) -> int:
        """Delete the oldest events, in cursor order, up to the first one written at or after
        ``written_before``; record the highest deleted cursor as ``purged_through``. Deletes at
        most ``batch_size`` rows per transaction; returns how many went."""
        cutoff = self._write_time(written_before)

        async def body(conn: Statements) -> tuple[int, int]:
            return await purge_event_batch(
                conn.fetch, conn.run, self._outbox_sql, cutoff, batch_size
            )

        return await purge_in_batches(lambda: self._in_transaction(body), batch_size=batch_size)
