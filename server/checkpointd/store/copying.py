"""``store copy``: every row of some namespaces from one store to another, SQLite or Postgres
either way, in one transaction on the destination.

The tables are walked generically, from each store's own catalog: every table with a
``namespace`` column is copied row for row (its columns matched by name), so a table a later
migration adds is copied without a change here. What is not generic is listed once, below:
tables that are no namespace's (:data:`STORE_TABLES`), columns named differently per backend
(:data:`RENAMED`), and values each backend spells its own way (times, booleans, an empty
request id), which :func:`convert` turns by the destination's column type.

Numbers that order a store (the checkpoints' ``sequence``, which pending rows, claims,
decisions and events also carry, and the events' ``cursor``) are kept when the destination
holds no rows yet, and the destination's counters are set past the source's, so a watcher
that resumes from a cursor taken on the source gets exactly the events after it. When the
destination already holds rows (other namespaces, or ``merge``), they are shifted above the
destination's highest, the same shift for every column that holds them, so a run's history
keeps its order; cursors then change and watchers restart from a snapshot.

A copy writes nothing until it commits: killed midway, the destination is as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from checkpointd.store import times

__all__ = [
    "RENAMED",
    "STORE_TABLES",
    "Column",
    "CopyError",
    "CopyResult",
    "TableSide",
    "already_in_destination",
    "column_list",
    "convert",
    "copy_store",
    "quoted",
]

#: Tables that belong to the store, not to a namespace: migrations are the destination's own
#: (the versions must match); the purge mark of the event outbox is merged (the highest).
STORE_TABLES: Final = frozenset({"schema_migrations", "interrupt_events_purged"})
#: Columns one backend names otherwise: (table, SQLite name) -> Postgres name.
RENAMED: Final = {("graph_checkpoints", "metadata_json"): "metadata"}
#: Columns that hold a checkpoint sequence, or an event cursor, in any table.
SEQUENCE_COLUMN: Final = "sequence"
CURSOR_COLUMN: Final = "cursor"
#: The tables whose counters assign those numbers.
SEQUENCE_TABLE: Final = "checkpoints"
CURSOR_TABLE: Final = "interrupt_events"
#: Rows per batch read and written.
BATCH: Final = 500


class CopyError(Exception):
    """The copy cannot be done or did not verify; nothing was written."""


def quoted(name: str) -> str:
    """A table or column name as an SQL identifier (both backends quote alike)."""
    return '"' + name.replace('"', '""') + '"'


def column_list(columns: Sequence[str]) -> str:
    """The quoted columns of a SELECT or an INSERT, in order."""
    return ", ".join(map(quoted, columns))


def already_in_destination(table: str, exc: Exception) -> CopyError:
    """A copied row whose key the destination holds: the copy stops, nothing is merged."""
    return CopyError(f"{table}: a row is already in the destination ({exc})")


@dataclass(frozen=True, slots=True)
class Column:
    """A column as a store's catalog describes it."""

    name: str
    kind: str
    """``time``, ``bool``, ``bytes``, ``int`` or ``text`` (Postgres knows; SQLite says
    ``int`` for times and booleans, which :func:`convert` reads from the other side)."""
    nullable: bool


class TableSide(Protocol):
    """One store as the copy sees it (``store/sqlite/tables.py``, ``store/postgres/tables.py``)."""

    backend: str

    async def catalog(self) -> dict[str, list[Column]]:
        """Every table with its columns."""
        ...

    async def schema_version(self) -> int:
        """The highest migration applied."""
        ...

    async def namespaces(self, tables: Iterable[str]) -> list[str]:
        """The namespaces that have rows in any of ``tables``."""
        ...

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        """Rows of ``table`` in ``namespaces`` (all when None)."""
        ...

    async def counter(self, table: str, column: str) -> int:
        """The highest number ``table``'s counter handed out (or its rows hold)."""
        ...

    async def purged_through(self) -> int:
        """The outbox's purge mark."""
        ...


@dataclass
class CopyResult:
    """What was copied, per table, and how the numbers moved."""

    rows: dict[str, int] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    sequence_shift: int = 0
    cursor_shift: int = 0


def _to_postgres_name(table: str, name: str) -> str:
    return RENAMED.get((table, name), name)


def convert(value: Any, kind: str, nullable: bool, *, to_postgres: bool, empty_null: bool) -> Any:
    """A value read from one backend, as the other stores it, by the destination column's
    ``kind`` (for a copy to SQLite, the kind of the source's Postgres column)."""
    if to_postgres:
        if value is None:
            return None
        if kind == "time" and isinstance(value, int):
            return times.from_us(value)
        if kind == "bool" and isinstance(value, int):
            return bool(value)
        if empty_null and value == "":
            return None
        return value
    if value is None and not nullable:
        return (
            ""  # NOT NULL DEFAULT '' on SQLite where Postgres keeps NULL (checkpoints.request_id)
        )
    if isinstance(value, datetime):
        return times.to_us(value)
    if isinstance(value, bool):
        return int(value)
    return value


Progress = Callable[[str, int, int], None]


class Reader(Protocol):
    """The source's rows, read in one snapshot."""

    def rows(
        self, table: str, columns: Sequence[str], namespaces: Sequence[str], batch: int
    ) -> Any:
        """An async iterator of row batches (tuples, in ``columns`` order)."""
        ...


class Writer(Protocol):
    """The destination's one transaction."""

    async def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """Insert the rows (identity columns given explicitly)."""
        ...

    async def raise_counter(self, table: str, column: str, at_least: int) -> None:
        """Make ``table``'s counter hand out numbers above ``at_least`` from now on."""
        ...

    async def raise_purged_through(self, value: int) -> None:
        """Set the purge mark to ``value`` if that is higher."""
        ...

    async def count(self, table: str, namespaces: Sequence[str] | None) -> int:
        """Rows of ``table`` in ``namespaces`` (all when None), as the transaction sees them."""
        ...


async def copy_store(
    source: Any,
    destination: Any,
    *,
    namespaces: Sequence[str] | None,
    merge: bool,
    progress: Progress | None = None,
) -> CopyResult:
    """Copy ``namespaces`` (every one that has rows when None) from ``source`` to
    ``destination`` (both :class:`TableSide` with ``snapshot()`` / ``transaction()``)."""
    src_version = await source.schema_version()
    dst_version = await destination.schema_version()
    if src_version != dst_version:
        raise CopyError(
            f"the source is at schema version {src_version} and the destination at "
            f"{dst_version}: start a server of this version on the source once, so it migrates"
        )
    src_catalog = await source.catalog()
    dst_catalog = await destination.catalog()
    plan = _plan(src_catalog, dst_catalog, source.backend, destination.backend)
    tables = list(plan)
    chosen = list(namespaces) if namespaces else await source.namespaces(tables)
    if not chosen:
        raise CopyError("the source holds no rows: nothing to copy")
    if not merge:
        taken = [name for name in tables if await destination.count(name, chosen)]
        if taken:
            raise CopyError(
                f"the destination already holds rows of {', '.join(map(repr, chosen))} in "
                f"{', '.join(taken)}: copy into an empty store, or pass --merge"
            )
    dst_has_rows = any([await destination.count(name, None) for name in tables])
    result = CopyResult(namespaces=chosen)
    if dst_has_rows:
        result.sequence_shift = await destination.counter(SEQUENCE_TABLE, SEQUENCE_COLUMN)
        result.cursor_shift = await destination.counter(CURSOR_TABLE, CURSOR_COLUMN)
    expected = {name: await source.count(name, chosen) for name in tables}
    before = {name: await destination.count(name, chosen) for name in tables}
    to_postgres = destination.backend == "postgres" and source.backend == "sqlite"
    to_sqlite = destination.backend == "sqlite" and source.backend == "postgres"
    async with source.snapshot() as reader, destination.transaction() as writer:
        for name, (src_cols, dst_cols, kinds) in plan.items():
            done = 0
            total = expected[name]
            if progress is not None:
                progress(name, 0, total)
            async for batch in reader.rows(name, src_cols, chosen, BATCH):
                rows = [
                    _shape(row, src_cols, kinds, result, to_postgres, to_sqlite, name)
                    for row in batch
                ]
                await writer.insert(name, dst_cols, rows)
                done += len(rows)
                if progress is not None:
                    progress(name, done, total)
            result.rows[name] = done
        src_seq = await source.counter(SEQUENCE_TABLE, SEQUENCE_COLUMN)
        src_cur = await source.counter(CURSOR_TABLE, CURSOR_COLUMN)
        await writer.raise_counter(SEQUENCE_TABLE, SEQUENCE_COLUMN, src_seq + result.sequence_shift)
        await writer.raise_counter(CURSOR_TABLE, CURSOR_COLUMN, src_cur + result.cursor_shift)
        if not dst_has_rows:
            await writer.raise_purged_through(await source.purged_through())
        # Verified inside the transaction: a count that differs rolls the whole copy back.
        for name in tables:
            found = await writer.count(name, chosen) - before[name]
            if found != expected[name] or result.rows[name] != expected[name]:
                raise CopyError(
                    f"{name}: {expected[name]} rows in the source, {found} in the destination; "
                    "nothing was written"
                )
        await asyncio.sleep(0)  # a point where a cancelled copy stops before its commit
    return result


def _shape(
    row: tuple[Any, ...],
    columns: Sequence[str],
    kinds: Sequence[tuple[str, bool, bool]],
    result: CopyResult,
    to_postgres: bool,
    to_sqlite: bool,
    table: str,
) -> tuple[Any, ...]:
    out = []
    for value, column, (kind, nullable, empty_null) in zip(row, columns, kinds, strict=True):
        if column == SEQUENCE_COLUMN and result.sequence_shift and isinstance(value, int):
            value = value + result.sequence_shift if value else value
        elif column == CURSOR_COLUMN and table == CURSOR_TABLE and result.cursor_shift:
            value = value + result.cursor_shift
        if to_postgres or to_sqlite:
            value = convert(value, kind, nullable, to_postgres=to_postgres, empty_null=empty_null)
        out.append(value)
    return tuple(out)


def _plan(
    src: dict[str, list[Column]], dst: dict[str, list[Column]], src_backend: str, dst_backend: str
) -> dict[str, tuple[list[str], list[str], list[tuple[str, bool, bool]]]]:
    """For each namespaced table: the source's column names, the destination's, and how to
    convert each value (kind, destination nullable, empty means NULL)."""
    plan: dict[str, tuple[list[str], list[str], list[tuple[str, bool, bool]]]] = {}
    for table in sorted(src):
        if table in STORE_TABLES:
            continue
        names = {c.name for c in src[table]}
        if "namespace" not in names:
            raise CopyError(
                f"table {table!r} has no namespace column: name it in "
                "checkpointd.store.copying.STORE_TABLES and say how it is copied"
            )
        if table not in dst:
            raise CopyError(f"the destination has no table {table!r}")
        dst_by_name = {c.name: c for c in dst[table]}
        src_cols: list[str] = []
        dst_cols: list[str] = []
        kinds: list[tuple[str, bool, bool]] = []
        for column in src[table]:
            target = _rename(table, column.name, src_backend, dst_backend)
            found = dst_by_name.get(target)
            if found is None:
                raise CopyError(f"the destination's {table} has no column {target!r}")
            postgres_side = found if dst_backend == "postgres" else column
            kind = postgres_side.kind
            # An empty request id is NULL where Postgres lets it be (its unique index skips
            # NULLs), '' where SQLite wants it NOT NULL.
            empty_null = (
                dst_backend == "postgres"
                and found.nullable
                and column.kind == "text"
                and (column.name == "request_id")
            )
            src_cols.append(column.name)
            dst_cols.append(target)
            kinds.append((kind, found.nullable, empty_null))
        missing = set(dst_by_name) - set(dst_cols)
        required = [m for m in missing if not dst_by_name[m].nullable]
        if required:
            raise CopyError(f"the source's {table} lacks columns {sorted(required)}")
        plan[table] = (src_cols, dst_cols, kinds)
    return plan


def _rename(table: str, name: str, src_backend: str, dst_backend: str) -> str:
    if src_backend == dst_backend:
        return name
    if dst_backend == "postgres":
        return _to_postgres_name(table, name)
    for (t, sqlite_name), pg_name in RENAMED.items():
        if t == table and pg_name == name:
            return sqlite_name
    return name
