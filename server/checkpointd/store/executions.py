"""The executions reader: summaries of the runs of a namespace, for operators (contracts
C11, C12), of both frameworks: fastaiagent runs and LangGraph threads.

It only reads, over the tables of the store it is built on (``checkpoints``,
``pending_interrupts``, ``interrupt_decisions``, ``idempotency_results``, and the graph
tables ``graph_checkpoints`` and ``graph_writes``), through that store's connections
(``SQLiteStore.access``, ``PostgresStore.access``). The statements of the runs
(:class:`ExecutionSql`) and the reads (:class:`ExecutionReader`) are written once; each
backend's ``executions`` module says where its tables are, how its placeholders and times
are written, which connection reads, and gives its own SQL of a thread's summary
(:attr:`ExecutionSql.threads`: it reads JSON metadata and write times its own way).

A fastaiagent run's status, by its rows (C11):

* ``paused``: it has a pending interrupt (decided or not);
* ``failed``: else, its newest checkpoint (by sequence) has status ``failed``;
* ``ended``: else, its newest checkpoint is a ``run_end`` row;
* ``running``: otherwise (between steps, being resumed, or left without a ``run_end`` row).

A LangGraph thread's status, by its rows (C12), LangGraph's own signs read without decoding
a checkpoint:

* ``paused``: it has a pending pause (a pending interrupt with an interrupt id);
* ``failed``: else, its newest root checkpoint (``checkpoint_ns`` empty, the greatest
  checkpoint id) has a pending write on channel ``__error__`` (a task raised);
* ``running``: else, that checkpoint has other pending writes (tasks of the step after it
  finished and the next checkpoint is not written yet), or its metadata ``source`` is
  ``input`` (an input was taken and no step is written yet);
* ``ended``: otherwise. The server does not decode a checkpoint, so it does not know its
  next tasks: a step whose tasks have not written anything yet, and a thread stopped at a
  static breakpoint (``interrupt_before``/``interrupt_after``, which records no pause),
  read ``ended`` too.

The listing reads each framework's summaries with one statement per page and merges them by
last activity: a page position (:class:`ExecutionPosition`) is where each of the two stands.

The namespaces that hold a run (contract N2) are read from the three tables a run leaves
rows in (``checkpoints``, ``pending_interrupts``, ``graph_checkpoints``), each of whose
indexes leads with the namespace: a page of names is one statement that steps from one name
to the next by an index lookup per name (a loose index scan), so its cost grows with the
names listed, not with the rows they hold.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar

from checkpointd.domain import Page, PendingRecord
from checkpointd.paging import MAX_SEQUENCE
from checkpointd.store import rows
from checkpointd.store.columns import DECIDED_PENDING_COLUMNS, DECISION_ROW_COLUMNS, TimeWriter
from checkpointd.store.filters import set_conditions
from checkpointd.store.statements import Body, Statements

__all__ = [
    "ERROR_CHANNEL",
    "MAX_IDEMPOTENCY_KEYS",
    "STATUS_CASE",
    "ExecutionDetail",
    "ExecutionPosition",
    "ExecutionQuery",
    "ExecutionReader",
    "ExecutionSql",
    "ExecutionStatus",
    "ExecutionSummary",
    "Framework",
    "ThreadPosition",
]

T = TypeVar("T")

#: The most idempotency keys an execution's detail lists (the count is always complete).
MAX_IDEMPOTENCY_KEYS: Final = 1000

#: The channel of the write LangGraph stores for a task that raised.
ERROR_CHANNEL: Final = "__error__"

#: The status of a run, in SQL both backends understand: ``c`` is its newest checkpoint,
#: ``p`` its pending interrupt (LEFT JOIN, so NULL when none).
STATUS_CASE: Final = (
    "CASE WHEN p.execution_id IS NOT NULL THEN 'paused' "
    "WHEN c.status = 'failed' THEN 'failed' "
    "WHEN c.step_type = 'run_end' THEN 'ended' "
    "ELSE 'running' END"
)


class ExecutionStatus(enum.StrEnum):
    """Where a run stands; the text :data:`STATUS_CASE` computes."""

    RUNNING = "running"
    PAUSED = "paused"
    ENDED = "ended"
    FAILED = "failed"


class Framework(enum.StrEnum):
    """Which framework wrote a run: whose tables hold it."""

    FASTAIAGENT = "fastaiagent"
    """Its rows are in ``checkpoints``."""
    LANGGRAPH = "langgraph"
    """A thread: its rows are in ``graph_checkpoints``; its execution id is the thread id."""


@dataclass(frozen=True, slots=True)
class ExecutionSummary:
    """One run, as its newest checkpoint and pending interrupt tell (for a thread, see
    :class:`ExecutionSql` for what each field holds)."""

    execution_id: str
    chain_name: str
    """Of the newest checkpoint."""
    status: ExecutionStatus
    checkpoint_count: int
    last_activity_at: datetime
    """The newest checkpoint's created_at."""
    last_checkpoint_id: str
    last_node_id: str
    last_sequence: int
    """The newest checkpoint's sequence: what the runs are ordered and paged by (0 for a
    thread)."""
    framework: Framework = Framework.FASTAIAGENT


@dataclass(frozen=True, slots=True)
class ExecutionQuery:
    """The filters of a listing; None means "any"."""

    chain_name: str | None = None
    """For a thread: its graph's name."""
    status: ExecutionStatus | None = None
    active_since: datetime | None = None
    framework: Framework | None = None


@dataclass(frozen=True, slots=True)
class ThreadPosition:
    """The last thread a listing returned: threads are ordered by last activity, then id."""

    last_activity_at: datetime
    thread_id: str


@dataclass(frozen=True, slots=True)
class ExecutionPosition:
    """Where a listing stands in each framework's runs: after the last one of each it
    returned (None: none returned yet)."""

    run_sequence: int | None = None
    """The newest checkpoint's sequence of the last fastaiagent run returned."""
    thread: ThreadPosition | None = None

    def after(self, page: list[ExecutionSummary]) -> ExecutionPosition:
        """The position once ``page`` (returned from this one) has been read."""
        runs = [s for s in page if s.framework is Framework.FASTAIAGENT]
        threads = [s for s in page if s.framework is Framework.LANGGRAPH]
        return ExecutionPosition(
            run_sequence=runs[-1].last_sequence if runs else self.run_sequence,
            thread=(
                ThreadPosition(threads[-1].last_activity_at, threads[-1].execution_id)
                if threads
                else self.thread
            ),
        )


@dataclass(frozen=True, slots=True)
class ExecutionDetail:
    """One run, with what an operator looks at when it seems stuck."""

    summary: ExecutionSummary
    pending: PendingRecord | None
    """Its (first) pending interrupt with the decision on it, if paused."""
    last_decided: PendingRecord | None
    """Its newest decided pause with the decision, even once resumed."""
    idempotency_keys: list[str] = field(default_factory=list)
    """In key order, at most :data:`MAX_IDEMPOTENCY_KEYS`."""
    idempotency_key_count: int = 0
    pauses: list[PendingRecord] = field(default_factory=list)
    """Every pending pause with its decision, in record order (a thread may have several)."""


class ExecutionSql:
    """The reader's statements on a backend: ``tables`` is the prefix of its table names
    (Postgres: the quoted schema and a dot), ``number`` turns ``?`` into its placeholders,
    ``threads`` is the backend's summary of the namespace's threads.

    ``threads`` takes the namespace as its one parameter and ``{threads_where}`` where a
    caller narrows it to one thread (`` AND thread_id = ?``); it selects, per thread, the
    columns of a summary: ``execution_id`` (the thread id), ``chain_name`` (the graph's name
    where known: the chain name of its pending pause, else of its newest decided pause, else
    its newest root checkpoint's metadata ``graph_name`` or ``graph_id``, else empty),
    ``run_status`` (C12's rule), ``checkpoint_count`` (every ``checkpoint_ns``),
    ``last_activity_at`` (when the server wrote its newest checkpoint, of any
    ``checkpoint_ns``), ``last_checkpoint_id`` (its newest root checkpoint's, or empty),
    ``last_node_id`` (the node of a pending pause, or empty) and ``last_sequence`` (0). The
    caller appends ``WHERE`` conditions on those columns and the order.
    """

    def __init__(self, *, tables: str, number: Callable[[str], str], threads: str) -> None:
        t = tables
        self.number = number
        self.threads = threads
        # Each execution's newest checkpoint (by sequence) and count, with its status.
        # {runs_where} narrows to one execution; the outer WHERE is appended by the caller.
        self.summaries = (
            "WITH runs AS ("
            " SELECT execution_id, max(sequence) AS last_sequence, count(*) AS checkpoint_count"
            f" FROM {t}checkpoints WHERE namespace = ?{{runs_where}} GROUP BY execution_id"
            "), described AS ("
            " SELECT r.execution_id, r.last_sequence, r.checkpoint_count, c.chain_name,"
            " c.node_id AS last_node_id, c.checkpoint_id AS last_checkpoint_id,"
            f" c.created_at AS last_activity_at, {STATUS_CASE} AS run_status"
            f" FROM runs AS r JOIN {t}checkpoints AS c ON c.sequence = r.last_sequence"
            f" LEFT JOIN {t}pending_interrupts AS p"
            " ON p.namespace = ? AND p.execution_id = r.execution_id AND p.interrupt_id = ''"
            ") SELECT * FROM described WHERE last_sequence < ?"
        )
        self.order = " ORDER BY last_sequence DESC LIMIT ?"
        self.thread_order = " ORDER BY last_activity_at DESC, execution_id DESC LIMIT ?"
        # A run's pauses have no interrupt id, a thread's each have one: a run and a thread
        # of the same id never read each other's.
        pending = (
            f"SELECT {DECIDED_PENDING_COLUMNS} FROM {t}pending_interrupts AS p "
            f"LEFT JOIN {t}interrupt_decisions AS d ON d.namespace = p.namespace "
            "AND d.execution_id = p.execution_id AND d.checkpoint_id = p.checkpoint_id "
            "AND d.interrupt_id = p.interrupt_id "
            "WHERE p.namespace = ? AND p.execution_id = ? AND p.interrupt_id {kind} '' "
            "ORDER BY p.sequence, p.interrupt_id"
        )
        newest = (
            f"SELECT {DECISION_ROW_COLUMNS} FROM {t}interrupt_decisions "
            "WHERE namespace = ? AND execution_id = ? AND interrupt_id {kind} '' "
            "ORDER BY sequence DESC LIMIT 1"
        )
        self.pending_of_execution = number(pending.format(kind="="))
        self.pending_of_thread = number(pending.format(kind="<>"))
        self.newest_decision = number(newest.format(kind="="))
        self.newest_thread_decision = number(newest.format(kind="<>"))
        # A thread's decided pauses, newest first, on the decisions' key (namespace,
        # execution_id, ...): its own rows only, whatever the namespace holds.
        self.thread_decisions = number(
            f"SELECT {DECISION_ROW_COLUMNS} FROM {t}interrupt_decisions "
            "WHERE namespace = ? AND execution_id = ? AND interrupt_id <> '' "
            "ORDER BY sequence DESC LIMIT ?"
        )
        self.keys = number(
            f"SELECT key FROM {t}idempotency_results WHERE namespace = ? AND execution_id = ? "
            "ORDER BY key LIMIT ?"
        )
        self.key_count = number(
            f"SELECT count(*) FROM {t}idempotency_results WHERE namespace = ? AND execution_id = ?"
        )
        # The tables a run leaves rows in: a namespace holds a run when one of them has a row.
        held = ("checkpoints", "pending_interrupts", "graph_checkpoints")
        # Per table, the next names after the first ``?``, at most the second ``?`` of them,
        # each found by one index lookup from the last; the three merged in name order.
        steps = ",\n".join(
            f"s{i}(name, n) AS ("
            f"SELECT (SELECT namespace FROM {t}{table} WHERE namespace > ?"
            " ORDER BY namespace LIMIT 1), 1"
            f" UNION ALL SELECT (SELECT namespace FROM {t}{table} WHERE namespace > s{i}.name"
            f" ORDER BY namespace LIMIT 1), s{i}.n + 1 FROM s{i}"
            f" WHERE s{i}.name IS NOT NULL AND s{i}.n < ?)"
            for i, table in enumerate(held)
        )
        merged = " UNION ".join(
            f"SELECT name FROM s{i} WHERE name IS NOT NULL" for i in range(len(held))
        )
        self.namespaces = number(f"WITH RECURSIVE {steps}\n{merged} ORDER BY name LIMIT ?")
        #: The namespaces among a grant's (``{granted}``: one ``CAST(? AS TEXT)`` select per
        #: name, joined by UNION ALL) that hold a run, after ``?``, at most ``?``.
        self.granted_namespaces = (
            "SELECT name FROM ({granted}) AS g WHERE name > ? AND ("
            + " OR ".join(
                f"EXISTS (SELECT 1 FROM {t}{table} WHERE namespace = g.name)" for table in held
            )
            + ") ORDER BY name LIMIT ?"
        )


class ExecutionReader(abc.ABC):
    """Reads execution summaries from a store's tables, over the backend's statements: the
    listing is one read, an execution's detail one snapshot (its parts agree with each
    other)."""

    def __init__(
        self, sql: ExecutionSql, read_time: rows.TimeReader, write_time: TimeWriter
    ) -> None:
        self._sql = sql
        self._read_time = read_time
        self._write_time = write_time

    @abc.abstractmethod
    async def _in_read(self, body: Body[T]) -> T:
        """Run ``body``'s reads."""

    @abc.abstractmethod
    async def _in_snapshot(self, body: Body[T]) -> T:
        """Run ``body``'s reads so that they see one state."""

    def _filters(self, query: ExecutionQuery) -> tuple[str, list[Any]]:
        """The conditions of a listing's set filters, on the summary columns."""
        status, since = query.status, query.active_since
        return set_conditions(
            ("chain_name = ?", query.chain_name),
            ("run_status = ?", None if status is None else status.value),
            ("last_activity_at >= ?", None if since is None else self._write_time(since)),
        )

    def _summaries(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        before_sequence: int | None,
        limit: int,
        execution_id: str | None = None,
    ) -> tuple[str, list[Any]]:
        """The runs' listing SQL and parameters (one run's summary with ``execution_id``)."""
        runs_where, one_run = set_conditions(("execution_id = ?", execution_id))
        sql = self._sql.summaries.format(runs_where=runs_where)
        before = MAX_SEQUENCE if before_sequence is None else before_sequence
        params: list[Any] = [namespace, *one_run, namespace, before]
        return self._listing(sql, params, query, self._sql.order, limit)

    def _thread_summaries(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        after: ThreadPosition | None,
        limit: int,
        thread_id: str | None = None,
    ) -> tuple[str, list[Any]]:
        """The threads' listing SQL and parameters (one thread's with ``thread_id``)."""
        threads_where, one_thread = set_conditions(("thread_id = ?", thread_id))
        sql = self._sql.threads.format(threads_where=threads_where) + " WHERE 1 = 1"
        params: list[Any] = [namespace, *one_thread]
        if after is not None:
            when = self._write_time(after.last_activity_at)
            sql += " AND (last_activity_at < ? OR (last_activity_at = ? AND execution_id < ?))"
            params += [when, when, after.thread_id]
        return self._listing(sql, params, query, self._sql.thread_order, limit)

    def _listing(
        self, sql: str, params: list[Any], query: ExecutionQuery, order: str, limit: int
    ) -> tuple[str, list[Any]]:
        """``sql`` narrowed by the query's filters, in ``order``, at most ``limit`` rows; its
        parameters after ``params``."""
        filters, values = self._filters(query)
        return self._sql.number(sql + filters + order), [*params, *values, limit]

    def _summary(self, row: Any) -> ExecutionSummary:
        return self._from_row(row, int(row["last_sequence"]), Framework.FASTAIAGENT)

    def _thread(self, row: Any) -> ExecutionSummary:
        return self._from_row(row, 0, Framework.LANGGRAPH)  # a thread's rows have no sequence

    def _from_row(self, row: Any, last_sequence: int, framework: Framework) -> ExecutionSummary:
        return ExecutionSummary(
            execution_id=row["execution_id"],
            chain_name=row["chain_name"],
            status=ExecutionStatus(row["run_status"]),
            checkpoint_count=int(row["checkpoint_count"]),
            last_activity_at=self._read_time(row["last_activity_at"]),
            last_checkpoint_id=row["last_checkpoint_id"],
            last_node_id=row["last_node_id"],
            last_sequence=last_sequence,
            framework=framework,
        )

    def _decided(self, found: list[Any]) -> PendingRecord | None:
        if not found:
            return None
        return rows.pending_from_row(found[0], self._read_time, with_decision=True)

    async def list_executions(
        self,
        namespace: str,
        query: ExecutionQuery,
        *,
        after: ExecutionPosition,
        limit: int,
    ) -> Page[ExecutionSummary]:
        """Up to ``limit`` executions after ``after``, newest activity first, matching every
        set filter; ``more`` says whether more matched (one more of each framework is read to
        tell). The runs (by sequence) and the threads (by last activity, then id) are each
        read with one statement and merged by last activity."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        reads: list[tuple[str, list[Any], Callable[[Any], ExecutionSummary]]] = []
        if query.framework in (None, Framework.FASTAIAGENT):
            sql, params = self._summaries(
                namespace, query, before_sequence=after.run_sequence, limit=limit + 1
            )
            reads.append((sql, params, self._summary))
        if query.framework in (None, Framework.LANGGRAPH):
            sql, params = self._thread_summaries(
                namespace, query, after=after.thread, limit=limit + 1
            )
            reads.append((sql, params, self._thread))

        async def body(conn: Statements) -> list[list[ExecutionSummary]]:
            return [
                [build(row) for row in await conn.fetch(sql, params)]
                for sql, params, build in reads
            ]

        found = await self._in_read(body)
        merged = _merge(found)
        return Page(merged[:limit], more=len(merged) > limit)

    async def get_execution(
        self, namespace: str, execution_id: str, framework: Framework | None = None
    ) -> ExecutionDetail | None:
        """The execution's summary, pending interrupts, newest decision and idempotency keys,
        read in one snapshot; None when it has no checkpoint. Without ``framework``: the
        fastaiagent run of that id when it has a checkpoint, else the thread."""
        sql, params = self._summaries(
            namespace, ExecutionQuery(), before_sequence=None, limit=1, execution_id=execution_id
        )
        thread_sql, thread_params = self._thread_summaries(
            namespace, ExecutionQuery(), after=None, limit=1, thread_id=execution_id
        )
        key = (namespace, execution_id)

        async def run(conn: Statements) -> ExecutionDetail | None:
            found = await conn.fetch(sql, params)
            if not found:
                return None
            pending = await conn.fetch(self._sql.pending_of_execution, key)
            decided = await conn.fetch(self._sql.newest_decision, key)
            keys = await conn.fetch(self._sql.keys, (*key, MAX_IDEMPOTENCY_KEYS))
            count = await conn.fetch(self._sql.key_count, key)
            pauses = self._pauses(pending)
            return ExecutionDetail(
                summary=self._summary(found[0]),
                pending=pauses[0] if pauses else None,
                last_decided=self._decided(decided),
                idempotency_keys=[row["key"] for row in keys],
                idempotency_key_count=int(count[0][0]),
                pauses=pauses,
            )

        async def thread(conn: Statements) -> ExecutionDetail | None:
            found = await conn.fetch(thread_sql, thread_params)
            if not found:
                return None
            pending = await conn.fetch(self._sql.pending_of_thread, key)
            decided = await conn.fetch(self._sql.newest_thread_decision, key)
            pauses = self._pauses(pending)
            return ExecutionDetail(
                summary=self._thread(found[0]),
                pending=pauses[0] if pauses else None,
                last_decided=self._decided(decided),
                pauses=pauses,
            )

        async def body(conn: Statements) -> ExecutionDetail | None:
            if framework is Framework.LANGGRAPH:
                return await thread(conn)
            found = await run(conn)
            if found is None and framework is None:
                return await thread(conn)
            return found

        return await self._in_snapshot(body)

    async def list_namespaces(
        self, *, after: str, limit: int, granted: frozenset[str] | None = None
    ) -> Page[str]:
        """Up to ``limit`` names of the namespaces that hold a run (a fastaiagent checkpoint,
        a pending interrupt or a graph checkpoint), after ``after`` in the store's order of
        names; with ``granted``, only those among them. ``more`` says whether more follow."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        if granted is None:
            sql = self._sql.namespaces
            params: list[Any] = [after, limit + 1] * 3 + [limit + 1]
        elif not granted:
            return Page()
        else:
            names = sorted(granted)
            union = " UNION ALL ".join("SELECT CAST(? AS TEXT) AS name" for _ in names)
            sql = self._sql.number(self._sql.granted_namespaces.format(granted=union))
            params = [*names, after, limit + 1]

        async def body(conn: Statements) -> list[str]:
            return [str(row["name"]) for row in await conn.fetch(sql, params)]

        found = await self._in_read(body)
        return Page(found[:limit], more=len(found) > limit)

    async def thread_pauses(
        self, namespace: str, thread_id: str, *, limit: int
    ) -> tuple[list[PendingRecord], Page[PendingRecord]]:
        """A LangGraph thread's pending pauses with the decision on each (record order), and
        its newest ``limit`` decided pauses, newest first (``more``: older ones were left),
        read in one snapshot by the thread's keys: the run view's pauses, exact whatever
        else the namespace holds."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        key = (namespace, thread_id)

        async def body(conn: Statements) -> tuple[list[Any], list[Any]]:
            pending = await conn.fetch(self._sql.pending_of_thread, key)
            decided = await conn.fetch(self._sql.thread_decisions, (*key, limit + 1))
            return pending, decided

        pending, decided = await self._in_snapshot(body)
        return self._pauses(pending), Page(self._pauses(decided[:limit]), more=len(decided) > limit)

    def _pauses(self, found: list[Any]) -> list[PendingRecord]:
        return [rows.pending_from_row(row, self._read_time, with_decision=True) for row in found]


def _merge(listings: list[list[ExecutionSummary]]) -> list[ExecutionSummary]:
    """Each framework's listing (each in its own order) merged newest activity first: at
    each place the head with the later last activity (a run before a thread at the same
    time), so each listing keeps its order and a page is a prefix of each."""
    merged: list[ExecutionSummary] = []
    heads = [0] * len(listings)
    while True:
        best: int | None = None
        for i, listing in enumerate(listings):
            if heads[i] >= len(listing):
                continue
            if best is None or (
                listing[heads[i]].last_activity_at > listings[best][heads[best]].last_activity_at
            ):
                best = i
        if best is None:
            return merged
        merged.append(listings[best][heads[best]])
        heads[best] += 1
