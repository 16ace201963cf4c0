"""The approvals page's keyboard shortcuts, in a real headless Chromium on each backend, with
fastaiagent runs and LangGraph threads in one namespace: they move through the pauses, open
and close, and never act while one types in a field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, pause, plain_pause
from tests.console.page import open_page, press, row, shown_ids, wait


def focused_ids(browser: Any) -> list[str]:
    """The pauses the keyboard's focus marks (one at most)."""
    return [
        element.get_attribute("data-execution-id") or ""
        for element in browser.find_elements(By.CSS_SELECTOR, "article.interrupt.is-focused")
    ]


def test_w2_page_keyboard_moves_through_pauses_and_opens_their_runs(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """``/`` focuses the search, ``j``/``k`` move a visible focus through the pauses shown,
    Enter opens the focused pause's run, Escape closes what is open, ``?`` shows the keys;
    none of them act while one types in a field."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-k1")
    thread, interrupt_id = plain_pause(console.target)
    pause(chain, "run-k3")
    open_page(browser, console.url)
    row(browser, "run-k1")
    wait(browser).until(lambda b: shown_ids(b) == ["run-k3", thread, "run-k1"])

    press(browser, "?")
    help_box = browser.find_element(By.ID, "help")
    wait(browser).until(lambda b: help_box.is_displayed())
    assert "j" in help_box.text
    assert "Escape" in help_box.text
    press(browser, Keys.ESCAPE)
    wait(browser).until(lambda b: not help_box.is_displayed())

    press(browser, "j")
    wait(browser).until(lambda b: focused_ids(b) == ["run-k3"])
    press(browser, "j", "j", "j")  # stops at the last
    wait(browser).until(lambda b: focused_ids(b) == ["run-k1"])
    press(browser, "k")
    wait(browser).until(lambda b: focused_ids(b) == [thread])
    press(browser, Keys.ENTER)
    dialog = browser.find_element(By.ID, "run-view")
    wait(browser).until(lambda b: dialog.is_displayed())
    assert browser.find_element(By.ID, "run-title").text == f"Run {thread}"
    assert f"interrupt={interrupt_id}" in browser.current_url
    press(browser, "j")  # the run is open: the list behind it stays put
    assert focused_ids(browser) == [thread]
    press(browser, Keys.ESCAPE)
    wait(browser).until(lambda b: not dialog.is_displayed())
    wait(browser).until(lambda b: "run=" not in b.current_url)

    press(browser, "/")
    box = browser.find_element(By.ID, "search")
    wait(browser).until(lambda b: b.switch_to.active_element == box)
    assert box.get_attribute("value") == ""  # the slash is not typed
    press(browser, "k")  # typed, not a move (every pause here holds a "k")
    wait(browser).until(lambda b: box.get_attribute("value") == "k")
    assert focused_ids(browser) == [thread]
    assert len(shown_ids(browser)) == 3
    press(browser, Keys.ESCAPE)  # leaves the box, the search stays
    wait(browser).until(lambda b: b.switch_to.active_element != box)
    assert box.get_attribute("value") == "k"
    press(browser, "k")
    wait(browser).until(lambda b: focused_ids(b) == ["run-k3"])

    row(browser, "run-k3").find_element(By.CSS_SELECTOR, "input.note").send_keys("jk")
    assert focused_ids(browser) == ["run-k3"]
    note = row(browser, "run-k3").find_element(By.CSS_SELECTOR, "input.note")
    assert note.get_attribute("value") == "jk"
