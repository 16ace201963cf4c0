"""The typed answers of ``checkpointd interrupts decide`` (contract K3): ``--edit KEY=VALUE``
and ``--respond TEXT`` for a one-action LangChain ``HumanInTheLoopMiddleware`` pause,
``--decisions-json`` for one answer per action, ``--resume-json`` for any other graph pause."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from checkpointd_client import ActionDecision, DecisionResponse, PendingInterrupt
from checkpointd_client.models import ACTION_DECISION_TYPES

__all__ = ["add_response_arguments", "needs_pause", "response_from_arguments"]

#: Finds the pause being decided (for --edit, whose arguments start from the model's).
PauseLookup = Callable[[], PendingInterrupt | None]


def add_response_arguments(verdict: argparse._MutuallyExclusiveGroup) -> None:
    """Add the typed answers to the verdict group: one of them, or --approve / --reject."""
    verdict.add_argument(
        "--edit",
        action="append",
        metavar="KEY=VALUE",
        help="run the pause's one action with this argument changed (VALUE as JSON when it "
        "parses, else as text); repeat for several",
    )
    verdict.add_argument(
        "--respond",
        metavar="TEXT",
        help="answer for the pause's one action instead of running it (the tool's result)",
    )
    verdict.add_argument(
        "--decisions-json",
        metavar="JSON",
        help='one answer per action of the pause, in order: [{"type": "approve"}, {"type": '
        '"edit", "args": {...}}, {"type": "reject", "message": "..."}, {"type": "respond", '
        '"message": "..."}]',
    )
    verdict.add_argument(
        "--resume-json",
        metavar="JSON",
        help="the value interrupt() returns in the node (a graph pause that is not "
        "HumanInTheLoopMiddleware's)",
    )


def needs_pause(args: argparse.Namespace) -> bool:
    """Whether the answer is built from the pause's own request (--edit)."""
    return bool(args.edit)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parsed(flag: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{flag}: not JSON ({exc})") from None


def _actions_of(pause: PendingInterrupt) -> list[dict[str, Any]]:
    """The actions a middleware pause asks about (its context), each with name and args."""
    context = pause.context
    if isinstance(context.get("action_requests"), list):
        return [a for a in context["action_requests"] if isinstance(a, dict)]
    if context.get("type") == "tool_approval":
        return [context]
    return []


def _edited(pairs: Sequence[str], pause: PendingInterrupt | None) -> ActionDecision:
    if pause is None:
        raise ValueError("--edit: the run has no such pending interrupt")
    actions = _actions_of(pause)
    if len(actions) != 1:
        raise ValueError(
            f"--edit: the pause asks about {len(actions)} actions; answer each with "
            "--decisions-json"
            if actions
            else "--edit: the pause is not a HumanInTheLoopMiddleware request"
        )
    args = dict(actions[0].get("args") or {})
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--edit: {pair!r} is not KEY=VALUE")
        args[key] = _value(text)
    return ActionDecision.edit(args)


def _decision(index: int, item: Any) -> ActionDecision:
    where = f"--decisions-json: item {index}"
    if not isinstance(item, dict) or item.get("type") not in ACTION_DECISION_TYPES:
        raise ValueError(f"{where} needs a type: {', '.join(ACTION_DECISION_TYPES)}")
    args = item.get("args")
    if args is not None and not isinstance(args, dict):
        raise ValueError(f"{where}: args must be a JSON object")
    message = item.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError(f"{where}: message must be text")
    return ActionDecision(type=item["type"], args=args, message=message)


def response_from_arguments(
    args: argparse.Namespace, pause: PendingInterrupt | None
) -> DecisionResponse | None:
    """The typed answer the arguments give (None for --approve / --reject alone); a
    ValueError says what is wrong with them."""
    if args.edit:
        return DecisionResponse(actions=(_edited(args.edit, pause),))
    if args.respond is not None:
        if not args.respond:
            raise ValueError("--respond: the answer is empty")
        return DecisionResponse(actions=(ActionDecision.respond(args.respond),))
    if args.decisions_json is not None:
        items = _parsed("--decisions-json", args.decisions_json)
        if not isinstance(items, list) or not items:
            raise ValueError("--decisions-json: must be a non-empty JSON list, one per action")
        return DecisionResponse(actions=tuple(_decision(i, x) for i, x in enumerate(items)))
    if args.resume_json is not None:
        return DecisionResponse.resume(_parsed("--resume-json", args.resume_json))
    return None
