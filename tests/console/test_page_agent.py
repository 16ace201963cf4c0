"""A LangChain v1 agent decided on the approvals page (contracts K3, G11): a real
``create_agent`` with ``HumanInTheLoopMiddleware`` and a scripted offline chat model pauses
on its two tool calls; a person in a real headless Chromium edits the email and answers the
deletion for the tool; a ``GraphResumeWorker`` carries the decision out, and the agent ends as
LangChain's own in-memory run with the same decisions. Each backend."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from selenium.webdriver.common.by import By

from checkpointd_client import CheckpointdClient, PendingInterrupt
from tests.console.conftest import Console
from tests.console.test_page_answers import (
    arg_input,
    choose,
    confirm,
    open_page,
    pause_row,
    retype,
)
from tests.e2e.test_langchain_hitl import _outcome, reference, run_decided, status_of


@dataclass(frozen=True)
class At:
    target: str
    namespace: str = "default"


def test_k3_an_agent_decided_on_the_page_ends_as_langchains_own_run(
    console: Console, browser: Any
) -> None:
    edited = {"to": "bob", "body": "hi"}
    expected, expected_ran = reference(
        lambda _: {
            "decisions": [
                {"type": "edit", "edited_action": {"name": "send_email", "args": edited}},
                {"type": "respond", "message": "Deleted by hand."},
            ]
        }
    )

    def decide(client: CheckpointdClient, found: list[PendingInterrupt]) -> None:
        [paused] = found
        interrupt_id = paused.interrupt_id
        open_page(browser, console.url)
        email = choose(browser, interrupt_id, 0, "edit")
        retype(arg_input(email, "to"), "bob")
        deletion = choose(browser, interrupt_id, 1, "respond")
        deletion.find_element(By.CSS_SELECTOR, "textarea.action-respond").send_keys(
            "Deleted by hand."
        )
        pause_row(browser, interrupt_id).find_element(By.CSS_SELECTOR, "button.submit").click()
        asked = confirm(browser, interrupt_id)
        assert "send_email: edit: to = bob" in asked
        status_of(client, paused.execution_id, interrupt_id, "resumed")

    ran: list[str] = []
    done, _ = asyncio.run(run_decided(At(console.target), ran, decide, 1))
    assert not done["state"].next
    assert _outcome(done["state"].values) == expected
    assert ran == expected_ran == ["send_email:bob"]
