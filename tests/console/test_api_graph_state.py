"""The run view's API on a real server of each backend (contracts W1, W3): a checkpoint's
state decoded with what changed from its parent, the listing's parents and pauses for the
fork tree, a thread's pauses with their decisions, and the refusals of the other
endpoints."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from checkpointd_client import CheckpointdClient
from tests.console.conftest import Console
from tests.console.http import call
from tests.console.run_view_graph import ForkedThread, forked_thread
from tests.contract.helpers import interrupted


def api(console: Console, path: str, **query: str) -> Any:
    return call("GET", f"{console.url}api/{path}?{urlencode(query)}")


def checkpoints_of(console: Console, thread: str) -> list[dict[str, Any]]:
    reply = api(console, "graph-checkpoints", namespace="default", thread_id=thread)
    assert reply.status == 200
    return list(reply.body["checkpoints"])


def state(console: Console, found: ForkedThread, checkpoint: dict[str, Any]) -> dict[str, Any]:
    reply = api(
        console,
        "graph-state",
        namespace="default",
        thread_id=found.thread,
        checkpoint_ns=checkpoint["checkpoint_ns"],
        checkpoint_id=checkpoint["checkpoint_id"],
    )
    assert reply.status == 200, reply.body
    return dict(reply.body)


def test_w3_console_shows_a_checkpoints_state_and_what_changed_from_its_parent(
    console: Console,
) -> None:
    """graph-state decodes the channel values (messages as their type), says which channels
    were added or changed from the parent, what a list channel appended, and the pending
    writes (a pause's request); the listing carries each checkpoint's parent, its subgraph
    and its pauses, so the view can draw the fork."""
    found = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    listed = checkpoints_of(console, found.thread)
    by_id = {c["checkpoint_id"]: c for c in listed}
    children = [c for c in listed if c["parent_checkpoint_id"] == found.fork_point]
    assert len(children) == 2
    assert by_id[found.fork]["parent_checkpoint_id"] == found.fork_point
    assert by_id[found.fork]["source"] == "update"
    subgraph = [c for c in listed if c["checkpoint_ns"]]
    assert subgraph, "the subgraph's checkpoints are listed with the thread's"
    assert all(c["checkpoint_ns"].startswith("checks:") for c in subgraph)
    assert all(c["parents"].get("") for c in subgraph)
    assert sum(c["interrupts"] for c in listed) == 2  # a task paused at two checkpoints

    # The fork: the edit changed the ticket, nothing else.
    edited = state(console, found, by_id[found.fork])
    assert edited["parent"]["checkpoint_id"] == found.fork_point
    ticket = next(c for c in edited["changes"] if c["channel"] == "ticket")
    assert ticket["change"] == "changed"
    assert (ticket["before"]["amount"], ticket["after"]["amount"]) == (40, 25)
    assert edited["values"]["ticket"] == {"item": "A-1", "amount": 25}

    # The step that wrote the refund's answer appended one message to three.
    answered = next(
        c
        for c in listed
        if not c["checkpoint_ns"] and c["source"] == "loop" and "approve_email" in c["tasks"]
    )
    shown = state(console, found, answered)
    messages = next(c for c in shown["changes"] if c["channel"] == "messages")
    [appended] = messages["appended"]
    assert appended["$type"] == "langchain_core.messages.human.HumanMessage"
    assert appended["value"]["content"] == "refund: yes"
    assert len(messages["before"]) == 2
    assert [m["value"]["id"] for m in shown["values"]["messages"]] == [
        "m-ask",
        "m-draft",
        "m-refund",
    ]
    # It is where the second pause waits: its interrupt write holds the request.
    [paused] = [w for w in shown["pending_writes"] if w["channel"] == "__interrupt__"]
    assert paused["node"] == "approve_email"
    [request] = paused["value"]
    assert request["$type"] == "langgraph.types.Interrupt"
    assert request["value"]["value"] == {"question": "Email the customer?"}
    assert request["value"]["id"] == found.second_pause
    assert shown["cut"] == {}

    # The first checkpoint has no parent: every value is added.
    first = next(c for c in listed if not c["checkpoint_ns"] and not c["parent_checkpoint_id"])
    opened = state(console, found, first)
    assert opened["parent"] is None
    assert {c["change"] for c in opened["changes"]} == {"added"}


def test_w3_console_lists_a_threads_pauses_with_their_decisions(console: Console) -> None:
    """graph-pauses lists the thread's two pauses, oldest first, with their requests: the
    first with the decision made on the console (who, the answer, the note), the second
    waiting."""
    found = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    reply = api(console, "graph-pauses", namespace="default", thread_id=found.thread)
    assert reply.status == 200, reply.body
    assert reply.body["complete"] is True
    first, second = reply.body["pauses"]
    assert (first["interrupt_id"], second["interrupt_id"]) == (
        found.first_pause,
        found.second_pause,
    )
    assert (first["node_id"], second["node_id"]) == ("approve_refund", "approve_email")
    assert "Refund 40 EUR?" in first["context_json"]
    decision = first["decision"]
    assert (decision["approved"], decision["decided_by"], decision["reason"]) == (
        True,
        "console",
        "ok",
    )
    assert decision["response"]["resume_json"] == '"yes"'
    assert "decision" not in second


def test_w3_console_lists_a_threads_pauses_by_its_keys_not_a_runs_of_the_same_id(
    console: Console,
) -> None:
    """graph-pauses reads the thread's own pauses and decisions by its keys: a fastaiagent
    run of the same id in the namespace (paused, then decided) and another thread's pauses
    are not among them, and the listing is complete."""
    found = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    other = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    with CheckpointdClient(console.target) as client:
        client.record_interrupt(*interrupted(found.thread))
        client.submit_decision(found.thread, approved=False, decided_by="ops")
    reply = api(console, "graph-pauses", namespace="default", thread_id=found.thread)
    assert reply.status == 200, reply.body
    assert reply.body["complete"] is True
    listed = [(p["execution_id"], p.get("interrupt_id", "")) for p in reply.body["pauses"]]
    assert listed == [
        (found.thread, found.first_pause),
        (found.thread, found.second_pause),
    ]
    assert other.first_pause not in {interrupt for _, interrupt in listed}


def test_w1_console_graph_state_refuses_bad_input_and_unknown_checkpoints(
    console: Console,
) -> None:
    """A missing checkpoint id or thread is INVALID_FIELD (400), an unknown checkpoint
    CHECKPOINT_NOT_FOUND (404); the namespace is checked as everywhere."""
    found = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    missing = api(console, "graph-state", namespace="default", thread_id=found.thread)
    assert (missing.status, missing.reason) == (400, "INVALID_FIELD")
    assert missing.body["error"]["metadata"]["field"] == "checkpoint_id"
    no_thread = api(console, "graph-state", namespace="default", checkpoint_id=found.fork)
    assert (no_thread.status, no_thread.reason) == (400, "INVALID_FIELD")
    unknown = api(
        console,
        "graph-state",
        namespace="default",
        thread_id=found.thread,
        checkpoint_id=str(uuid.uuid4()),
    )
    assert (unknown.status, unknown.reason) == (404, "CHECKPOINT_NOT_FOUND")
    elsewhere = api(
        console, "graph-state", namespace="other", thread_id=found.thread, checkpoint_id=found.fork
    )
    assert (elsewhere.status, elsewhere.reason) == (404, "CHECKPOINT_NOT_FOUND")
    bad_ns = api(console, "graph-state", namespace="bad ns!", thread_id="t", checkpoint_id="c")
    assert (bad_ns.status, bad_ns.reason) == (400, "INVALID_FIELD")
    no_thread_pauses = api(console, "graph-pauses", namespace="default")
    assert (no_thread_pauses.status, no_thread_pauses.reason) == (400, "INVALID_FIELD")


def test_w1_console_graph_state_keeps_the_tokens_namespaces(
    auth_console: Console, tokens: Any
) -> None:
    """With tokens, graph-state and graph-pauses answer a token only in the namespaces it
    grants (NAMESPACE_NOT_ALLOWED elsewhere) and ask for a token (401) without one."""
    query = urlencode({"namespace": "team-b", "thread_id": "t", "checkpoint_id": "c"})
    for path in ("graph-state", "graph-pauses"):
        url = f"{auth_console.url}api/{path}?{query}"
        refused = call("GET", url, token=tokens.approver)
        assert (refused.status, refused.reason) == (403, "NAMESPACE_NOT_ALLOWED")
        anonymous = call("GET", url)
        assert anonymous.status == 401
