"""One namespace holding a fastaiagent run, a Python LangGraph thread and a LangGraph.js
thread, each paused, on the approvals page in a real headless Chromium on each backend
(contracts G15, G16, W2): the inbox lists every pause and finds the JS thread's by search,
the page decides the JS pauses, a JS ``GraphResumeWorker`` carries the decisions out, the
Decided list records each by node and interrupt with what happened after, and the runs list
follows the JS thread to its end while the other two still wait."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, pause, plain_pause
from tests.console.page import open_listed_run, open_page, row, shown_ids, wait
from tests.console.test_page_list import search
from tests.console.test_page_runs import listed
from tests.polyglot.conftest import node as node  # the fixture: node, with the client's packages
from tests.polyglot.test_langgraph_js_worker import pause_js, start_js, wait_until_logged
from tests.support.shared_server import SharedSidecar


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The JS worker processes a test starts, killed at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(60)
        if process.stdout is not None:
            process.stdout.close()


def pause_row(browser: Any, interrupt_id: str) -> WebElement:
    selector = f'article.interrupt[data-interrupt-id="{interrupt_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def decide_on_page(browser: Any, interrupt_id: str, verdict: str) -> None:
    """Click Approve or Reject on the pause, then confirm, as a person does."""
    pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, f"button.{verdict}").click()
    pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, "button.confirm").click()


def record(browser: Any, interrupt_id: str) -> WebElement:
    selector = f'tr.decision[data-interrupt-id="{interrupt_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def outcome(browser: Any, interrupt_id: str) -> str:
    return str(record(browser, interrupt_id).find_element(By.CSS_SELECTOR, ".outcome").text)


def test_g16_page_decides_a_langgraph_js_threads_pauses_beside_python_and_fastaiagent_ones(
    console: Console,
    browser: Any,
    node: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """A fastaiagent pause, a Python thread's and a JS thread's two parallel pauses are rows
    of one inbox; a search by the JS thread's id keeps its two; Approve and Reject on the page
    decide them, the JS worker carries both out (the approval resumed, the rejection carried
    out, never in success's words), the Decided list names each pause's node and interrupt,
    the runs list reads the JS thread ended by itself, and its Open run shows its
    checkpoints."""
    pause(approval_chain("orders", checkpointer_for(console.target, "default"), []), "run-1")
    python, _ = plain_pause(console.target)
    js = f"js-{uuid.uuid4().hex[:8]}"
    here = SharedSidecar(console.sidecar.store, console.target, "", "default")
    ids = pause_js(node, here, tmp_path, js)
    start_js(processes, node, here, tmp_path)
    open_page(browser, console.url)

    wait(browser).until(lambda b: sorted(shown_ids(b)) == sorted(["run-1", python, js, js]))
    assert row(browser, js).find_element(By.CSS_SELECTOR, ".chain").text == "js-support"
    search(browser, js)
    wait(browser).until(lambda b: shown_ids(b) == [js, js])
    search(browser, "")
    wait(browser).until(lambda b: len(shown_ids(b)) == 4)

    decide_on_page(browser, ids["a"], "approve")
    wait(browser).until(lambda b: outcome(b, ids["a"]) == "resumed")
    decide_on_page(browser, ids["b"], "reject")
    wait(browser).until(lambda b: outcome(b, ids["b"]) == "rejection carried out")
    for name in ("a", "b"):
        shown = record(browser, ids[name]).find_element(By.CSS_SELECTOR, ".pause").text
        assert shown == f"node {name} · interrupt {ids[name][:8]}…"
    wait_until_logged(tmp_path / f"{js}.log", ["a:true:console", "b:false:console", "ship"])

    # The runs list follows the thread to its end by itself; the other two still wait.
    wait(browser).until(
        lambda b: (
            {run: (framework, status) for run, framework, _, status in listed(b)}
            == {
                js: ("LangGraph", "ended"),
                python: ("LangGraph", "paused"),
                "run-1": ("fastaiagent", "paused"),
            }
        )
    )
    assert row(browser, python).find_elements(By.CSS_SELECTOR, "button.approve")
    with CheckpointdClient(console.target) as client:
        assert {p.execution_id for p in client.iter_pending_interrupts()} == {"run-1", python}

    open_listed_run(browser, js)
    wait(browser).until(
        lambda b: len(b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr.graph-checkpoint")) >= 3
    )
