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
from typing import Any, Final, NamedTuple

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
        v.at_most("response.actions", len(response.actions), _ACTIONS_MAX, "actions")
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
#: actions, their review configs, and a config's action name, allowed decisions and argument
#: schema.
_SPELLINGS: Final = (
    ("action_requests", "review_configs", "action_name", "allowed_decisions", "args_schema"),
    ("actionRequests", "reviewConfigs", "actionName", "allowedDecisions", "argsSchema"),
)


class _Requested(NamedTuple):
    """An action a middleware pause asks about: what may answer it (None: any decision;
    no schema: any arguments)."""

    name: str
    allowed: list[str] | None
    args_schema: dict[str, Any] | None


def _list_or_none(value: Any) -> list[str] | None:
    return value if isinstance(value, list) else None


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _batched(context: dict[str, Any]) -> list[_Requested] | None:
    """The actions of a batched request (a ``HITLRequest``), or None when ``context`` is not
    one."""
    for requests, configs, name_key, allowed_key, schema_key in _SPELLINGS:
        if not isinstance(context.get(requests), list):
            continue
        by_name = {
            config.get(name_key): config
            for config in context.get(configs) or ()
            if isinstance(config, dict)
        }
        found: list[_Requested] = []
        for request in context[requests]:
            name = str(request.get("name", "")) if isinstance(request, dict) else ""
            config = by_name.get(name, {})
            found.append(
                _Requested(
                    name,
                    _list_or_none(config.get(allowed_key)),
                    _dict_or_none(config.get(schema_key)),
                )
            )
        return found
    return None


def _requested_actions(context: Any) -> list[_Requested] | None:
    """The actions a middleware pause asks about; None when the pause is not the
    middleware's."""
    if not isinstance(context, dict):
        return None
    batched = _batched(context)
    if batched is not None:
        return batched
    if context.get("type") == "tool_approval":  # per call: a ToolApprovalRequest
        # The saver put the allowed decisions and the tool's argument schema, read from the
        # interrupt's response schema, into the context.
        return [
            _Requested(
                str(context.get("name", "")),
                _list_or_none(context.get("allowed_decisions")),
                _dict_or_none(context.get("args_schema")),
            )
        ]
    return None


def _args_misfit(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Where and why ``args`` does not fit the JSON schema ``schema``; None when they fit, or
    when the schema cannot check anything (it is invalid, or refers to what it does not hold):
    a schema the agent sent badly must not keep a person from deciding."""
    # Imported here: jsonschema takes a tenth of a second to import, which every server start
    # would pay for a check only an edit with a schema needs.
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators
    from referencing.exceptions import Unresolvable

    try:
        checker = validators.validator_for(schema)
        checker.check_schema(schema)
        error = schema_errors.best_match(checker(schema).iter_errors(args))
    except (schema_errors.SchemaError, Unresolvable):
        return None
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def check_fits(pending: PendingRecord, response: str) -> None:
    """INVALID_ARGUMENT unless ``response`` answers ``pending`` as it asks: a middleware pause
    takes one allowed decision per action (an edit's arguments fitting the tool's schema where
    the pause gives one), another graph pause a resume value, a fastaiagent pause neither."""
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
    for index, (action, asked) in enumerate(zip(actions, requested, strict=True)):
        if asked.allowed is not None and action["type"] not in asked.allowed:
            raise InvalidField(
                "response.actions.type",
                f"the pause does not allow {action['type']!r} for {asked.name!r}, action "
                f"{index + 1} (allowed: {', '.join(map(str, asked.allowed))})",
            )
        misfit = None
        if action["type"] == "edit" and asked.args_schema is not None:
            misfit = _args_misfit(asked.args_schema, action["args"])
        if misfit is not None:
            raise InvalidField(
                "response.actions.edited_args_json",
                f"does not fit the arguments {asked.name!r} takes, action {index + 1}: {misfit}",
            )
