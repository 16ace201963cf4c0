"""LangGraph.js on checkpointd (contract G14): the Node client's ``CheckpointdSaver`` passes
LangGraph's own JS conformance suite for checkpoint savers, and a real ``StateGraph`` runs on
it, on every backend (Postgres through a transaction-pooling PgBouncer too).

One vitest process per backend runs both files of clients/node/spec/langgraph on the
backend's shared server, in namespaces under the test's own:

- ``validation.spec.mjs``: ``specTest`` and ``deltaChannelHistoryTests`` of
  ``@langchain/langgraph-checkpoint-validation`` (its CLI cannot load a saver in 1.1.1), a
  fresh namespace per saver the suite creates. The reference ``PostgresSaver`` passes all of
  it (it stores only the channels a put changes, as G2 has it).
- ``graph.spec.mjs``: a Send fan-out and a subgraph that interrupts, run until it pauses in a
  first process; the pause in the inbox (G8) with its interrupt id; a resume by that id in
  a second process that removes it; time travel from the checkpoint before the review.

The counts come from vitest's JSON report, file by file: exactly these many tests passed,
none failed or skipped. Then the Python saver reads the JS graph's thread back, value for
value: both languages shape the rows alike.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from checkpointd_client.langgraph import CheckpointdSaver
from tests.conftest import BACKENDS, PGBOUNCER_BACKEND
from tests.support.shared_server import SharedSidecar

from .conftest import NODE_CLIENT

#: LangGraph's conformance suite: 718 tests of specTest and 8 of getDeltaChannelHistory.
VALIDATION_TESTS = 726
#: The graph spec's tests.
GRAPH_TESTS = 4
VITEST_TIMEOUT_S = 300


@pytest.fixture(params=[*BACKENDS, PGBOUNCER_BACKEND])
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, Postgres, and Postgres behind a transaction-pooling PgBouncer."""
    return str(request.param)


def counts(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The tests of each spec file by status ("passed", "failed", "skipped", ...)."""
    found: dict[str, dict[str, int]] = {}
    for result in report["testResults"]:
        per_status = found.setdefault(Path(result["name"]).name, {})
        for assertion in result["assertionResults"]:
            per_status[assertion["status"]] = per_status.get(assertion["status"], 0) + 1
    return found


def test_g14_g8_langgraph_js_suite_passes_and_a_js_graph_pauses_resumes_and_forks(
    node: str, vitest: str, sidecar: SharedSidecar, tmp_path: Path
) -> None:
    """726 of 726 conformance tests and the graph spec pass, nothing skipped; the Python saver
    reads the JS graph's final checkpoint."""
    report_path = tmp_path / "vitest.json"
    env = {
        **os.environ,
        "CHECKPOINTD_TARGET": sidecar.target,
        "CHECKPOINTD_TEST_NAMESPACE": sidecar.namespace,
    }
    env.pop("CHECKPOINTD_TOKEN", None)
    result = subprocess.run(
        [node, vitest, "run", "--reporter=dot", "--reporter=json", f"--outputFile={report_path}"],
        cwd=NODE_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=VITEST_TIMEOUT_S,
        check=False,
    )
    output = (result.stdout + result.stderr)[-20_000:]
    assert report_path.is_file(), output
    by_file = counts(json.loads(report_path.read_text()))
    assert by_file == {
        "validation.spec.mjs": {"passed": VALIDATION_TESTS},
        "graph.spec.mjs": {"passed": GRAPH_TESTS},
    }, output
    assert result.returncode == 0, output

    with CheckpointdSaver(sidecar.target, namespace=f"{sidecar.namespace}-graph") as saver:
        found = saver.get_tuple({"configurable": {"thread_id": "review-1"}})
        assert found is not None
        values = found.checkpoint["channel_values"]
        assert values["verdict"] == "rejected"
        assert sorted(values["done"]) == ["A", "B", "C"]
        assert values["items"] == ["a", "b", "c"]
        assert found.metadata["source"] == "loop"
        assert found.parent_config is not None
        history = list(saver.list({"configurable": {"thread_id": "review-1", "checkpoint_ns": ""}}))
        verdicts = {t.checkpoint["channel_values"].get("verdict") for t in history}
        assert {"approved by ana", "rejected"} <= verdicts
