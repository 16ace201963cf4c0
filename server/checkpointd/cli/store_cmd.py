"""``checkpointd store backup|check|copy``: copy a live SQLite store, check a store, and
move a store's namespaces between SQLite and Postgres.

``backup`` takes a consistent copy of an SQLite store while servers keep writing to it
(:mod:`checkpointd.store.sqlite.backup`); a Postgres store is backed up with ``pg_dump -n
SCHEMA`` (see the README). ``check`` reads a store (a backup, before you trust it): its
integrity (SQLite), its schema version against the one this server knows, and the rows of
every table. Both work on the store directly, not through a server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from checkpointd.cli.output import aligned, fail
from checkpointd.cli.parsers import add_actions, add_command
from checkpointd.cli.progress import ProgressLine, format_duration
from checkpointd.config import DEFAULT_PG_SCHEMA
from checkpointd.store.schema import load_migrations

__all__ = ["DESCRIPTION", "HELP", "register"]


def _is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _sqlite_path(url: str) -> Path:
    if not url.startswith("sqlite://"):
        raise argparse.ArgumentTypeError(
            f"{url!r} is not a store URL: sqlite:///PATH or postgresql://..."
        )
    return Path(url.removeprefix("sqlite://"))


HELP = "back up or check a store"
DESCRIPTION = (
    "Work on a store directly (not through a server): take a consistent backup of a live "
    "SQLite store, or check a store."
)


def register(store: argparse.ArgumentParser) -> None:
    """Add ``store backup``, ``store check`` and ``store copy``."""
    actions = add_actions(store)
    backup = add_command(
        actions,
        "backup",
        run_backup,
        help="copy a live SQLite store to a file, consistently",
        description="Copy an SQLite store to FILE as one consistent snapshot while servers "
        "keep writing to it: every write acknowledged before the backup starts is in the "
        "copy. The copy is checked and flushed to disk before it takes its name, so a failed "
        "or killed backup leaves no FILE. Restore by stopping the servers and putting FILE in "
        "place of the store file (and removing the store's -wal and -shm files). For "
        "Postgres, use pg_dump -n SCHEMA (see the README).",
    )
    backup.add_argument("--store", required=True, help="the store: sqlite:///PATH")
    backup.add_argument("--to", required=True, type=Path, metavar="FILE", help="the copy")
    backup.add_argument("--force", action="store_true", help="replace FILE if it exists")
    backup.add_argument(
        "--quiet", "-q", action="store_true", help="no progress line, only the summary"
    )
    check = add_command(
        actions,
        "check",
        run_check,
        help="check a store: integrity, schema version, rows per table",
        description="Read a store (an SQLite file such as a backup, or a Postgres schema): "
        "SQLite's integrity check, the schema version (it must be one this server can open) "
        "and the rows of every table. Exits 1 when any of that is wrong.",
    )
    check.add_argument(
        "--store", required=True, help="the store: sqlite:///PATH or postgresql://..."
    )
    check.add_argument(
        "--pg-schema",
        default=DEFAULT_PG_SCHEMA,
        help="the Postgres schema of the store [default: %(default)s]",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    copy = add_command(
        actions,
        "copy",
        run_copy,
        help="copy namespaces from one store to another (SQLite <-> Postgres)",
        description="Copy every row of the namespaces (all by default) from one store to "
        "another, SQLite or Postgres either way: checkpoints with their sequences and "
        "created_at, pending interrupts, claims, decisions and leases, idempotency results, "
        "request ids and tombstones, the watch events with their cursors, the replication "
        "state, the graph store's tables. Stop the servers on the source first. The "
        "destination is migrated to this version's schema and written in one transaction: a "
        "copy that fails or is killed leaves it as it was. A destination that already holds "
        "rows of the namespaces is refused unless --merge. The rows of every table are "
        "counted on both sides before the commit.",
    )
    copy.add_argument("--from", dest="source", required=True, help="the source store URL")
    copy.add_argument("--to", dest="destination", required=True, help="the destination URL")
    copy.add_argument(
        "--from-pg-schema", default=DEFAULT_PG_SCHEMA, help="the source's Postgres schema"
    )
    copy.add_argument(
        "--to-pg-schema", default=DEFAULT_PG_SCHEMA, help="the destination's Postgres schema"
    )
    copy.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NAMESPACE",
        help="copy this namespace (repeat for more) [default: every one with rows]",
    )
    copy.add_argument(
        "--merge",
        action="store_true",
        help="copy into a destination that already holds rows of these namespaces (a row "
        "whose key is already there fails the copy, which then writes nothing)",
    )
    copy.add_argument("--quiet", "-q", action="store_true", help="no progress, only the summary")


def _print_rows(tables: Mapping[str, int]) -> None:
    """The rows of each table, aligned under TABLE and ROWS."""
    for line in aligned(("TABLE", "ROWS"), [(name, str(rows)) for name, rows in tables.items()]):
        print(line)


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"  # pragma: no cover - the loop always returns


def run_backup(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Back up an SQLite store; 1 when it cannot be done (nothing is left behind)."""
    from checkpointd.store.sqlite.backup import BackupError, backup

    if _is_postgres(args.store):
        return fail(
            "store backup copies SQLite stores; back up a Postgres store with "
            "pg_dump -n SCHEMA (see the README's Backups section)"
        )
    try:
        source = _sqlite_path(args.store)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    line = ProgressLine("pages", quiet=args.quiet)
    try:
        result = backup(
            source,
            args.to,
            force=args.force,
            progress=lambda done, total: line.update("backup", done, total),
        )
    except BackupError as exc:
        line.close()
        return fail(str(exc))
    line.close()
    print(
        f"backed up {source} to {result.path}: {result.pages} pages, {_size(result.bytes)} "
        f"in {format_duration(result.seconds)}"
    )
    return 0


def run_check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Check a store; 0 when it is sound and this server can open it."""
    backend: Literal["sqlite", "postgres"] = "postgres" if _is_postgres(args.store) else "sqlite"
    known = load_migrations(backend)[-1].version
    integrity: str | None = None
    try:
        if backend == "postgres":
            from checkpointd.store.postgres.inventory import InventoryError, inventory

            try:
                version, tables = asyncio.run(inventory(args.store, args.pg_schema))
            except (InventoryError, ValueError) as exc:
                return fail(str(exc))
        else:
            from checkpointd.store.sqlite.backup import BackupError, check

            try:
                found = check(_sqlite_path(args.store))
            except BackupError as exc:
                return fail(str(exc))
            integrity, version, tables = found.integrity, found.schema_version, found.tables
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    problems = []
    if integrity not in (None, "ok"):
        problems.append(f"integrity check: {integrity}")
    if version == 0:
        problems.append("no schema_migrations: not a checkpointd store")
    elif version > known:
        problems.append(f"schema version {version} is newer than this server knows ({known})")
    if args.json:
        report: dict[str, Any] = {
            "backend": backend,
            "integrity": integrity,
            "schema_version": version,
            "known_schema_version": known,
            "tables": tables,
            "problems": problems,
        }
        print(json.dumps(report, sort_keys=True))
    else:
        _print_rows(tables)
        state = "; ".join(problems) if problems else "ok"
        checked = "" if integrity is None else f", integrity {integrity}"
        print(
            f"{backend} store: schema version {version} (this server knows {known})"
            f"{checked}, {len(tables)} tables, {sum(tables.values())} rows: {state}"
        )
    return 1 if problems else 0


async def _migrated(url: str, schema: str) -> None:
    """Create or migrate the destination as a server would on start."""
    if _is_postgres(url):
        from checkpointd.store.postgres import PostgresStore

        store: Any = PostgresStore(url, schema=schema, min_pool_size=1, max_pool_size=1)
    else:
        from checkpointd.store.sqlite import SQLiteStore

        path = _sqlite_path(url)
        if not path.parent.is_dir():
            raise ValueError(f"{path.parent} is not a directory")
        store = SQLiteStore(path)
    await store.open()
    await store.close()


async def _side(url: str, schema: str) -> Any:
    if _is_postgres(url):
        from checkpointd.store.postgres.tables import PostgresTables

        return await PostgresTables.connect(url, schema)
    from checkpointd.store.sqlite.tables import SQLiteTables

    return SQLiteTables(_sqlite_path(url))


async def _close(side: Any) -> None:
    result = side.close()
    if asyncio.iscoroutine(result):
        await result


async def _copy(args: argparse.Namespace, line: ProgressLine) -> Any:
    from checkpointd.store.copying import CopyError, copy_store

    same_sqlite = not _is_postgres(args.source) and not _is_postgres(args.destination)
    if (
        same_sqlite
        and _sqlite_path(args.source).resolve() == _sqlite_path(args.destination).resolve()
    ):
        raise CopyError("the source and the destination are the same store")
    if args.source == args.destination and args.from_pg_schema == args.to_pg_schema:
        raise CopyError("the source and the destination are the same store")
    source = await _side(args.source, args.from_pg_schema)
    try:
        if await source.schema_version() == 0:
            raise CopyError("the source is no checkpointd store (no schema_migrations)")
        await _migrated(args.destination, args.to_pg_schema)
        destination = await _side(args.destination, args.to_pg_schema)
        try:
            return await copy_store(
                source,
                destination,
                namespaces=args.namespaces,
                merge=args.merge,
                progress=lambda table, done, total: line.update(table, done, total),
            )
        finally:
            await _close(destination)
    finally:
        await _close(source)


def run_copy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Copy namespaces between stores; 1 when refused or failed (nothing written)."""
    import time

    from checkpointd.store.base import StoreError
    from checkpointd.store.copying import CopyError

    line = ProgressLine("rows", quiet=args.quiet)
    started = time.monotonic()
    try:
        result = asyncio.run(_copy(args, line))
    except (CopyError, StoreError, ValueError, argparse.ArgumentTypeError) as exc:
        line.close()
        return fail(f"{exc}; the destination is unchanged")
    line.close()
    if not args.quiet:
        _print_rows(result.rows)
    shifted = (
        f"; sequences shifted by {result.sequence_shift}, cursors by {result.cursor_shift}"
        if result.sequence_shift or result.cursor_shift
        else "; sequences and cursors kept"
    )
    print(
        f"copied {sum(result.rows.values())} rows of {len(result.namespaces)} namespaces "
        f"({', '.join(result.namespaces)}) in {len(result.rows)} tables, verified, in "
        f"{format_duration(time.monotonic() - started)}{shifted}"
    )
    return 0
