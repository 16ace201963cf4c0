"""Typed answers to a pause (contract K3): a decision per action of a LangChain
``HumanInTheLoopMiddleware`` pause, or the value ``interrupt()`` returns for any other graph
pause.

The servicer turns a request's ``DecisionResponse`` into the JSON the store keeps
(:func:`response_json`); the store checks it against the pause it answers inside the
decision's transaction (:func:`check_fits`), so a response the pause does not take changes
nothing. Stored form: ``{"actions": [{"type": "edit", "args": {...}}, {"type": "reject",
"message": "..."}]}`` or ``{"resume": <any JSON value>}``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from checkpointd import validation as v
from checkpointd.domain import PendingRecord
from checkpointd.errors import InvalidField
from checkpointd_client.v1 import checkpoint_pb2 as pb

__all__ = [
    "ACTION_TYPES",
    "MESSAGE_MAX",
    "RESUME_JSON_MAX",
    "check_fits",
    "response_json",
    "response_to_proto",
]

#: The decisions LangChain's middleware knows, by the proto enum's values.
ACTION_TYPES: Final = {
    pb.ACTION_DECISION_TYPE_APPROVE: "approve",
    pb.ACTION_DECISION_TYPE_EDIT: "edit",
    pb.ACTION_DECISION_TYPE_REJECT: "reject",
    pb.ACTION_DECISION_TYPE_RESPOND: "respond",
}
_PROTO_TYPES: Final = {name: number for number, name in ACTION_TYPES.items()}
MESSAGE_MAX: Final = 16384
RESUME_JSON_MAX: Final = 1 << 20
#: More actions than a model turn asks for is a malformed request, not a pause's answer.
_ACTIONS_MAX: Final = 1000


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _action(index: int, action: pb.ActionDecision) -> dict[str, Any]:
    # Fields are named without the index (as every nested field is); the rule says which.
    which = f"(action {index + 1})"
    kind = ACTION_TYPES.get(action.type)
    if kind is None:
        raise InvalidField(
            "response.actions.type", f"must be APPROVE, EDIT, REJECT or RESPOND {which}"
        )
    answer: dict[str, Any] = {"type": kind}
    if kind == "edit":
        if not action.edited_args_json:
            raise InvalidField("response.actions.edited_args_json", f"is required for EDIT {which}")
        args = v.parse_json("response.actions.edited_args_json", action.edited_args_json)
        if not isinstance(args, dict):
            raise InvalidField(
                "response.actions.edited_args_json", f"must be a JSON object {which}"
            )
        answer["args"] = args
    elif action.edited_args_json:
        raise InvalidField(
            "response.actions.edited_args_json", f"is for EDIT only {which}: its type is {kind}"
        )
    if kind in ("approve", "edit") and action.message:
        raise InvalidField(
            "response.actions.message",
            f"is for REJECT and RESPOND only {which}: its type is {kind}",
        )
    if kind == "respond" and not action.message:
        raise InvalidField(
            "response.actions.message", f"is required for RESPOND, the tool's answer {which}"
        )
    if action.message:
        answer["message"] = v.text("response.actions.message", action.message, MESSAGE_MAX)
    return answer


def response_json(request_has_response: bool, response: pb.DecisionResponse, approved: bool) -> str:
    """The stored form of a request's response (empty when the request has none), or
    INVALID_ARGUMENT for one that is malformed whatever the pause (``approved`` must be false
    exactly when an action is rejected)."""
    if not request_has_response:
        return ""
    if response.actions and response.resume_json:
        raise InvalidField("response", "must set actions or resume_json, not both")
    if response.actions:
        if len(response.actions) > _ACTIONS_MAX:
            raise InvalidField("response.actions", f"must hold at most {_ACTIONS_MAX} actions")
        actions = [_action(i, a) for i, a in enumerate(response.actions)]
        rejects = any(action["type"] == "reject" for action in actions)
        if approved == rejects:
            raise InvalidField(
                "approved",
                "must be false exactly when an action is rejected "
                f"({'an action is' if rejects else 'no action is'} rejected)",
            )
        return _dump({"actions": actions})
    if not response.resume_json:
        raise InvalidField("response", "must set actions or resume_json (or be left unset)")
    if len(response.resume_json) > RESUME_JSON_MAX:
        raise InvalidField("response.resume_json", f"must be at most {RESUME_JSON_MAX} characters")
    return _dump({"resume": v.parse_json("response.resume_json", response.resume_json)})


def response_to_proto(stored: str) -> pb.DecisionResponse | None:
    """The proto of a stored response (None when the decision has none)."""
    if not stored:
        return None
    data = json.loads(stored)
    if "resume" in data:
        return pb.DecisionResponse(resume_json=_dump(data["resume"]))
    return pb.DecisionResponse(
        actions=[
            pb.ActionDecision(
                type=_PROTO_TYPES[action["type"]],
                edited_args_json=_dump(action["args"]) if "args" in action else "",
                message=action.get("message", ""),
            )
            for action in data["actions"]
        ]
    )


#: How LangChain (snake_case) and LangChain.js (camelCase) write a batched request: its
#: actions, their review configs, and a config's action name and allowed decisions.
_SPELLINGS: Final = (
    ("action_requests", "review_configs", "action_name", "allowed_decisions"),
    ("actionRequests", "reviewConfigs", "actionName", "allowedDecisions"),
)


def _batched(context: dict[str, Any]) -> list[tuple[str, list[str] | None]] | None:
    """The actions of a batched request (a ``HITLRequest``) with their allowed decisions,
    or None when ``context`` is not one."""
    for requests, configs, name_key, allowed_key in _SPELLINGS:
        if not isinstance(context.get(requests), list):
            continue
        allowed = {
            config.get(name_key): config.get(allowed_key)
            for config in context.get(configs) or ()
            if isinstance(config, dict)
        }
        found: list[tuple[str, list[str] | None]] = []
        for request in context[requests]:
            name = str(request.get("name", "")) if isinstance(request, dict) else ""
            permitted = allowed.get(name)
            found.append((name, permitted if isinstance(permitted, list) else None))
        return found
    return None


def _requested_actions(context: Any) -> list[tuple[str, list[str] | None]] | None:
    """The actions a middleware pause asks about, each with its allowed decisions (None:
    any); None when the pause is not the middleware's."""
    if not isinstance(context, dict):
        return None
    batched = _batched(context)
    if batched is not None:
        return batched
    if context.get("type") == "tool_approval":  # per call: a ToolApprovalRequest
        permitted = context.get("allowed_decisions")
        return [(str(context.get("name", "")), permitted if isinstance(permitted, list) else None)]
    return None


def check_fits(pending: PendingRecord, response: str) -> None:
    """INVALID_ARGUMENT unless ``response`` answers ``pending`` as it asks: a middleware pause
    takes one allowed decision per action, another graph pause a resume value, a fastaiagent
    pause neither."""
    if not response:
        return
    if not pending.interrupt_id:
        raise InvalidField(
            "response",
            "a fastaiagent pause takes no response: its run resumes with the verdict, "
            "reason and metadata",
        )
    data = json.loads(response)
    requested = _requested_actions(json.loads(pending.context_json or "{}"))
    if requested is None:
        if "actions" in data:
            raise InvalidField(
                "response.actions",
                "the pause is not a HumanInTheLoopMiddleware request: answer it with resume_json",
            )
        return
    if "actions" not in data:
        raise InvalidField(
            "response.resume_json",
            "the pause is a HumanInTheLoopMiddleware request: answer each action in actions",
        )
    actions = data["actions"]
    if len(actions) != len(requested):
        raise InvalidField(
            "response.actions",
            f"must answer each of the pause's {len(requested)} action(s) in order "
            f"(got {len(actions)})",
        )
    for index, (action, (name, permitted)) in enumerate(zip(actions, requested, strict=True)):
        if permitted is not None and action["type"] not in permitted:
            raise InvalidField(
                "response.actions.type",
                f"the pause does not allow {action['type']!r} for {name!r}, action "
                f"{index + 1} (allowed: {', '.join(map(str, permitted))})",
            )
