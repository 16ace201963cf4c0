"""``checkpointd interrupts list|show|watch|decide``: the pending interrupts of a namespace,
for people.

``list`` prints an aligned table, newest first, with the decision on each pause and the start
of its context (``--json``: one object per pause, the whole context). ``show`` prints a run's
pauses whole: what a person reads before deciding. ``watch``
prints the pending set and then one line per change as it happens (``--json``: one JSON object
per line, for machines), and reconnects by itself when the server goes away. ``decide``
approves or rejects a pause (contract K1); a resume worker carries the decision out. A
LangGraph thread may wait on several pauses: ``show`` and ``decide`` take the run's only one
unless ``--interrupt-id`` names another, and list the ids when there are several. All talk
to a running server through the Python client, with the connection options of
:mod:`checkpointd.cli.connection` (``--target``, which defaults to ``$CHECKPOINTD_TARGET``
then 127.0.0.1:7470; ``--token-file`` or ``$CHECKPOINTD_TOKEN``; ``--tls-*``).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import logging
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from types import FrameType
from typing import Any, TypedDict

from checkpointd.cli import decision_flags
from checkpointd.cli.connection import (
    READ_NAMESPACE,
    RUN_NAMESPACE,
    add_connection_arguments,
    connect,
    non_negative_int,
    positive_int,
)
from checkpointd.cli.listing import print_listing
from checkpointd.cli.output import aligned, fail, print_json, record_json, words
from checkpointd.cli.parsers import add_actions, add_command
from checkpointd.cli.pauses import compact_context, pause_block, pause_name, pick_pause
from checkpointd_client import (
    CheckpointdClient,
    CheckpointdError,
    Decision,
    DecisionResponse,
    FailedPreconditionError,
    InterruptEvent,
    PendingInterrupt,
    SnapshotComplete,
    SnapshotItem,
    WatchItem,
    WatchProgress,
)

__all__ = ["DESCRIPTION", "HELP", "format_age", "format_table", "register"]

COLUMNS = ("EXECUTION_ID", "CHAIN", "REASON", "NODE", "AGENT_PATH", "DECISION", "AGE", "CONTEXT")


class _Filters(TypedDict):
    """What ``list`` and ``watch`` select the interrupts by, as the client's calls take it."""

    chain_name: str | None
    reason: str | None
    agent_path_prefix: str | None


def _filter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chain", help="only interrupts of this chain name")
    parser.add_argument("--reason", help="only interrupts with this reason")
    parser.add_argument(
        "--agent-path-prefix", help="only interrupts whose agent_path starts with this"
    )


def _filters(args: argparse.Namespace) -> _Filters:
    return _Filters(
        chain_name=args.chain, reason=args.reason, agent_path_prefix=args.agent_path_prefix
    )


HELP = "list, show, watch or decide pending interrupts"
DESCRIPTION = "Read the runs that paused for a human, from a running server."


def register(interrupts: argparse.ArgumentParser) -> None:
    """Add ``interrupts list``, ``interrupts watch`` and ``interrupts decide``."""
    actions = add_actions(interrupts)
    listing = add_command(
        actions,
        "list",
        run_list,
        help="print the pending interrupts as a table, newest first",
        description="Print the pending interrupts of a namespace as a table, newest first.",
    )
    add_connection_arguments(listing, namespace_help=READ_NAMESPACE, all_namespaces=True)
    _filter_arguments(listing)
    listing.add_argument(
        "--limit",
        type=positive_int,
        default=100,
        help="the most rows to print [default: %(default)s]",
    )
    listing.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per pause (its whole context and decision) instead",
    )
    show = add_command(
        actions,
        "show",
        run_show,
        help="print a run's pauses whole: context, node, reason, decision",
        description="Print what a person reads before deciding: each pause of a run with its "
        "whole context, node, reason, interrupt id and decision.",
    )
    show.add_argument("execution_id", metavar="EXECUTION_ID", help="the paused run")
    show.add_argument(
        "--interrupt-id", help="only this pause of a graph thread [default: all of the run's]"
    )
    show.add_argument("--json", action="store_true", help="print one JSON object per pause")
    add_connection_arguments(show, namespace_help=RUN_NAMESPACE)
    watch = add_command(
        actions,
        "watch",
        run_watch,
        help="print the pending interrupts, then every change as it happens",
        description="Print the pending interrupts of a namespace, then one line per change "
        "(added, claimed, removed) until interrupted. Reconnects by itself after a server "
        "restart, losing nothing.",
    )
    add_connection_arguments(watch, namespace_help=READ_NAMESPACE, timeout=False)
    _filter_arguments(watch)
    watch.add_argument(
        "--after-cursor",
        type=non_negative_int,
        default=0,
        help="continue after this cursor (from an earlier --json line) instead of starting "
        "with a snapshot [default: 0, a snapshot]",
    )
    watch.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per line: kind snapshot, snapshot_complete, event or progress",
    )
    decide = add_command(
        actions,
        "decide",
        run_decide,
        help="approve, reject, edit or answer a pending interrupt",
        description="Decide a pending interrupt: a resume worker then resumes the run with "
        "Resume(approved=..., metadata=...), or a graph with the answer its pause asks for "
        "(--edit, --respond, --decisions-json for LangChain's HumanInTheLoopMiddleware, "
        "--resume-json for any other interrupt()). A pause takes one decision; a second one "
        "is refused, naming the first, unless the first one's resume failed.",
    )
    decide.add_argument("execution_id", metavar="EXECUTION_ID", help="the paused run")
    decide.add_argument(
        "--interrupt-id",
        help="which pause of a graph thread (its INTERRUPT_ID in `list`) [default: the run's "
        "only pause; when it has several, they are listed]",
    )
    verdict = decide.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", dest="approved", action="store_true", help="let it go on")
    verdict.add_argument("--reject", dest="approved", action="store_false", help="refuse it")
    decision_flags.add_response_arguments(verdict)
    decide.add_argument(
        "--metadata",
        default="{}",
        help="a JSON object handed to the run as Resume.metadata [default: {}]",
    )
    decide.add_argument("--reason", help="why, for the record")
    decide.add_argument("--decided-by", help="who decides [default: the user running the command]")
    add_connection_arguments(decide, namespace_help=RUN_NAMESPACE)


# --- formatting ---------------------------------------------------------------------------


def format_age(created_at: datetime | None, now: datetime) -> str:
    """Return a short age: ``42s``, ``5m``, ``3h``, ``2d`` (``-`` when unknown)."""
    if created_at is None:
        return "-"
    seconds = max(int((now - created_at).total_seconds()), 0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


#: An action's answer in the past tense, for one-word decisions ("edited:alice:decided").
_DONE: dict[str, str] = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "respond": "responded",
}


def format_decision(decision: Decision | None) -> str:
    """Return a decision in one word: ``approved:alice:resumed`` (``-`` when undecided)."""
    if decision is None:
        return "-"
    verdict = "approved" if decision.approved else "rejected"
    if decision.response is not None and decision.response.actions:
        verdict = "+".join(_DONE[action.type] for action in decision.response.actions)
    elif decision.response is not None:
        verdict = "answered"
    return f"{verdict}:{decision.decided_by}:{decision.status}"


def format_table(rows: Sequence[PendingInterrupt], now: datetime) -> list[str]:
    """Return the header and one line per row, each column as wide as its widest cell; an
    INTERRUPT_ID column after EXECUTION_ID when a row is a graph pause (G8)."""
    graph = any(p.interrupt_id for p in rows)
    header = (COLUMNS[0], "INTERRUPT_ID", *COLUMNS[1:]) if graph else COLUMNS
    cells = [
        (
            p.execution_id,
            *((p.interrupt_id or "-",) if graph else ()),
            p.chain_name or "-",
            p.reason or "-",
            p.node_id or "-",
            p.agent_path or "-",
            format_decision(p.decision),
            format_age(p.created_at, now),
            compact_context(p.context),
        )
        for p in rows
    ]
    return aligned(header, cells)


#: The keys of a pending interrupt's JSON object, but its decision (one of its own).
_PENDING_KEYS = (
    "execution_id",
    "chain_name",
    "node_id",
    "reason",
    "context",
    "agent_path",
    "created_at",
    "checkpoint_id",
    "interrupt_id",
    "checkpoint_ns",
)
#: The keys of a decision's JSON object, but its response (one of its own).
_DECISION_KEYS = (
    "approved",
    "metadata",
    "decided_by",
    "reason",
    "decided_at",
    "status",
    "attempts",
    "lease_expires_at",
    "error",
    "reported_at",
)


def pending_json(pending: PendingInterrupt) -> dict[str, Any]:
    """Return a pending interrupt as a JSON object (times as ISO 8601 UTC)."""
    decision = pending.decision
    return {
        **record_json(pending, _PENDING_KEYS),
        "decision": None if decision is None else decision_json(decision),
    }


def decision_json(decision: Decision) -> dict[str, Any]:
    """Return a decision as a JSON object (times as ISO 8601 UTC)."""
    response = decision.response
    return {
        **record_json(decision, _DECISION_KEYS),
        "response": None if response is None else response_json(response),
    }


def response_json(response: DecisionResponse) -> dict[str, Any]:
    """Return a decision's typed answer as JSON: its actions, or its resume value."""
    if response.has_resume:
        return {"resume": response.resume_value}
    return {
        "actions": [
            {key: value for key, value in dataclasses.asdict(action).items() if value is not None}
            for action in response.actions
        ]
    }


def item_json(item: WatchItem) -> dict[str, Any]:
    """Return one watch item as the JSON object ``watch --json`` prints."""
    match item:
        case SnapshotItem():
            return {
                "kind": "snapshot",
                "resnapshot": item.resnapshot,
                "pending": pending_json(item.pending),
            }
        case SnapshotComplete():
            return {
                "kind": "snapshot_complete",
                "cursor": item.cursor,
                "resnapshot": item.resnapshot,
            }
        case InterruptEvent():
            return {
                "kind": "event",
                "cursor": item.cursor,
                "type": item.type,
                "event_time": item.event_time.isoformat(),
                "pending": pending_json(item.pending),
            }
        case WatchProgress():
            return {"kind": "progress", "cursor": item.cursor}


def _describe(pending: PendingInterrupt) -> str:
    decision = pending.decision
    return words(
        pending.execution_id,
        f"interrupt={pending.interrupt_id}" if pending.interrupt_id else None,
        f"chain={pending.chain_name or '-'}",
        f"reason={pending.reason or '-'}",
        f"node={pending.node_id or '-'}",
        f"agent_path={pending.agent_path}" if pending.agent_path else None,
        None if decision is None else f"decision={format_decision(decision)}",
    )


def item_line(item: WatchItem, now: datetime) -> str | None:
    """Return the human line for one watch item (``None``: nothing to print on stdout)."""
    match item:
        case SnapshotItem():
            age = format_age(item.pending.created_at, now)
            return f"{'pending':<8} {_describe(item.pending)} age={age}"
        case InterruptEvent():
            when = item.event_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return f"{item.type:<8} {_describe(item.pending)} at={when} cursor={item.cursor}"
        case _:
            return None


# --- commands -----------------------------------------------------------------------------


def run_list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the pending interrupts as a table; 1 when the server answers an error."""
    return print_listing(
        args,
        lambda client: partial(client.list_pending_interrupts, **_filters(args)),
        lambda page: page.pending_interrupts,
        lambda rows: format_table(rows, datetime.now(UTC)),
        what="pending interrupts",
        newest=lambda pending: pending.created_at,
        as_json=pending_json,
    )


def run_show(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print a run's pauses whole; 1 when it has none (or not the one named)."""
    try:
        with connect(args) as client:
            pauses = [
                p for p in client.iter_pending_interrupts() if p.execution_id == args.execution_id
            ]
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    if args.interrupt_id is not None:
        pauses = [p for p in pauses if p.interrupt_id == args.interrupt_id]
    if not pauses:
        which = "" if args.interrupt_id is None else f" with interrupt id {args.interrupt_id!r}"
        return fail(
            f"{args.execution_id} has no pending interrupt{which} in namespace {args.namespace!r}"
        )
    now = datetime.now(UTC)
    for n, pending in enumerate(pauses):
        if args.json:
            print_json(pending_json(pending))
            continue
        if n:
            print()
        print("\n".join(pause_block(pending, now)))
    return 0


def run_decide(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Decide one pause; print the decision. 1 when refused (the winner is named)."""
    try:
        metadata = json.loads(args.metadata)
    except ValueError:
        parser.error(f"--metadata: {args.metadata!r} is not JSON")
    if not isinstance(metadata, dict):
        parser.error("--metadata must be a JSON object")
    decided_by = args.decided_by or _user()
    try:
        with connect(args) as client:
            pause = _pause(client, args)
            if isinstance(pause, str):
                return fail(pause)
            response = decision_flags.response_from_arguments(
                args, pause if decision_flags.needs_pause(args) else None
            )
            decided = client.submit_decision(
                args.execution_id,
                # --approve / --reject say it; a typed answer carries its own verdict.
                approved=args.approved if response is None else None,
                decided_by=decided_by,
                resume_metadata=metadata,
                reason=args.reason,
                interrupt_id=pause.interrupt_id if pause is not None else args.interrupt_id or "",
                response=response,
            )
    except FailedPreconditionError as exc:
        if exc.reason == "ALREADY_DECIDED":
            verdict = "approved" if exc.metadata.get("approved") == "true" else "rejected"
            return fail(
                f"{args.execution_id} was already {verdict} by "
                f"{exc.metadata.get('decided_by')} at {exc.metadata.get('decided_at')}"
            )
        return fail(exc)
    except (CheckpointdError, ValueError) as exc:
        return fail(exc)
    assert decided.decision is not None
    print(
        f"{format_decision(decided.decision).split(':')[0]} {decided.execution_id} "
        f"({pause_name(decided)}) as {decided.decision.decided_by}: a resume worker will carry "
        "it out"
    )
    return 0


def _pause(client: CheckpointdClient, args: argparse.Namespace) -> PendingInterrupt | str | None:
    """The pause being decided: the one --interrupt-id names, else the run's only one. A
    sentence when the run waits on several and none is named; None when it has none (the
    server then says so, with its reason)."""
    pauses = [p for p in client.iter_pending_interrupts() if p.execution_id == args.execution_id]
    picked = pick_pause(args.execution_id, pauses, args.interrupt_id)
    if isinstance(picked, str):
        return picked if len(pauses) > 1 and args.interrupt_id is None else None
    return picked


def _user() -> str:
    try:
        return getpass.getuser() or "cli"
    except (KeyError, OSError):  # no user name in a bare container
        return "cli"


def run_watch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the pending set and every change until Ctrl-C or SIGTERM, then exit 0."""
    logging.basicConfig(level=logging.WARNING, format="checkpointd: %(message)s")
    logging.getLogger("checkpointd_client.watch").setLevel(logging.INFO)
    try:
        client = connect(args)
    except ValueError as exc:
        return fail(exc)
    with client:
        try:
            watch = client.watch_interrupts(after_cursor=args.after_cursor, **_filters(args))
        except ValueError as exc:
            return fail(exc)

        def stop(signum: int, frame: FrameType | None) -> None:
            watch.close()

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            for item in watch:
                _print_item(item, args.json)
        except KeyboardInterrupt:
            watch.close()
        except CheckpointdError as exc:
            return fail(exc)
        except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing left to do
            sys.stderr.close()
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _print_item(item: WatchItem, as_json: bool) -> None:
    if as_json:
        print_json(item_json(item), flush=True)
        return
    line = item_line(item, datetime.now(UTC))
    if line is not None:
        print(line, flush=True)
    elif isinstance(item, SnapshotComplete):
        note = "new snapshot complete" if item.resnapshot else "snapshot complete"
        print(f"-- {note} at cursor {item.cursor}; watching for changes --", file=sys.stderr)
