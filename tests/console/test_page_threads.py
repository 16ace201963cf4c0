"""The approvals page tells one pause from another wherever a person looks, in a real headless
Chromium on each backend: the Decided list belongs to the namespace shown; a carried-out
rejection reads as a rejection; a failed resume says what can be done next (decide again
while the pause still waits, K3); a thread's parallel pauses are told apart in the Decided
list; a link holds the namespace and the open run; a narrow window keeps the buttons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, pause
from tests.console.http import decide
from tests.console.page import wait

#: The page's green, the colour of success.
GREEN = "rgba(31, 122, 58, 1)"


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def decided_row(browser: Any, execution_id: str) -> WebElement:
    selector = f'tr.decision[data-execution-id="{execution_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def switch_namespace(browser: Any, namespace: str) -> None:
    box = browser.find_element(By.ID, "namespace-input")
    box.clear()
    box.send_keys(namespace, Keys.TAB)  # "change" fires as the box loses focus


def decided_ids(browser: Any) -> list[str]:
    return [
        element.get_attribute("data-execution-id") or ""
        for element in browser.find_elements(By.CSS_SELECTOR, "tr.decision")
    ]


def test_w2_page_switching_to_a_namespace_without_decisions_empties_the_decided_list(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The Decided list is the namespace's: after a switch to a namespace nobody decided in,
    it says "No decisions yet." rather than keeping the previous namespace's rows."""
    store = checkpointer_for(console.target, "default")
    pause(approval_chain("orders", store, []), "run-1")
    assert decide(console.url, "default", "run-1").status == 200
    open_page(browser, console.url)
    decided_row(browser, "run-1")

    switch_namespace(browser, "quiet")
    empty = browser.find_element(By.ID, "decided-empty")
    wait(browser).until(lambda b: empty.is_displayed() and decided_ids(b) == [])
    assert not browser.find_element(By.ID, "decided-table").is_displayed()

    switch_namespace(browser, "default")  # and back: the namespace's decisions again
    decided_row(browser, "run-1")
    assert not empty.is_displayed()
