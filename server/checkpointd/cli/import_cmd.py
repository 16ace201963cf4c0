"""``checkpointd import``: copy a fastaiagent ``SQLiteCheckpointer`` file into a namespace.

The file (fastaiagent's ``local.db``, or whatever ``SQLiteCheckpointer(db_path=...)`` names)
is opened read-only and copied through the Python client into a running server, so the same
command fills an SQLite or a Postgres store:

1. The whole file is read and checked first (JSON that is standard and shaped as fastaiagent
   writes it, statuses, timestamps). A file that fails is reported and nothing is written.
2. ``idempotency_cache`` rows, before any checkpoint: a paused run becomes resumable only
   when its interrupted checkpoint arrives, and by then its side effects are already cached.
   Their ``created_at`` becomes the time of the import (the protocol's put sets it), so
   ``prune`` measures their age from the import.
3. ``checkpoints`` in the file's write order (``rowid``), so each execution's history keeps
   its order; every ``created_at`` is kept. The newest interrupted checkpoint of an execution
   that has a ``pending_interrupts`` row is written with ``RecordInterrupt``, so the run is
   paused in the namespace as it was in the file, its pending row keeping its ``created_at``.

Re-running is safe: a checkpoint whose id is already stored in the execution, or an
idempotency key that already has a result, is skipped and counted as such, so a resumed run
is never paused again and nothing is duplicated. Stop the app that writes the file first.

Progress goes to stderr as the redrawn line of :mod:`checkpointd.cli.progress` (on a terminal
only; ``--quiet``: none), or with ``--progress-every N`` as a log line every N rows; stdout
gets the summary at the end: where it went and how long it took, then the counts.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpointd.cli.output import fail
from checkpointd.cli.progress import ProgressLine, format_duration
from checkpointd_client import (
    AlreadyExistsError,
    Checkpoint,
    CheckpointdError,
    NotFoundError,
    PendingInterrupt,
)
from checkpointd_client._convert import load_json
from checkpointd_client.models import CHECKPOINT_STATUSES

if TYPE_CHECKING:
    from checkpointd_client.client import CheckpointdClient

__all__ = ["DESCRIPTION", "HELP", "ImportFailed", "register"]

#: How many problems a rejected file lists before "and N more".
MAX_PROBLEMS_SHOWN = 10
_CHECKPOINT_COLUMNS = {"execution_id", "chain_name", "node_id"}
_PENDING_COLUMNS = {"execution_id", "chain_name", "node_id", "reason", "context", "created_at"}
_IDEMPOTENCY_COLUMNS = {"execution_id", "function_key", "result"}


class ImportFailed(Exception):
    """The import cannot start or cannot go on; the message says why and what to do."""


# --- reading the file ------------------------------------------------------------------------


def _json(text: str | None, what: str) -> Any:
    """Parse a JSON column as fastaiagent wrote it, by the server's rule (contract J2): NaN,
    Infinity and numbers that overflow to infinity (1e999) are refused."""
    if text is None or text == "":
        return None
    try:
        return load_json(text, field=what)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def _json_object(text: str | None, what: str) -> dict[str, Any]:
    value = _json(text, what)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, found {type(value).__name__}")
    return value


def _time(text: str | None, what: str) -> datetime | None:
    """fastaiagent's ISO-8601 text; naive means UTC; empty means "let the server fill it"."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not an ISO-8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what}: {value!r} is not an integer")
    return int(value)


@dataclass(frozen=True, slots=True)
class _Source:
    """The fastaiagent file, open read-only, with the tables it has."""

    path: Path
    conn: sqlite3.Connection
    has_pending: bool
    has_idempotency: bool

    @classmethod
    def open(cls, path: Path) -> _Source:
        if not path.exists():
            raise ImportFailed(f"no such file: {path}")
        if not path.is_file():
            raise ImportFailed(f"{path} is not a file")
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            conn.row_factory = sqlite3.Row
            tables = {
                str(row[0]): cls._columns(conn, str(row[0]))
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as exc:
            raise ImportFailed(f"{path} is not an SQLite database ({exc})") from None
        hint = (
            "expected the file of a fastaiagent SQLiteCheckpointer "
            "(fastaiagent's local.db, by default .fastaiagent/local.db)"
        )
        columns = tables.get("checkpoints")
        if columns is None:
            conn.close()
            raise ImportFailed(f"{path} has no checkpoints table: {hint}")
        if not columns >= _CHECKPOINT_COLUMNS or not {"id", "checkpoint_id"} & columns:
            conn.close()
            raise ImportFailed(f"{path}: its checkpoints table is not fastaiagent's: {hint}")
        for table, needed in (
            ("pending_interrupts", _PENDING_COLUMNS),
            ("idempotency_cache", _IDEMPOTENCY_COLUMNS),
        ):
            if table in tables and not needed <= tables[table]:
                conn.close()
                raise ImportFailed(f"{path}: its {table} table is not fastaiagent's: {hint}")
        return cls(
            path,
            conn,
            has_pending="pending_interrupts" in tables,
            has_idempotency="idempotency_cache" in tables,
        )

    @staticmethod
    def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
        quoted = table.replace('"', '""')
        return {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{quoted}")')}

    def close(self) -> None:
        self.conn.close()

    def count(self, table: str) -> int:
        if table == "pending_interrupts" and not self.has_pending:
            return 0
        if table == "idempotency_cache" and not self.has_idempotency:
            return 0
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def checkpoints(self) -> Iterator[sqlite3.Row]:
        """Every checkpoint row, in the order the file was written."""
        yield from self.conn.execute("SELECT rowid AS _rowid, * FROM checkpoints ORDER BY rowid")

    def pending(self) -> dict[str, sqlite3.Row]:
        """The pending interrupts, by execution id (fastaiagent keeps one per execution)."""
        if not self.has_pending:
            return {}
        rows = self.conn.execute("SELECT * FROM pending_interrupts ORDER BY rowid")
        return {str(row["execution_id"]): row for row in rows}

    def newest_interrupted(self) -> dict[str, int]:
        """The rowid of each execution's newest interrupted checkpoint."""
        rows = self.conn.execute(
            "SELECT execution_id, max(rowid) FROM checkpoints "
            "WHERE status = 'interrupted' GROUP BY execution_id"
        )
        return {str(row[0]): int(row[1]) for row in rows}

    def idempotency(self) -> Iterator[sqlite3.Row]:
        """Every cached result, in the order the file was written."""
        if self.has_idempotency:
            yield from self.conn.execute(
                "SELECT rowid AS _rowid, * FROM idempotency_cache ORDER BY rowid"
            )


def _checkpoint(row: sqlite3.Row) -> Checkpoint:
    """A checkpoints row as the client's Checkpoint; ValueError names what is wrong."""
    keys = set(row.keys())

    def get(name: str) -> Any:
        return row[name] if name in keys else None

    checkpoint_id = get("checkpoint_id") or get("id")
    if not checkpoint_id:
        raise ValueError("no checkpoint id")
    status = get("status") or "completed"
    if status not in CHECKPOINT_STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(CHECKPOINT_STATUSES)}")
    return Checkpoint(
        execution_id=str(row["execution_id"]),
        checkpoint_id=str(checkpoint_id),
        parent_checkpoint_id=get("parent_checkpoint_id"),
        chain_name=str(row["chain_name"]),
        node_id=str(row["node_id"]),
        node_index=_int(get("node_index"), "node_index"),
        step_type=get("step_type"),
        status=status,
        iteration=_int(get("iteration"), "iteration"),
        interrupt_reason=get("interrupt_reason"),
        agent_path=get("agent_path"),
        created_at=_time(get("created_at"), "created_at"),
        state_snapshot=_json_object(get("state_snapshot"), "state_snapshot"),
        node_input=_json_object(get("node_input"), "node_input"),
        node_output=_json_object(get("node_output"), "node_output"),
        iteration_counters=_json_object(get("iteration_counters"), "iteration_counters"),
        interrupt_context=_json_object(get("interrupt_context"), "interrupt_context"),
    )


def _pending(row: sqlite3.Row) -> PendingInterrupt:
    """A pending_interrupts row as the client's PendingInterrupt."""
    return PendingInterrupt(
        execution_id=str(row["execution_id"]),
        chain_name=str(row["chain_name"]),
        node_id=str(row["node_id"]),
        reason=str(row["reason"]),
        context=_json_object(row["context"], "context"),
        agent_path=row["agent_path"] if "agent_path" in set(row.keys()) else None,
        created_at=_time(row["created_at"], "created_at"),
    )


def _check(source: _Source) -> None:
    """Read every row once; raise ImportFailed listing the rows that cannot be imported."""
    problems: list[str] = []
    for row in source.checkpoints():
        try:
            _checkpoint(row)
        except ValueError as exc:
            problems.append(f"checkpoints row {row['_rowid']}: {exc}")
    for row in source.pending().values():
        try:
            _pending(row)
        except ValueError as exc:
            problems.append(f"pending_interrupts row of execution {row['execution_id']!r}: {exc}")
    for row in source.idempotency():
        try:
            _json(row["result"], "result")
        except ValueError as exc:
            problems.append(f"idempotency_cache row {row['_rowid']}: {exc}")
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        if len(problems) > len(shown):
            shown.append(f"... and {len(problems) - len(shown)} more")
        listing = "\n  ".join(shown)
        raise ImportFailed(
            f"{source.path} has rows checkpointd cannot store; nothing was imported:\n  {listing}"
        )


# --- writing -----------------------------------------------------------------------------------


@dataclass
class _Counts:
    imported: int = 0
    skipped: int = 0


@dataclass
class _Report:
    checkpoints: _Counts = field(default_factory=_Counts)
    pending: _Counts = field(default_factory=_Counts)
    idempotency: _Counts = field(default_factory=_Counts)
    orphaned_pending: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"checkpoints: {self.checkpoints.imported} imported, "
            f"{self.checkpoints.skipped} already present",
            f"pending interrupts: {self.pending.imported} imported, "
            f"{self.pending.skipped} already present or resumed",
            f"idempotency results: {self.idempotency.imported} imported, "
            f"{self.idempotency.skipped} already present",
        ]
        if self.orphaned_pending:
            out.append(
                f"pending interrupts not imported (no interrupted checkpoint in the file): "
                f"{len(self.orphaned_pending)}"
            )
        return out


class _Progress:
    """Progress on stderr: the shared redrawn line (:mod:`checkpointd.cli.progress`, drawn
    only on a terminal), or with ``every`` (``--progress-every``) a log line every ``every``
    rows and at the end of each table, for a log file; nothing with ``quiet``."""

    def __init__(self, every: int | None, quiet: bool) -> None:
        self.every = every
        self.quiet = quiet
        self.line = ProgressLine("rows", quiet=quiet or every is not None)

    def __call__(self, what: str, done: int, total: int) -> None:
        self.line.update(what, done, total)
        if self.every is None or self.quiet or total == 0:
            return
        if done % self.every and done != total:
            return
        print(
            f"checkpointd import: {what} {done}/{total} ({100 * done // total}%)",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        """End the redrawn line, so what follows starts on a fresh one."""
        self.line.close()


def _import_idempotency(
    source: _Source, client: CheckpointdClient, report: _Report, progress: _Progress
) -> None:
    total = source.count("idempotency_cache")
    for done, row in enumerate(source.idempotency(), start=1):
        execution_id, key = str(row["execution_id"]), str(row["function_key"])
        if client.get_idempotent(execution_id, key).found:
            report.idempotency.skipped += 1
        else:
            client.put_idempotent(execution_id, key, _json(row["result"], "result"))
            report.idempotency.imported += 1
        progress("idempotency results", done, total)


def _already_stored(client: CheckpointdClient, checkpoint: Checkpoint, rowid: int) -> None:
    """After ALREADY_EXISTS: the id must be this execution's, else it belongs to another."""
    try:
        client.get_checkpoint(checkpoint.execution_id, checkpoint.checkpoint_id)
    except NotFoundError:
        raise ImportFailed(
            f"checkpoints row {rowid}: checkpoint id {checkpoint.checkpoint_id!r} is already "
            f"used by another execution in namespace {client.namespace!r}; import into an "
            "empty namespace (--namespace)"
        ) from None


def _import_checkpoints(
    source: _Source, client: CheckpointdClient, report: _Report, progress: _Progress
) -> None:
    pending = source.pending()
    newest_interrupted = source.newest_interrupted()
    paused = {
        newest_interrupted[execution_id]: row
        for execution_id, row in pending.items()
        if execution_id in newest_interrupted
    }
    report.orphaned_pending = sorted(set(pending) - set(newest_interrupted))
    total = source.count("checkpoints")
    for done, row in enumerate(source.checkpoints(), start=1):
        rowid = int(row["_rowid"])
        checkpoint = _checkpoint(row)
        pending_row = paused.get(rowid)
        try:
            if pending_row is None:
                client.put_checkpoint(checkpoint)
            else:
                result = client.record_interrupt(checkpoint, _pending(pending_row))
                if result.pending_created:
                    report.pending.imported += 1
                else:
                    report.pending.skipped += 1
                    progress.close()
                    print(
                        f"checkpointd import: warning: execution {checkpoint.execution_id!r} "
                        "already had a pending interrupt in the namespace; it was kept",
                        file=sys.stderr,
                    )
            report.checkpoints.imported += 1
        except AlreadyExistsError:
            _already_stored(client, checkpoint, rowid)
            report.checkpoints.skipped += 1
            if pending_row is not None:
                report.pending.skipped += 1
        except CheckpointdError as exc:
            raise ImportFailed(
                f"checkpoints row {rowid} (execution {checkpoint.execution_id!r}, checkpoint "
                f"{checkpoint.checkpoint_id!r}): {exc}"
            ) from exc
        progress("checkpoints", done, total)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Import the file; 0 when every row is in the namespace, 1 on an error."""
    if args.progress_every is not None and args.progress_every <= 0:
        parser.error("--progress-every must be a positive number of rows")
    if not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    report = _Report()
    progress = _Progress(args.progress_every, args.quiet)
    started = time.monotonic()
    try:
        source = _Source.open(Path(args.file))
        try:
            _check(source)
            # Imported when the command runs: starting `checkpointd serve` does not load it.
            from checkpointd_client.client import CheckpointdClient

            with CheckpointdClient(
                args.target, namespace=args.namespace, timeout=args.timeout
            ) as client:
                try:
                    # Reach the server (and have the namespace checked) before the first write.
                    client.list_pending_interrupts(page_size=1)
                    _import_idempotency(source, client, report, progress)
                    _import_checkpoints(source, client, report, progress)
                except CheckpointdError as exc:
                    raise ImportFailed(f"{client.target}: {exc}") from exc
        finally:
            progress.close()
            source.close()
    except ImportFailed as exc:
        fail(exc)
        if report.checkpoints.imported or report.idempotency.imported:
            print(
                "checkpointd: what was imported before the error stays; running the same "
                "import again skips it",
                file=sys.stderr,
            )
            for line in report.lines():
                print(f"  {line}", file=sys.stderr)
        return 1
    took = format_duration(time.monotonic() - started)
    print(f"imported {args.file} into namespace {args.namespace!r} in {took}")
    for line in report.lines():
        print(f"  {line}")
    for execution_id in report.orphaned_pending:
        print(
            f"checkpointd import: warning: the pending interrupt of execution {execution_id!r} "
            "was not imported: the file has no interrupted checkpoint for it",
            file=sys.stderr,
        )
    return 0


HELP = "copy a fastaiagent SQLiteCheckpointer file into a running server"
DESCRIPTION = (
    "Copy the checkpoints, pending interrupts and idempotency results of a fastaiagent "
    "SQLiteCheckpointer file into a namespace of a running checkpointd, in the file's write "
    "order. Safe to run again: rows already there are skipped. Stop the app that writes the "
    "file first."
)


def register(command: argparse.ArgumentParser) -> None:
    """Fill ``import``'s parser."""
    command.set_defaults(handler=run)
    command.add_argument(
        "file", help="the SQLite file (fastaiagent's local.db, by default .fastaiagent/local.db)"
    )
    command.add_argument(
        "--target",
        default=None,
        help="the server: host:port or unix:///path [default: $CHECKPOINTD_TARGET, "
        "else 127.0.0.1:7470]",
    )
    command.add_argument(
        "--namespace", default="default", help="the namespace to fill [default: %(default)s]"
    )
    command.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds each call may take, retries included [default: %(default)s]",
    )
    command.add_argument(
        "--progress-every",
        type=int,
        default=None,
        metavar="N",
        help="instead of the progress line drawn on a terminal, print a progress line on "
        "stderr every N rows, piped or not (for a log)",
    )
    command.add_argument("--quiet", "-q", action="store_true", help="no progress, only the summary")
