"""``checkpointd runs list|show|delete``: the executions of a namespace, for people (C11).

``list`` prints one line per run, newest activity first, with its status (running, paused,
ended, failed), its number of checkpoints and its last activity. ``show`` prints one run:
its summary, the pending interrupt and the decision on it, the newest decision and how it
was carried out, the idempotency keys stored, and its checkpoints in write order; ``--state
N`` prints the state of its N-th checkpoint instead. ``delete`` deletes a run
(DeleteExecution, contract C6) after a confirmation. With ``--json``, ``list`` and ``show``
print one JSON object per line. All talk to a running server through the Python client.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from checkpointd.cli.connection import (
    PAGE_CAP,
    add_connection_arguments,
    connect,
    fail,
    positive_int,
    read_pages,
)
from checkpointd.cli.interrupts import decision_json, format_age, pending_json
from checkpointd_client import (
    Checkpoint,
    CheckpointdError,
    Decision,
    Execution,
    ExecutionDetail,
    NotFoundError,
    PendingInterrupt,
)
from checkpointd_client.models import EXECUTION_STATUSES

__all__ = ["format_checkpoints", "format_executions", "parse_since", "register"]

LIST_COLUMNS = ("EXECUTION_ID", "CHAIN", "STATUS", "CHECKPOINTS", "LAST_NODE", "LAST_ACTIVITY")
SHOW_COLUMNS = ("#", "SEQUENCE", "NODE", "STATUS", "STEP_TYPE", "CREATED_AT", "ITERATION")
_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: a duration back from now (``90s``, ``30m``, ``2h``, ``7d``) or an ISO
    8601 time (UTC when it names no offset)."""
    match = _DURATION.fullmatch(text.strip())
    if match:
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
        try:
            return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
        except OverflowError:
            raise argparse.ArgumentTypeError(f"{text!r} reaches before year 1") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30m, 2h, 7d) nor an ISO 8601 time"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _position(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value == 0:
        raise argparse.ArgumentTypeError("checkpoints count from 1 (or from -1, the newest)")
    return value


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``runs list``, ``runs show`` and ``runs delete`` to the command line."""
    runs = commands.add_parser(
        "runs",
        help="list, inspect or delete the runs of a namespace",
        description="Read the runs (executions) of a namespace from a running server: which "
        "are running, paused, ended or failed, and what one of them wrote.",
    )
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list",
        help="print the runs as a table, newest activity first",
        description="Print the runs of a namespace, newest activity first: chain, status "
        "(paused: waiting on a pending interrupt; failed: its newest checkpoint failed; ended: "
        "its newest checkpoint is a run_end row; running: anything else), number of "
        "checkpoints, newest node and last activity.",
    )
    add_connection_arguments(listing, namespace_help="the namespace to read [default: default]")
    listing.add_argument("--chain", help="only runs whose newest checkpoint has this chain name")
    listing.add_argument("--status", choices=EXECUTION_STATUSES, help="only runs in this status")
    listing.add_argument(
        "--since",
        type=parse_since,
        help="only runs active since then: a duration back from now (30m, 2h, 7d) or an "
        "ISO 8601 time",
    )
    listing.add_argument(
        "--limit", type=positive_int, default=100, help="the most rows [default: %(default)s]"
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object per run")
    listing.set_defaults(handler=run_list)

    show = actions.add_parser(
        "show",
        help="print one run: its pause, decision, idempotency keys and checkpoints",
        description="Print one run: its summary, its pending interrupt and the decision on it, "
        "its newest decision and how it was carried out (resumed, resume_failed, ...), the "
        "idempotency keys it stored, and its checkpoints in write order.",
    )
    show.add_argument("execution_id", metavar="EXECUTION_ID", help="the run")
    add_connection_arguments(show, namespace_help="the namespace of the run [default: default]")
    show.add_argument(
        "--state",
        type=_position,
        metavar="N",
        help="print the state of the run's N-th checkpoint (the # column; -1 is the newest) "
        "as JSON, and nothing else",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per line: the run (kind execution), then each checkpoint "
        "(kind checkpoint)",
    )
    show.set_defaults(handler=run_show)

    delete = actions.add_parser(
        "delete",
        help="delete a run after a confirmation",
        description="Delete a run: its checkpoints, its pending interrupt, its decisions and "
        "its idempotency results, in one transaction (DeleteExecution). Asks first, unless "
        "--yes. Its request ids stay remembered, so a late retry cannot bring it back.",
    )
    delete.add_argument("execution_id", metavar="EXECUTION_ID", help="the run")
    add_connection_arguments(delete, namespace_help="the namespace of the run [default: default]")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask")
    delete.set_defaults(handler=run_delete)


# --- formatting ---------------------------------------------------------------------------


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _table(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [columns, *cells]) for i in range(len(columns))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [columns, *cells]
    ]


def format_executions(rows: Sequence[Execution], now: datetime) -> list[str]:
    """The header and one aligned line per run."""
    return _table(
        LIST_COLUMNS,
        [
            (
                e.execution_id,
                e.chain_name or "-",
                e.status,
                str(e.checkpoint_count),
                e.last_node_id or "-",
                f"{_when(e.last_activity_at)} ({format_age(e.last_activity_at, now)} ago)",
            )
            for e in rows
        ],
    )


def format_checkpoints(rows: Sequence[Checkpoint]) -> list[str]:
    """The header and one aligned line per checkpoint, in write order."""
    return _table(
        SHOW_COLUMNS,
        [
            (
                str(position),
                str(c.sequence),
                c.node_id or "-",
                c.status,
                c.step_type or "-",
                _when(c.created_at),
                str(c.iteration),
            )
            for position, c in enumerate(rows, start=1)
        ],
    )


def execution_json(execution: Execution) -> dict[str, Any]:
    """A run's summary as a JSON object."""
    return {
        "execution_id": execution.execution_id,
        "chain_name": execution.chain_name,
        "status": execution.status,
        "checkpoint_count": execution.checkpoint_count,
        "last_activity_at": _iso(execution.last_activity_at),
        "last_checkpoint_id": execution.last_checkpoint_id,
        "last_node_id": execution.last_node_id,
        "last_sequence": execution.last_sequence,
    }


def checkpoint_json(position: int, cp: Checkpoint) -> dict[str, Any]:
    """One checkpoint of ``show --json`` (without its JSON payloads; ``--state`` has those)."""
    return {
        "kind": "checkpoint",
        "position": position,
        "sequence": cp.sequence,
        "checkpoint_id": cp.checkpoint_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
        "chain_name": cp.chain_name,
        "node_id": cp.node_id,
        "node_index": cp.node_index,
        "status": cp.status,
        "step_type": cp.step_type,
        "iteration": cp.iteration,
        "interrupt_reason": cp.interrupt_reason,
        "agent_path": cp.agent_path,
        "created_at": _iso(cp.created_at),
    }


def _describe_decision(decision: Decision) -> str:
    verdict = "approved" if decision.approved else "rejected"
    parts = [
        f"{verdict} by {decision.decided_by} at {_when(decision.decided_at)}",
        f"status={decision.status}",
        f"attempts={decision.attempts}",
    ]
    if decision.reason:
        parts.append(f"reason={decision.reason!r}")
    if decision.lease_expires_at is not None:
        parts.append(f"lease_until={_when(decision.lease_expires_at)}")
    if decision.reported_at is not None:
        parts.append(f"reported={_when(decision.reported_at)}")
    if decision.error:
        parts.append(f"error={decision.error!r}")
    return " ".join(parts)


def _describe_pause(pending: PendingInterrupt) -> str:
    return (
        f"node={pending.node_id or '-'} reason={pending.reason or '-'} "
        f"since={_when(pending.created_at)} checkpoint={pending.checkpoint_id}"
    )


def format_detail(detail: ExecutionDetail, now: datetime) -> list[str]:
    """The head of ``show``: the summary, the pause, the decision, the idempotency keys."""
    e = detail.execution
    lines = [
        f"execution    {e.execution_id}",
        f"chain        {e.chain_name or '-'}",
        f"status       {e.status}",
        f"checkpoints  {e.checkpoint_count}",
        f"last         {_when(e.last_activity_at)} ({format_age(e.last_activity_at, now)} ago) "
        f"at {e.last_node_id or '-'}",
    ]
    if detail.pending is not None:
        lines.append(f"pending      {_describe_pause(detail.pending)}")
        if detail.pending.decision is not None:
            lines.append(f"decision     {_describe_decision(detail.pending.decision)}")
        else:
            lines.append("decision     - (undecided)")
    decided = detail.last_decided
    shown = detail.pending.decision if detail.pending is not None else None
    if decided is not None and decided.decision is not None and decided.decision != shown:
        lines.append(
            f"last decided {_describe_decision(decided.decision)} "
            f"(pause at {decided.node_id or '-'}, checkpoint {decided.checkpoint_id})"
        )
    keys = detail.idempotency_keys
    listed = ", ".join(keys) if keys else "-"
    more = detail.idempotency_key_count - len(keys)
    suffix = f" (and {more} more)" if more > 0 else ""
    lines.append(f"idempotency  {detail.idempotency_key_count} keys: {listed}{suffix}")
    return lines


# --- commands -----------------------------------------------------------------------------


def _print_json(value: dict[str, Any]) -> None:
    print(json.dumps(value, ensure_ascii=False, sort_keys=True))


def run_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the runs, newest activity first; 1 when the server answers an error."""
    try:
        with connect(args) as client:
            rows, more = read_pages(
                lambda size, token: client.list_executions(
                    page_size=size,
                    page_token=token,
                    chain_name=args.chain,
                    status=args.status,
                    active_since=args.since,
                ),
                lambda page: page.executions,
                args.limit,
            )
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    rows = rows[: args.limit]
    if args.json:
        for row in rows:
            _print_json(execution_json(row))
        return 0
    if not rows:
        print(f"no runs in namespace {args.namespace!r}", file=sys.stderr)
        return 0
    for line in format_executions(rows, datetime.now(UTC)):
        print(line)
    if more:
        print(f"(showing the newest {args.limit}; raise --limit for more)", file=sys.stderr)
    return 0


def _pick(checkpoints: Sequence[Checkpoint], position: int) -> Checkpoint | None:
    index = position - 1 if position > 0 else len(checkpoints) + position
    return checkpoints[index] if 0 <= index < len(checkpoints) else None


def run_show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print one run; 1 when it does not exist or the server answers an error."""
    try:
        with connect(args) as client:
            detail = client.get_execution(args.execution_id)
            checkpoints = list(client.iter_checkpoints(args.execution_id, page_size=PAGE_CAP))
    except NotFoundError:
        print(
            f"checkpointd: error: no run {args.execution_id!r} in namespace {args.namespace!r}",
            file=sys.stderr,
        )
        return 1
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    if args.state is not None:
        picked = _pick(checkpoints, args.state)
        if picked is None:
            print(
                f"checkpointd: error: --state {args.state}: the run has "
                f"{len(checkpoints)} checkpoints",
                file=sys.stderr,
            )
            return 1
        print(json.dumps(picked.state_snapshot, ensure_ascii=False, indent=2, sort_keys=True))
        return 0
    if args.json:
        _print_json(_detail_json(detail))
        for position, cp in enumerate(checkpoints, start=1):
            _print_json(checkpoint_json(position, cp))
        return 0
    for line in _show_lines(detail, checkpoints):
        print(line)
    return 0


def _show_lines(detail: ExecutionDetail, checkpoints: Sequence[Checkpoint]) -> Iterator[str]:
    yield from format_detail(detail, datetime.now(UTC))
    yield ""
    yield from format_checkpoints(checkpoints)


def _detail_json(detail: ExecutionDetail) -> dict[str, Any]:
    decided = detail.last_decided
    return {
        "kind": "execution",
        **execution_json(detail.execution),
        "pending": None if detail.pending is None else pending_json(detail.pending),
        "last_decided": None if decided is None else pending_json(decided),
        "last_decision": (
            None if decided is None or decided.decision is None else decision_json(decided.decision)
        ),
        "idempotency_keys": detail.idempotency_keys,
        "idempotency_key_count": detail.idempotency_key_count,
    }


def run_delete(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Delete one run after a confirmation; 0 when deleted (or nothing to delete)."""
    try:
        with connect(args) as client:
            try:
                detail: ExecutionDetail | None = client.get_execution(args.execution_id)
            except NotFoundError:
                detail = None
            if not args.yes:
                answer = _confirm(args, detail)
                if answer is not None:
                    return answer
            result = client.delete_execution(args.execution_id)
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    pending = "a pending interrupt" if result.pending_interrupt_deleted else "no pending interrupt"
    print(
        f"deleted {args.execution_id}: {result.checkpoints_deleted} checkpoints, {pending}, "
        f"{result.idempotency_results_deleted} idempotency results"
    )
    return 0


def _confirm(args: argparse.Namespace, detail: ExecutionDetail | None) -> int | None:
    """Ask on the terminal; None to go on, else the exit code."""
    if not sys.stdin.isatty():
        print(
            "checkpointd: error: not deleting without a confirmation: stdin is not a terminal "
            "(pass --yes)",
            file=sys.stderr,
        )
        return 2
    if detail is None:
        what = "it has no checkpoints (idempotency results, if any, are deleted too)"
    else:
        e = detail.execution
        paused = ", paused" if detail.pending is not None else ""
        what = (
            f"{e.status}{paused}, {e.checkpoint_count} checkpoints, "
            f"{detail.idempotency_key_count} idempotency results"
        )
    try:
        reply = input(
            f"Delete run {args.execution_id} in namespace {args.namespace!r} ({what})? [y/N] "
        )
    except EOFError:
        reply = ""
    if reply.strip().lower() not in ("y", "yes"):
        print("not deleted", file=sys.stderr)
        return 1
    return None
