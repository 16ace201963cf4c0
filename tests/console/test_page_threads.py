"""The approvals page tells one pause from another wherever a person looks, in a real headless
Chromium on each backend: the Decided list belongs to the namespace shown; a carried-out
rejection reads as a rejection; a failed resume says what can be done next (decide again
while the pause still waits, K3); a thread's parallel pauses are told apart in the Decided
list; a link holds the namespace and the open run; a narrow window keeps the buttons."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from langgraph.types import Command
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from checkpointd_client.langgraph import CheckpointdSaver
from tests.console.conftest import Console, FailingRunner, approval_chain, pause, plain_pause
from tests.console.http import decide
from tests.console.page import row, status_of, wait
from tests.contract.test_graph_interrupts import one_pause, two_pauses

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


def test_w2_page_a_carried_out_rejection_reads_as_a_rejection(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
    worker_for: Callable[..., ResumeWorker],
) -> None:
    """A rejection a worker carried out reads "rejection carried out", in the rejection's
    colour, on its row and in the Decided list: never "resumed" in the green of success."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    pause(chain, "run-no")
    open_page(browser, console.url)
    row(browser, "run-no")
    assert decide(console.url, "default", "run-no", approved=False).status == 200
    wait(browser).until(lambda b: "rejected by console" in status_of(row(b, "run-no")))
    worker_for({"orders": chain}, console.target)
    cell = 'tr.decision[data-execution-id="run-no"] .resume .outcome'
    wait(browser).until(
        lambda b: b.find_element(By.CSS_SELECTOR, cell).text == "rejection carried out"
    )
    shown = browser.find_element(By.CSS_SELECTOR, cell)
    assert "resumed" not in (shown.get_attribute("class") or "")
    assert shown.value_of_css_property("color") != GREEN
    decided_row(browser, "run-no").find_element(By.CSS_SELECTOR, "button.open-run").click()
    summary = browser.find_element(By.ID, "run-summary")
    wait(browser).until(lambda b: summary.text == "rejected by console · rejection carried out")


def test_k3_page_offers_to_decide_again_after_a_failed_resume_while_the_pause_waits(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
    worker_for: Callable[..., ResumeWorker],
) -> None:
    """A resume that failed before the run moved on leaves the pause waiting (K3): its row
    shows the error, counts as waiting and offers Approve / Reject again, and the new
    decision takes the failed one's place. A resume that failed after the run moved on
    offers nothing to click and says what the operator can do instead."""
    store = checkpointer_for(console.target, "default")
    pause(approval_chain("orders", store, []), "run-again")
    open_page(browser, console.url)
    row(browser, "run-again")
    assert decide(console.url, "default", "run-again").status == 200
    with CheckpointdClient(console.target) as client:
        [waiting] = client.list_pending_interrupts().pending_interrupts
        client.lease_decision("run-again", waiting.checkpoint_id, lease_token="t-1")
        client.report_resume(
            "run-again", waiting.checkpoint_id, lease_token="t-1", error="ValueError: bad limit"
        )
    wait(browser).until(lambda b: "resume failed" in status_of(row(b, "run-again")))
    status = status_of(row(browser, "run-again"))
    assert "resume failed: ValueError: bad limit" in status
    assert "the pause still waits: decide again" in status
    assert browser.find_element(By.ID, "count").text == "1 waiting"
    cell = decided_row(browser, "run-again").find_element(By.CSS_SELECTOR, ".resume")
    assert "resume failed: ValueError: bad limit" in cell.text
    assert "the pause still waits" in cell.text
    # Decide again in the Decided list takes the person to the pause's form.
    cell.find_element(By.CSS_SELECTOR, "button.decide-again").click()
    wait(browser).until(
        lambda b: (
            b.switch_to.active_element
            == row(b, "run-again").find_element(By.CSS_SELECTOR, "input.note")
        )
    )

    again = row(browser, "run-again")
    again.find_element(By.CSS_SELECTOR, "input.note").send_keys("limit fixed")
    again.find_element(By.CSS_SELECTOR, "button.reject").click()
    row(browser, "run-again").find_element(By.CSS_SELECTOR, "button.confirm").click()
    wait(browser).until(
        lambda b: (
            status_of(row(b, "run-again"))
            == "rejected by console — “limit fixed” · waiting for a worker"
        )
    )
    assert not row(browser, "run-again").find_elements(By.CSS_SELECTOR, "button.decide")
    with CheckpointdClient(console.target) as client:
        [replaced] = client.list_pending_interrupts().pending_interrupts
    assert replaced.decision is not None
    assert (replaced.decision.approved, replaced.decision.status) == (False, "decided")

    # Failed after the worker took the run on (its pause claimed): nothing to decide again.
    failing = approval_chain("refunds", store, [])
    pause(failing, "run-gone")
    row(browser, "run-gone")
    assert decide(console.url, "default", "run-gone").status == 200
    worker_for({"refunds": FailingRunner(failing)}, console.target)
    wait(browser).until(lambda b: "resume failed" in status_of(row(b, "run-gone")))
    gone = row(browser, "run-gone")
    assert "resume failed: RuntimeError: the ledger is offline" in status_of(gone)
    assert "the run no longer waits at this pause" in status_of(gone)
    assert not gone.find_elements(By.CSS_SELECTOR, "button.decide")
    cell = decided_row(browser, "run-gone").find_element(By.CSS_SELECTOR, ".resume")
    assert "no longer waits" in cell.text
    assert not cell.find_elements(By.CSS_SELECTOR, "button.decide-again")


def test_g9_page_decided_rows_of_a_threads_parallel_pauses_name_their_node_and_interrupt(
    console: Console, browser: Any
) -> None:
    """Two pauses of one LangGraph thread, both decided, are two Decided rows that say which
    is which: the node and the start of the interrupt id (all of it on hover)."""
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    with CheckpointdSaver(console.target, graph_name="support") as saver:
        graph = two_pauses(saver)
        result = graph.invoke({"log": []}, config)
        ids = {i.value["reason"]: str(i.id) for i in result["__interrupt__"]}
        open_page(browser, console.url)
        for interrupt_id in ids.values():
            body = {"interrupt_id": interrupt_id}
            assert decide(console.url, "default", thread, body=body).status == 200
        wait(browser).until(lambda b: decided_ids(b) == [thread, thread])
        shown = {
            r.get_attribute("data-interrupt-id"): r
            for r in browser.find_elements(By.CSS_SELECTOR, "tr.decision")
        }
        for node, interrupt_id in (("a", ids["ask-a"]), ("b", ids["ask-b"])):
            decided = shown[interrupt_id]
            assert decided.find_element(By.CSS_SELECTOR, ".node").text == f"node {node}"
            short = decided.find_element(By.CSS_SELECTOR, ".interrupt-id")
            assert short.text == f"{interrupt_id[:8]}…"
            assert short.get_attribute("title") == f"interrupt {interrupt_id}"
        graph.invoke(Command(resume={ids["ask-a"]: "yes", ids["ask-b"]: "yes"}), config)


def test_g8_page_open_run_of_a_thread_shows_its_checkpoints(console: Console, browser: Any) -> None:
    """ "Open run" on a LangGraph pause shows the thread's checkpoints, oldest first, as a
    person reads them undecoded (step, the nodes whose tasks wrote, source, age), where it
    showed an empty table (the run view read only fastaiagent checkpoints)."""
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    with CheckpointdSaver(console.target, graph_name="support") as saver:
        one_pause(saver).invoke({"log": []}, {"configurable": {"thread_id": thread}})
    open_page(browser, console.url)
    row(browser, thread).find_element(By.CSS_SELECTOR, "button.open-run").click()
    rows = "#run-checkpoints tr.graph-checkpoint"
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, rows)) >= 2)
    assert browser.find_element(By.ID, "run-title").text == f"Run {thread}"  # a thread is a run
    cells = [
        [td.text for td in tr.find_elements(By.CSS_SELECTOR, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, rows)
    ]
    assert [c[0] for c in cells] == [str(n) for n in range(1, len(cells) + 1)]
    assert cells[0][2:] == ["input", cells[0][3], "step -1"]  # the input, before any node
    assert cells[-1][1] == "review"  # the pause: the review task's interrupt write
    assert cells[-1][4] == "step 0"


def test_w2_page_link_holds_the_namespace_and_the_open_run(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """The address names the namespace shown and the run open, so a pause can be linked in a
    chat: opening the link shows that namespace with that run open; closing the run takes it
    out of the address."""
    store = checkpointer_for(console.target, "team-l")
    pause(approval_chain("orders", store, []), "run-l")
    open_page(browser, console.url)
    switch_namespace(browser, "team-l")
    row(browser, "run-l").find_element(By.CSS_SELECTOR, "button.open-run").click()
    wait(browser).until(lambda b: "run=run-l" in b.current_url)
    link = browser.current_url
    assert "namespace=team-l" in link

    browser.get("about:blank")
    open_page(browser, link)
    dialog = browser.find_element(By.ID, "run-view")
    wait(browser).until(lambda b: dialog.is_displayed())
    assert browser.find_element(By.ID, "run-title").text == "Run run-l"
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr")))
    assert browser.find_element(By.ID, "namespace-input").get_attribute("value") == "team-l"
    wait(browser).until(
        lambda b: "waiting for a decision" in b.find_element(By.ID, "run-summary").text
    )
    browser.find_element(By.ID, "run-close").click()
    wait(browser).until(lambda b: "run=" not in b.current_url)
    assert "namespace=team-l" in browser.current_url
    row(browser, "run-l")


#: The buttons of ``element`` the window does not show whole: (class, left, right) each.
_CUT_OFF = """
const width = document.documentElement.clientWidth;
return [...arguments[0].querySelectorAll("button")]
  .map((b) => [b.className, b.getBoundingClientRect()])
  .filter(([, r]) => r.width > 0 && (r.left < 0 || r.right > width))
  .map(([name, r]) => [name, r.left, r.right]);
"""


def test_w2_page_buttons_fit_a_420px_window(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """On a phone-sized window (420 px) Approve, Reject and the confirmation's buttons are
    whole on screen, for a run with a long id and a graph pause with a resume value, and the
    page does not scroll sideways."""
    store = checkpointer_for(console.target, "default")
    run = f"orders_{uuid.uuid4().hex}{uuid.uuid4().hex}"  # ids made of two ids are long
    pause(approval_chain("orders", store, []), run, note="refund 40 EUR " * 10)
    thread, _ = plain_pause(console.target)
    browser.set_window_size(420, 800)
    open_page(browser, console.url)
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert width <= 420
    for execution_id in (run, thread):
        shown = row(browser, execution_id)
        assert shown.find_elements(By.CSS_SELECTOR, "button.reject")
        assert browser.execute_script(_CUT_OFF, shown) == []
    row(browser, run).find_element(By.CSS_SELECTOR, "button.reject").click()
    panel = row(browser, run).find_element(By.CSS_SELECTOR, ".confirm-panel")
    assert panel.find_elements(By.CSS_SELECTOR, "button.reject-confirm")
    assert browser.execute_script(_CUT_OFF, panel) == []
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
