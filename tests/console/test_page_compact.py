"""The approvals page's compact view, in a real headless Chromium on each backend, with
fastaiagent runs and LangGraph threads in one namespace: one line a pause, so seven fit a
1280x800 window, deciding from the line, and the view kept in the address."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, batched_pause, pause, plain_pause
from tests.console.page import open_page, reopen, row, status_of, wait

#: The bottom of each pause shown, in the window's pixels.
_BOTTOMS = """
return [...document.querySelectorAll("article.interrupt")]
  .map((a) => a.getBoundingClientRect().bottom);
"""


def test_w2_page_compact_view_fits_seven_pauses_in_a_1280x800_window(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The compact view shows a pause on one line (run, node, reason, age, and Approve /
    Reject, or Decide… for a pause that asks for typed answers), so seven fit a 1280x800
    window without scrolling; Approve asks first as in the full view; Decide… opens the
    pause's form; the address keeps the view."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    runs = [f"run-{n}" for n in range(5)]
    for n, execution_id in enumerate(runs):
        pause(chain, execution_id, note=f"refund {n} " * 20)
    plain, _ = plain_pause(console.target)
    batch, _ = batched_pause(console.target)
    browser.set_window_size(1280, 800)
    open_page(browser, console.url)
    for execution_id in (*runs, plain, batch):
        row(browser, execution_id)
    height = browser.execute_script("return window.innerHeight")
    assert max(browser.execute_script(_BOTTOMS)) > height  # the full view scrolls

    Select(browser.find_element(By.ID, "view")).select_by_value("compact")
    wait(browser).until(lambda b: "view=compact" in b.current_url)
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "article.compact")) == 7)
    bottoms = browser.execute_script(_BOTTOMS)
    assert len(bottoms) == 7
    assert max(bottoms) <= height, (bottoms, height)
    first = row(browser, "run-0")
    assert first.find_element(By.CSS_SELECTOR, ".execution-id").text == "run-0"
    assert first.find_element(By.CSS_SELECTOR, ".node").text == "node ask"
    assert first.find_element(By.CSS_SELECTOR, ".reason").text == "approval"
    assert first.find_element(By.CSS_SELECTOR, ".age").text.endswith("ago")
    assert not first.find_elements(By.CSS_SELECTOR, "dl.fields, details.context")
    assert row(browser, plain).find_elements(By.CSS_SELECTOR, "button.approve")
    assert not row(browser, batch).find_elements(By.CSS_SELECTOR, "button.approve")

    first.find_element(By.CSS_SELECTOR, "button.approve").click()
    panel = row(browser, "run-0").find_element(By.CSS_SELECTOR, ".confirm-panel")
    assert "Approve run run-0" in panel.text
    panel.find_element(By.CSS_SELECTOR, "button.confirm").click()
    wait(browser).until(lambda b: "approved by console" in status_of(row(b, "run-0")))
    wait(browser).until(lambda b: "compact" in (row(b, "run-0").get_attribute("class") or ""))

    row(browser, batch).find_element(By.CSS_SELECTOR, "button.expand").click()
    wait(browser).until(
        lambda b: row(b, batch).find_element(By.CSS_SELECTOR, "fieldset.choices").is_displayed()
    )
    row(browser, batch).find_element(By.CSS_SELECTOR, "button.collapse").click()
    wait(browser).until(lambda b: not row(b, batch).find_elements(By.CSS_SELECTOR, "fieldset"))

    reopen(browser, browser.current_url)
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "article.compact")) == 7)
    assert browser.find_element(By.ID, "view").get_attribute("value") == "compact"
    browser.set_window_size(420, 800)  # and a phone: nothing scrolls sideways
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
