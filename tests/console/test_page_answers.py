"""The approvals page answers what a graph pause asks (contract K3), in a real headless
Chromium on each backend: a LangChain ``HumanInTheLoopMiddleware`` pause is decided per
action (approve, edit, reject, respond, among the ones each action allows), a plain
``interrupt()`` takes a JSON resume value checked in the browser, and a fastaiagent pause
keeps its approve / reject. What the page sent is read back through the Python client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client import ActionDecision, CheckpointdClient, Decision, DecisionResponse
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import (
    Console,
    approval_chain,
    batched_pause,
    pause,
    per_call_pause,
    plain_pause,
)
from tests.console.page import row, screenshot, status_of, wait


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser).until(lambda b: b.find_element(By.ID, "connection").text == "live")


def pause_row(browser: Any, interrupt_id: str) -> WebElement:
    """The row of a graph pause, found again each time (live updates rebuild rows)."""
    selector = f'article.interrupt[data-interrupt-id="{interrupt_id}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def action_item(browser: Any, interrupt_id: str, index: int) -> WebElement:
    selector = f'li.hitl-action[data-index="{index}"]'
    found: WebElement = pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, selector)
    return found


def offered(item: WebElement) -> list[str]:
    """The decisions an action offers, in order."""
    return [
        str(radio.get_attribute("value"))
        for radio in item.find_elements(By.CSS_SELECTOR, "input.choice-input")
    ]


def choose(browser: Any, interrupt_id: str, index: int, choice: str) -> WebElement:
    """Pick ``choice`` for action ``index``; the action's item."""
    item = action_item(browser, interrupt_id, index)
    item.find_element(By.CSS_SELECTOR, f'input.choice-input[value="{choice}"]').click()
    return item


def arg_input(item: WebElement, key: str) -> WebElement:
    found: WebElement = item.find_element(By.CSS_SELECTOR, f'.arg-value[data-arg="{key}"]')
    return found


def retype(field: WebElement, text: str) -> None:
    """Replace a field's text the way a person does (select all, type)."""
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(text)


def form_error(browser: Any, interrupt_id: str) -> str:
    """The row's form error, once it shows one."""

    def shown(b: Any) -> str:
        errors = pause_row(b, interrupt_id).find_elements(By.CSS_SELECTOR, ".form-error")
        return str(errors[0].text) if errors else ""

    text: str = wait(browser).until(shown)
    return text


def confirm(browser: Any, interrupt_id: str) -> str:
    """Say yes in the row's confirmation; the text it asked with."""
    panel = pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, ".confirm-panel")
    text = str(panel.text)
    panel.find_element(By.CSS_SELECTOR, "button.confirm").click()
    return text


def decided_status(browser: Any, interrupt_id: str, expected: str) -> None:
    wait(browser).until(lambda b: expected in status_of(pause_row(b, interrupt_id)))


def decision_of(target: str, *, interrupt_id: str = "", execution_id: str = "") -> Decision | None:
    """The decision on the one pending pause of ``interrupt_id`` (or of the fastaiagent run
    ``execution_id``), as gRPC lists it; None while it waits."""
    with CheckpointdClient(target) as client:
        [found] = [
            p
            for p in client.list_pending_interrupts().pending_interrupts
            if (p.interrupt_id == interrupt_id if interrupt_id else p.execution_id == execution_id)
        ]
    return found.decision


def stored_decision(target: str, interrupt_id: str) -> Decision:
    found = decision_of(target, interrupt_id=interrupt_id)
    assert found is not None
    return found


def decided_answer(browser: Any, interrupt_id: str) -> list[str]:
    """The typed answer the Decided list records for the pause, an item per action (or the
    resume value)."""
    selector = f'tr.decision[data-interrupt-id="{interrupt_id}"] li.answer'
    texts: list[str] = wait(browser).until(
        lambda b: [e.text for e in b.find_elements(By.CSS_SELECTOR, selector)]
    )
    return texts


def test_k3_page_decides_each_action_of_a_batched_pause_with_edit_and_respond(
    console: Console, browser: Any, tmp_path: Path
) -> None:
    """A batched middleware pause shows one item per action (tool, arguments as text) with
    the decisions that action allows; Submit asks for a choice on each; an edit's form holds
    the action's arguments; the confirmation says each answer; the stored decision is the
    edit and the response, in order, approved; the Decided list says so compactly. The form
    fits a 420 px wide window."""
    _, interrupt_id = batched_pause(console.target)
    open_page(browser, console.url)
    shown = pause_row(browser, interrupt_id)
    assert shown.get_attribute("data-kind") == "actions"
    items = shown.find_elements(By.CSS_SELECTOR, "li.hitl-action")
    assert [i.find_element(By.CSS_SELECTOR, ".tool").text for i in items] == [
        "send_email",
        "refund",
    ]
    args = {
        f.get_attribute("data-field"): f.find_element(By.TAG_NAME, "dd").text
        for f in items[0].find_elements(By.CSS_SELECTOR, "dl.args .field")
    }
    assert args == {"to": "ann", "body": "hi", "cc": '["bo"]'}
    assert [offered(i) for i in items] == [
        ["approve", "edit", "reject"],
        ["approve", "reject", "respond"],
    ]
    assert not shown.find_elements(By.CSS_SELECTOR, "button.approve, .resume-json")

    # Nothing is sent before every action has its answer.
    shown.find_element(By.CSS_SELECTOR, "button.submit").click()
    assert "Choose a decision for send_email (action 1 of 2)" in form_error(browser, interrupt_id)
    assert not pause_row(browser, interrupt_id).find_elements(By.CSS_SELECTOR, ".confirm-panel")

    email = choose(browser, interrupt_id, 0, "edit")
    values = {
        field.get_attribute("data-arg"): field.get_attribute("value")
        for field in email.find_elements(By.CSS_SELECTOR, ".arg-value")
    }
    assert values == {"to": "ann", "body": "hi", "cc": '["bo"]'}
    retype(arg_input(email, "to"), "bob")
    refund = choose(browser, interrupt_id, 1, "respond")
    refund.find_element(By.CSS_SELECTOR, "textarea.action-respond").send_keys("Refunded by hand.")
    screenshot(browser, tmp_path, "answers")
    browser.set_window_size(420, 900)
    try:
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"the page scrolls sideways by {overflow} px at 420 px"
    finally:
        browser.set_window_size(1100, 800)

    pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, "button.submit").click()
    asked = confirm(browser, interrupt_id)
    assert "Submit these 2 decisions on run thread-" in asked
    assert "send_email: edit: to = bob" in asked
    assert "refund: respond for the tool: “Refunded by hand.”" in asked
    decided_status(
        browser, interrupt_id, "approved by console (send_email edited: to; refund responded)"
    )
    assert decided_answer(browser, interrupt_id) == [
        "send_email edited: to = bob",
        "refund responded: “Refunded by hand.”",
    ]
    decision = stored_decision(console.target, interrupt_id)
    assert decision.approved is True
    assert decision.response == DecisionResponse(
        actions=(
            ActionDecision.edit({"to": "bob", "body": "hi", "cc": ["bo"]}),
            ActionDecision.respond("Refunded by hand."),
        )
    )


def test_k3_page_edits_a_per_call_pause_and_resumes_a_plain_interrupt_with_a_value(
    console: Console, browser: Any, checkpointer_for: Callable[..., SidecarCheckpointer]
) -> None:
    """A per-call pause's edit form follows the tool's argument schema (keys and types,
    checked in the browser); a plain interrupt() takes a JSON resume value beside Approve /
    Reject, refused in the browser with a clear message when it is not JSON; a fastaiagent
    pause keeps exactly its note, Approve and Reject."""
    _, per_call = per_call_pause(console.target)
    _, plain = plain_pause(console.target)
    pause(approval_chain("orders", checkpointer_for(console.target, "default"), []), "run-1")
    open_page(browser, console.url)

    chain_row = row(browser, "run-1")
    assert chain_row.get_attribute("data-kind") == "verdict"
    controls = chain_row.find_elements(By.CSS_SELECTOR, "input, textarea, button.decide")
    assert [c.get_attribute("class") for c in controls] == [
        "note",
        "decide approve",
        "decide reject",
    ]

    item = choose(browser, per_call, 0, "edit")
    assert offered(item) == ["approve", "edit", "reject"]
    fields = [
        (
            label.find_element(By.CSS_SELECTOR, ".arg-name").text,
            label.find_element(By.CSS_SELECTOR, ".arg-type").text,
            arg_input(label, label.find_element(By.CSS_SELECTOR, ".arg-name").text).get_attribute(
                "value"
            ),
        )
        for label in item.find_elements(By.CSS_SELECTOR, "label.arg")
    ]
    assert fields == [
        ("order", "text", "A-1"),
        ("amount", "integer, as JSON", "40"),
        ("notify", "boolean, as JSON", ""),
    ]
    for typed, said in (
        ("forty", "refund: amount is not JSON"),
        ("45.5", "refund: amount must be an integer."),
    ):
        retype(arg_input(action_item(browser, per_call, 0), "amount"), typed)
        pause_row(browser, per_call).find_element(By.CSS_SELECTOR, "button.submit").click()
        assert said in form_error(browser, per_call)
        assert browser.switch_to.active_element.get_attribute("data-arg") == "amount"
    retype(arg_input(action_item(browser, per_call, 0), "amount"), "45")
    pause_row(browser, per_call).find_element(By.CSS_SELECTOR, "button.submit").click()
    assert "refund: edit: amount = 45" in confirm(browser, per_call)
    decided_status(browser, per_call, "approved by console (edited: amount)")
    assert decided_answer(browser, per_call) == ["refund edited: amount = 45"]
    assert stored_decision(console.target, per_call).response == DecisionResponse(
        actions=(ActionDecision.edit({"order": "A-1", "amount": 45}),)
    )

    shown = pause_row(browser, plain)
    assert shown.get_attribute("data-kind") == "resume"
    field = shown.find_element(By.CSS_SELECTOR, "label.resume-value")
    assert field.text.startswith("Resume with value (JSON, optional)")
    field.find_element(By.TAG_NAME, "textarea").send_keys("{pick: 2}")
    shown.find_element(By.CSS_SELECTOR, "button.approve").click()
    assert form_error(browser, plain).startswith("The resume value is not JSON (")
    resume = pause_row(browser, plain).find_element(By.CSS_SELECTOR, "textarea.resume-json")
    assert resume.get_attribute("aria-invalid") == "true"
    assert not pause_row(browser, plain).find_elements(By.CSS_SELECTOR, ".confirm-panel")
    retype(resume, '{"pick": 2}')
    pause_row(browser, plain).find_element(By.CSS_SELECTOR, "button.approve").click()
    assert 'resuming it with the value {"pick":2}, without a note?' in confirm(browser, plain)
    decided_status(browser, plain, 'approved by console (resume value {"pick":2})')
    assert decided_answer(browser, plain) == ['resume value {"pick":2}']
    decision = stored_decision(console.target, plain)
    assert decision.approved is True
    assert decision.response is not None
    assert decision.response.resume_value == {"pick": 2}
    # The fastaiagent pause is still waiting, untouched.
    assert decision_of(console.target, execution_id="run-1") is None


def test_k3_w2_page_says_why_the_server_refused_and_rejects_an_action_with_a_message(
    console: Console, browser: Any
) -> None:
    """A batched pause's edit form follows its review config's argument schema; an edit the
    server refuses (a list item of the wrong type, which the form does not check) is not
    swallowed: the row says what happened with the ErrorInfo reason, nothing is stored, and
    the answers typed stay for the person to change. Approving one action and rejecting the
    other with a message then decides the pause not approved, and the row and the Decided
    list say which action was rejected and why."""
    _, interrupt_id = batched_pause(console.target)
    open_page(browser, console.url)
    email = choose(browser, interrupt_id, 0, "edit")
    assert [
        (
            label.find_element(By.CSS_SELECTOR, ".arg-name").text,
            label.find_element(By.CSS_SELECTOR, ".arg-type").text,
        )
        for label in email.find_elements(By.CSS_SELECTOR, "label.arg")
    ] == [("to", "text"), ("body", "text"), ("cc", "array, as JSON")]
    retype(arg_input(email, "cc"), '["bo", 7]')
    choose(browser, interrupt_id, 1, "approve")
    pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, "button.submit").click()
    assert 'send_email: edit: cc = ["bo",7]' in confirm(browser, interrupt_id)

    def refusal(b: Any) -> str:
        message = pause_row(b, interrupt_id).find_element(By.CSS_SELECTOR, "p.error.message")
        return str(message.text)

    said: str = wait(browser).until(refusal)
    assert said.startswith(
        "Could not submit the decisions: response.actions.args: does not fit the arguments "
        "'send_email' takes, action 1: cc.1: 7 is not of type 'string'"
    ), said
    assert said.endswith(" (INVALID_FIELD)."), said
    assert decision_of(console.target, interrupt_id=interrupt_id) is None
    shown = pause_row(browser, interrupt_id)
    assert not shown.find_elements(By.CSS_SELECTOR, ".confirm-panel")
    kept = shown.find_element(By.CSS_SELECTOR, 'li.hitl-action[data-index="0"]')
    assert kept.find_element(By.CSS_SELECTOR, "input:checked").get_attribute("value") == "edit"
    assert arg_input(kept, "cc").get_attribute("value") == '["bo", 7]'

    choose(browser, interrupt_id, 0, "approve")
    refund = choose(browser, interrupt_id, 1, "reject")
    # Only the chosen decision's field shows: the reject message, not the respond text.
    assert refund.find_element(By.CSS_SELECTOR, "input.action-reject").is_displayed()
    assert not refund.find_element(By.CSS_SELECTOR, "textarea.action-respond").is_displayed()
    refund.find_element(By.CSS_SELECTOR, "input.action-reject").send_keys("  not today ")
    pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, "button.submit").click()
    asked = confirm(browser, interrupt_id)
    assert "send_email: approve" in asked
    assert "refund: reject, telling the model “not today”" in asked
    summary = "send_email approved; refund rejected: not today"
    decided_status(browser, interrupt_id, f"rejected by console ({summary})")
    assert decided_answer(browser, interrupt_id) == [
        "send_email approved",
        "refund rejected: “not today”",
    ]
    # The refusal said earlier has given way to the decision.
    assert (
        not pause_row(browser, interrupt_id)
        .find_element(By.CSS_SELECTOR, "p.error.message")
        .is_displayed()
    )
    decision = stored_decision(console.target, interrupt_id)
    assert decision.approved is False
    assert decision.response == DecisionResponse(
        actions=(ActionDecision.approve(), ActionDecision.reject("not today"))
    )
