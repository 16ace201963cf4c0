"""The approvals page tells each state truly (contract W2), in a real headless Chromium on
each backend: a decided row shows resuming, then resumed, and leaves only after; a failed
resume stays with its error; the connection reads "live" only while the stream answers (after
a watch expiry, a restart, a SIGKILL, a frozen server); a restart that ends the session says
so; a decision is confirmed before it is sent; recent decisions, the run behind a pause and
the namespaces with pauses are one click away."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastaiagent import Chain, FunctionTool, interrupt
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from checkpointd_client import CheckpointdClient
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from tests.console.conftest import (
    Console,
    FailingRunner,
    Tokens,
    approval_chain,
    console_url,
    pause,
)
from tests.console.http import decide
from tests.console.page import WAIT_S, row, screenshot, shown_ids, sign_in, status_of, wait
from tests.support.sidecar import Sidecar

# Records every text the watched node shows, in order (null while it is absent), so a test
# reads the whole history of a state rather than racing to see a short-lived one.
_RECORD = """
const [name, selector] = arguments;
window.__seen = window.__seen || {};
const seen = (window.__seen[name] = []);
const look = () => {
  const node = document.querySelector(selector);
  const text = node ? node.textContent : null;
  if (seen.length === 0 || seen[seen.length - 1] !== text) seen.push(text);
};
look();
new MutationObserver(look).observe(document.body, {
  subtree: true, childList: true, characterData: true, attributes: true,
});
"""


# Holds the page's next request until the test lets it go: a decision in flight, for as long
# as the test needs to look at it.
_HOLD_FETCH = """
const real = window.fetch;
window.fetch = (...args) => new Promise((resolve) => {
  window.fetch = real;
  window.__release = () => resolve(real(...args));
});
"""


def record(browser: Any, name: str, selector: str) -> None:
    browser.execute_script(_RECORD, name, selector)


def seen(browser: Any, name: str) -> list[str | None]:
    texts: list[str | None] = browser.execute_script("return window.__seen[arguments[0]]", name)
    return texts


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def connection(browser: Any) -> str:
    return str(browser.find_element(By.ID, "connection").text)


class Gate:
    """A node that waits until the test opens it, so a resume stays in progress while the
    test looks at the page."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def __call__(self, item: str) -> str:
        assert self.opened.wait(WAIT_S), "the test never opened the gate"
        return item


def gated_chain(name: str, store: SidecarCheckpointer, gate: Gate) -> Chain:
    """ask (pauses) -> ship (waits for the gate)."""

    def ask(item: str) -> dict[str, Any]:
        decision = interrupt("approval", {"item": item, "amount": 40, "currency": "EUR"})
        return {"approved": decision.approved}

    chain = Chain(name, checkpointer=store)
    chain.add_node(
        "ask",
        tool=FunctionTool(name="ask", fn=ask),
        input_mapping={"item": "{{state.item}}"},
        output_key="answer",
    )
    chain.add_node(
        "ship",
        tool=FunctionTool(name="ship", fn=gate),
        input_mapping={"item": "{{state.item}}"},
        output_key="shipped",
    )
    chain.connect("ask", "ship")
    return chain


def test_w2_page_decided_row_shows_resuming_then_resumed_and_leaves_only_after(
    console: Console,
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
    worker_for: Callable[..., ResumeWorker],
) -> None:
    """Approved, a row reads "waiting for a worker"; once a worker claims it, "resuming…"
    (it does not leave: the claim carries no decision); once the worker reports, "resumed",
    and only then it leaves. A resume that fails stays with its error, and the decided
    section follows both live."""
    store = checkpointer_for(console.target, "default")
    gate = Gate()
    chain = gated_chain("orders", store, gate)
    pause(chain, "run-ok")
    failing = approval_chain("refunds", store, [])
    pause(failing, "run-bad")
    open_page(browser, console.url)
    row(browser, "run-ok")
    row(browser, "run-bad")
    record(browser, "ok", 'article.interrupt[data-execution-id="run-ok"] .status')
    record(browser, "bad", 'article.interrupt[data-execution-id="run-bad"] .status')
    assert decide(console.url, "default", "run-ok", body={"reason": "fine"}).status == 200
    assert decide(console.url, "default", "run-bad").status == 200
    wait(browser).until(lambda b: "waiting for a worker" in status_of(row(b, "run-ok")))
    # Both decisions reach the page on their own events: wait for the second too.
    wait(browser).until(lambda b: b.find_element(By.ID, "count").text.startswith("0 waiting"))

    worker_for({"orders": chain, "refunds": FailingRunner(failing)}, console.target)
    wait(browser).until(lambda b: "resuming…" in status_of(row(b, "run-ok")))
    decided_ok = 'tr.decision[data-execution-id="run-ok"] .resume .outcome'
    wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, decided_ok).text == "resuming…")
    detail = 'tr.decision[data-execution-id="run-ok"] .outcome-detail'
    screenshot(browser, tmp_path, "resuming")
    gate.opened.set()
    wait(browser).until(lambda b: "run-ok" not in shown_ids(b))
    history = [text for text in seen(browser, "ok") if text is not None]
    assert history[-1] == "approved by console — “fine” · resumed"
    assert any(text.endswith("· resuming…") for text in history)
    # The row was never gone before it read "resumed" (the old page dropped it at the claim).
    texts = seen(browser, "ok")
    assert None not in texts[texts.index(history[0]) : texts.index(history[-1])]
    wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, decided_ok).text == "resumed")
    wait(browser).until(
        lambda b: b.find_element(By.CSS_SELECTOR, detail).text.startswith("resumed ")
    )

    # The run behind the resumed pause: every step in order, the pause, then the rest.
    browser.find_element(
        By.CSS_SELECTOR, 'tr.decision[data-execution-id="run-ok"] button.open-run'
    ).click()
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr")) >= 2)
    steps = [
        (
            r.find_element(By.CSS_SELECTOR, ".node").text,
            r.find_element(By.CSS_SELECTOR, ".cp-status").text,
        )
        for r in browser.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr")
    ]
    assert steps[0] == ("ask", "interrupted (approval)")
    assert ("ship", "completed") in steps[1:]
    assert steps[-1][1] == "completed"
    assert browser.find_element(By.ID, "run-summary").text.endswith("· resumed")
    browser.find_element(By.ID, "run-close").click()

    bad = wait(browser).until(
        lambda b: "resume failed" in status_of(row(b, "run-bad")) and row(b, "run-bad")
    )
    assert "resume failed: RuntimeError: the ledger is offline" in status_of(bad)
    assert None not in seen(browser, "bad")[1:]  # it never vanished on the way
    failed = browser.find_element(By.CSS_SELECTOR, 'tr.decision[data-execution-id="run-bad"]')
    assert "resume failed: RuntimeError: the ledger is offline" in failed.text
    screenshot(browser, tmp_path, "decided")


def test_w2_page_says_why_it_asks_for_the_token_again_after_a_restart(
    sidecar_factory: Callable[..., Sidecar], tokens_file: Path, tokens: Tokens, browser: Any
) -> None:
    """Sessions live in the server's memory: after a restart the page asks for the token
    again and says why, rather than showing an empty queue."""
    server = sidecar_factory(
        "--console-listen", f"127.0.0.1:{free_port()}", "--auth-tokens-file", str(tokens_file)
    )
    sign_in(browser, console_url(server), tokens.approver)
    server.stop()
    server.start()
    why = browser.find_element(By.ID, "login-why")
    wait(browser).until(lambda b: why.is_displayed())
    assert "Your session has ended" in why.text
    assert "restart of the server" in why.text
    assert browser.find_element(By.ID, "token").is_displayed()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_w2_page_is_live_only_while_the_stream_answers(
    sidecar_factory: Callable[..., Sidecar],
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """An idle page is "live" again after a watch expiry and after a restart; it stops
    reading "live" at once when the server is killed, disables the buttons saying why, and
    is live again after the restart; a frozen server (silent past the progress interval)
    reads "no contact"."""
    server = sidecar_factory(
        "--console-listen",
        f"127.0.0.1:{free_port()}",
        "--watch-max-lifetime",
        "3",
        "--watch-progress-interval",
        "2",  # the page counts (2 x 2 + 3) s of silence as a lost stream
    )
    url = console_url(server)
    # A store that has had events, none pending now: a reconnect resumes at a cursor (a
    # cursor of 0 would take a fresh snapshot, whose "ready" hid the stale indicator).
    store = checkpointer_for(server.target, "default")
    pause(approval_chain("orders", store, []), "run-0")
    with CheckpointdClient(server.target) as client:
        client.delete_execution("run-0")
    open_page(browser, url)
    assert shown_ids(browser) == []
    record(browser, "connection", "#connection")

    # The watch expires every 3 s: the idle page reconnects and reads "live" again.
    wait(browser).until(lambda b: "reconnecting (WATCH_EXPIRED)" in seen(b, "connection"))
    wait(browser).until(lambda b: connection(b) == "live")
    after_expiry = seen(browser, "connection")
    assert after_expiry[after_expiry.index("reconnecting (WATCH_EXPIRED)") + 1 :].count("live")

    # A restart (SIGTERM): back to live with no rows, and a new pause shows.
    server.stop()
    wait(browser).until(lambda b: connection(b) != "live")
    # From here on streams do not expire, so nothing but the checked event ends them.
    server.extra_args[server.extra_args.index("--watch-max-lifetime") + 1] = "0"
    server.start()
    wait(browser).until(lambda b: connection(b) == "live")
    pause(approval_chain("orders", store, []), "run-1")
    row(browser, "run-1")

    # SIGKILL: not live within a few seconds; the buttons say why they are disabled.
    server.kill()
    # The point of the check: at once (the dropped connection), well before the silence of
    # 7 s would tell, and not the minute a browser may take to give up.
    WebDriverWait(browser, 3).until(lambda b: connection(b) != "live")
    banner = browser.find_element(By.ID, "banner")
    assert banner.is_displayed()
    assert "Not connected to the server" in banner.text
    approve = row(browser, "run-1").find_element(By.CSS_SELECTOR, "button.approve")
    assert not approve.is_enabled()
    assert "not connected" in (approve.get_attribute("title") or "")
    screenshot(browser, tmp_path, "disconnected")
    server.start()
    wait(browser).until(lambda b: connection(b) == "live")
    wait(browser).until(
        lambda b: row(b, "run-1").find_element(By.CSS_SELECTOR, "button.approve").is_enabled()
    )
    assert not browser.find_element(By.ID, "banner").is_displayed()

    # A frozen server keeps the connection open and says nothing: after a few progress
    # intervals the page reads "no contact", and it is live again once the server goes on.
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        wait(browser).until(lambda b: "no contact" in seen(b, "connection"))
        assert "last contact" in browser.find_element(By.ID, "banner").text
        assert shown_ids(browser) == ["run-1"]  # what was shown stays, marked out of date
    finally:
        server.process.send_signal(signal.SIGCONT)
    wait(browser).until(lambda b: connection(b) == "live")


def test_w2_page_confirms_a_decision_and_opens_the_run(
    console: Console,
    browser: Any,
    tmp_path: Path,
    checkpointer_for: Callable[..., SidecarCheckpointer],
) -> None:
    """A row shows the context's top-level fields as text (long values cut), the run id to
    copy; Reject asks first, saying what is decided with the note, Escape cancels, the
    keyboard confirms; both buttons are disabled while it is sent; a refusal says why with
    the API's reason; the decided section lists it; the run view lists its checkpoints."""
    store = checkpointer_for(console.target, "default")
    chain = approval_chain("orders", store, [])
    long_note = "<b>bold</b> " + "x" * 200
    pause(chain, "run-1", note=long_note)
    open_page(browser, console.url)
    shown = row(browser, "run-1")
    fields = {
        f.get_attribute("data-field"): f.find_element(By.TAG_NAME, "dd")
        for f in shown.find_elements(By.CSS_SELECTOR, "dl.fields .field")
    }
    assert fields["item"].text == "run-1"
    assert fields["note"].text.startswith("<b>bold</b> xxx")
    assert fields["note"].text.endswith("…")
    assert len(fields["note"].text) == 80
    assert fields["note"].get_attribute("title") == long_note
    assert not shown.find_elements(By.CSS_SELECTOR, "dl.fields b")
    assert shown.find_element(By.CSS_SELECTOR, "code.execution-id").text == "run-1"
    shown.find_element(By.CSS_SELECTOR, "button.copy").click()
    wait(browser).until(
        lambda b: (
            row(b, "run-1").find_element(By.CSS_SELECTOR, "button.copy").text
            in ("Copied", "Selected")
        )
    )

    # Reject asks first; Escape takes it back; nothing was sent.
    shown = row(browser, "run-1")
    shown.find_element(By.CSS_SELECTOR, "input.note").send_keys("wrong amount")
    shown.find_element(By.CSS_SELECTOR, "button.reject").click()
    panel = row(browser, "run-1").find_element(By.CSS_SELECTOR, ".confirm-panel")
    assert (
        "Reject run run-1 (orders, approval, node ask) with the note “wrong amount”?" in panel.text
    )
    assert (
        browser.switch_to.active_element.get_attribute("class") == "decide confirm reject-confirm"
    )
    screenshot(browser, tmp_path, "confirm")
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait(browser).until(lambda b: not b.find_elements(By.CSS_SELECTOR, ".confirm-panel"))
    assert browser.switch_to.active_element.get_attribute("class") == "decide reject"

    # Someone else decides while this one is on its way: both buttons stay disabled in
    # flight, and the refusal says what happened in words, with the API's reason.
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # the keyboard opens it again
    row(browser, "run-1").find_element(By.CSS_SELECTOR, ".confirm-panel")
    browser.execute_script(_HOLD_FETCH)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    in_flight = row(browser, "run-1")
    buttons = in_flight.find_elements(By.CSS_SELECTOR, "button.decide, button.cancel")
    assert len(buttons) == 4
    assert not any(b.is_enabled() for b in buttons)
    assert decide(console.url, "default", "run-1", approved=True).status == 200
    browser.execute_script("window.__release()")
    refused = str(
        wait(browser).until(
            lambda b: row(b, "run-1").find_element(By.CSS_SELECTOR, ".message").text or None
        )
    )
    assert refused.startswith("Could not reject: ")
    assert refused.endswith("(ALREADY_DECIDED).")
    assert "Failed to fetch" not in refused

    decided = wait(browser).until(
        lambda b: b.find_element(By.CSS_SELECTOR, 'tr.decision[data-execution-id="run-1"]')
    )
    assert "approved" in decided.find_element(By.CSS_SELECTOR, ".verdict").text
    assert decided.find_element(By.CSS_SELECTOR, ".by").text == "console"
    assert decided.find_element(By.CSS_SELECTOR, ".resume .outcome").text == "waiting for a worker"
    browser.execute_script("state.workerHintAfterS = 0")
    wait(browser).until(
        lambda b: (
            "waiting for a worker that runs chain “orders”"
            in b.find_element(
                By.CSS_SELECTOR, 'tr.decision[data-execution-id="run-1"] .resume'
            ).text
        )
    )

    # The run behind the pause: its checkpoints in order, the pause last.
    row(browser, "run-1").find_element(By.CSS_SELECTOR, "button.open-run").click()
    dialog = browser.find_element(By.ID, "run-view")
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr")) >= 1)
    steps = [
        (
            r.find_element(By.CSS_SELECTOR, ".node").text,
            r.find_element(By.CSS_SELECTOR, ".cp-status").text,
        )
        for r in dialog.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr")
    ]
    assert steps[-1] == ("ask", "interrupted (approval)")
    assert "approved by console" in dialog.find_element(By.ID, "run-summary").text
    screenshot(browser, tmp_path, "run")
    dialog.find_element(By.ID, "run-close").click()

    # Namespaces are offered, not only typed: a typo says where the pauses are.
    other = checkpointer_for(console.target, "team-x")
    pause(approval_chain("orders", other, []), "run-x")
    box = browser.find_element(By.ID, "namespace-input")
    box.clear()
    box.send_keys("typo", Keys.ENTER)
    box.send_keys(Keys.TAB)  # "change" fires as the box loses focus
    hint = browser.find_element(By.ID, "namespace-hint")
    expected = "Nothing is in “typo”. Namespaces with runs: default, team-x."
    # (The list is read again on each switch; the hint follows it.)
    wait(browser).until(lambda b: hint.is_displayed() and hint.text == expected)
    options = browser.find_elements(By.CSS_SELECTOR, "#namespace-options option")
    assert [(o.get_attribute("value"), o.get_attribute("label")) for o in options] == [
        ("default", "1 pending"),
        ("team-x", "1 pending"),
    ]
    box.clear()
    box.send_keys("team-x", Keys.TAB)
    row(browser, "run-x")
    assert not hint.is_displayed()
