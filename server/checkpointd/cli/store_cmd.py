"""``checkpointd store backup|check``: copy a live SQLite store, and check a store.

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
import sys
from pathlib import Path
from typing import Any, Literal

from checkpointd.cli.progress import ProgressLine, format_duration
from checkpointd.config import DEFAULT_PG_SCHEMA
from checkpointd.store.schema import load_migrations

__all__ = ["register"]


def _is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _sqlite_path(url: str) -> Path:
    if not url.startswith("sqlite://"):
        raise argparse.ArgumentTypeError(
            f"{url!r} is not a store URL: sqlite:///PATH or postgresql://..."
        )
    return Path(url.removeprefix("sqlite://"))


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``store backup`` and ``store check`` to the command line."""
    store = commands.add_parser(
        "store",
        help="back up or check a store",
        description="Work on a store directly (not through a server): take a consistent "
        "backup of a live SQLite store, or check a store.",
    )
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION")

    backup = actions.add_parser(
        "backup",
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
    backup.set_defaults(handler=run_backup)

    check = actions.add_parser(
        "check",
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
    check.set_defaults(handler=run_check)


def _error(message: str) -> int:
    print(f"checkpointd: error: {message}", file=sys.stderr)
    return 1


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
        return _error(
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
        return _error(str(exc))
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
                return _error(str(exc))
        else:
            from checkpointd.store.sqlite.backup import BackupError, check

            try:
                found = check(_sqlite_path(args.store))
            except BackupError as exc:
                return _error(str(exc))
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
        width = max([len("TABLE"), *map(len, tables)])
        print(f"{'TABLE'.ljust(width)}  ROWS")
        for name, rows in tables.items():
            print(f"{name.ljust(width)}  {rows}")
        state = "; ".join(problems) if problems else "ok"
        checked = "" if integrity is None else f", integrity {integrity}"
        print(
            f"{backend} store: schema version {version} (this server knows {known})"
            f"{checked}, {len(tables)} tables, {sum(tables.values())} rows: {state}"
        )
    return 1 if problems else 0
