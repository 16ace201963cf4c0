"""`checkpointd interrupts list|watch` against a real server, as a person or a script runs it."""

from __future__ import annotations

import hashlib
import json
import operator
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt as graph_interrupt

from checkpointd.cli.interrupts import format_age
from checkpointd_client import CheckpointdClient
from checkpointd_client.langgraph import CheckpointdSaver
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

TIMEOUT = 30


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `checkpointd ...` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "checkpointd", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, **(env or {})},
    )


def record(client: CheckpointdClient, execution_id: str, **fields: Any) -> None:
    cp, pending = interrupted(execution_id, **fields)
    client.record_interrupt(cp, pending)


def test_i4_interrupts_list_prints_an_aligned_table_newest_first(sidecar: SharedSidecar):
    """The table has a header, one row per pending interrupt, newest first, columns aligned;
    filters and --limit apply; the target comes from $CHECKPOINTD_TARGET."""
    old = datetime.now(UTC) - timedelta(hours=3)
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        record(client, "exec-a", created_at=old)
        record(client, "exec-long-identifier-b", chain_name="refunds", agent_path="swarm:s/a:x")
        record(client, "exec-c", node_id="review")

    result = cli(
        "interrupts",
        "list",
        "--namespace",
        sidecar.namespace,
        env={"CHECKPOINTD_TARGET": sidecar.target},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "EXECUTION_ID",
        "CHAIN",
        "REASON",
        "NODE",
        "AGENT_PATH",
        "DECISION",
        "AGE",
        "CONTEXT",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["exec-c", "exec-long-identifier-b", "exec-a"]
    starts = [
        lines[0].index(col)
        for col in ("CHAIN", "REASON", "NODE", "AGENT_PATH", "DECISION", "AGE", "CONTEXT")
    ]
    for line in lines[1:]:
        for start in starts:
            assert line[start - 2 : start] == "  ", (line, start)
            assert line[start] != " ", (line, start)
    assert lines[2].split()[1:5] == ["refunds", "manager_approval", "node", "swarm:s/a:x"]
    assert lines[3].split()[-2:] == ["3h", '{"amount":500}']

    only = cli(
        "interrupts",
        "list",
        "--target",
        sidecar.target,
        "--namespace",
        sidecar.namespace,
        "--chain",
        "refunds",
    )
    assert [line.split()[0] for line in only.stdout.splitlines()[1:]] == ["exec-long-identifier-b"]
    limited = cli(
        "interrupts",
        "list",
        "--target",
        sidecar.target,
        "--namespace",
        sidecar.namespace,
        "--limit",
        "1",
    )
    assert len(limited.stdout.splitlines()) == 2
    assert "raise --limit" in limited.stderr
    empty = cli(
        "interrupts",
        "list",
        "--target",
        sidecar.target,
        "--namespace",
        f"{sidecar.namespace}-nobody",
    )
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "no pending interrupts" in empty.stderr


@pytest.mark.own_server
def test_interrupts_commands_fail_with_one_line(sidecar: Sidecar):
    """A bad namespace, a bad flag or an unreachable server is one line on stderr, never a
    traceback."""
    bad_ns = cli("interrupts", "list", "--target", sidecar.target, "--namespace", "Bad Name!")
    assert bad_ns.returncode == 1
    assert bad_ns.stderr.startswith("checkpointd: error:")
    assert "namespace" in bad_ns.stderr
    bad_flag = cli("interrupts", "watch", "--target", sidecar.target, "--after-cursor", "-1")
    assert bad_flag.returncode == 2
    assert "--after-cursor" in bad_flag.stderr
    sidecar.kill()
    down = cli("interrupts", "list", "--target", sidecar.target, "--timeout", "1")
    assert down.returncode == 1
    assert "UNAVAILABLE" in down.stderr
    for result in (bad_ns, bad_flag, down):
        assert "Traceback" not in result.stderr


def _lines(stream: IO[str], out: queue.Queue[str]) -> None:
    for line in stream:
        out.put(line)


def test_i5_interrupts_watch_json_prints_snapshot_then_events_and_stops_on_ctrl_c(
    sidecar: SharedSidecar,
):
    """--json prints one object per line (snapshot, marker, events); Ctrl-C exits 0; a later
    watch with --after-cursor continues after the cursor without a snapshot."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        record(client, "paused-1")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "checkpointd",
                "interrupts",
                "watch",
                "--json",
                "--target",
                sidecar.target,
                "--namespace",
                sidecar.namespace,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
        try:
            snapshot = json.loads(lines.get(timeout=TIMEOUT))
            marker = json.loads(lines.get(timeout=TIMEOUT))
            record(client, "paused-2", interrupt_context={"amount": 12.5, "who": "zoë"})
            client.claim_interrupt("paused-1")
            added = json.loads(lines.get(timeout=TIMEOUT))
            claimed = json.loads(lines.get(timeout=TIMEOUT))
        finally:
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert snapshot["kind"] == "snapshot"
    assert snapshot["resnapshot"] is False
    assert snapshot["pending"]["execution_id"] == "paused-1"
    assert snapshot["pending"]["context"] == {"amount": 500}
    assert marker["kind"] == "snapshot_complete"
    assert (added["kind"], added["type"], added["pending"]["execution_id"]) == (
        "event",
        "added",
        "paused-2",
    )
    assert added["pending"]["context"] == {"amount": 12.5, "who": "zoë"}
    assert (claimed["type"], claimed["pending"]["execution_id"]) == ("claimed", "paused-1")
    assert marker["cursor"] < added["cursor"] < claimed["cursor"]
    datetime.fromisoformat(added["event_time"])

    # Continue after the "added" event: only the claim comes again, with no snapshot.
    again = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "interrupts",
            "watch",
            "--json",
            "--target",
            sidecar.target,
            "--namespace",
            sidecar.namespace,
            "--after-cursor",
            str(added["cursor"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    more: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(again.stdout, more), daemon=True).start()
    try:
        first = json.loads(more.get(timeout=TIMEOUT))
    finally:
        again.send_signal(signal.SIGTERM)
        _, stderr = again.communicate(timeout=TIMEOUT)
    assert again.returncode == 0, stderr
    assert (first["kind"], first["cursor"]) == ("event", claimed["cursor"])


def test_i5_g9_interrupts_watch_shows_a_threads_pauses_by_interrupt_beside_a_runs(
    sidecar: SharedSidecar,
):
    """The text watch prints a LangGraph thread's two parallel pauses as two lines, each
    with its interrupt id and node, beside a fastaiagent run's pause (which has no interrupt
    id); a decision on one of the thread's pauses is one "decided" line naming that pause."""
    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_graph_interrupts import two_pauses

    thread = f"thread-{uuid.uuid4().hex[:8]}"
    with (
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client,
        CheckpointdSaver(
            sidecar.target, namespace=sidecar.namespace, graph_name="support"
        ) as saver,
    ):
        record(client, "exec-w")
        two_pauses(saver).invoke({"log": []}, {"configurable": {"thread_id": thread}})
        ids = {p.node_id: p.interrupt_id for p in client.iter_pending_interrupts()}
    base = ("--target", sidecar.target, "--namespace", sidecar.namespace)
    proc = subprocess.Popen(
        [sys.executable, "-m", "checkpointd", "interrupts", "watch", *base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        snapshot = sorted(lines.get(timeout=TIMEOUT) for _ in range(3))
        decided = cli(
            "interrupts", "decide", thread, "--interrupt-id", ids["a"], "--approve", *base
        )
        assert decided.returncode == 0, decided.stderr
        event = lines.get(timeout=TIMEOUT)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, stderr
    run_line, *thread_lines = snapshot
    assert run_line.split()[:2] == ["pending", "exec-w"]
    assert "interrupt=" not in run_line
    for line, node in zip(thread_lines, sorted(("a", "b"), key=lambda n: ids[n]), strict=True):
        assert line.split()[:3] == ["pending", thread, f"interrupt={ids[node]}"]
        assert "chain=support" in line
        assert f"node={node}" in line
    assert event.split()[:3] == ["decided", thread, f"interrupt={ids['a']}"]
    assert "node=a" in event
    assert "decision=approved" in event


def test_interrupts_age_is_short_and_never_negative():
    """Ages read 42s, 5m, 3h, 2d; a creation time ahead of this clock reads 0s."""
    now = datetime(2024, 1, 2, tzinfo=UTC)
    assert [
        format_age(now - timedelta(seconds=s), now) for s in (42, 300, 3 * 3600, 2 * 86400)
    ] == [
        "42s",
        "5m",
        "3h",
        "2d",
    ]
    assert format_age(now + timedelta(seconds=5), now) == "0s"
    assert format_age(None, now) == "-"


def test_k1_interrupts_decide_approves_once_and_list_shows_the_decision(sidecar: SharedSidecar):
    """`interrupts decide` stores the decision (metadata and reason included), `list` shows
    it in the DECISION column, and a second decision fails with one line naming the first."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        record(client, "exec-d")
        record(client, "exec-e")
    base = ("--target", sidecar.target, "--namespace", sidecar.namespace)
    approved = cli(
        "interrupts",
        "decide",
        "exec-d",
        "--approve",
        "--metadata",
        '{"limit": 100}',
        "--reason",
        "under the limit",
        "--decided-by",
        "alice",
        *base,
    )
    assert approved.returncode == 0, approved.stderr
    assert "exec-d" in approved.stdout
    assert approved.stdout == (
        "approved exec-d (node node) as alice: a resume worker will carry it out\n"
    )
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        [row] = [
            p
            for p in client.list_pending_interrupts().pending_interrupts
            if p.execution_id == "exec-d"
        ]
    assert row.decision is not None
    assert (row.decision.metadata, row.decision.reason) == ({"limit": 100}, "under the limit")

    again = cli("interrupts", "decide", "exec-d", "--reject", "--decided-by", "bob", *base)
    assert again.returncode == 1
    assert again.stderr.count("\n") == 1
    assert "already approved by alice" in again.stderr

    listing = cli("interrupts", "list", *base)
    rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines()[1:]}
    assert rows["exec-d"][-3] == "approved:alice:decided"
    assert rows["exec-e"][-3] == "-"

    bad = cli("interrupts", "decide", "exec-e", "--approve", "--metadata", "[1]", *base)
    assert bad.returncode == 2
    assert "JSON object" in bad.stderr
    neither = cli("interrupts", "decide", "exec-e", *base)
    assert neither.returncode == 2
    nothing = cli("interrupts", "decide", "exec-none", "--approve", *base)
    assert nothing.returncode == 1
    assert "NO_PENDING_INTERRUPT" in nothing.stderr or "no pending interrupt" in nothing.stderr
    for result in (again, bad, neither, nothing):
        assert "Traceback" not in result.stderr


def test_k3_interrupts_decide_sends_typed_answers(sidecar: SharedSidecar):
    """`decide --edit KEY=VALUE` edits a one-action middleware pause from its own arguments,
    `--decisions-json` answers each action of a batch, `--resume-json` answers a plain
    interrupt(); what the pause does not take fails with one line and changes nothing."""
    from langgraph.types import interrupt

    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_decision_responses import BATCH, paused

    one_action = {
        "action_requests": [{"name": "send_email", "args": {"to": "ann", "body": "hi"}}],
        "review_configs": [
            {"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }
    with (
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client,
        CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, graph_name="agent") as saver,
    ):
        single = paused(client, saver, lambda: interrupt(one_action))
        batch = paused(client, saver, lambda: interrupt(BATCH))
        plain = paused(client, saver, lambda: interrupt({"reason": "pick"}))
    base = ("--target", sidecar.target, "--namespace", sidecar.namespace, "--decided-by", "ann")

    def decide(pause: Any, *flags: str) -> subprocess.CompletedProcess[str]:
        return cli(
            "interrupts",
            "decide",
            pause.execution_id,
            "--interrupt-id",
            pause.interrupt_id,
            *flags,
            *base,
        )

    refused = decide(single, "--respond", "done")
    assert refused.returncode == 1
    assert "does not allow 'respond' for 'send_email'" in refused.stderr
    assert refused.stderr.count("\n") == 1
    too_many = decide(batch, "--edit", "to=bob")
    assert too_many.returncode == 1
    assert "asks about 2 actions" in too_many.stderr

    edited = decide(single, "--edit", "to=bob", "--edit", 'cc=["cy"]')
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout.startswith(f"edited {single.execution_id} (node ")
    both = decide(
        batch,
        "--decisions-json",
        '[{"type": "respond", "message": "sent"}, {"type": "reject", "message": "keep it"}]',
    )
    assert both.returncode == 0, both.stderr
    assert both.stdout.startswith(f"responded+rejected {batch.execution_id} (node ")
    answered = decide(plain, "--resume-json", '{"choice": 2}')
    assert answered.returncode == 0, answered.stderr

    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        decided = {p.execution_id: p.decision for p in client.iter_pending_interrupts()}
    edit = decided[single.execution_id]
    assert edit is not None
    assert edit.response is not None
    assert edit.response.actions[0].args == {"to": "bob", "body": "hi", "cc": ["cy"]}
    assert edit.approved is True
    batch_decision = decided[batch.execution_id]
    assert batch_decision is not None
    assert batch_decision.approved is False
    plain_decision = decided[plain.execution_id]
    assert plain_decision is not None
    assert plain_decision.response is not None
    assert plain_decision.response.resume_value == {"choice": 2}
    for result in (refused, too_many, edited, both, answered):
        assert "Traceback" not in result.stderr


def test_i4_g8_list_json_and_show_give_a_pause_whole_for_both_kinds_of_run(sidecar: SharedSidecar):
    """`interrupts list` shows the start of each pause's context and `--json` the whole of
    it; `interrupts show` prints a run's pauses in full, a fastaiagent run's one and each of a
    LangGraph thread's parallel two, and fails with one line for a run with none."""
    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_graph_interrupts import two_pauses

    thread = f"thread-{datetime.now(UTC).timestamp():.0f}"
    with (
        CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client,
        CheckpointdSaver(
            sidecar.target, namespace=sidecar.namespace, graph_name="support"
        ) as saver,
    ):
        record(client, "exec-f", interrupt_context={"amount": 500, "note": "x" * 80})
        two_pauses(saver).invoke({"log": []}, {"configurable": {"thread_id": thread}})
    base = ("--target", sidecar.target, "--namespace", sidecar.namespace)

    table = cli("interrupts", "list", *base)
    assert table.returncode == 0, table.stderr
    [fast] = [line for line in table.stdout.splitlines() if line.startswith("exec-f")]
    assert fast.endswith("…")  # the context is cut in the table
    assert '{"amount":500,"note":"xxx' in fast
    listed = [
        json.loads(line) for line in cli("interrupts", "list", "--json", *base).stdout.splitlines()
    ]
    by_run = {(row["execution_id"], row["node_id"]): row for row in listed}
    assert by_run[("exec-f", "node")]["context"] == {"amount": 500, "note": "x" * 80}
    assert by_run[(thread, "a")]["context"] == {"reason": "ask-a"}
    assert by_run[(thread, "b")]["interrupt_id"]

    shown = cli("interrupts", "show", "exec-f", *base)
    assert shown.returncode == 0, shown.stderr
    assert "pause        node node\n" in shown.stdout
    assert "decision     none yet\n" in shown.stdout
    assert f'    "note": "{"x" * 80}"' in shown.stdout  # the whole context, indented JSON
    both = cli("interrupts", "show", thread, *base)
    assert both.returncode == 0, both.stderr
    for node in ("a", "b"):
        row = by_run[(thread, node)]
        assert f"pause        node {node}, interrupt {row['interrupt_id']}\n" in both.stdout
    one = cli(
        "interrupts",
        "show",
        thread,
        "--interrupt-id",
        by_run[(thread, "a")]["interrupt_id"],
        "--json",
        *base,
    )
    assert [json.loads(line)["node_id"] for line in one.stdout.splitlines()] == ["a"]
    none = cli("interrupts", "show", "exec-none", *base)
    assert none.returncode == 1
    assert (
        none.stderr == "checkpointd: error: exec-none has no pending interrupt in namespace "
        f"'{sidecar.namespace}'\n"
    )


def test_k1_g9_decide_takes_a_threads_only_pause_and_lists_several(sidecar: SharedSidecar):
    """Without --interrupt-id, `decide` decides a LangGraph thread's only pause (it used to
    say the thread had none) and refuses, listing the ids, when the thread waits on two;
    the namespace may come from $CHECKPOINTD_NAMESPACE."""
    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_graph_interrupts import one_pause, two_pauses

    stamp = f"{datetime.now(UTC).timestamp():.0f}"
    single, double = f"single-{stamp}", f"double-{stamp}"
    with CheckpointdSaver(
        sidecar.target, namespace=sidecar.namespace, graph_name="support"
    ) as saver:
        one_pause(saver).invoke({"log": []}, {"configurable": {"thread_id": single}})
        two_pauses(saver).invoke({"log": []}, {"configurable": {"thread_id": double}})
    env = {"CHECKPOINTD_TARGET": sidecar.target, "CHECKPOINTD_NAMESPACE": sidecar.namespace}

    decided = cli("interrupts", "decide", single, "--approve", "--decided-by", "ann", env=env)
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.startswith(f"approved {single} (node review, interrupt ")
    refused = cli("interrupts", "decide", double, "--approve", env=env)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    assert f"{double} waits on 2 pauses; name one with --interrupt-id: " in refused.stderr
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        pauses = {p.execution_id + p.node_id: p for p in client.iter_pending_interrupts()}
    assert pauses[f"{single}review"].decision is not None
    assert pauses[f"{double}a"].decision is None
    assert pauses[f"{double}b"].decision is None
    for node in ("a", "b"):
        assert f"{pauses[double + node].interrupt_id} (node {node}, interrupt " in refused.stderr


# --- --all-namespaces -------------------------------------------------------------------------


@dataclass
class Namespaces:
    """A server with tokens, and pauses of both kinds in team-a (a fastaiagent run) and
    team-b (a LangGraph thread, the newer), one in team-c, which the ``ops`` token may not
    read, and in team-e an older run without a pause."""

    server: Sidecar
    ops: Path  # read-only in team-a, team-b and team-e
    a_only: Path  # read-only in team-a
    thread: str
    admin: str  # the token itself: read-write everywhere


def _token_entry(name: str, token: str, namespaces: list[str]) -> dict[str, Any]:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {"name": name, "token_sha256": digest, "namespaces": namespaces, "role": "read-only"}


def paused_thread(target: str, namespace: str, token: str) -> str:
    """A LangGraph thread of graph "support" paused at node "review"; its id."""

    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [str(graph_interrupt({"reason": "refund"}))]}

    builder = StateGraph(GraphLog)
    builder.add_node("review", review)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    thread = f"thread-{uuid.uuid4().hex[:6]}"
    saver = CheckpointdSaver(target, namespace=namespace, graph_name="support", token=token)
    with saver:
        builder.compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": thread}}
        )
    return thread


class GraphLog(TypedDict):
    log: Annotated[list[str], operator.add]


def namespaces_server(sidecar_factory: Callable[..., Sidecar], tmp_path: Path) -> Namespaces:
    """See :class:`Namespaces`: the server, its pauses, and the tokens' files."""
    admin, ops, a_only = (f"tok-{secrets.token_urlsafe(16)}" for _ in range(3))
    entries = [
        {**_token_entry("admin", admin, ["*"]), "role": "read-write"},
        _token_entry("ops", ops, ["team-a", "team-b", "team-e"]),
        _token_entry("a-only", a_only, ["team-a"]),
    ]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": entries}))
    tokens.chmod(0o600)
    server = sidecar_factory("--auth-tokens-file", str(tokens))
    old = datetime.now(UTC) - timedelta(minutes=5)
    for namespace, execution_id in (("team-a", "run-a"), ("team-c", "run-c")):
        with CheckpointdClient(server.target, namespace=namespace, token=admin) as client:
            record(client, execution_id, chain_name="orders", created_at=old)
    thread = paused_thread(server.target, "team-b", admin)
    with CheckpointdClient(server.target, namespace="team-e", token=admin) as client:
        client.put_checkpoint(
            checkpoint("run-e", node_id="a", created_at=old - timedelta(minutes=5))
        )
    files = []
    for name, token in (("ops", ops), ("a-only", a_only)):
        path = tmp_path / f"{name}.token"
        path.write_text(token)
        files.append(path)
    return Namespaces(server, files[0], files[1], thread, admin)


def test_g8_interrupts_list_all_namespaces_lists_every_namespace_the_token_reads(
    sidecar_factory: Callable[..., Sidecar], tmp_path: Path
):
    """-A lists the pauses of every namespace the token may read, as the server lists them
    (ListNamespaces, N2), newest first across namespaces, both kinds, with a NAMESPACE column
    (``namespace`` in --json); a namespace the token may not read is left out; -A with
    --namespace is refused, and without a token the server's refusal is said."""
    setup = namespaces_server(sidecar_factory, tmp_path)
    where = ("--target", setup.server.target)
    result = cli("interrupts", "list", "-A", *where, "--token-file", str(setup.ops))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAMESPACE", "EXECUTION_ID", "INTERRUPT_ID"]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("team-b", setup.thread, "support"),
        ("team-a", "run-a", "orders"),
    ]
    assert lines[0].index("EXECUTION_ID") == lines[1].index(setup.thread)

    as_json = cli(
        "interrupts", "list", "--all-namespaces", *where, "--json", "--token-file", str(setup.ops)
    )
    listed = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(p["namespace"], p["execution_id"]) for p in listed] == [
        ("team-b", setup.thread),
        ("team-a", "run-a"),
    ]
    assert listed[0]["interrupt_id"]
    assert not listed[1]["interrupt_id"]

    narrow = cli("interrupts", "list", "-A", *where, "--token-file", str(setup.a_only))
    assert [line.split()[:2] for line in narrow.stdout.splitlines()[1:]] == [["team-a", "run-a"]]

    both = cli("interrupts", "list", "-A", "--namespace", "team-a", *where)
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
    no_token = cli("interrupts", "list", "-A", *where, env={"CHECKPOINTD_TOKEN": ""})
    assert no_token.returncode == 1
    assert "MISSING_TOKEN" in no_token.stderr
