"""The console's JSON API over real HTTP, on each backend: it answers with the same rules and
errors as gRPC (W1), decides once (K1), takes the typed answers a graph pause asks for (K3),
and streams the watch hub resumably."""

from __future__ import annotations

import json
import operator
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd_client import (
    ActionDecision,
    CheckpointdClient,
    DecisionResponse,
    PendingInterrupt,
    RetryPolicy,
)
from checkpointd_client.errors import CheckpointdError
from checkpointd_client.fastaiagent import SidecarCheckpointer
from checkpointd_client.langgraph import CheckpointdSaver
from tests.console.conftest import (
    HITL_BATCH,
    Console,
    Tokens,
    approval_chain,
    batched_pause,
    console_url,
    pause,
    per_call_pause,
    plain_pause,
)
from tests.console.http import CSRF, EventStream, call, decide
from tests.security.certs import make_pki
from tests.support.sidecar import Sidecar

NO_RETRY = RetryPolicy(max_attempts=1)


def grpc_reason(target: str, namespace: str, token: str | None, execution_id: str) -> str:
    """The ErrorInfo reason gRPC answers the same decision with."""
    with CheckpointdClient(target, namespace=namespace, token=token, retry=NO_RETRY) as client:
        try:
            client.submit_decision(execution_id, approved=True, decided_by="grpc")
        except CheckpointdError as exc:
            return exc.reason
    raise AssertionError("gRPC accepted the decision")


def test_k1_console_lists_pending_and_decides_once(
    console: Console, checkpointer_for: Callable[..., SidecarCheckpointer]
) -> None:
    """The page's listing holds the paused run with its context; a decision from the console
    is the pause's one decision, by 'console', and a second is ALREADY_DECIDED (409)."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-1", note="ship it")
    listing = call("GET", console.url + "api/pending?namespace=default")
    assert listing.status == 200
    [row] = listing.body["pending_interrupts"]
    assert row["execution_id"] == "run-1"
    assert row["chain_name"] == "orders"
    assert row["node_id"] == "ask"
    assert '"note": "ship it"' in row["context_json"] or '"note":"ship it"' in row["context_json"]
    assert "decision" not in row

    reply = decide(console.url, "default", "run-1", body={"reason": "looks right"})
    assert reply.status == 200, reply.body
    decision = reply.body["pending"]["decision"]
    assert decision["approved"] is True
    assert decision["decided_by"] == "console"
    assert decision["reason"] == "looks right"

    again = decide(console.url, "default", "run-1", approved=False)
    assert (again.status, again.reason) == (409, "ALREADY_DECIDED")
    assert again.body["error"]["metadata"]["decided_by"] == "console"
    with CheckpointdClient(console.target) as client:
        [decided] = client.list_decisions().pending_interrupts
    assert decided.decision is not None
    assert (decided.decision.decided_by, decided.decision.approved) == ("console", True)
    listing = call("GET", console.url + "api/pending?namespace=default")
    assert listing.body["pending_interrupts"][0]["decision"]["decided_by"] == "console"


def test_w1_console_refusals_match_grpc(
    auth_console: Console,
    tokens: Tokens,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """Each refusal of a decision carries the reason gRPC gives the same caller, and changes
    nothing."""
    store = checkpointer_for(auth_console.target, "team-a", token=tokens.approver)
    pause(approval_chain("orders", store, []), "run-1")
    url, target = auth_console.url, auth_console.target
    cases = [
        # (token, namespace, execution id, HTTP status)
        (tokens.viewer, "team-a", "run-1", 403),  # READ_ONLY_TOKEN
        (tokens.other, "team-a", "run-1", 403),  # NAMESPACE_NOT_ALLOWED
        (tokens.approver, "Team A!", "run-1", 400),  # INVALID_FIELD
        (tokens.approver, "team-a", "nope", 404),  # NO_PENDING_INTERRUPT
        (None, "team-a", "run-1", 401),  # MISSING_TOKEN
        ("tok-" + "x" * 30, "team-a", "run-1", 401),  # INVALID_TOKEN
    ]
    seen = []
    for token, namespace, execution_id, status in cases:
        reply = decide(url, namespace, execution_id, token=token)
        assert reply.status == status, reply.body
        assert reply.reason == grpc_reason(target, namespace, token, execution_id)
        seen.append(reply.reason)
    assert seen == [
        "READ_ONLY_TOKEN",
        "NAMESPACE_NOT_ALLOWED",
        "INVALID_FIELD",
        "NO_PENDING_INTERRUPT",
        "MISSING_TOKEN",
        "INVALID_TOKEN",
    ]
    # Reading follows the same grants: the viewer sees team-a, the other token does not.
    assert call("GET", url + "api/pending?namespace=team-a", token=tokens.viewer).status == 200
    denied = call("GET", url + "api/pending?namespace=team-a", token=tokens.other)
    assert (denied.status, denied.reason) == (403, "NAMESPACE_NOT_ALLOWED")
    with CheckpointdClient(target, namespace="team-a", token=tokens.approver) as client:
        [still] = client.list_pending_interrupts().pending_interrupts
    assert still.decision is None


def test_w1_console_session_cookie_is_httponly_strict_and_csrf_safe(
    auth_console: Console, tokens: Tokens, checkpointer_for: Callable[..., SidecarCheckpointer]
) -> None:
    """POST /api/session checks the token and sets an HttpOnly SameSite=Strict cookie; a
    mutating request without the console header or from another origin is refused."""
    url = auth_console.url
    wrong = call("POST", url + "api/session", {"token": "tok-" + "y" * 30}, headers=CSRF)
    assert (wrong.status, wrong.reason) == (401, "INVALID_TOKEN")
    assert "Set-Cookie" not in wrong.headers
    no_header = call("POST", url + "api/session", {"token": tokens.approver})
    assert (no_header.status, no_header.reason) == (403, "CROSS_SITE_REQUEST")

    opened = call("POST", url + "api/session", {"token": tokens.approver}, headers=CSRF)
    assert opened.status == 200
    assert opened.body["token_name"] == "approver"
    assert opened.body["namespaces"] == ["team-a"]
    set_cookie = opened.headers["Set-Cookie"]
    assert "HttpOnly" in set_cookie
    assert "SameSite=Strict" in set_cookie
    assert tokens.approver not in set_cookie  # the cookie names a session, not the token
    cookie = set_cookie.split(";", 1)[0]
    assert call("GET", url + "api/session", cookie=cookie).body["signed_in"] is True
    assert call("GET", url + "api/session").body == {"auth": True, "signed_in": False}

    store = checkpointer_for(auth_console.target, "team-a", token=tokens.approver)
    pause(approval_chain("orders", store, []), "run-1")
    bare = decide(url, "team-a", "run-1", cookie=cookie, headers={"X-Checkpointd-Console": "0"})
    assert (bare.status, bare.reason) == (403, "CROSS_SITE_REQUEST")
    foreign = decide(url, "team-a", "run-1", cookie=cookie, headers={"Origin": "http://evil.test"})
    assert (foreign.status, foreign.reason) == (403, "CROSS_SITE_REQUEST")
    same = decide(url, "team-a", "run-1", cookie=cookie, headers={"Origin": url.rstrip("/")})
    assert same.status == 200, same.body
    assert same.body["pending"]["decision"]["decided_by"] == "approver"

    closed = call("DELETE", url + "api/session", cookie=cookie, headers=CSRF)
    assert closed.status == 200
    assert call("GET", url + "api/session", cookie=cookie).body["signed_in"] is False


def test_w1_console_without_tokens_answers_loopback_names_only(console: Console) -> None:
    """Without tokens, a request naming another host (a rebound DNS name) is refused."""
    url = console.url + "api/pending?namespace=default"
    assert call("GET", url).status == 200
    assert call("GET", url, headers={"Host": "localhost"}).status == 200
    rebound = call("GET", url, headers={"Host": "attacker.example:7471"})
    assert (rebound.status, rebound.reason) == (403, "CROSS_SITE_REQUEST")


def test_w1_console_events_resume_from_last_event_id(
    console: Console, checkpointer_for: Callable[..., SidecarCheckpointer]
) -> None:
    """The event stream starts with a snapshot, then carries each event with its position as
    its id (CURSOR.MICROS: the cursor and its event's time); a stream reopened with
    Last-Event-ID gets exactly the events after it, and one whose id names another event
    than the store's at that cursor (it went back in time) gets CURSOR_EXPIRED (I5)."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-old")
    url = console.url + "api/events?namespace=default"
    stream = EventStream(url)
    try:
        name, _, snapshot = stream.next()
        assert (name, snapshot["execution_id"]) == ("snapshot", "run-old")
        ready_id, _ = stream.until("ready")
        pause(chain, "run-new")
        added_id, added = stream.until("interrupt")
        assert added["type"] == "INTERRUPT_EVENT_TYPE_ADDED"
        assert added["pending"]["execution_id"] == "run-new"
        cursor, _, micros = added_id.partition(".")
        assert int(cursor) > int(ready_id.partition(".")[0])
        assert int(micros) > 0
        assert decide(console.url, "default", "run-new").status == 200
        decided_id, decided = stream.until("interrupt")
        assert decided["type"] == "INTERRUPT_EVENT_TYPE_DECIDED"
    finally:
        stream.close()
    resumed = EventStream(url, last_event_id=added_id)
    try:
        event_id, again = resumed.until("interrupt")
    finally:
        resumed.close()
    assert (event_id, again["type"]) == (decided_id, "INTERRUPT_EVENT_TYPE_DECIDED")
    rewritten = EventStream(url, last_event_id=f"{cursor}.{int(micros) - 1}")
    try:
        _, failure = rewritten.until("failure")
    finally:
        rewritten.close()
    assert failure["error"]["reason"] == "CURSOR_EXPIRED"


def test_w1_console_streams_end_with_shutting_down_and_the_server_stops_cleanly(
    console: Console,
) -> None:
    """SIGTERM ends open event streams with a SHUTTING_DOWN failure (the page reconnects from
    its cursor) and the server exits 0."""
    stream = EventStream(console.url + "api/events?namespace=default")
    try:
        stream.until("ready")
        assert console.sidecar.stop() == 0
        _, failure = stream.until("failure")
    finally:
        stream.close()
    assert failure["error"]["reason"] == "SHUTTING_DOWN"
    assert "stopped" in console.sidecar.log_path.read_text()


def test_w1_console_serves_https_with_the_servers_certificate_and_a_secure_cookie(
    sidecar_factory: Callable[..., Sidecar], tokens_file: Path, tokens: Tokens, tmp_path: Path
) -> None:
    """With --tls-cert the console is HTTPS with the same identity, and its session cookie is
    Secure as well as HttpOnly and SameSite=Strict."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    server = sidecar_factory(
        "--console-listen",
        "127.0.0.1:0",
        "--auth-tokens-file",
        str(tokens_file),
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
    )
    url = console_url(server)
    assert url.startswith("https://")
    context = ssl.create_default_context(cafile=str(pki.ca))
    request = urllib.request.Request(
        url + "api/session",
        data=json.dumps({"token": tokens.approver}).encode(),
        method="POST",
        headers={**CSRF, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        assert response.status == 200
        cookie = response.headers["Set-Cookie"]
    assert "Secure" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie


def test_w1_console_refuses_a_non_loopback_address_without_tokens_or_tls(
    tmp_path: Path,
) -> None:
    """The exposure rule of the gRPC listeners: 0.0.0.0 needs tokens, TLS or --insecure."""
    command = [
        sys.executable,
        "-m",
        "checkpointd",
        "serve",
        "--store",
        f"sqlite://{tmp_path}/store.db",
        "--listen",
        "127.0.0.1:0",
        "--console-listen",
        "0.0.0.0:0",
        "--store-wait",
        "0",
    ]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0
    assert "refusing to listen on 0.0.0.0:0 without authentication or TLS" in refused.stderr


class ReviewState(TypedDict):
    log: Annotated[list[str], operator.add]


def review(state: ReviewState) -> dict[str, Any]:
    return {"log": [str(interrupt({"reason": "refund", "amount": 7}))]}


def test_g8_console_lists_and_decides_a_graph_pause_by_interrupt_id(console: Console) -> None:
    """A LangGraph pause is a row with its interrupt id (chain = the graph's name, context =
    the interrupt's value); a decision naming the id decides it, and an unknown id is
    NO_PENDING_INTERRUPT (404)."""
    with CheckpointdSaver(console.target, graph_name="refunds") as saver:
        builder = StateGraph(ReviewState)
        builder.add_node("review", review)
        builder.add_edge(START, "review")
        builder.add_edge("review", END)
        result = builder.compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": "thread-1"}}
        )
    [raised] = result["__interrupt__"]
    listing = call("GET", console.url + "api/pending?namespace=default")
    [row] = listing.body["pending_interrupts"]
    assert (row["execution_id"], row["interrupt_id"]) == ("thread-1", raised.id)
    assert (row["chain_name"], row["reason"]) == ("refunds", "refund")
    assert json.loads(row["context_json"]) == {"reason": "refund", "amount": 7}

    unknown = decide(console.url, "default", "thread-1", body={"interrupt_id": "f" * 32})
    assert (unknown.status, unknown.reason) == (404, "NO_PENDING_INTERRUPT")
    wrong_type = decide(console.url, "default", "thread-1", body={"interrupt_id": 5})
    assert (wrong_type.status, wrong_type.reason) == (400, "INVALID_FIELD")
    reply = decide(console.url, "default", "thread-1", body={"interrupt_id": raised.id})
    assert reply.status == 200, reply.body
    assert reply.body["pending"]["interrupt_id"] == raised.id
    assert reply.body["pending"]["decision"]["decided_by"] == "console"


def test_w1_console_reads_recent_decisions_and_a_runs_checkpoints_with_the_grpc_rules(
    auth_console: Console,
    tokens: Tokens,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """GET /api/decisions answers the newest decisions first, with their resume state;
    GET /api/checkpoints a run's checkpoints oldest first; both refuse what gRPC refuses the
    same caller, with its reason."""
    url, target = auth_console.url, auth_console.target
    store = checkpointer_for(target, "team-a", token=tokens.approver)
    chain = approval_chain("orders", store, [])
    for execution_id in ("run-1", "run-2", "run-3"):
        pause(chain, execution_id)
        assert decide(url, "team-a", execution_id, token=tokens.approver).status == 200
    recent = call("GET", url + "api/decisions?namespace=team-a&limit=2", token=tokens.viewer)
    assert recent.status == 200, recent.body
    assert [p["execution_id"] for p in recent.body["decided"]] == ["run-3", "run-2"]
    assert recent.body["complete"] is True
    assert recent.body["decided"][0]["decision"]["status"] == "DECISION_STATUS_DECIDED"

    steps = call(
        "GET", url + "api/checkpoints?namespace=team-a&execution_id=run-1", token=tokens.viewer
    )
    assert steps.status == 200, steps.body
    with CheckpointdClient(target, namespace="team-a", token=tokens.approver) as client:
        expected = [c.checkpoint_id for c in client.list_checkpoints("run-1").checkpoints]
    assert [c["checkpoint_id"] for c in steps.body["checkpoints"]] == expected
    assert steps.body["checkpoints"][-1]["status"] == "CHECKPOINT_STATUS_INTERRUPTED"

    # The namespaces listed are those holding runs that the token may read (N2).
    team_b = checkpointer_for(target, "team-b", token=tokens.other)
    pause(approval_chain("orders", team_b, []), "run-b")
    assert call("GET", url + "api/namespaces", token=tokens.viewer).body == {
        "namespaces": [{"name": "team-a", "pending": 3}],
        "next_page_token": "",
    }
    assert call("GET", url + "api/namespaces", token=tokens.other).body == {
        "namespaces": [{"name": "team-b", "pending": 1}],
        "next_page_token": "",
    }

    refusals = [
        ("api/decisions?namespace=team-a", tokens.other, 403, "NAMESPACE_NOT_ALLOWED"),
        ("api/decisions?namespace=team-a&limit=0", tokens.viewer, 400, "INVALID_FIELD"),
        ("api/decisions?namespace=team-a", None, 401, "MISSING_TOKEN"),
        (
            "api/checkpoints?namespace=team-a&execution_id=run-1",
            tokens.other,
            403,
            "NAMESPACE_NOT_ALLOWED",
        ),
        ("api/checkpoints?namespace=team-a", tokens.viewer, 400, "INVALID_FIELD"),
    ]
    for path, token, status, reason in refusals:
        reply = call("GET", url + path, token=token)
        assert (reply.status, reply.reason) == (status, reason), (path, reply.body)


def pauses_of(target: str) -> dict[tuple[str, str], PendingInterrupt]:
    """The pending interrupts of the default namespace, as gRPC lists them, by pause."""
    with CheckpointdClient(target) as client:
        listed = client.list_pending_interrupts().pending_interrupts
    return {(p.execution_id, p.interrupt_id): p for p in listed}


def test_k3_console_stores_typed_answers_and_infers_the_verdict_from_the_actions(
    console: Console,
) -> None:
    """A response of actions (edit, reject) decides a batched middleware pause with approved
    left out: not approved, since one rejects; one approval of a per-call pause is approved;
    a plain interrupt() takes any JSON resume value. Each is stored as sent, and the listings
    and the reply show it."""
    url, target = console.url, console.target
    batched, per_call, plain = (
        batched_pause(target),
        per_call_pause(target),
        plain_pause(target),
    )
    edited = {"to": "bob", "body": "hello", "cc": []}
    actions = [{"type": "edit", "args": edited}, {"type": "reject", "message": "not today"}]
    reply = decide_typed(url, batched, {"response": {"actions": actions}})
    assert reply.status == 200, reply.body
    decision = reply.body["pending"]["decision"]
    assert decision.get("approved", False) is False  # (the JSON mapping leaves false out)
    assert decision["response"] == {
        "actions": [
            {
                "type": "ACTION_DECISION_TYPE_EDIT",
                "edited_args_json": json.dumps(edited, separators=(",", ":")),
            },
            {"type": "ACTION_DECISION_TYPE_REJECT", "message": "not today"},
        ]
    }
    approve = decide_typed(url, per_call, {"response": {"actions": [{"type": "approve"}]}})
    assert approve.status == 200, approve.body
    assert approve.body["pending"]["decision"]["approved"] is True
    value = [2, {"why": "cheapest"}, None]
    resumed = decide_typed(url, plain, {"approved": True, "response": {"resume": value}})
    assert resumed.status == 200, resumed.body
    assert json.loads(resumed.body["pending"]["decision"]["response"]["resume_json"]) == value

    stored = {k: p.decision.response for k, p in pauses_of(target).items() if p.decision}
    assert stored == {
        batched: DecisionResponse(
            actions=(ActionDecision.edit(edited), ActionDecision.reject("not today"))
        ),
        per_call: DecisionResponse(actions=(ActionDecision.approve(),)),
        plain: DecisionResponse.resume(value),
    }
    # The page's listings carry the answers (the proto's JSON mapping), context and all.
    listed = call("GET", url + "api/pending?namespace=default").body["pending_interrupts"]
    recent = call("GET", url + "api/decisions?namespace=default").body["decided"]
    for rows in (listed, recent):
        by_pause = {(r["execution_id"], r["interrupt_id"]): r for r in rows}
        assert by_pause[batched]["decision"]["response"] == decision["response"]
        assert json.loads(by_pause[batched]["context_json"]) == HITL_BATCH
        assert json.loads(by_pause[plain]["decision"]["response"]["resume_json"]) == value


def decide_typed(url: str, pause: tuple[str, str], body: dict[str, Any]) -> Any:
    """POST a decision on a graph pause with ``body``'s fields (``approved`` only if given)."""
    execution_id, interrupt_id = pause
    sent = {"namespace": "default", "execution_id": execution_id, "interrupt_id": interrupt_id}
    return call("POST", url + "api/decisions", {**sent, **body}, headers=CSRF)


#: (pause, the body's fields, the field refused, a part of the rule): malformed answers, and
#: answers the pause does not take (checked by SubmitDecision, named as the body names them).
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("batched", {"response": [{"type": "approve"}]}, "response", "must be a JSON object"),
    ("batched", {"response": {"actions": [], "resume": 1}}, "response", "either actions or"),
    ("batched", {"response": {"decisions": []}}, "response", "has no field 'decisions'"),
    ("batched", {"response": {"actions": []}}, "response.actions", "non-empty list"),
    ("batched", {"response": {"actions": ["approve"]}}, "response.actions", "JSON objects"),
    (
        "batched",
        {"response": {"actions": [{"type": "approve", "why": "x"}]}},
        "response.actions",
        "has no field 'why' (action 1)",
    ),
    (
        "batched",
        {"response": {"actions": [{"type": "APPROVE"}, {"type": "approve"}]}},
        "response.actions.type",
        "must be approve, edit, reject or respond (action 1)",
    ),
    (
        "batched",
        {"response": {"actions": [{"type": "edit", "args": [1]}, {"type": "approve"}]}},
        "response.actions.args",
        "must be a JSON object (action 1)",
    ),
    (
        "batched",
        {"response": {"actions": [{"type": "approve"}, {"type": "reject", "message": 7}]}},
        "response.actions.message",
        "must be a string (action 2)",
    ),
    (
        "batched",
        {"response": {"actions": [{"type": "edit"}, {"type": "approve"}]}},
        "response.actions.args",
        "is required for EDIT",
    ),
    (
        "batched",
        {"response": {"resume": {"decisions": []}}},
        "approved",
        "may be left out when response has actions",
    ),
    ("batched", {"response": {"actions": [{"type": "approve"}]}}, "response.actions", "2 action"),
    (
        "batched",
        {"response": {"actions": [{"type": "respond", "message": "done"}, {"type": "approve"}]}},
        "response.actions.type",
        "does not allow 'respond' for 'send_email'",
    ),
    (
        "batched",
        {
            "approved": True,
            "response": {"actions": [{"type": "approve"}, {"type": "reject"}]},
        },
        "approved",
        "false exactly when an action is rejected",
    ),
    (
        "batched",
        {"approved": True, "response": {"resume": 1}},
        "response.resume",
        "answer each action in actions",
    ),
    (
        "plain",
        {"response": {"actions": [{"type": "approve"}]}},
        "response.actions",
        "answer it with resume",
    ),
    ("plain", {"approved": True, "response": {"resume": float("nan")}}, "body", "standard JSON"),
    ("fastaiagent", {"approved": True, "response": {"resume": 1}}, "response", "fastaiagent"),
]


def test_k3_w1_console_refuses_a_malformed_answer_or_one_the_pause_does_not_take(
    console: Console, checkpointer_for: Callable[..., SidecarCheckpointer]
) -> None:
    """Each is INVALID_FIELD (400) naming the body's field, and no pause is decided."""
    url, target = console.url, console.target
    pause(approval_chain("orders", checkpointer_for(target, "default"), []), "run-1")
    pauses = {
        "batched": batched_pause(target),
        "plain": plain_pause(target),
        "fastaiagent": ("run-1", ""),
    }
    for kind, body, field, rule in REFUSED:
        reply = decide_typed(url, pauses[kind], body)
        error = reply.body["error"]
        assert (reply.status, reply.reason) == (400, "INVALID_FIELD"), (kind, body, reply.body)
        assert error["metadata"]["field"] == field, (body, error)
        assert rule in error["metadata"]["rule"], (body, error)
        assert "resume_json" not in error["message"]
    assert all(p.decision is None for p in pauses_of(target).values())
