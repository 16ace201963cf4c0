"""Fixtures of the console suite: a server of each backend with the approvals console on,
with or without tokens, a paused fastaiagent chain to approve, and LangGraph pauses that ask
what LangChain's ``HumanInTheLoopMiddleware`` asks (batched and per call) or a plain
``interrupt()``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
import os
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from fastaiagent import Chain, FunctionTool, Resume, interrupt
from langchain.agents.middleware.human_in_the_loop import _decision_schema
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt as graph_interrupt

from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from checkpointd_client.langgraph import CheckpointdSaver
from tests.console.page import WAIT_S
from tests.support.sidecar import Sidecar

_CONSOLE_RE = re.compile(r"approvals console on (?P<url>https?://\S+/)")


@dataclass(frozen=True)
class Tokens:
    """approver: read-write in team-a; viewer: read-only in team-a; other: read-write in
    team-b only."""

    approver: str
    viewer: str
    other: str


@dataclass
class Console:
    """A running server with its console: the gRPC target and the console's base URL."""

    sidecar: Sidecar
    url: str

    @property
    def target(self) -> str:
        return self.sidecar.target


def console_url(sidecar: Sidecar) -> str:
    """The console's URL, from the line the server logs when it listens."""
    match = _CONSOLE_RE.search(sidecar.log_path.read_text(errors="replace"))
    assert match, "the server did not log its console address"
    return match.group("url")


@pytest.fixture
def tokens() -> Tokens:
    return Tokens(*(f"tok-{secrets.token_urlsafe(24)}" for _ in range(3)))


@pytest.fixture
def tokens_file(tokens: Tokens, tmp_path: Path) -> Path:
    def entry(name: str, token: str, namespace: str, role: str) -> dict[str, Any]:
        digest = hashlib.sha256(token.encode()).hexdigest()
        return {"name": name, "token_sha256": digest, "namespaces": [namespace], "role": role}

    path = tmp_path / "tokens.json"
    document = {
        "tokens": [
            entry("approver", tokens.approver, "team-a", "read-write"),
            entry("viewer", tokens.viewer, "team-a", "read-only"),
            entry("other", tokens.other, "team-b", "read-write"),
        ]
    }
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    return path


@pytest.fixture
def console(sidecar_factory: Callable[..., Sidecar]) -> Console:
    """A server of each backend with the console on loopback and no tokens."""
    server = sidecar_factory("--console-listen", "127.0.0.1:0")
    return Console(server, console_url(server))


@pytest.fixture
def auth_console(sidecar_factory: Callable[..., Sidecar], tokens_file: Path) -> Console:
    """A server of each backend with the console on and the tokens of ``tokens_file``."""
    server = sidecar_factory(
        "--console-listen", "127.0.0.1:0", "--auth-tokens-file", str(tokens_file)
    )
    return Console(server, console_url(server))


def approval_chain(name: str, store: SidecarCheckpointer, done: list[str]) -> Chain:
    """ask (pauses with the run's ``note`` in its context) -> ship."""

    def ask(item: str, note: str) -> dict[str, Any]:
        decision = interrupt("approval", {"item": item, "note": note})
        return {"approved": decision.approved}

    def ship(item: str) -> str:
        done.append(item)
        return item

    chain = Chain(name, checkpointer=store)
    chain.add_node(
        "ask",
        tool=FunctionTool(name="ask", fn=ask),
        input_mapping={"item": "{{state.item}}", "note": "{{state.note}}"},
        output_key="answer",
    )
    chain.add_node(
        "ship",
        tool=FunctionTool(name="ship", fn=ship),
        input_mapping={"item": "{{state.item}}"},
        output_key="shipped",
    )
    chain.connect("ask", "ship")
    return chain


def pause(chain: Chain, execution_id: str, note: str = "") -> None:
    """Run ``chain`` until it pauses for approval."""
    result = asyncio.run(
        chain.aexecute({"item": execution_id, "note": note}, execution_id=execution_id)
    )
    assert result.status == "paused"


class FailingRunner:
    """Resumes the chain, then fails the way a run whose last step broke fails."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain

    async def aresume(self, execution_id: str, resume_value: Resume) -> Any:
        await self.chain.aresume(execution_id, resume_value=resume_value)
        raise RuntimeError("the ledger is offline")


@pytest.fixture
def worker_for() -> Iterator[Callable[..., ResumeWorker]]:
    """Resume workers run in threads, stopped after the test."""
    running: list[tuple[ResumeWorker, threading.Thread]] = []

    def start(runners: dict[str, Any], target: str, namespace: str = "default") -> ResumeWorker:
        worker = ResumeWorker(runners, target=target, namespace=namespace)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
        thread.join(WAIT_S)


# --- graph pauses (contract K3) -------------------------------------------------------------

#: The arguments ``send_email`` takes (a review config's ``args_schema``).
EMAIL_ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "body": {"type": "string"},
        "cc": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["to", "body"],
}

#: Two actions of one model turn, as the middleware asks about them when batched: the first
#: may be approved, edited (its arguments as its schema says) or rejected, the second
#: approved, rejected or answered for.
HITL_BATCH: dict[str, Any] = {
    "action_requests": [
        {
            "name": "send_email",
            "args": {"to": "ann", "body": "hi", "cc": ["bo"]},
            "description": "Send an email?",
        },
        {"name": "refund", "args": {"order": "A-1", "amount": 40}, "description": "Refund?"},
    ],
    "review_configs": [
        {
            "action_name": "send_email",
            "allowed_decisions": ["approve", "edit", "reject"],
            "args_schema": EMAIL_ARGS_SCHEMA,
        },
        {"action_name": "refund", "allowed_decisions": ["approve", "reject", "respond"]},
    ],
}


@tool
def refund(order: str, amount: int, notify: bool = True) -> str:
    """Refund an order."""
    return f"refunded {order}"


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


def graph_pause(
    target: str, ask: Callable[[], Any], graph_name: str = "agent", namespace: str = "default"
) -> tuple[str, str]:
    """Run a one-node graph on the saver until ``ask()`` (which calls interrupt()) pauses it;
    the thread id and the interrupt id."""

    def node(state: _State) -> dict[str, Any]:
        return {"log": [json.dumps(ask())]}

    builder = StateGraph(_State)
    builder.add_node("review", node)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    with CheckpointdSaver(target, namespace=namespace, graph_name=graph_name) as saver:
        result = builder.compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": thread}}
        )
    [raised] = result["__interrupt__"]
    return thread, str(raised.id)


def batched_pause(target: str, namespace: str = "default") -> tuple[str, str]:
    """A batched middleware pause: the two actions of :data:`HITL_BATCH`."""
    return graph_pause(target, lambda: graph_interrupt(HITL_BATCH), namespace=namespace)


def per_call_pause(target: str, namespace: str = "default") -> tuple[str, str]:
    """A per-call middleware pause of the ``refund`` tool (approve, edit or reject), whose
    context gets the tool's argument schema from the interrupt's response schema."""
    value = {
        "type": "tool_approval",
        "tool_call_id": "call-1",
        "name": "refund",
        "args": {"order": "A-1", "amount": 40},
        "description": "Refund?",
    }
    schema = _decision_schema(["approve", "edit", "reject"], "refund", refund)
    return graph_pause(
        target,
        lambda: graph_interrupt(value, response_schema=schema),
        namespace=namespace,
    )


def plain_pause(target: str, namespace: str = "default") -> tuple[str, str]:
    """A plain interrupt(): it takes any JSON value as its answer."""
    value = {"reason": "pick", "options": [1, 2, 3]}
    return graph_pause(target, lambda: graph_interrupt(value), namespace=namespace)


@pytest.fixture
def checkpointer_for() -> Iterator[Callable[..., SidecarCheckpointer]]:
    """SidecarCheckpointers closed after the test."""
    opened: list[SidecarCheckpointer] = []

    def make(target: str, namespace: str, token: str | None = None) -> SidecarCheckpointer:
        store = SidecarCheckpointer(target, namespace=namespace, token=token)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# --- the browser ---------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRE_BROWSER_ENV = "CHECKPOINTD_REQUIRE_BROWSER"


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh headless Chromium driven by Debian's chromedriver (never a downloaded one);
    skipped where no browser is installed, a failure under CHECKPOINTD_REQUIRE_BROWSER=1."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        message = (
            f"no browser: {', '.join(missing)} missing (apt-get install chromium chromium-driver)"
        )
        if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager would go to the network for a driver; the path below is the driver.
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1100,800",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(
        service=Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "driver.log")),
        options=options,
    )
    try:
        yield driver
    finally:
        driver.quit()
