"""K3: an edit's arguments checked against the tool's schema its pause carries, and a schema
that cannot check anything (invalid, or referring to what it does not hold) leaving the
decision to the person rather than refusing it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from checkpointd.decision_responses import _args_misfit, check_fits
from checkpointd.domain import PendingRecord
from checkpointd.errors import InvalidField

SCHEMA = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "cc": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["to"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "misfit"),
    [
        ({"to": "ann"}, None),
        ({"to": "ann", "cc": ["bo"]}, None),
        ({}, "'to' is a required property"),
        ({"to": "ann", "cc": ["bo", 3]}, "cc.1: 3 is not of type 'string'"),
        ({"to": "ann", "bcc": "x"}, "Additional properties are not allowed ('bcc' was unexpected)"),
    ],
)
def test_k3_args_misfit_names_the_argument_and_the_rule(
    args: dict[str, Any], misfit: str | None
) -> None:
    assert _args_misfit(SCHEMA, args) == misfit


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "no-such-type"},
        {"$ref": "#/$defs/Missing"},
        {"properties": {"to": {"$ref": "https://example.invalid/schema.json"}}},
    ],
    ids=["invalid", "missing-def", "remote-ref"],
)
def test_k3_a_schema_that_cannot_check_lets_any_arguments_through(
    schema: dict[str, Any],
) -> None:
    assert _args_misfit(schema, {"to": 1}) is None


def _pause(context: dict[str, Any]) -> PendingRecord:
    return PendingRecord(
        execution_id="t",
        chain_name="agent",
        node_id="tools",
        reason="interrupt",
        context_json=json.dumps(context),
        agent_path=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        checkpoint_id="c",
        interrupt_id="i",
    )


def test_k3_only_edits_are_checked_and_only_where_a_schema_is_given() -> None:
    per_call = {"type": "tool_approval", "name": "send", "args_schema": SCHEMA}
    check_fits(_pause(per_call), json.dumps({"actions": [{"type": "approve"}]}))
    check_fits(
        _pause({"type": "tool_approval", "name": "send"}),
        json.dumps({"actions": [{"type": "edit", "args": {"anything": 1}}]}),
    )
    with pytest.raises(InvalidField, match="does not fit the arguments 'send' takes"):
        check_fits(_pause(per_call), json.dumps({"actions": [{"type": "edit", "args": {}}]}))
