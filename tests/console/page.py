"""What the browser tests read off the approvals page: waits that look again when a live
update replaced what they were reading, and the rows as the page shows them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 30
#: Where the screenshots of the page's states go (docs/approvals.md shows them).
SCREENSHOTS_ENV = "CHECKPOINTD_SCREENSHOTS"


def wait(browser: Any) -> WebDriverWait[Any]:
    """A wait that looks again when the page replaced a row it was reading (live updates
    rebuild rows)."""
    return WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def reopen(browser: Any, link: str) -> None:
    """Opens ``link`` afresh, as a person who was sent it does."""
    browser.get("about:blank")
    open_page(browser, link)


def press(browser: Any, *keys: str) -> None:
    """Keys typed into whatever has the focus, as a person types them."""
    ActionChains(browser).send_keys(*keys).perform()


def sign_in(browser: Any, url: str, token: str) -> None:
    browser.get(url)
    field = wait(browser).until(lambda b: b.find_element(By.ID, "token"))
    wait(browser).until(lambda b: field.is_displayed())
    field.send_keys(token)
    browser.find_element(By.ID, "login-button").click()
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def row(browser: Any, execution_id: str) -> WebElement:
    """The row of ``execution_id``, once the page shows it."""
    selector = f'article.interrupt[data-execution-id="{execution_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def open_listed_run(browser: Any, execution_id: str) -> None:
    """Open ``execution_id``'s run from the runs list, until its view shows it. The list is
    rebuilt by live updates: a click whose press and release met two builds of the row
    reaches no button, so the click is made again until the title (set by the click at once)
    names the run in the open view."""
    selector = f'tr.run-row[data-execution-id="{execution_id}"] button.open-run'
    title = f"Run {execution_id}"

    def shown(b: Any) -> bool:
        view = b.find_element(By.ID, "run-view")
        return (
            view.get_attribute("open") is not None
            and b.find_element(By.ID, "run-title").text == title
        )

    def opened(b: Any) -> bool:
        if shown(b):
            return True
        b.find_element(By.CSS_SELECTOR, selector).click()
        return shown(b)

    wait(browser).until(opened)


def status_of(element: WebElement) -> str:
    return str(element.find_element(By.CSS_SELECTOR, ".status").text)


def shown_ids(browser: Any) -> list[str]:
    return [
        element.get_attribute("data-execution-id") or ""
        for element in browser.find_elements(By.CSS_SELECTOR, "article.interrupt")
    ]


def screenshot(browser: Any, tmp_path: Path, name: str) -> None:
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(directory / f"approvals-{name}.png"))
