"""``checkpointd runs list|show|delete``: the executions of a namespace, for people (C11),
fastaiagent runs and LangGraph threads alike (C12).

``list`` prints one line per run, newest activity first, with its framework, its status
(running, paused, ended, failed), its number of checkpoints and its last activity. ``show``
prints one run: its summary, the pending interrupt and the decision on it, the newest
decision and how it was carried out, the idempotency keys stored, and its checkpoints in
write order; ``--state N`` prints the state of its N-th checkpoint instead. For a thread it
prints its summary, each of its pauses whole, and its checkpoints oldest first (step, source,
the nodes that wrote, the time in the checkpoint id) as ListGraphCheckpoints lists them.
``delete`` deletes a run (DeleteExecution, contract C6) or a thread (DeleteGraphThread, G5)
after a confirmation. With ``--json``, ``list`` and ``show`` print one JSON object per line.
All talk to a running server through the Python client.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from checkpointd.cli.connection import (
    READ_NAMESPACE,
    RUN_NAMESPACE,
    add_connection_arguments,
    connect,
    positive_int,
)
from checkpointd.cli.interrupts import decision_json, pending_json
from checkpointd.cli.listing import PAGE_CAP, print_listing
from checkpointd.cli.output import aligned, fail, print_json, record_json, words
from checkpointd.cli.output import when as _when
from checkpointd.cli.parsers import add_actions, add_command
from checkpointd.cli.pauses import compact_context
from checkpointd.cli.thread_view import (
    format_graph_checkpoints,
    format_thread,
    graph_checkpoint_json,
    graph_checkpoints,
    last_activity,
)
from checkpointd_client import (
    Checkpoint,
    CheckpointdError,
    Decision,
    Execution,
    ExecutionDetail,
    NotFoundError,
    PendingInterrupt,
)
from checkpointd_client.models import EXECUTION_STATUSES, FRAMEWORKS
from checkpointd_client.v1 import graph_service_pb2 as g

__all__ = [
    "DESCRIPTION",
    "HELP",
    "format_checkpoints",
    "format_executions",
    "parse_since",
    "register",
]

LIST_COLUMNS = (
    "EXECUTION_ID",
    "FRAMEWORK",
    "CHAIN",
    "STATUS",
    "CHECKPOINTS",
    "LAST_NODE",
    "LAST_ACTIVITY",
)
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


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run an action works on, and where it is."""
    parser.add_argument(
        "execution_id", metavar="EXECUTION_ID", help="the run (a LangGraph thread's thread id)"
    )
    add_connection_arguments(parser, namespace_help=RUN_NAMESPACE)
    parser.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        help="the fastaiagent run or the LangGraph thread of that id [default: the run when "
        "there is one, else the thread]",
    )


HELP = "list, inspect or delete the runs of a namespace"
DESCRIPTION = (
    "Read the runs (executions) of a namespace from a running server: which are running, "
    "paused, ended or failed, and what one of them wrote."
)


def register(runs: argparse.ArgumentParser) -> None:
    """Add ``runs list``, ``runs show`` and ``runs delete``."""
    actions = add_actions(runs)
    listing = add_command(
        actions,
        "list",
        run_list,
        help="print the runs as a table, newest activity first",
        description="Print the runs of a namespace, fastaiagent runs and LangGraph threads, "
        "newest activity first: framework, chain (a thread's graph name, where known), status "
        "(a run is paused waiting on a pending interrupt, failed when its newest checkpoint "
        "failed, ended when its newest checkpoint is a run_end row, running otherwise; a "
        "thread is paused with a pending pause, failed when its newest checkpoint holds an "
        "error write, running when it holds other writes, is an input checkpoint or has Sends "
        "to run, ended "
        "otherwise), number of checkpoints, newest node and last activity.",
    )
    add_connection_arguments(listing, namespace_help=READ_NAMESPACE, all_namespaces=True)
    listing.add_argument(
        "--chain", help="only runs whose newest checkpoint has this chain name (threads: graph)"
    )
    listing.add_argument("--framework", choices=FRAMEWORKS, help="only runs of this framework")
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
    show = add_command(
        actions,
        "show",
        run_show,
        help="print one run: its pause, decision, idempotency keys and checkpoints",
        description="Print one run: its summary, its pending interrupt and the decision on it, "
        "its newest decision and how it was carried out (resumed, resume_failed, ...), the "
        "idempotency keys it stored, and its checkpoints in write order. For a LangGraph "
        "thread: its summary, each pause with its decision, and its checkpoints oldest first "
        "(step, source, the nodes whose writes it holds, the time its id carries).",
    )
    _run_arguments(show)
    show.add_argument(
        "--state",
        type=_position,
        metavar="N",
        help="print the state of the run's N-th checkpoint (the # column; -1 is the newest) "
        "as JSON, and nothing else (a fastaiagent run's only)",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per line: the run (kind execution), then each checkpoint "
        "(kind checkpoint)",
    )
    delete = add_command(
        actions,
        "delete",
        run_delete,
        help="delete a run after a confirmation",
        description="Delete a run: its checkpoints, its pending interrupt, its decisions and "
        "its idempotency results, in one transaction (DeleteExecution); a LangGraph thread: "
        "its checkpoints in every checkpoint_ns, its writes, its pauses and their decisions "
        "(DeleteGraphThread). Asks first, unless --yes. Its request ids stay remembered, so a "
        "late retry cannot bring it back.",
    )
    _run_arguments(delete)
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask")


# --- formatting ---------------------------------------------------------------------------


def format_executions(rows: Sequence[Execution], now: datetime) -> list[str]:
    """The header and one aligned line per run."""
    return aligned(
        LIST_COLUMNS,
        [
            (
                e.execution_id,
                e.framework,
                e.chain_name or "-",
                e.status,
                str(e.checkpoint_count),
                e.last_node_id or "-",
                last_activity(e, now),
            )
            for e in rows
        ],
    )


def format_checkpoints(rows: Sequence[Checkpoint]) -> list[str]:
    """The header and one aligned line per checkpoint, in write order."""
    return aligned(
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


#: The keys of a run's JSON object.
_EXECUTION_KEYS = (
    "execution_id",
    "framework",
    "chain_name",
    "status",
    "checkpoint_count",
    "last_activity_at",
    "last_checkpoint_id",
    "last_node_id",
    "last_sequence",
)
#: The keys of a checkpoint's JSON object in ``show --json``: not its JSON payloads
#: (``--state`` prints those).
_CHECKPOINT_KEYS = (
    "sequence",
    "checkpoint_id",
    "parent_checkpoint_id",
    "chain_name",
    "node_id",
    "node_index",
    "status",
    "step_type",
    "iteration",
    "interrupt_reason",
    "agent_path",
    "created_at",
)


def execution_json(execution: Execution) -> dict[str, Any]:
    """A run's summary as a JSON object."""
    return record_json(execution, _EXECUTION_KEYS)


def checkpoint_json(position: int, cp: Checkpoint) -> dict[str, Any]:
    """One checkpoint of ``show --json``, with its place in the run."""
    return {"kind": "checkpoint", "position": position, **record_json(cp, _CHECKPOINT_KEYS)}


def _describe_decision(decision: Decision) -> str:
    verdict = "approved" if decision.approved else "rejected"
    lease, reported = decision.lease_expires_at, decision.reported_at
    return words(
        f"{verdict} by {decision.decided_by} at {_when(decision.decided_at)}",
        f"status={decision.status}",
        f"attempts={decision.attempts}",
        f"reason={decision.reason!r}" if decision.reason else None,
        None if lease is None else f"lease_until={_when(lease)}",
        None if reported is None else f"reported={_when(reported)}",
        f"error={decision.error!r}" if decision.error else None,
    )


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
        f"last         {last_activity(e, now)} at {e.last_node_id or '-'}",
    ]
    if detail.pending is not None:
        lines.append(f"pending      {_describe_pause(detail.pending)}")
        lines.append(f"context      {compact_context(detail.pending.context, width=None)}")
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


def _is_thread(detail: ExecutionDetail | None, framework: str | None) -> bool:
    if detail is None:
        return framework == "langgraph"
    return detail.execution.framework == "langgraph"


# --- commands -----------------------------------------------------------------------------


def run_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the runs, newest activity first; 1 when the server answers an error."""
    return print_listing(
        args,
        lambda client: partial(
            client.list_executions,
            chain_name=args.chain,
            status=args.status,
            active_since=args.since,
            framework=args.framework,
        ),
        lambda page: page.executions,
        lambda rows: format_executions(rows, datetime.now(UTC)),
        what="runs",
        newest=lambda execution: execution.last_activity_at,
        as_json=execution_json,
    )


def _pick(checkpoints: Sequence[Checkpoint], position: int) -> Checkpoint | None:
    index = position - 1 if position > 0 else len(checkpoints) + position
    return checkpoints[index] if 0 <= index < len(checkpoints) else None


def run_show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print one run or thread; 1 when it does not exist or the server answers an error."""
    tuples: list[g.GraphCheckpointTuple] = []
    checkpoints: list[Checkpoint] = []
    try:
        with connect(args) as client:
            detail = client.get_execution(args.execution_id, framework=args.framework)
            if _is_thread(detail, args.framework):
                tuples = graph_checkpoints(client, args.execution_id)
            else:
                checkpoints = list(client.iter_checkpoints(args.execution_id, page_size=PAGE_CAP))
    except NotFoundError:
        return fail(f"no run {args.execution_id!r} in namespace {args.namespace!r}")
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    if _is_thread(detail, args.framework):
        return _show_thread(args, detail, tuples)
    if args.state is not None:
        picked = _pick(checkpoints, args.state)
        if picked is None:
            return fail(f"--state {args.state}: the run has {len(checkpoints)} checkpoints")
        print(json.dumps(picked.state_snapshot, ensure_ascii=False, indent=2, sort_keys=True))
        return 0
    if args.json:
        print_json(_detail_json(detail))
        for position, cp in enumerate(checkpoints, start=1):
            print_json(checkpoint_json(position, cp))
        return 0
    for line in _show_lines(detail, checkpoints):
        print(line)
    return 0


def _show_thread(
    args: argparse.Namespace, detail: ExecutionDetail, tuples: Sequence[g.GraphCheckpointTuple]
) -> int:
    """``show`` of a LangGraph thread."""
    if args.state is not None:
        return fail(
            f"--state reads a fastaiagent run's checkpoint; {args.execution_id!r} is a "
            "LangGraph thread, whose state the graph's saver reads"
        )
    if args.json:
        print_json(_detail_json(detail))
        for position, found in enumerate(tuples, start=1):
            print_json(graph_checkpoint_json(position, found))
        return 0
    for line in format_thread(detail, datetime.now(UTC)):
        print(line)
    print()
    for line in format_graph_checkpoints(tuples):
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
        "pauses": [pending_json(p) for p in detail.pauses],
        "idempotency_keys": detail.idempotency_keys,
        "idempotency_key_count": detail.idempotency_key_count,
    }


def run_delete(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Delete one run or thread after a confirmation; 0 when deleted (or nothing to delete)."""
    try:
        with connect(args) as client:
            try:
                detail: ExecutionDetail | None = client.get_execution(
                    args.execution_id, framework=args.framework
                )
            except NotFoundError:
                detail = None
            if not args.yes:
                answer = _confirm(args, detail)
                if answer is not None:
                    return answer
            if _is_thread(detail, args.framework):
                request = g.DeleteGraphThreadRequest(
                    namespace=client.namespace,
                    request_id=uuid.uuid4().hex,
                    thread_id=args.execution_id,
                )
                deleted = client.call_graph("DeleteGraphThread", request)
                pauses = 0 if detail is None else len(detail.pauses)
                print(
                    f"deleted LangGraph thread {args.execution_id}: "
                    f"{deleted.checkpoints_deleted} checkpoints, {pauses} pending pauses"
                )
                return 0
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
    thread = _is_thread(detail, args.framework)
    if detail is None and thread:
        what = "it has no checkpoints"
    elif detail is None:
        what = "it has no checkpoints (idempotency results, if any, are deleted too)"
    elif thread:
        e = detail.execution
        what = f"{e.status}, {e.checkpoint_count} checkpoints, {len(detail.pauses)} pending pauses"
    else:
        e = detail.execution
        paused = ", paused" if detail.pending is not None else ""
        what = (
            f"{e.status}{paused}, {e.checkpoint_count} checkpoints, "
            f"{detail.idempotency_key_count} idempotency results"
        )
    try:
        kind = "LangGraph thread" if thread else "run"
        reply = input(
            f"Delete {kind} {args.execution_id} in namespace {args.namespace!r} ({what})? [y/N] "
        )
    except EOFError:
        reply = ""
    if reply.strip().lower() not in ("y", "yes"):
        print("not deleted", file=sys.stderr)
        return 1
    return None
