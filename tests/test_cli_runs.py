"""`checkpointd runs list|show|delete` against a real server of each backend (contracts C11,
C12: fastaiagent runs and LangGraph threads), as a person (tables, a confirmation on a
terminal) or a script (--json) runs them."""

from __future__ import annotations

import json
import operator
import os
import pty
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from checkpointd.cli.runs import parse_since
from checkpointd_client import CheckpointdClient, NotFoundError
from checkpointd_client.langgraph import CheckpointdSaver
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar
from tests.test_cli_interrupts import namespaces_server

TIMEOUT = 30


def cli(*args: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run `checkpointd ...` to completion (stdin: /dev/null unless given)."""
    return subprocess.run(
        [sys.executable, "-m", "checkpointd", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        env={**os.environ, "CHECKPOINTD_TOKEN": ""},
    )


def _runs(client: CheckpointdClient) -> dict[str, str]:
    """A running, an ended, a failed, a paused (decided) run and a fork, oldest first."""
    ids = {name: f"{name}-{uuid.uuid4().hex[:6]}" for name in ("run", "end", "fail", "pause")}
    old = datetime.now(UTC) - timedelta(days=2)
    client.put_checkpoint(checkpoint(ids["run"], chain_name="refunds", node_id="a", created_at=old))
    client.put_checkpoint(checkpoint(ids["end"], node_id="a", step_type="llm_call"))
    client.put_checkpoint(checkpoint(ids["end"], node_id="run_end", step_type="run_end"))
    client.put_checkpoint(checkpoint(ids["fail"], node_id="a"))
    client.put_checkpoint(checkpoint(ids["fail"], node_id="b", status="failed"))
    client.put_checkpoint(
        checkpoint(ids["pause"], node_id="a", iteration=1, state_snapshot={"step": 1})
    )
    cp, pending = interrupted(ids["pause"], node_id="review", iteration=2)
    client.record_interrupt(cp, pending)
    client.put_idempotent(ids["pause"], "charge:1", {"charged": 500})
    client.submit_decision(ids["pause"], approved=True, decided_by="alice", reason="ok")
    fork_point = client.get_fork_point(ids["end"])
    ids["fork"] = f"fork-{uuid.uuid4().hex[:6]}"
    client.put_checkpoint(
        checkpoint(ids["fork"], node_id="a", parent_checkpoint_id=fork_point.checkpoint_id)
    )
    return ids


@pytest.fixture
def runs(sidecar: SharedSidecar) -> dict[str, str]:
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        return _runs(client)


def _where(sidecar: SharedSidecar) -> tuple[str, ...]:
    return ("--target", sidecar.target, "--namespace", sidecar.namespace)


def test_c11_runs_list_prints_each_run_with_its_status_newest_first(sidecar, runs):
    """The table: a header, one aligned row per run, newest activity first, with chain,
    status, count, newest node and last activity; filters narrow it."""
    result = cli("runs", "list", *_where(sidecar))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "EXECUTION_ID",
        "FRAMEWORK",
        "CHAIN",
        "STATUS",
        "CHECKPOINTS",
        "LAST_NODE",
        "LAST_ACTIVITY",
    ]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        (runs["fork"], "fastaiagent", "running", "1"),
        (runs["pause"], "fastaiagent", "paused", "2"),
        (runs["fail"], "fastaiagent", "failed", "2"),
        (runs["end"], "fastaiagent", "ended", "2"),
        (runs["run"], "fastaiagent", "running", "1"),
    ]
    assert rows[1][5] == "review"
    assert rows[-1][2] == "refunds"
    assert rows[-1][-2:] == ["(2d", "ago)"]
    status_column = lines[0].index("STATUS")
    assert all(line[status_column - 2 : status_column] == "  " for line in lines[1:])

    paused = cli("runs", "list", *_where(sidecar), "--status", "paused")
    assert [line.split()[0] for line in paused.stdout.splitlines()[1:]] == [runs["pause"]]
    recent = cli("runs", "list", *_where(sidecar), "--since", "1d", "--limit", "2")
    assert [line.split()[0] for line in recent.stdout.splitlines()[1:]] == [
        runs["fork"],
        runs["pause"],
    ]
    assert "raise --limit" in recent.stderr
    chain = cli("runs", "list", *_where(sidecar), "--chain", "refunds")
    assert [line.split()[0] for line in chain.stdout.splitlines()[1:]] == [runs["run"]]


def test_c11_runs_list_json_is_one_object_per_run(sidecar, runs):
    """--json: one JSON object per line, times in ISO 8601, nothing on stderr."""
    result = cli("runs", "list", *_where(sidecar), "--json")
    assert result.returncode == 0, result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["execution_id"] for o in objects][:2] == [runs["fork"], runs["pause"]]
    paused = objects[1]
    assert paused["status"] == "paused"
    assert paused["framework"] == "fastaiagent"
    assert paused["checkpoint_count"] == 2
    assert paused["last_node_id"] == "review"
    assert datetime.fromisoformat(paused["last_activity_at"]).tzinfo is not None
    assert result.stderr == ""


def test_c11_runs_show_prints_pause_decision_keys_and_history(sidecar, runs):
    """show: the summary, the pause and its decision, the idempotency keys, then the
    checkpoints in write order with sequence, node, status, step type, time, iteration."""
    result = cli("runs", "show", runs["pause"], *_where(sidecar))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"execution    {runs['pause']}" in out
    assert "status       paused" in out
    assert "pending      node=review reason=manager_approval" in out
    assert 'context      {"amount":500}' in out  # what the pause asks about
    assert "decision     approved by alice" in out
    assert "status=decided" in out
    assert "idempotency  1 keys: charge:1" in out
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == [
        "#",
        "SEQUENCE",
        "NODE",
        "STATUS",
        "STEP_TYPE",
        "CREATED_AT",
        "ITERATION",
    ]
    first, second = (line.split() for line in table[1:])
    assert (first[0], first[2], first[3], first[-1]) == ("1", "a", "completed", "1")
    assert (second[0], second[2], second[3], second[-1]) == ("2", "review", "interrupted", "2")
    assert int(first[1]) < int(second[1])

    state = cli("runs", "show", runs["pause"], *_where(sidecar), "--state", "1")
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout) == {"step": 1}
    beyond = cli("runs", "show", runs["pause"], *_where(sidecar), "--state", "3")
    assert beyond.returncode == 1
    assert "has 2 checkpoints" in beyond.stderr

    missing = cli("runs", "show", "nobody", *_where(sidecar))
    assert missing.returncode == 1
    assert "no run 'nobody'" in missing.stderr


def test_c11_runs_show_keeps_the_decision_after_the_resume(sidecar, runs):
    """Once a worker resumed the run, show has no pending interrupt but the decision as
    carried out; --json prints the run, then one object per checkpoint."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        pause = client.get_latest_checkpoint(runs["pause"]).checkpoint_id
        client.lease_decision(runs["pause"], pause, lease_token="w1", lease_seconds=30)
        client.claim_interrupt(runs["pause"])
        client.report_resume(runs["pause"], pause, lease_token="w1")
    result = cli("runs", "show", runs["pause"], *_where(sidecar))
    assert "status       running" in result.stdout
    assert "pending" not in result.stdout
    assert "last decided approved by alice" in result.stdout
    assert "status=resumed" in result.stdout

    lines = cli("runs", "show", runs["pause"], *_where(sidecar), "--json").stdout.splitlines()
    head, *rows = (json.loads(line) for line in lines)
    assert head["kind"] == "execution"
    assert head["pending"] is None
    assert head["last_decision"]["status"] == "resumed"
    assert head["idempotency_keys"] == ["charge:1"]
    assert [r["kind"] for r in rows] == ["checkpoint", "checkpoint"]
    assert [r["node_id"] for r in rows] == ["a", "review"]


def test_c11_runs_show_of_a_fork_names_its_parent(sidecar, runs):
    """A fork's first checkpoint carries the checkpoint it branched from."""
    lines = cli("runs", "show", runs["fork"], *_where(sidecar), "--json").stdout.splitlines()
    head, row = (json.loads(line) for line in lines)
    assert head["status"] == "running"
    assert row["parent_checkpoint_id"]


def test_c6_runs_delete_asks_on_a_terminal_and_deletes(sidecar, runs):
    """Without --yes: refused when stdin is no terminal; on a terminal "n" keeps the run and
    "y" deletes it; --yes deletes without asking."""
    refused = cli("runs", "delete", runs["fail"], *_where(sidecar))
    assert refused.returncode == 2
    assert "--yes" in refused.stderr

    for answer, code in ((b"n\n", 1), (b"y\n", 0)):
        controller, terminal = pty.openpty()
        try:
            os.write(controller, answer)
            result = cli("runs", "delete", runs["fail"], *_where(sidecar), stdin=terminal)
        finally:
            os.close(terminal)
            os.close(controller)
        assert result.returncode == code, result.stderr
    assert "failed, 2 checkpoints, 0 idempotency results" in result.stdout
    assert f"deleted {runs['fail']}: 2 checkpoints, no pending interrupt" in result.stdout

    yes = cli("runs", "delete", runs["pause"], *_where(sidecar), "--yes")
    assert yes.returncode == 0, yes.stderr
    assert "a pending interrupt, 1 idempotency results" in yes.stdout
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        for run in (runs["fail"], runs["pause"]):
            with pytest.raises(NotFoundError):
                client.get_execution(run)


def test_runs_since_takes_a_duration_or_a_time():
    """--since 30m is half an hour back; an ISO time without offset is UTC; junk is refused."""
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-01-01T00:00:00") == datetime(2026, 1, 1, tzinfo=UTC)
    bad = cli("runs", "list", "--since", "yesterday")
    assert bad.returncode == 2
    assert "neither a duration" in bad.stderr


# --- LangGraph threads (contract C12) -------------------------------------------------------


class GraphState(TypedDict):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Any:
    def node(state: GraphState) -> dict[str, Any]:
        return {"log": [name]}

    return node


def _review(state: GraphState) -> dict[str, Any]:
    answer = interrupt({"reason": "refund", "amount": 42})
    return {"log": [f"review:{answer}"]}


def _graph(saver: CheckpointdSaver, *nodes: tuple[str, Any]) -> Any:
    graph = StateGraph(GraphState)
    previous = START
    for name, node in nodes:
        graph.add_node(name, node)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=saver)


@pytest.fixture
def threads(sidecar: SharedSidecar) -> dict[str, str]:
    """A fastaiagent run, then an ended thread, then a thread paused at "review"."""
    ids = {
        "run": f"run-{uuid.uuid4().hex[:6]}",
        "ended": f"thread-{uuid.uuid4().hex[:6]}",
        "paused": f"thread-{uuid.uuid4().hex[:6]}",
    }
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.put_checkpoint(checkpoint(ids["run"], node_id="a"))
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace, graph_name="support") as s:
        _graph(s, ("a", _step("a")), ("b", _step("b"))).invoke(
            {"log": []}, {"configurable": {"thread_id": ids["ended"]}}
        )
        _graph(s, ("a", _step("a")), ("review", _review)).invoke(
            {"log": []}, {"configurable": {"thread_id": ids["paused"]}}
        )
    return ids


def test_c12_runs_list_shows_threads_beside_runs_with_their_framework(sidecar, threads):
    """Threads are rows of the table with framework langgraph, their graph's name where
    known and their status; --framework narrows to one kind."""
    result = cli("runs", "list", *_where(sidecar))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (threads["paused"], "langgraph", "support", "paused"),
        (threads["ended"], "langgraph", "-", "ended"),
        (threads["run"], "fastaiagent", "flow", "running"),
    ]
    assert rows[0][5] == "review"
    graphs = cli("runs", "list", *_where(sidecar), "--framework", "langgraph")
    assert [line.split()[0] for line in graphs.stdout.splitlines()[1:]] == [
        threads["paused"],
        threads["ended"],
    ]
    only_runs = cli("runs", "list", *_where(sidecar), "--framework", "fastaiagent", "--json")
    assert [json.loads(line)["execution_id"] for line in only_runs.stdout.splitlines()] == [
        threads["run"]
    ]
    paused = cli("runs", "list", *_where(sidecar), "--status", "paused", "--json")
    [row] = [json.loads(line) for line in paused.stdout.splitlines()]
    assert (row["execution_id"], row["framework"]) == (threads["paused"], "langgraph")
    bad = cli("runs", "list", *_where(sidecar), "--framework", "crewai")
    assert bad.returncode == 2


def test_c12_runs_show_prints_a_thread_its_pauses_and_its_checkpoints(sidecar, threads):
    """show THREAD: the summary, each pause whole (node, reason, context), then the
    checkpoints oldest first with step, source, the nodes whose tasks wrote and the time;
    --json prints the thread, then one object per checkpoint; --state is refused."""
    result = cli("runs", "show", threads["paused"], *_where(sidecar))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"execution    {threads['paused']}" in out
    assert "framework    langgraph" in out
    assert "graph        support" in out
    assert "status       paused" in out
    assert "pauses       1" in out
    assert "pause        node review, interrupt " in out
    assert "reason       refund" in out
    assert '  "amount": 42,' in out
    assert "decision     none yet" in out
    table = out.rsplit("\n\n", 1)[1].splitlines()
    assert table[0].split() == [
        "#",
        "STEP",
        "SOURCE",
        "WROTE",
        "TASKS",
        "CREATED_AT",
        "CHECKPOINT_NS",
    ]
    rows = [line.split() for line in table[1:]]
    assert [(r[1], r[2]) for r in rows] == [("-1", "input"), ("0", "loop"), ("1", "loop")]
    assert [r[4] for r in rows] == ["__start__", "a", "review"]
    assert all(r[5].startswith("20") for r in rows)

    lines = cli("runs", "show", threads["paused"], *_where(sidecar), "--json").stdout
    head, *checkpoints = (json.loads(line) for line in lines.splitlines())
    assert (head["kind"], head["framework"], head["status"]) == ("execution", "langgraph", "paused")
    assert [p["node_id"] for p in head["pauses"]] == ["review"]
    assert [c["kind"] for c in checkpoints] == ["graph_checkpoint"] * 3
    assert [c["source"] for c in checkpoints] == ["input", "loop", "loop"]
    assert checkpoints[-1]["checkpoint_id"] == head["last_checkpoint_id"]

    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.submit_decision(
            threads["paused"],
            interrupt_id=head["pauses"][0]["interrupt_id"],
            approved=True,
            decided_by="alice",
        )
    decided = cli("runs", "show", threads["paused"], *_where(sidecar)).stdout
    assert "decision     approved by alice" in decided

    state = cli("runs", "show", threads["ended"], *_where(sidecar), "--state", "1")
    assert state.returncode == 1
    assert "LangGraph thread" in state.stderr


def test_c12_runs_delete_deletes_a_thread_after_the_same_confirmation(sidecar, threads):
    """delete THREAD: refused without a terminal, asks naming the thread, deletes it through
    DeleteGraphThread with its pauses; show then finds nothing."""
    refused = cli("runs", "delete", threads["paused"], *_where(sidecar))
    assert refused.returncode == 2
    assert "--yes" in refused.stderr

    for answer, code in ((b"n\n", 1), (b"y\n", 0)):
        controller, terminal = pty.openpty()
        try:
            os.write(controller, answer)
            result = cli("runs", "delete", threads["paused"], *_where(sidecar), stdin=terminal)
        finally:
            os.close(terminal)
            os.close(controller)
        assert result.returncode == code, result.stderr
    assert f"Delete LangGraph thread {threads['paused']}" in result.stdout
    assert "paused, 3 checkpoints, 1 pending pauses" in result.stdout
    assert f"deleted LangGraph thread {threads['paused']}: 3 checkpoints" in result.stdout

    yes = cli("runs", "delete", threads["ended"], *_where(sidecar), "--yes")
    assert yes.returncode == 0, yes.stderr
    assert f"deleted LangGraph thread {threads['ended']}: 4 checkpoints" in yes.stdout
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        for thread in (threads["paused"], threads["ended"]):
            with pytest.raises(NotFoundError):
                client.get_execution(thread)
        assert client.list_pending_interrupts().pending_interrupts == []
    missing = cli("runs", "show", threads["paused"], *_where(sidecar))
    assert missing.returncode == 1


@pytest.mark.own_server
def test_c12_runs_list_all_namespaces_lists_both_kinds_with_their_namespace(
    sidecar_factory: Callable[..., Sidecar], tmp_path: Path
):
    """-A lists the runs of every namespace the server lists for the token (ListNamespaces,
    N2): fastaiagent runs and LangGraph threads, paused or not, of a namespace with no pause
    too, newest activity first across namespaces, with a NAMESPACE column (``namespace`` in
    --json); the filters apply in each; a namespace the token may not read is left out."""
    setup = namespaces_server(sidecar_factory, tmp_path)
    with CheckpointdClient(setup.server.target, namespace="team-a", token=setup.admin) as c:
        c.put_checkpoint(checkpoint("run-a2", node_id="a"))
    with CheckpointdClient(setup.server.target, namespace="team-d", token=setup.admin) as c:
        c.put_checkpoint(checkpoint("run-d", node_id="a"))
    where = ("--target", setup.server.target)
    ops = ("--token-file", str(setup.ops))
    result = cli("runs", "list", "-A", *where, *ops)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAMESPACE", "EXECUTION_ID", "FRAMEWORK"]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [
        ("team-a", "run-a2", "fastaiagent", "running"),
        ("team-b", setup.thread, "langgraph", "paused"),
        ("team-a", "run-a", "fastaiagent", "paused"),
        ("team-e", "run-e", "fastaiagent", "running"),
    ]
    as_json = cli("runs", "list", "-A", *where, *ops, "--framework", "langgraph", "--json")
    [thread] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert (thread["namespace"], thread["execution_id"]) == ("team-b", setup.thread)
    limited = cli("runs", "list", "-A", *where, *ops, "--limit", "1")
    assert [line.split()[1] for line in limited.stdout.splitlines()[1:]] == ["run-a2"]
    assert "raise --limit" in limited.stderr
    both = cli("runs", "list", "--all-namespaces", "--namespace", "team-a", *where, *ops)
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
