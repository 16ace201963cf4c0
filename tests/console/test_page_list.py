"""The approvals page's list of pauses, in a real headless Chromium on each backend, with
fastaiagent runs and LangGraph threads in one namespace: a search by run id or context text,
and newest or oldest first, both kept in the address so the view can be linked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, pause, plain_pause
from tests.console.page import open_page, reopen, row, shown_ids, wait


def search(browser: Any, text: str) -> None:
    """Types ``text`` into the search box in place of what it held, as a person does."""
    box = browser.find_element(By.ID, "search")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE, text)


def count(browser: Any) -> str:
    return str(browser.find_element(By.ID, "count").text)


def test_w2_page_search_filters_by_run_id_and_context_and_is_kept_in_the_link(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The search box narrows the pauses, as one types and whatever the case, to those whose
    run id (a run's execution id, a thread's id) or context holds the text; the count says
    how many of how many are shown; the address keeps the search, so the filtered view can
    be linked; a search is only compared, never read as markup."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-apple", note="refund 40 EUR")
    pause(chain, "run-pear", note="Invoice 7 for ACME")
    thread, _ = plain_pause(console.target)  # its context: {"reason": "pick", "options": [...]}
    open_page(browser, console.url)
    for execution_id in ("run-apple", "run-pear", thread):
        row(browser, execution_id)

    search(browser, "acme")  # context text, another case
    wait(browser).until(lambda b: shown_ids(b) == ["run-pear"])
    assert count(browser).startswith("1 of 3")
    search(browser, thread.upper())  # a thread's id
    wait(browser).until(lambda b: shown_ids(b) == [thread])
    search(browser, "Run-A")  # a run's id
    wait(browser).until(lambda b: shown_ids(b) == ["run-apple"])
    search(browser, '"options"')  # the context as JSON text
    wait(browser).until(lambda b: shown_ids(b) == [thread])
    search(browser, "nothing like it")
    wait(browser).until(lambda b: shown_ids(b) == [])
    assert browser.find_element(By.ID, "empty").text == "No pause matches the search."
    assert count(browser).startswith("0 of 3")

    search(browser, "acme")
    wait(browser).until(lambda b: "q=acme" in b.current_url)
    reopen(browser, browser.current_url)
    row(browser, "run-pear")
    wait(browser).until(lambda b: shown_ids(b) == ["run-pear"])
    assert browser.find_element(By.ID, "search").get_attribute("value") == "acme"

    search(browser, "")  # cleared: everything again, and the address forgets the search
    wait(browser).until(lambda b: len(shown_ids(b)) == 3)
    assert "q=" not in browser.current_url
    assert count(browser) == "3 waiting"

    markup = "<img src=x onerror=window.__pwned=1>"
    reopen(browser, f"{console.url}#q=%3Cimg%20src%3Dx%20onerror%3Dwindow.__pwned%3D1%3E")
    assert browser.find_element(By.ID, "search").get_attribute("value") == markup
    wait(browser).until(lambda b: count(b).startswith("0 of 3"))
    assert not browser.find_elements(By.CSS_SELECTOR, "main img")
    assert browser.execute_script("return window.__pwned === undefined")


def test_w2_page_sorts_oldest_first_and_keeps_the_order_in_the_link(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """Newest first by default (what came in today); oldest first on request (what has waited
    longest, for an SLA), kept in the address and live: a pause that comes in goes last."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-old")
    thread, _ = plain_pause(console.target)
    pause(chain, "run-new")
    open_page(browser, console.url)
    row(browser, "run-old")
    wait(browser).until(lambda b: shown_ids(b) == ["run-new", thread, "run-old"])
    order = Select(browser.find_element(By.ID, "sort"))
    assert order.first_selected_option.text == "newest first"

    order.select_by_value("oldest")
    wait(browser).until(lambda b: shown_ids(b) == ["run-old", thread, "run-new"])
    wait(browser).until(lambda b: "sort=oldest" in b.current_url)
    pause(chain, "run-newest")  # live: the newest goes last
    wait(browser).until(lambda b: shown_ids(b) == ["run-old", thread, "run-new", "run-newest"])

    reopen(browser, browser.current_url)
    row(browser, "run-newest")
    wait(browser).until(lambda b: shown_ids(b) == ["run-old", thread, "run-new", "run-newest"])
    order = Select(browser.find_element(By.ID, "sort"))
    assert order.first_selected_option.get_attribute("value") == "oldest"
    order.select_by_value("newest")
    wait(browser).until(lambda b: shown_ids(b) == ["run-newest", "run-new", thread, "run-old"])
    assert "sort=" not in browser.current_url
