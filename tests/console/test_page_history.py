"""The Decided list is a record of each decision (contract W2), in a real headless Chromium on
each backend: who decided what, for which pause (its node, its interrupt id, each action's
answer with the arguments an edit changed or the message a rejection gave), with the note,
when, and what happened after: resumed and when, a rejection carried out (in the rejection's
colour), a failed resume with the worker's error and Decide again, a resume under way with
its attempt and its lease.

``CHECKPOINTD_SCREENSHOTS=docs pytest tests/console/test_page_history.py -k sqlite`` writes
``docs/decided-history.png``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, batched_pause, pause
from tests.console.http import decide
from tests.console.page import SCREENSHOTS_ENV, wait

#: The page's green, the colour of success; its red, the rejection's.
GREEN = "rgba(31, 122, 58, 1)"
RED = "rgba(179, 38, 30, 1)"


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def carry_out(
    target: str, execution_id: str, *, error: str | None = None, report: bool = True, **lease: Any
) -> None:
    """Lease the decision on the one pause of ``execution_id`` as a resume worker does, and
    report it resumed (or failed with ``error``) unless ``report`` is false."""
    with CheckpointdClient(target) as client:
        [waiting] = [
            p
            for p in client.list_pending_interrupts().pending_interrupts
            if p.execution_id == execution_id
        ]
        client.lease_decision(execution_id, waiting.checkpoint_id, lease_token="t-1", **lease)
        if report:
            client.report_resume(
                execution_id, waiting.checkpoint_id, lease_token="t-1", error=error
            )


def record_of(browser: Any, execution_id: str) -> WebElement:
    selector = f'tr.decision[data-execution-id="{execution_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def said(browser: Any, execution_id: str, part: str) -> str:
    """The text of one part (a CSS selector) of the record of ``execution_id``. Read again
    when the live list redraws the row between finding it and reading it (a stale element)."""
    read: tuple[str] = wait(browser).until(
        lambda b: (record_of(b, execution_id).find_element(By.CSS_SELECTOR, part).text,)
    )
    return read[0]


def outcome_is(browser: Any, execution_id: str, text: str) -> None:
    wait(browser).until(lambda b: said(b, execution_id, ".outcome") == text)


def test_w2_page_decided_list_records_who_decided_what_and_what_happened_after(
    console: Console,
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """An approval resumed says when; a rejection carried out reads as a rejection, not in
    the green of success; a middleware pause lists each action's answer (the edited argument
    with its new value, the rejection with its message); a failed resume shows the worker's
    error and Decide again, which takes the person to the pause's form; a resume whose
    worker's lease ran out says which attempt it was and when the lease ended."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    for run in ("run-yes", "run-no", "run-bad", "run-busy"):
        pause(chain, run)
    thread, interrupt_id = batched_pause(console.target)

    assert decide(console.url, "default", "run-yes", body={"reason": "checked"}).status == 200
    carry_out(console.target, "run-yes")
    no = decide(console.url, "default", "run-no", approved=False, body={"reason": "too dear"})
    assert no.status == 200
    carry_out(console.target, "run-no")
    response = {
        "actions": [
            {"type": "edit", "args": {"to": "bob", "body": "hi", "cc": ["bo"]}},
            {"type": "reject", "message": "not today"},
        ]
    }
    body = {"interrupt_id": interrupt_id, "response": response}
    assert decide(console.url, "default", thread, approved=False, body=body).status == 200
    assert decide(console.url, "default", "run-bad").status == 200
    carry_out(console.target, "run-bad", error="RuntimeError: the ledger is offline")
    assert decide(console.url, "default", "run-busy").status == 200
    carry_out(console.target, "run-busy", report=False, lease_seconds=1)
    open_page(browser, console.url)

    outcome_is(browser, "run-yes", "resumed")
    assert said(browser, "run-yes", ".verdict") == "approved"
    assert (said(browser, "run-yes", ".by"), said(browser, "run-yes", ".note")) == (
        "console",
        "checked",
    )
    assert said(browser, "run-yes", ".pause") == "node ask"
    detail = record_of(browser, "run-yes").find_element(By.CSS_SELECTOR, ".outcome-detail")
    assert detail.text.startswith("resumed ")
    assert detail.text.endswith(" ago")
    assert detail.find_element(By.CSS_SELECTOR, "time.age").get_attribute("datetime")

    outcome_is(browser, "run-no", "rejection carried out")
    assert said(browser, "run-no", ".verdict") == "rejected"
    colour = record_of(browser, "run-no").find_element(By.CSS_SELECTOR, ".outcome")
    assert colour.value_of_css_property("color") != GREEN
    assert said(browser, "run-no", ".outcome-detail").startswith("carried out ")

    answers = record_of(browser, thread).find_elements(By.CSS_SELECTOR, "li.answer")
    assert [a.text for a in answers] == [
        "send_email edited: to = bob",
        "refund rejected: “not today”",
    ]
    assert answers[1].get_attribute("data-type") == "reject"
    assert answers[1].find_element(By.CSS_SELECTOR, ".what").value_of_css_property("color") == RED
    assert '"to": "bob"' in (answers[0].get_attribute("title") or "")
    assert said(browser, thread, ".pause") == f"node review · interrupt {interrupt_id[:8]}…"
    assert said(browser, thread, ".outcome") == "waiting for a worker"

    outcome_is(browser, "run-bad", "resume failed: RuntimeError: the ledger is offline")
    assert "the pause still waits" in said(browser, "run-bad", ".outcome-detail")

    wait(browser).until(
        lambda b: (
            said(b, "run-busy", ".outcome") == "resuming…"
            and said(b, "run-busy", ".outcome-detail").startswith(
                "attempt 1 · its lease ran out at "
            )
        )
    )
    save_record(browser, tmp_path)

    record_of(browser, "run-bad").find_element(By.CSS_SELECTOR, "button.decide-again").click()
    pending = 'article.interrupt[data-execution-id="run-bad"] input.note'
    wait(browser).until(
        lambda b: b.switch_to.active_element == b.find_element(By.CSS_SELECTOR, pending)
    )


def save_record(browser: Any, tmp_path: Path) -> None:
    """The Decided section alone, as docs/approvals.md shows it."""
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    section = browser.find_element(By.ID, "decided")
    browser.execute_script("arguments[0].scrollIntoView()", section)
    section.screenshot(str(directory / "decided-history.png"))
