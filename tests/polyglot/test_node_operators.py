"""The Node.js client's operator calls against a real server on every backend: the runs of a
namespace (ListExecutions, GetExecution: contract C11) and a graph retention on demand
(ApplyGraphRetention: G12, G13), each read back from Python."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from checkpointd_client import CheckpointdClient
from tests.contract.helpers import checkpoint, interrupted
from tests.contract.test_graph import Graph, stored
from tests.contract.test_graph_retention import _history, _pause
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT

TIMEOUT_S = 60

RUNS = """
const { CheckpointdClient } = require('./src');
const [namespace] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace });
const summary = (e) => [e.execution_id, e.status, e.checkpoint_count];
(async () => {
  const all = await client.listExecutions();
  const paused = await client.listExecutions({ status: 'paused' });
  const refunds = await client.listExecutions({ chainName: 'refunds' });
  const recent = await client.listExecutions({ activeSince: new Date(Date.now() + 3600e3) });
  const pages = await client.listExecutions({ pageSize: 1 });
  const walked = [];
  for await (const e of client.iterExecutions({ pageSize: 1 })) walked.push(e.execution_id);
  const detail = await client.getExecution('run-paused');
  const ended = await client.getExecution('run-ended');
  let missing = 'none';
  try {
    await client.getExecution('no-such-run');
  } catch (error) {
    missing = `${error.code}:${error.reason}`;
  }
  let badStatus = 'none';
  try {
    await client.listExecutions({ status: 'sleeping' });
  } catch (error) {
    badStatus = error.constructor.name;
  }
  process.stdout.write(JSON.stringify({
    all: all.executions.map(summary),
    paused: paused.executions.map((e) => e.execution_id),
    refunds: refunds.executions.map((e) => e.execution_id),
    recent: recent.executions.length,
    first_page: [pages.executions.length, pages.next_page_token !== ''],
    walked,
    detail: {
      execution: summary(detail.execution),
      pending: detail.pending_interrupt.execution_id,
      pending_reason: detail.pending_interrupt.reason,
      keys: detail.idempotency_keys,
      key_count: detail.idempotency_key_count,
      last_decided: detail.last_decided,
    },
    ended_pending: ended.pending_interrupt,
    missing,
    bad_status: badStatus,
  }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""

THREADS = """
const { CheckpointdClient } = require('./src');
const [namespace, thread] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace });
const summary = (e) => [e.execution_id, e.framework, e.status];
(async () => {
  const both = await client.listExecutions();
  const threads = await client.listExecutions({ framework: 'langgraph' });
  const runs = await client.listExecutions({ framework: 'FRAMEWORK_FASTAIAGENT' });
  const detail = await client.getExecution(thread, { framework: 'langgraph' });
  let badFramework = 'none';
  try {
    await client.listExecutions({ framework: 'crewai' });
  } catch (error) {
    badFramework = error.constructor.name;
  }
  process.stdout.write(JSON.stringify({
    both: both.executions.map(summary),
    threads: threads.executions.map(summary),
    runs: runs.executions.map(summary),
    detail: [summary(detail.execution), detail.pending_interrupts.map((p) => p.node_id)],
    bad_framework: badFramework,
  }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""

NAMESPACES = """
const { CheckpointdClient } = require('./src');
const [namespace] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace: 'default' });
(async () => {
  const first = await client.listNamespaces({ pageSize: 1 });
  const walked = [];
  for await (const name of client.iterNamespaces({ pageSize: 2 })) walked.push(name);
  let badToken = 'none';
  try {
    await client.listNamespaces({ pageToken: 'not a token' });
  } catch (error) {
    badToken = `${error.code}:${error.reason}`;
  }
  process.stdout.write(JSON.stringify({
    first: [first.namespaces.length, first.next_page_token !== ''],
    walked,
    bad_token: badToken,
  }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""

RETENTION = """
const { CheckpointdClient } = require('./src');
const [namespace] = process.argv.slice(1);
const client = new CheckpointdClient({ namespace });
(async () => {
  const dry = await client.applyGraphRetention({ keepNewest: 2, dryRun: true });
  const cut = await client.applyGraphRetention({ keepNewest: 2, requestId: 'node-ret-1' });
  const again = await client.applyGraphRetention({ keepNewest: 2, requestId: 'node-ret-1' });
  const idle = await client.applyGraphRetention({ idleForSeconds: 3600 });
  const refusals = [];
  for (const rules of [{}, { idleForSeconds: 0 }, { keepNewest: -1 }]) {
    try {
      await client.applyGraphRetention(rules);
      refusals.push('accepted');
    } catch (error) {
      refusals.push(`${error.code}:${error.reason}:${error.metadata.field}`);
    }
  }
  process.stdout.write(JSON.stringify({ dry, cut, again, idle, refusals }));
  client.close();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def run_node(node: str, script: str, sidecar: SharedSidecar, *args: str) -> Any:
    """Run ``script`` against the server (its arguments: the namespace, then ``args``) and
    return the JSON it prints."""
    done = subprocess.run(
        [node, "-e", script, sidecar.namespace, *args],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env={**os.environ, "CHECKPOINTD_TARGET": sidecar.target},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def graph(sidecar: SharedSidecar) -> Iterator[Graph]:
    with grpc.insecure_channel(sidecar.target) as channel:
        yield Graph(channel, sidecar.namespace)


def test_c11_the_node_client_lists_and_describes_runs(node: str, sidecar: SharedSidecar) -> None:
    """listExecutions pages and filters (status, chain name, last activity) newest activity
    first as ListExecutions does; iterExecutions walks every page; getExecution answers the
    run's summary, pending interrupt and idempotency keys (null when there is no pause), and
    NOT_FOUND for a run with no checkpoint; an unknown status is a TypeError."""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.put_checkpoint(checkpoint("run-ended", chain_name="refunds"))
        client.put_checkpoint(checkpoint("run-ended", node_id="run_end", step_type="run_end"))
        client.put_checkpoint(checkpoint("run-paused"))
        client.record_interrupt(*interrupted("run-paused"))
        client.put_idempotent("run-paused", "charge", {"id": 7})
        client.put_idempotent("run-paused", "email", None)
        client.put_checkpoint(checkpoint("run-going", chain_name="refunds"))
        expected = [
            [e.execution_id, e.status, str(e.checkpoint_count)]
            for e in client.list_executions().executions
        ]
    assert [row[0] for row in expected] == ["run-going", "run-paused", "run-ended"]

    seen = run_node(node, RUNS, sidecar)
    assert seen["all"] == [
        [run, f"EXECUTION_STATUS_{status.upper()}", count] for run, status, count in expected
    ]
    assert seen["paused"] == ["run-paused"]
    assert seen["refunds"] == ["run-going"]  # run-ended's newest checkpoint names "flow"
    assert seen["recent"] == 0
    assert seen["first_page"] == [1, True]
    assert seen["walked"] == ["run-going", "run-paused", "run-ended"]
    assert seen["detail"] == {
        "execution": ["run-paused", "EXECUTION_STATUS_PAUSED", "2"],
        "pending": "run-paused",
        "pending_reason": "manager_approval",
        "keys": ["charge", "email"],
        "key_count": "2",
        "last_decided": None,
    }
    assert seen["ended_pending"] is None
    assert seen["missing"] == f"{grpc.StatusCode.NOT_FOUND.value[0]}:NO_CHECKPOINTS"
    assert seen["bad_status"] == "TypeError"


def test_c12_the_node_client_lists_threads_beside_runs_by_framework(
    node: str, sidecar: SharedSidecar
) -> None:
    """listExecutions lists a LangGraph thread beside a fastaiagent run with its framework, and
    its framework option keeps one kind; getExecution of the thread gives its pauses; an
    unknown framework is a TypeError."""
    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_graph_interrupts import one_pause

    thread = "thread-node-ops"
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.put_checkpoint(checkpoint("run-going"))
    with CheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:
        one_pause(saver).invoke({"log": []}, {"configurable": {"thread_id": thread}})
    seen = run_node(node, THREADS, sidecar, thread)
    langgraph = [thread, "FRAMEWORK_LANGGRAPH", "EXECUTION_STATUS_PAUSED"]
    fastaiagent = ["run-going", "FRAMEWORK_FASTAIAGENT", "EXECUTION_STATUS_RUNNING"]
    assert seen["both"] == [langgraph, fastaiagent]
    assert seen["threads"] == [langgraph]
    assert seen["runs"] == [fastaiagent]
    assert seen["detail"] == [langgraph, ["review"]]
    assert seen["bad_framework"] == "TypeError"


def test_n2_the_node_client_lists_the_namespaces(node: str, sidecar: SharedSidecar) -> None:
    """listNamespaces pages the namespaces that hold a run in name order, the test's own
    among them whatever the client's namespace; iterNamespaces walks every page, each name
    once; a bad page token is INVALID_PAGE_TOKEN. (The shared server's other tests come and
    go, so only this test's namespace is sure to be listed.)"""
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace) as client:
        client.put_checkpoint(checkpoint("run-here"))
    seen = run_node(node, NAMESPACES, sidecar)
    assert sidecar.namespace in seen["walked"]
    assert seen["first"] == [1, len(seen["walked"]) > 1]
    assert seen["walked"] == sorted(set(seen["walked"]))
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert seen["bad_token"] == f"{invalid}:INVALID_PAGE_TOKEN"


def test_g12_g13_the_node_client_applies_a_graph_retention(
    node: str, sidecar: SharedSidecar, graph: Graph
) -> None:
    """applyGraphRetention: a dry run counts and changes nothing, the run deletes what it
    counted (a paused thread kept whole), a retry with its request id answers the same
    counts, and a missing or bad rule is INVALID_FIELD naming the field."""
    _history(graph, "t", 5)
    _history(graph, "paused", 4)
    _pause(graph, "paused", "c003")
    before = stored(graph)
    seen = run_node(node, RETENTION, sidecar)
    counts = {
        "threads_deleted": "0",
        "checkpoints_deleted": "3",
        "writes_deleted": "3",
        "channel_values_deleted": "3",
        "paused_threads_kept": "1",
        "delta_threads_kept": "0",
    }
    assert seen["dry"] == seen["cut"] == seen["again"] == counts
    assert seen["idle"]["threads_deleted"] == "0"
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert seen["refusals"] == [
        f"{invalid}:INVALID_FIELD:idle_for",
        f"{invalid}:INVALID_FIELD:idle_for",
        f"{invalid}:INVALID_FIELD:keep_newest",
    ]
    after = stored(graph)
    assert len(after) == len(before) - 3
    assert sorted({row[2] for row in after if row[0] == "t"}) == ["c003", "c004"]
    assert len([row for row in after if row[0] == "paused"]) == 4
