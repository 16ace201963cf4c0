"""Contract K3: a decision carries the typed answer its pause asks for, checked against the
pause before anything is written, and a decision whose resume failed is replaced by the next
one. Real ``StateGraph``s on the blocking saver pause the way LangChain's
``HumanInTheLoopMiddleware`` does (batched and per call) or with a plain ``interrupt()``;
each rule runs on every backend."""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents.middleware.human_in_the_loop import _decision_schema
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd_client import (
    ActionDecision,
    CheckpointdClient,
    DecisionResponse,
    FailedPreconditionError,
    InterruptEvent,
    InvalidArgumentError,
    PendingInterrupt,
    SnapshotComplete,
)
from checkpointd_client.langgraph import CheckpointdSaver
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from tests.contract.helpers import interrupted

#: Two actions of one model turn, as the batched middleware asks about them.
BATCH = {
    "action_requests": [
        {"name": "send_email", "args": {"to": "ann", "body": "hi"}, "description": "Send?"},
        {"name": "delete_file", "args": {"path": "/tmp/x"}, "description": "Delete?"},
    ],
    "review_configs": [
        {
            "action_name": "send_email",
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        },
        {"action_name": "delete_file", "allowed_decisions": ["approve", "reject"]},
    ],
}


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(saver: CheckpointdSaver, ask: Any) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"log": [json.dumps(ask())]}

    graph = StateGraph(State)
    graph.add_node("review", node)
    graph.add_edge(START, "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


@pytest.fixture
def saver(sidecar: Any) -> Iterator[CheckpointdSaver]:
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, graph_name="agent") as s:
        yield s


def paused(client: CheckpointdClient, saver: CheckpointdSaver, ask: Any) -> PendingInterrupt:
    """Run a one-node graph to its pause; return the pause as the inbox lists it."""
    thread = f"thread-{uuid.uuid4().hex[:10]}"
    _graph(saver, ask).invoke({"log": []}, {"configurable": {"thread_id": thread}})
    [row] = [p for p in client.iter_pending_interrupts() if p.execution_id == thread]
    return row


def batched(client: CheckpointdClient, saver: CheckpointdSaver) -> PendingInterrupt:
    return paused(client, saver, lambda: interrupt(BATCH))


def per_call(client: CheckpointdClient, saver: CheckpointdSaver) -> PendingInterrupt:
    value = {
        "type": "tool_approval",
        "tool_call_id": "call-1",
        "name": "delete_file",
        "args": {"path": "/tmp/x"},
        "description": "Delete?",
    }
    schema = _decision_schema(["approve", "reject"], "delete_file")
    return paused(client, saver, lambda: interrupt(value, response_schema=schema))


def plain(client: CheckpointdClient, saver: CheckpointdSaver) -> PendingInterrupt:
    return paused(client, saver, lambda: interrupt({"reason": "pick", "options": [1, 2, 3]}))


def decide(
    client: CheckpointdClient, pause: PendingInterrupt, response: DecisionResponse, **kw: Any
) -> PendingInterrupt:
    kw.setdefault("decided_by", "ann")
    return client.submit_decision(
        pause.execution_id, interrupt_id=pause.interrupt_id, response=response, **kw
    )


def test_k3_a_batched_pause_takes_one_typed_answer_per_action(client, saver):
    """Edit and reject, in the order of the actions: stored on the pause, listed with it and
    carried by the "decided" event; the verdict follows the answers (a rejection)."""
    pause = batched(client, saver)
    response = DecisionResponse(
        actions=(
            ActionDecision.edit({"to": "bob", "body": "hello"}),
            ActionDecision.reject("not today"),
        )
    )
    with client.watch_interrupts(timeout=60) as watch:
        for item in watch:
            if isinstance(item, SnapshotComplete):
                break
        decided = decide(client, pause, response)
        for item in watch:
            if isinstance(item, InterruptEvent) and item.type == "decided":
                assert item.pending.execution_id == pause.execution_id
                assert item.pending.decision == decided.decision
                break
    assert decided.decision is not None
    assert decided.decision.response == response
    assert decided.decision.approved is False
    [listed] = [p for p in client.iter_pending_interrupts() if p.execution_id == pause.execution_id]
    assert listed.decision == decided.decision


def test_k3_respond_and_approve_keep_the_verdict_approved(client, saver):
    """An answer for the tool and an approval: approved, stored as sent."""
    pause = batched(client, saver)
    response = DecisionResponse(
        actions=(ActionDecision.respond("Sent it myself."), ActionDecision.approve())
    )
    decided = decide(client, pause, response)
    assert decided.decision is not None
    assert decided.decision.approved is True
    assert decided.decision.response == response


def test_k3_a_per_call_pause_lists_what_it_allows_and_takes_one_answer(client, saver):
    """A per-call tool approval shows the decisions its response schema allows; it takes
    one of them, and refuses another."""
    pause = per_call(client, saver)
    assert pause.context["allowed_decisions"] == ["approve", "reject"]
    with pytest.raises(InvalidArgumentError, match="does not allow 'respond' for 'delete_file'"):
        decide(client, pause, DecisionResponse(actions=(ActionDecision.respond("no"),)))
    decided = decide(client, pause, DecisionResponse(actions=(ActionDecision.reject(),)))
    assert decided.decision is not None
    assert decided.decision.approved is False


def test_k3_a_plain_interrupt_takes_any_json_resume_value(client, saver):
    """Any other graph pause takes the value interrupt() returns, JSON of any shape."""
    pause = plain(client, saver)
    response = DecisionResponse.resume([2, {"why": "cheapest"}, None])
    decided = decide(client, pause, response)
    assert decided.decision is not None
    assert decided.decision.response is not None
    assert decided.decision.response.resume_value == [2, {"why": "cheapest"}, None]
    assert decided.decision.approved is True


REFUSED = [
    pytest.param(
        "batched",
        DecisionResponse(actions=(ActionDecision.approve(),)),
        None,
        "response.actions",
        "each of the pause's 2 action",
        id="too-few-actions",
    ),
    pytest.param(
        "batched",
        DecisionResponse(actions=(ActionDecision.approve(), ActionDecision.respond("done"))),
        None,
        "response.actions.type",
        "does not allow 'respond' for 'delete_file'",
        id="not-allowed",
    ),
    pytest.param(
        "batched",
        DecisionResponse(actions=(ActionDecision.approve(), ActionDecision.reject())),
        True,
        "approved",
        "false exactly when an action is rejected",
        id="verdict-contradicts",
    ),
    pytest.param(
        "batched",
        DecisionResponse.resume({"decisions": []}),
        None,
        "response.resume_json",
        "answer each action",
        id="resume-value-to-middleware",
    ),
    pytest.param(
        "plain",
        DecisionResponse(actions=(ActionDecision.approve(),)),
        None,
        "response.actions",
        "not a HumanInTheLoopMiddleware request",
        id="actions-to-plain",
    ),
]


@pytest.mark.parametrize(("kind", "response", "approved", "field", "says"), REFUSED)
def test_k3_an_answer_the_pause_does_not_take_is_refused_and_writes_nothing(
    client, saver, kind, response, approved, field, says
):
    """INVALID_ARGUMENT naming the field and what the pause takes; the pause stays
    undecided and a fitting answer is taken afterwards."""
    pause = batched(client, saver) if kind == "batched" else plain(client, saver)
    with pytest.raises(InvalidArgumentError) as err:
        decide(client, pause, response, approved=approved)
    assert err.value.reason == "INVALID_FIELD"
    assert err.value.metadata.get("field") == field
    assert says in str(err.value)
    [still] = [p for p in client.iter_pending_interrupts() if p.execution_id == pause.execution_id]
    assert still.decision is None
    decided = decide(
        client,
        pause,
        DecisionResponse.resume(1)
        if kind == "plain"
        else (DecisionResponse(actions=(ActionDecision.approve(), ActionDecision.approve()))),
    )
    assert decided.decision is not None


@tool
def send_email(to: str, copies: int, urgent: bool = False) -> str:
    """Send an email."""
    return "sent"


#: The argument schema of send_email, as a batched request's review config may carry it.
SEND_EMAIL_ARGS = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "copies": {"type": "integer", "minimum": 1}},
    "required": ["to", "copies"],
}


def per_call_with_edit(client: CheckpointdClient, saver: CheckpointdSaver) -> PendingInterrupt:
    """A per-call approval of a real tool: its edit branch carries the tool's argument schema."""
    value = {
        "type": "tool_approval",
        "tool_call_id": "call-1",
        "name": "send_email",
        "args": {"to": "ann", "copies": 1},
        "description": "Send?",
    }
    schema = _decision_schema(["approve", "edit", "reject"], "send_email", send_email)
    return paused(client, saver, lambda: interrupt(value, response_schema=schema))


def batched_with_schema(client: CheckpointdClient, saver: CheckpointdSaver) -> PendingInterrupt:
    """A batched request (LangChain.js's spelling) whose review config gives the schema."""
    request = {
        "actionRequests": [{"name": "send_email", "args": {"to": "ann", "copies": 1}}],
        "reviewConfigs": [
            {
                "actionName": "send_email",
                "allowedDecisions": ["approve", "edit"],
                "argsSchema": SEND_EMAIL_ARGS,
            }
        ],
    }
    return paused(client, saver, lambda: interrupt(request))


@pytest.mark.parametrize("pause_of", [per_call_with_edit, batched_with_schema])
@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"to": "ann"}, "'copies' is a required property"),
        ({"to": "ann", "copies": "two"}, "copies: 'two' is not of type 'integer'"),
        ({"to": 7, "copies": 1}, "to: 7 is not of type 'string'"),
    ],
    ids=["missing", "wrong-type", "wrong-type-first"],
)
def test_k3_an_edit_that_does_not_fit_the_tools_arguments_is_refused(
    client, saver, pause_of, args, says
):
    """An edit is checked against the tool's argument schema the pause carries (the per-call
    response schema's, or a review config's): one that does not fit is INVALID_ARGUMENT naming
    the argument, before anything is written; a fitting edit is taken afterwards."""
    pause = pause_of(client, saver)
    with pytest.raises(InvalidArgumentError) as err:
        decide(client, pause, DecisionResponse(actions=(ActionDecision.edit(args),)))
    assert err.value.metadata.get("field") == "response.actions.edited_args_json"
    assert "does not fit the arguments 'send_email' takes, action 1" in str(err.value)
    assert says in str(err.value)
    [still] = [p for p in client.iter_pending_interrupts() if p.execution_id == pause.execution_id]
    assert still.decision is None
    edited = {"to": "bob", "copies": 2}
    decided = decide(client, pause, DecisionResponse(actions=(ActionDecision.edit(edited),)))
    assert decided.decision is not None
    assert decided.decision.response is not None
    assert decided.decision.response.actions[0].args == edited


@pytest.mark.parametrize(
    ("action", "field"),
    [
        (pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_UNSPECIFIED), "response.actions.type"),
        (
            pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_EDIT),
            "response.actions.edited_args_json",
        ),
        (
            pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_EDIT, edited_args_json="[1]"),
            "response.actions.edited_args_json",
        ),
        (
            pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_APPROVE, edited_args_json="{}"),
            "response.actions.edited_args_json",
        ),
        (pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_RESPOND), "response.actions.message"),
        (
            pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_APPROVE, message="why"),
            "response.actions.message",
        ),
    ],
)
def test_k3_a_malformed_action_is_refused_on_the_wire(client, saver, action, field):
    """What no pause takes (no type, an edit without an object of arguments, a message where
    none belongs, a respond without one) is INVALID_ARGUMENT, whatever the pause."""
    pause = batched(client, saver)
    request = svc.SubmitDecisionRequest(
        namespace=client.namespace,
        execution_id=pause.execution_id,
        interrupt_id=pause.interrupt_id,
        decided_by="ann",
        approved=True,
        response=pb.DecisionResponse(
            actions=[action, pb.ActionDecision(type=pb.ACTION_DECISION_TYPE_APPROVE)]
        ),
    )
    with pytest.raises(InvalidArgumentError) as err:
        client._invoke(client._interrupts.SubmitDecision, request, None, ())
    assert err.value.metadata.get("field") == field


def test_k3_a_fastaiagent_pause_takes_no_response(client, execution_id):
    """A fastaiagent run resumes with the verdict, reason and metadata alone."""
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending)
    with pytest.raises(InvalidArgumentError, match="fastaiagent pause takes no response"):
        client.submit_decision(
            execution_id, decided_by="ann", response=DecisionResponse.resume(True)
        )


def test_k3_a_decision_whose_resume_failed_is_replaced_by_the_next(client, saver):
    """The pause still waits after a failed resume: a new decision (another request) takes
    the failed one's place, with a new "decided" event and no lease; a decision that was
    carried out is never replaced."""
    pause = plain(client, saver)
    first = decide(
        client, pause, DecisionResponse.resume("a"), request_id="first-" + pause.interrupt_id
    )
    token = uuid.uuid4().hex
    client.lease_decision(
        pause.execution_id, first.checkpoint_id, lease_token=token, interrupt_id=pause.interrupt_id
    )
    client.report_resume(
        pause.execution_id,
        first.checkpoint_id,
        lease_token=token,
        error="ValidationError: not an option",
        interrupt_id=pause.interrupt_id,
    )
    failed = [p for p in client.iter_pending_interrupts() if p.execution_id == pause.execution_id]
    assert [p.decision.status for p in failed if p.decision] == ["resume_failed"]

    second = decide(client, pause, DecisionResponse.resume(2), decided_by="bob")
    assert second.decision is not None
    assert (second.decision.status, second.decision.attempts, second.decision.decided_by) == (
        "decided",
        0,
        "bob",
    )
    assert second.decision.response == DecisionResponse.resume(2)
    # The failed decision's own retry finds the pause decided by the new one.
    with pytest.raises(FailedPreconditionError) as err:
        decide(
            client, pause, DecisionResponse.resume("a"), request_id="first-" + pause.interrupt_id
        )
    assert err.value.reason == "ALREADY_DECIDED"
    token = uuid.uuid4().hex
    client.lease_decision(
        pause.execution_id, first.checkpoint_id, lease_token=token, interrupt_id=pause.interrupt_id
    )
    client.report_resume(
        pause.execution_id, first.checkpoint_id, lease_token=token, interrupt_id=pause.interrupt_id
    )
    with pytest.raises(FailedPreconditionError) as err:
        decide(client, pause, DecisionResponse.resume(3))
    assert err.value.reason == "ALREADY_DECIDED"
