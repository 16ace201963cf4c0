"""A pause and its decision in plain words, as ``interrupts show``, ``interrupts decide`` and
``runs show`` print them; and the pause a command means when the run has one or several
(a LangGraph thread may wait on several at once, one per parallel branch)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from checkpointd.cli.output import when as _when
from checkpointd_client import Decision, PendingInterrupt

__all__ = ["compact_context", "describe_decision", "pause_block", "pause_name", "pick_pause"]

#: The widest a context is shown in a table cell before it is cut.
CONTEXT_CELL = 48


def compact_context(context: Any, width: int | None = CONTEXT_CELL) -> str:
    """A pause's context as one line of JSON, cut to ``width`` characters (``…`` marks the
    cut); ``-`` when it has none."""
    if context in (None, {}, []):
        return "-"
    text = json.dumps(context, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


def pause_name(pending: PendingInterrupt) -> str:
    """Which pause of its run this is, for a person: its node, and its interrupt id when it
    is a LangGraph pause (a thread may have several)."""
    node = f"node {pending.node_id or '-'}"
    return f"{node}, interrupt {pending.interrupt_id}" if pending.interrupt_id else node


#: What a decision's status means, in the words an operator reads.
_STATUS_WORDS = {
    "decided": "waiting for a resume worker",
    "resuming": "being carried out",
    "resumed": "carried out",
    "resume_failed": "its resume failed; it may be decided again",
}


def describe_decision(decision: Decision) -> str:
    """A decision in one sentence: what was answered, by whom, when, and what came of it."""
    if decision.response is not None and decision.response.actions:
        what = " and ".join(action.type for action in decision.response.actions)
        verdict = f"answered ({what})"
    elif decision.response is not None:
        verdict = "answered"
    else:
        verdict = "approved" if decision.approved else "rejected"
    reason = f" ({decision.reason})" if decision.reason else ""
    outcome = _STATUS_WORDS.get(decision.status, decision.status)
    error = f": {decision.error}" if decision.error else ""
    return (
        f"{verdict} by {decision.decided_by}{reason} at {_when(decision.decided_at)}; "
        f"{outcome}{error}"
    )


def pause_block(pending: PendingInterrupt, now: datetime) -> list[str]:
    """Everything one needs to decide a pause, one fact a line; the context in full."""
    context = json.dumps(pending.context, ensure_ascii=False, indent=2, sort_keys=True)
    age = "-" if pending.created_at is None else f"{now - pending.created_at}".split(".")[0]
    lines = [
        f"run          {pending.execution_id}",
        f"pause        {pause_name(pending)}",
        f"reason       {pending.reason or '-'}",
        f"chain        {pending.chain_name or '-'}",
        f"waiting      since {_when(pending.created_at)} ({age})",
        f"checkpoint   {pending.checkpoint_id}",
    ]
    if pending.agent_path:
        lines.append(f"agent path   {pending.agent_path}")
    if pending.checkpoint_ns:
        lines.append(f"subgraph     {pending.checkpoint_ns}")
    decision = pending.decision
    lines.append(f"decision     {'none yet' if decision is None else describe_decision(decision)}")
    lines.append("context")
    lines.extend(f"  {line}" for line in context.splitlines())
    return lines


def pick_pause(
    execution_id: str, pauses: Sequence[PendingInterrupt], interrupt_id: str | None
) -> PendingInterrupt | str:
    """The pause of ``execution_id`` a command means: the one with ``interrupt_id`` when it
    is given, else the run's only one. A sentence saying why there is none to pick
    otherwise (none pending, or several and which)."""
    mine = [p for p in pauses if p.execution_id == execution_id]
    if interrupt_id is not None:
        mine = [p for p in mine if p.interrupt_id == interrupt_id]
    if len(mine) == 1:
        return mine[0]
    if not mine:
        which = "" if interrupt_id is None else f" with interrupt id {interrupt_id!r}"
        return f"{execution_id} has no pending interrupt{which}"
    listed = "; ".join(f"{p.interrupt_id} ({pause_name(p)})" for p in mine)
    return f"{execution_id} waits on {len(mine)} pauses; name one with --interrupt-id: {listed}"
