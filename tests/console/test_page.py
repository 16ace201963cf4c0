"""The approvals page in a real headless Chromium, on each backend: a paused run shows up
live, a click approves it, a ResumeWorker carries it out and the row leaves; a read-only
token sees no buttons; an untrusted context is shown as text."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from tests.console.conftest import Console, Tokens, approval_chain, pause
from tests.console.http import decide
from tests.console.page import WAIT_S, row, screenshot, shown_ids, sign_in, status_of, wait


def test_k1_page_approves_a_paused_run_that_a_resume_worker_completes(
    auth_console: Console,
    tokens: Tokens,
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """Pending runs show newest first with their details, a run paused after the page opened
    appears live, Approve records the decision by the token's name, a decision made elsewhere
    appears live, and the rows leave once a ResumeWorker has resumed the runs."""
    store = checkpointer_for(auth_console.target, "team-a", token=tokens.approver)
    done: list[str] = []
    chain = approval_chain("orders", store, done)
    pause(chain, "run-1", note="refund 40 EUR")
    sign_in(browser, auth_console.url, tokens.approver)
    first = row(browser, "run-1")
    assert first.find_element(By.CSS_SELECTOR, ".chain").text == "orders"
    assert first.find_element(By.CSS_SELECTOR, ".reason").text == "approval"
    assert first.find_element(By.CSS_SELECTOR, ".node").text == "node ask"
    assert first.find_element(By.CSS_SELECTOR, ".age").text.endswith("ago")
    first.find_element(By.CSS_SELECTOR, "details.context summary").click()
    assert '"note": "refund 40 EUR"' in first.find_element(By.CSS_SELECTOR, "pre").text

    pause(chain, "run-2", note="live")  # after the page opened: it arrives by the stream
    row(browser, "run-2")
    assert shown_ids(browser) == ["run-2", "run-1"]
    screenshot(browser, tmp_path, "pending")

    first = row(browser, "run-1")
    first.find_element(By.CSS_SELECTOR, "input.note").send_keys("checked the invoice")
    first.find_element(By.CSS_SELECTOR, "button.approve").click()
    confirm = row(browser, "run-1").find_element(By.CSS_SELECTOR, ".confirm-panel")
    assert "with the note “checked the invoice”" in confirm.text
    confirm.find_element(By.CSS_SELECTOR, "button.confirm").click()
    wait(browser).until(
        lambda b: (
            "approved by approver" in row(b, "run-1").find_element(By.CSS_SELECTOR, ".status").text
        )
    )
    assert not row(browser, "run-1").find_elements(By.CSS_SELECTOR, "button.decide")
    screenshot(browser, tmp_path, "approved")

    # Someone else's decision, made elsewhere, shows up live, and the buttons go.
    other = decide(auth_console.url, "team-a", "run-2", approved=False, token=tokens.approver)
    assert other.status == 200, other.body
    wait(browser).until(lambda b: "rejected by approver" in status_of(row(b, "run-2")))
    assert not row(browser, "run-2").find_elements(By.CSS_SELECTOR, "button.decide")

    worker = ResumeWorker(
        {"orders": chain}, target=auth_console.target, namespace="team-a", token=tokens.approver
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait(browser).until(lambda b: shown_ids(b) == [])
    finally:
        worker.stop()
        thread.join(WAIT_S)
    assert sorted(done) == ["run-1", "run-2"]
    with CheckpointdClient(auth_console.target, namespace="team-a", token=tokens.approver) as c:
        decided = {p.execution_id: p.decision for p in c.list_decisions().pending_interrupts}
    first_decision = decided["run-1"]
    assert first_decision is not None
    assert (first_decision.decided_by, first_decision.reason) == ("approver", "checked the invoice")
    assert {d.status for d in decided.values() if d is not None} == {"resumed"}


def test_w1_page_read_only_token_sees_no_buttons_and_a_script_context_stays_text(
    auth_console: Console,
    tokens: Tokens,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The viewer sees the run but no Approve/Reject, and the API refuses its decision as
    gRPC does; a context holding markup is shown as text and never runs; the chain filter
    narrows the list."""
    store = checkpointer_for(auth_console.target, "team-a", token=tokens.approver)
    markup = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    pause(approval_chain("orders", store, []), "run-x", note=markup)
    sign_in(browser, auth_console.url, tokens.viewer)
    shown = row(browser, "run-x")
    namespaces = browser.find_elements(By.CSS_SELECTOR, "#namespace-select option")
    assert [option.text for option in namespaces] == ["team-a"]
    assert not shown.find_elements(By.CSS_SELECTOR, "button.decide, input.note")
    shown.find_element(By.CSS_SELECTOR, "details.context summary").click()
    assert markup.replace('"', '\\"') in shown.find_element(By.CSS_SELECTOR, "pre").text
    assert not shown.find_elements(By.CSS_SELECTOR, "script, img")
    assert browser.execute_script("return window.__pwned === undefined")

    # The chain filter narrows what is shown to the runs of one chain.
    pause(approval_chain("refunds", store, []), "run-y")
    row(browser, "run-y")
    Select(browser.find_element(By.ID, "chain-filter")).select_by_value("refunds")
    assert shown_ids(browser) == ["run-y"]
    Select(browser.find_element(By.ID, "chain-filter")).select_by_value("")
    assert shown_ids(browser) == ["run-y", "run-x"]

    refused = decide(auth_console.url, "team-a", "run-x", token=tokens.viewer)
    assert (refused.status, refused.reason) == (403, "READ_ONLY_TOKEN")


def test_g9_page_shows_a_threads_parallel_graph_pauses_and_approves_one(
    console: Console, browser: Any
) -> None:
    """A LangGraph thread waiting on two interrupts shows two rows (chain = the graph's name,
    the interrupt's value as context); Approve on one decides that pause only."""
    import uuid

    from langgraph.types import Command

    from checkpointd_client.langgraph import CheckpointdSaver
    from tests.contract.test_graph_interrupts import two_pauses

    thread = f"thread-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    with CheckpointdSaver(console.target, graph_name="support") as saver:
        graph = two_pauses(saver)
        result = graph.invoke({"log": []}, config)
        ids = {i.value["reason"]: i.id for i in result["__interrupt__"]}
        browser.get(console.url)

        def pause_row(b: Any, interrupt_id: str) -> WebElement:
            selector = f'article.interrupt[data-interrupt-id="{interrupt_id}"]'
            found: WebElement = b.find_element(By.CSS_SELECTOR, selector)
            return found

        first = wait(browser).until(lambda b: pause_row(b, ids["ask-a"]))
        wait(browser).until(lambda b: pause_row(b, ids["ask-b"]))
        assert shown_ids(browser) == [thread, thread]
        assert first.find_element(By.CSS_SELECTOR, ".chain").text == "support"
        assert first.find_element(By.CSS_SELECTOR, ".reason").text == "ask-a"
        first.find_element(By.CSS_SELECTOR, "button.approve").click()
        pause_row(browser, ids["ask-a"]).find_element(By.CSS_SELECTOR, "button.confirm").click()
        wait(browser).until(
            lambda b: "approved by console" in status_of(pause_row(b, ids["ask-a"]))
        )
        assert pause_row(browser, ids["ask-b"]).find_elements(By.CSS_SELECTOR, "button.approve")
        with CheckpointdClient(console.target) as client:
            decided = {
                p.interrupt_id: p.decision
                for p in client.list_pending_interrupts().pending_interrupts
            }
        assert decided[ids["ask-b"]] is None
        approved = decided[ids["ask-a"]]
        assert approved is not None
        assert approved.approved

        # Resumed in code, not by a worker: the decided pause reads "resuming" (it was
        # claimed) and the other one still waits.
        graph.invoke(Command(resume={ids["ask-a"]: "yes"}), config)
        wait(browser).until(lambda b: "resuming" in status_of(pause_row(b, ids["ask-a"])))
        assert pause_row(browser, ids["ask-b"]).find_elements(By.CSS_SELECTOR, "button.approve")
