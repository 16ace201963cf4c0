"""The approvals page lists the namespace's runs (contract C12), fastaiagent runs and LangGraph
threads alike, in a real headless Chromium on each backend, through ``GET /api/runs``
(ListExecutions, with the grant and namespace checks of every other read): filtered by
framework, status and chain or graph name, page by page, each opening the run view."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import SidecarCheckpointer
from checkpointd_client.langgraph import CheckpointdSaver
from tests.console.conftest import Console, Tokens, approval_chain, pause, plain_pause
from tests.console.http import call
from tests.console.page import open_listed_run, screenshot, wait
from tests.console.test_page_run_view import js_thread
from tests.contract.helpers import checkpoint
from tests.contract.test_executions_graph import chain, step
from tests.polyglot.conftest import node as node  # the fixture: node, with the client's packages


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def listed(browser: Any) -> list[tuple[str, str, str, str]]:
    """The runs the list shows: (run, framework, chain, status), top to bottom."""
    return [
        (
            str(r.get_attribute("data-execution-id")),
            r.find_element(By.CSS_SELECTOR, ".framework").text,
            r.find_element(By.CSS_SELECTOR, ".chain").text,
            r.find_element(By.CSS_SELECTOR, ".run-status").text,
        )
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    ]


def shows(browser: Any, expected: list[tuple[str, str, str, str]]) -> None:
    wait(browser).until(lambda b: listed(b) == expected)


def test_c12_page_lists_runs_and_threads_filters_pages_and_opens_each(
    console: Console,
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """A LangGraph thread ended, a fastaiagent run paused, one running, and a thread paused
    are rows of the runs list, newest activity first, with their framework, chain (a paused
    thread's graph) and status; the filters narrow it; More runs reads the next page; Open
    run shows the run's checkpoints, and a paused thread's."""
    ended = "thread-ended"
    with CheckpointdSaver(console.target) as saver:
        chain(saver, ("a", step("a"))).invoke({"log": []}, {"configurable": {"thread_id": ended}})
    store = checkpointer_for(console.target, "default")
    pause(approval_chain("orders", store, []), "run-paused")
    with CheckpointdClient(console.target) as client:
        client.put_checkpoint(checkpoint("run-busy", chain_name="billing", node_id="a"))
    thread, _ = plain_pause(console.target)
    open_page(browser, console.url)
    everything = [
        (thread, "LangGraph", "agent", "paused"),
        ("run-busy", "fastaiagent", "billing", "running"),
        ("run-paused", "fastaiagent", "orders", "paused"),
        (ended, "LangGraph", "—", "ended"),
    ]
    shows(browser, everything)
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "runs"))
    screenshot(browser, tmp_path, "runs")
    first = browser.find_element(By.CSS_SELECTOR, "tr.run-row")
    assert first.find_element(By.CSS_SELECTOR, ".count").text != "0"
    assert first.find_element(By.CSS_SELECTOR, "time.age").get_attribute("datetime")

    Select(browser.find_element(By.ID, "runs-framework")).select_by_value("langgraph")
    shows(browser, [everything[0], everything[3]])
    Select(browser.find_element(By.ID, "runs-framework")).select_by_value("")
    Select(browser.find_element(By.ID, "runs-status")).select_by_value("paused")
    shows(browser, [everything[0], everything[2]])
    Select(browser.find_element(By.ID, "runs-status")).select_by_value("ended")
    shows(browser, everything[3:])
    Select(browser.find_element(By.ID, "runs-status")).select_by_value("")
    name = browser.find_element(By.ID, "runs-chain")
    name.send_keys("orders\n")
    shows(browser, everything[2:3])
    name.clear()
    name.send_keys("\n")
    shows(browser, everything)

    browser.execute_script("runsView.pageSize = 3")
    browser.find_element(By.ID, "runs-refresh").click()
    shows(browser, everything[:3])
    more = browser.find_element(By.ID, "runs-more")
    more.click()
    shows(browser, everything)
    wait(browser).until(lambda b: not more.is_displayed())

    open_listed_run(browser, "run-paused")
    wait(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr"))
    nodes = browser.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr .node")
    assert "ask" in [n.text for n in nodes]
    browser.find_element(By.ID, "run-close").click()
    open_listed_run(browser, thread)
    wait(browser).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr.graph-checkpoint")
    )
    browser.find_element(By.ID, "run-close").click()
    # A thread with no pause is read as a thread all the same, and its link says so.
    open_listed_run(browser, ended)
    wait(browser).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr.graph-checkpoint")
    )
    assert "graph=1" in browser.execute_script("return window.location.hash")


def test_c12_runs_api_checks_its_filters_and_the_grant(
    auth_console: Console,
    tokens: Tokens,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """/api/runs lists the runs of a namespace the token may read, with the filters of
    ListExecutions; another namespace is NAMESPACE_NOT_ALLOWED (403), an unknown framework
    or status INVALID_FIELD (400) naming the values, and no token MISSING_TOKEN (401)."""
    store = checkpointer_for(auth_console.target, "team-a", token=tokens.approver)
    pause(approval_chain("orders", store, []), "run-a")
    url = auth_console.url + "api/runs"
    reply = call("GET", url + "?namespace=team-a&framework=fastaiagent", token=tokens.viewer)
    assert reply.status == 200, reply.body
    [run] = reply.body["runs"]
    assert (run["execution_id"], run["status"], run["framework"]) == (
        "run-a",
        "EXECUTION_STATUS_PAUSED",
        "FRAMEWORK_FASTAIAGENT",
    )
    assert reply.body["next_page_token"] == ""
    none = call("GET", url + "?namespace=team-a&framework=langgraph", token=tokens.viewer)
    assert none.body["runs"] == []
    other = call("GET", url + "?namespace=team-b", token=tokens.viewer)
    assert (other.status, other.reason) == (403, "NAMESPACE_NOT_ALLOWED")
    bad = call("GET", url + "?namespace=team-a&framework=crewai", token=tokens.viewer)
    assert (bad.status, bad.reason) == (400, "INVALID_FIELD")
    assert "fastaiagent, langgraph" in bad.body["error"]["message"]
    status = call("GET", url + "?namespace=team-a&status=done", token=tokens.viewer)
    assert (status.status, status.reason) == (400, "INVALID_FIELD")
    size = call("GET", url + "?namespace=team-a&page_size=0", token=tokens.viewer)
    assert (size.status, size.reason) == (400, "INVALID_FIELD")
    anonymous = call("GET", url + "?namespace=team-a")
    assert (anonymous.status, anonymous.reason) == (401, "MISSING_TOKEN")


def test_w2_page_runs_list_is_live_on_pause_events_and_on_the_clock(
    console: Console,
    browser: Any,
    node: str,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """With the page open and nothing clicked: a fastaiagent run that pauses, a Python
    LangGraph thread and a LangGraph.js thread that pause appear in the runs list as their
    pause events arrive (the clock held back); a run that steps and ends, which sends no
    event, is read again on the clock; a read that changed nothing keeps the rows and the
    focus, and a page read with More runs stays."""
    with CheckpointdClient(console.target) as client:
        client.put_checkpoint(checkpoint("run-busy", chain_name="billing", node_id="a"))
    open_page(browser, console.url)
    shows(browser, [("run-busy", "fastaiagent", "billing", "running")])
    browser.execute_script("runsView.everyMs = 1e9")  # only the events read it now

    pause(approval_chain("orders", checkpointer_for(console.target, "default"), []), "run-paused")
    shows(
        browser,
        [
            ("run-paused", "fastaiagent", "orders", "paused"),
            ("run-busy", "fastaiagent", "billing", "running"),
        ],
    )
    thread, _ = plain_pause(console.target)
    js = f"js-{uuid.uuid4().hex[:8]}"
    js_thread(node, console.target, js)
    wait(browser).until(
        lambda b: (
            [(run, status) for run, _, _, status in listed(b)][:2]
            == [(js, "paused"), (thread, "paused")]
        )
    )
    assert [framework for _, framework, _, _ in listed(browser)][:2] == ["LangGraph"] * 2

    busy = 'tr.run-row[data-execution-id="run-busy"] button.open-run'
    browser.execute_script("arguments[0].focus()", browser.find_element(By.CSS_SELECTOR, busy))
    with CheckpointdClient(console.target) as client:
        client.put_checkpoint(
            checkpoint("run-busy", chain_name="billing", node_id="run_end", step_type="run_end")
        )
    browser.execute_script("runsView.everyMs = 300")
    wait(browser).until(lambda b: listed(b)[0] == ("run-busy", "fastaiagent", "billing", "ended"))
    focused = browser.switch_to.active_element
    assert focused.get_attribute("class") == "open-run"
    assert (
        focused.find_element(By.XPATH, "./ancestor::tr").get_attribute("data-execution-id")
        == "run-busy"
    )

    # Nothing changes now: the rows are the same elements read after read.
    kept = browser.find_element(By.CSS_SELECTOR, "tr.run-row")
    asked = browser.execute_script("return runsView.asked")
    wait(browser).until(lambda b: b.execute_script("return runsView.asked") >= asked + 2)
    assert kept.get_attribute("data-execution-id") == "run-busy"  # not stale: not replaced

    browser.execute_script("runsView.everyMs = 1e9; runsView.pageSize = 2")
    browser.find_element(By.ID, "runs-refresh").click()
    wait(browser).until(lambda b: len(listed(b)) == 2)
    browser.find_element(By.ID, "runs-more").click()
    wait(browser).until(lambda b: len(listed(b)) == 4)
    before = listed(browser)
    browser.execute_script("runsView.everyMs = 300")
    asked = browser.execute_script("return runsView.asked")
    wait(browser).until(lambda b: b.execute_script("return runsView.asked") >= asked + 2)
    assert listed(browser) == before


def test_n2_page_offers_namespaces_whose_runs_run_or_ended_and_lists_their_runs(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The namespace picker offers every namespace that holds a run, a pause or a LangGraph
    thread (ListNamespaces, N2), with its pending count: one holding only an ended LangGraph
    thread and one holding only a running fastaiagent run are offered beside one with a
    pause, and picking each lists its run. ``GET /api/namespaces`` reads them page by page."""
    ended = "thread-ended"
    with CheckpointdSaver(console.target, namespace="graph-ended") as saver:
        chain(saver, ("a", step("a"))).invoke({"log": []}, {"configurable": {"thread_id": ended}})
    with CheckpointdClient(console.target, namespace="fa-running") as client:
        client.put_checkpoint(checkpoint("run-busy", chain_name="billing", node_id="a"))
    pause(approval_chain("orders", checkpointer_for(console.target, "default"), []), "run-1")
    open_page(browser, console.url)

    def offered(b: Any) -> list[tuple[str | None, str | None]]:
        options = b.find_elements(By.CSS_SELECTOR, "#namespace-options option")
        return [(o.get_attribute("value"), o.get_attribute("label")) for o in options]

    wait(browser).until(
        lambda b: (
            offered(b)
            == [
                ("default", "1 pending"),
                ("fa-running", "nothing pending"),
                ("graph-ended", "nothing pending"),
            ]
        )
    )
    box = browser.find_element(By.ID, "namespace-input")
    hint = browser.find_element(By.ID, "namespace-hint")
    for namespace, run in [
        ("graph-ended", (ended, "LangGraph", "—", "ended")),
        ("fa-running", ("run-busy", "fastaiagent", "billing", "running")),
    ]:
        box.clear()
        box.send_keys(namespace, Keys.ENTER)
        box.send_keys(Keys.TAB)  # "change" fires as the box loses focus
        shows(browser, [run])
        assert not hint.is_displayed()

    pages, token = [], ""
    while True:
        reply = call("GET", console.url + f"api/namespaces?page_size=1&page_token={token}")
        assert reply.status == 200, reply.body
        pages.append(reply.body["namespaces"])
        token = reply.body["next_page_token"]
        if not token:
            break
    assert pages == [
        [{"name": "default", "pending": 1}],
        [{"name": "fa-running", "pending": 0}],
        [{"name": "graph-ended", "pending": 0}],
    ]
    for bad, reason in [
        ("page_size=0", "INVALID_FIELD"),
        ("page_size=1001", "INVALID_FIELD"),
        ("page_size=x", "INVALID_FIELD"),
        ("page_token=junk", "INVALID_PAGE_TOKEN"),
    ]:
        reply = call("GET", console.url + f"api/namespaces?{bad}")
        assert (reply.status, reply.reason) == (400, reason), (bad, reply.body)
