"""The run view of a LangGraph thread as a LangGraph Studio user expects it, in a real headless
Chromium on each backend, with a fastaiagent run waiting in the same namespace (contract W3):
the history as a tree (a fork's branches one level in, a subgraph's checkpoints under the
step that called it), the state of the step chosen with what changed from the step before,
and the thread's pauses with what they asked and what was decided.

Run with ``CHECKPOINTD_SCREENSHOTS=docs`` to refresh docs/langgraph-run-view.png."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.console.conftest import Console, approval_chain, pause
from tests.console.page import SCREENSHOTS_ENV, open_page, row, wait
from tests.console.run_view_graph import forked_thread
from tests.polyglot.conftest import NODE_CLIENT
from tests.polyglot.conftest import node as node  # the fixture: node, with the client's packages

STEPS = "#run-checkpoints tr.graph-checkpoint"


def step_row(browser: Any, checkpoint_id: str) -> WebElement:
    found: WebElement = browser.find_element(
        By.CSS_SELECTOR, f'{STEPS}[data-checkpoint-id="{checkpoint_id}"]'
    )
    return found


def change(browser: Any, channel: str) -> WebElement:
    selector = f'#run-state .change[data-channel="{channel}"]'
    found: WebElement = wait(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, selector))
    return found


def shown_state_of(browser: Any, checkpoint_id: str) -> None:
    """Waits until the state panel shows ``checkpoint_id``, read."""
    panel = browser.find_element(By.ID, "run-state")
    wait(browser).until(
        lambda b: (
            panel.get_attribute("data-checkpoint-id") == checkpoint_id
            and b.find_element(By.ID, "run-state-note").text != "reading…"
        )
    )


def test_w3_page_run_view_shows_a_forked_threads_tree_pauses_and_each_steps_changes(
    console: Console,
    browser: Any,
    checkpointer_for: Callable[..., SidecarCheckpointer],
    tmp_path: Path,
) -> None:
    """Open run on a thread with a fork, a subgraph and two pauses (one decided, one
    waiting), beside a fastaiagent run: the fork point has two children, each starting a
    branch one level in; the subgraph's checkpoints are grouped under its namespace; the two
    pauses say what they asked and who decided what; the newest step (the fork's edit) shows
    the ticket changed from 40 to 25, and the step chosen by keyboard where the second pause
    waits shows the message its step appended and the pause's request."""
    store = checkpointer_for(console.target, "default")
    pause(approval_chain("orders", store, []), "run-fa")
    found = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    browser.set_window_size(1400, 1000)
    open_page(browser, console.url)
    row(browser, "run-fa")
    row(browser, found.thread).find_element(By.CSS_SELECTOR, "button.open-run").click()
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, STEPS)) >= 8)

    # The tree: the fork point, its two branches one level in, the edit's branch second.
    fork_point = step_row(browser, found.fork_point)
    assert "fork" in (fork_point.get_attribute("class") or "")
    assert fork_point.get_attribute("data-children") == "2"
    assert "fork: 2 branches" in fork_point.find_element(By.CSS_SELECTOR, ".state").text
    level = int(fork_point.get_attribute("data-level") or "0")
    branches = browser.find_elements(
        By.CSS_SELECTOR, f'{STEPS}[data-parent-id="{found.fork_point}"]'
    )
    assert [b.get_attribute("data-branch") for b in branches] == ["branch 1 of 2", "branch 2 of 2"]
    assert {b.get_attribute("data-level") for b in branches} == {str(level + 1)}
    assert branches[1].get_attribute("data-checkpoint-id") == found.fork
    assert branches[1].find_element(By.CSS_SELECTOR, ".tasks").text == "state edited"
    positions = [int(b.find_element(By.CSS_SELECTOR, "button.step").text) for b in branches]
    assert positions[0] < positions[1]

    # The subgraph: a heading with its namespace, its checkpoints one level in, right under
    # the step that called it.
    [group] = browser.find_elements(By.CSS_SELECTOR, "#run-checkpoints tr.graph-namespace")
    namespace = group.get_attribute("data-checkpoint-ns") or ""
    assert namespace.startswith("checks:")
    inner = browser.find_elements(By.CSS_SELECTOR, f'{STEPS}[data-checkpoint-ns="{namespace}"]')
    assert inner
    group_level = int(group.get_attribute("data-level") or "0")
    assert {int(r.get_attribute("data-level") or "0") for r in inner} == {group_level + 1}
    caller = group.find_element(By.XPATH, "preceding-sibling::tr[1]")
    assert caller.get_attribute("data-checkpoint-ns") == ""

    # The pauses: the first decided on the console (its answer and note), the second waiting.
    items = wait(browser).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#run-pause-list li.run-pause")
    )
    assert [i.get_attribute("data-interrupt-id") for i in items] == [
        found.first_pause,
        found.second_pause,
    ]
    first, second = items
    assert "node approve_refund" in first.text
    assert "Refund 40 EUR?" in first.find_element(By.CSS_SELECTOR, ".request").text
    verdict = first.find_element(By.CSS_SELECTOR, ".decision").text
    assert 'approved by console (resume value "yes") — “ok”' in verdict
    assert verdict.endswith("the thread went on from here")  # invoked again, not by a worker
    assert second.find_element(By.CSS_SELECTOR, ".decision").text == "waiting for a decision"
    assert "Email the customer?" in second.find_element(By.CSS_SELECTOR, ".request").text

    # The newest step is shown first: the edit, which changed the ticket and nothing else.
    shown_state_of(browser, found.fork)
    ticket = change(browser, "ticket")
    assert ticket.get_attribute("data-change") == "changed"
    assert '"amount": 40' in ticket.find_element(By.CSS_SELECTOR, ".before").text
    assert '"amount": 25' in ticket.find_element(By.CSS_SELECTOR, ".after").text
    own = browser.find_elements(By.CSS_SELECTOR, "#run-state .state-changes > .change")
    assert [c.get_attribute("data-channel") for c in own] == ["ticket"]
    assert "after checkpoint" in browser.find_element(By.ID, "run-state-note").text

    # The second pause's step, chosen from its pause by keyboard: the message its step
    # appended, and the pause's request among its pending writes.
    go = second.find_element(By.CSS_SELECTOR, "button.pause-step")
    go.send_keys(Keys.ENTER)
    paused = [
        r
        for r in browser.find_elements(By.CSS_SELECTOR, f"{STEPS}.paused")
        if r.get_attribute("data-checkpoint-ns") == ""
    ][-1]
    shown_state_of(browser, paused.get_attribute("data-checkpoint-id") or "")
    assert paused.find_element(By.CSS_SELECTOR, "button.step").get_attribute("aria-pressed") == (
        "true"
    )
    messages = change(browser, "messages")
    assert "1 appended" in messages.text
    appended = messages.find_element(By.CSS_SELECTOR, ".appended").text
    assert "langchain_core.messages.human.HumanMessage" in appended
    assert '"content": "refund: yes"' in appended
    assert not messages.find_elements(By.CSS_SELECTOR, ".before")
    write = browser.find_element(
        By.CSS_SELECTOR, '#run-state li.write[data-channel="__interrupt__"]'
    )
    assert "approve_email → __interrupt__" in write.text
    assert "Email the customer?" in write.text
    if os.environ.get(SCREENSHOTS_ENV):
        directory = Path(os.environ[SCREENSHOTS_ENV])
        directory.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(directory / "langgraph-run-view.png"))

    # A click on a row chooses it too; the first step has no parent: everything is added.
    first_step = browser.find_elements(By.CSS_SELECTOR, STEPS)[0]
    first_step.find_element(By.CSS_SELECTOR, ".node").click()
    shown_state_of(browser, first_step.get_attribute("data-checkpoint-id") or "")
    kinds = {
        c.get_attribute("data-change")
        for c in browser.find_elements(By.CSS_SELECTOR, "#run-state .change")
    }
    assert kinds == {"added"}
    assert "the thread's first checkpoint" in browser.find_element(By.ID, "run-state-note").text

    # A phone-sized window: the view stacks, and the page does not scroll sideways.
    browser.set_window_size(420, 800)
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    dialog = browser.find_element(By.ID, "run-view")
    assert dialog.size["width"] <= width
    state_box = browser.find_element(By.ID, "run-state").rect
    assert state_box["x"] + state_box["width"] <= width


#: A thread the Node.js client's LangGraph.js saver writes (values as LangGraph.js's "json",
#: messages as LangChain's constructor envelopes): draft -> approve (pauses), forked at its
#: input by an edit made as "draft".
JS_THREAD = """
const { Annotation, END, START, StateGraph, MessagesAnnotation, interrupt } =
  require('@langchain/langgraph');
const { AIMessage, HumanMessage } = require('@langchain/core/messages');
const { CheckpointdSaver } = require('./src/langgraph');
const [namespace, thread] = process.argv.slice(1);
const State = Annotation.Root({ ...MessagesAnnotation.spec, ticket: Annotation() });
const saver = new CheckpointdSaver({ namespace, graphName: 'js-refunds' });
const graph = new StateGraph(State)
  .addNode('draft', () => ({
    messages: [new AIMessage({ content: 'Refund 40 EUR?', id: 'm-draft' })],
    ticket: { item: 'A-1', amount: 40 },
  }))
  .addNode('approve', () => ({
    messages: [new HumanMessage({ content: `refund: ${interrupt({ question: 'Refund?' })}` })],
  }))
  .addEdge(START, 'draft').addEdge('draft', 'approve').addEdge('approve', END)
  .compile({ checkpointer: saver });
(async () => {
  const config = { configurable: { thread_id: thread } };
  const asked = new HumanMessage({ content: 'I want a refund', id: 'm-ask' });
  const result = await graph.invoke({ messages: [asked] }, config);
  let input;
  for await (const s of graph.getStateHistory(config)) {
    if (s.next.length === 1 && s.next[0] === 'draft') input = s;
  }
  const edit = { ticket: { item: 'A-1', amount: 25 } };
  const fork = await graph.updateState(input.config, edit, 'draft');
  process.stdout.write(JSON.stringify({
    pause: result.__interrupt__[0].id,
    forkPoint: input.config.configurable.checkpoint_id,
    fork: fork.configurable.checkpoint_id,
  }));
  await saver.end();
})().catch((error) => { console.error(error); process.exit(1); });
"""


def js_thread(node: str, target: str, thread: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINTD_TOKEN"}
    env["CHECKPOINTD_TARGET"] = target
    done = subprocess.run(
        [node, "-e", JS_THREAD, "default", thread],
        cwd=NODE_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written: dict[str, str] = json.loads(done.stdout)
    return written


def test_w3_page_run_view_reads_a_thread_the_nodejs_saver_wrote(
    console: Console, browser: Any, node: str
) -> None:
    """A LangGraph.js thread (values as JSON, messages as LangChain's envelopes), beside a
    Python one: its fork is two branches, the edit shows the ticket added, the paused step
    the message its step appended as its type, and its pause waits."""
    python = forked_thread(console.target, console.url, f"thread-{uuid.uuid4().hex[:8]}")
    thread = f"js-{uuid.uuid4().hex[:8]}"
    written = js_thread(node, console.target, thread)
    open_page(browser, console.url)
    row(browser, python.thread)
    row(browser, thread).find_element(By.CSS_SELECTOR, "button.open-run").click()
    wait(browser).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, STEPS)) >= 4)
    assert step_row(browser, written["forkPoint"]).get_attribute("data-children") == "2"
    branches = browser.find_elements(
        By.CSS_SELECTOR, f'{STEPS}[data-parent-id="{written["forkPoint"]}"]'
    )
    assert [b.get_attribute("data-branch") for b in branches] == ["branch 1 of 2", "branch 2 of 2"]

    shown_state_of(browser, written["fork"])  # the newest: the edit
    ticket = change(browser, "ticket")
    assert ticket.get_attribute("data-change") == "added"
    assert '"amount": 25' in ticket.find_element(By.CSS_SELECTOR, ".after").text

    paused = browser.find_element(By.CSS_SELECTOR, f"{STEPS}.paused")
    paused.find_element(By.CSS_SELECTOR, "button.step").click()
    shown_state_of(browser, paused.get_attribute("data-checkpoint-id") or "")
    messages = change(browser, "messages")
    appended = messages.find_element(By.CSS_SELECTOR, ".appended").text
    assert '"$type": "langchain_core.messages.AIMessage"' in appended
    assert '"content": "Refund 40 EUR?"' in appended

    [waiting] = wait(browser).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "#run-pause-list li.run-pause")
    )
    assert waiting.get_attribute("data-interrupt-id") == written["pause"]
    assert "Refund?" in waiting.find_element(By.CSS_SELECTOR, ".request").text
    assert waiting.find_element(By.CSS_SELECTOR, ".decision").text == "waiting for a decision"
