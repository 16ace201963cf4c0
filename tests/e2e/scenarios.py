"""Real fastaiagent workflows over a checkpoint store, cut into phases.

Each scenario is a fastaiagent ``Chain``, ``Agent`` or ``Swarm`` driven by
``fastaiagent.testing.FunctionModel`` (no network, no API keys) plus a set of *phases*. A phase
is what one process does before it exits: start the run, resume it, fork it, look at the
store. ``run_scenario.py`` runs exactly one phase per process, so everything a later phase
relies on has crossed a process boundary through the store, as it does in production.

Side effects are written to ``events.jsonl`` in the work directory, one JSON line per call
tagged with the phase that made it. "The charge fired exactly once across both processes" is
then a fact on disk, not something a process remembered.

The store is built in one place only, :func:`make_checkpointer`, from the ``--target`` string.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastaiagent import Agent, Chain, FunctionTool, Resume, Swarm, idempotent, interrupt
from fastaiagent.chain.checkpoint import Checkpoint
from fastaiagent.checkpointers import Checkpointer, SQLiteCheckpointer
from fastaiagent.llm.message import Message, MessageRole
from fastaiagent.testing import FunctionModel
from pydantic_core import to_jsonable_python

#: ``--target`` prefix that selects fastaiagent's own ``SQLiteCheckpointer`` on the file that
#: follows it, e.g. ``reference:/tmp/x/ref.db``. Any other target is a checkpointd gRPC target.
REFERENCE_PREFIX = "reference:"

#: Exit status of a process that a scenario kills mid-node with ``os._exit`` (no cleanup, no
#: run-end row, no reply flushed): the nearest a test gets to ``kill -9``.
HARD_CRASH_EXIT_CODE = 86

#: Enough for every scenario here; ``list`` is asked for the whole history.
LIST_LIMIT = 10_000

EVENTS_FILE = "events.jsonl"


def make_checkpointer(target: str, namespace: str) -> Checkpointer:
    """The store a phase runs against: the one switch between reference and sidecar.

    ``reference:<path>`` is fastaiagent's ``SQLiteCheckpointer`` on that file (it has no
    namespaces, so ``namespace`` is ignored: each test gets its own file instead). Anything
    else is a gRPC target for checkpointd, through the drop-in adapter.
    """
    if target.startswith(REFERENCE_PREFIX):
        return SQLiteCheckpointer(db_path=target[len(REFERENCE_PREFIX) :])
    from checkpointd_client.fastaiagent import SidecarCheckpointer

    return SidecarCheckpointer(target, namespace=namespace)


# ---- workspace


@dataclass
class Workspace:
    """The directory a scenario's processes share for side-effect logs and flags."""

    dir: Path
    phase: str

    def record(self, event: str, **data: Any) -> None:
        """Append one side-effect event, tagged with the phase (process) that caused it."""
        tags = {"event": event, "phase": self.phase, "pid": os.getpid()}
        line = json.dumps({**tags, **data}, sort_keys=True)
        with (self.dir / EVENTS_FILE).open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def events(self) -> list[dict[str, Any]]:
        path = self.dir / EVENTS_FILE
        if not path.exists():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def first_time(self, flag: str) -> bool:
        """True the first time it is asked about ``flag`` in this workspace, by any process."""
        path = self.dir / f"{flag}.flag"
        if path.exists():
            return False
        path.touch()
        return True


@dataclass
class PhaseRun:
    """Everything one phase (one process) gets: the store, the workspace, the run's id."""

    checkpointer: Checkpointer
    ws: Workspace
    execution_id: str
    #: JSON that phases hand to later phases through the state file (e.g. a fork's new id).
    memo: dict[str, Any] = field(default_factory=dict)


PhaseFn = Callable[[PhaseRun], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    phases: dict[str, PhaseFn]


# ---- reporting


def run_summary(result: Any) -> dict[str, Any]:
    """The parts of a ``ChainResult`` / ``AgentResult`` the tests assert on, as JSON."""
    return {
        "status": result.status,
        "execution_id": result.execution_id,
        "output": to_jsonable_python(result.output, fallback=str),
        "pending_interrupt": to_jsonable_python(result.pending_interrupt, fallback=str),
    }


def checkpoint_row(cp: Checkpoint) -> dict[str, Any]:
    return cp.model_dump(mode="json")


def rows_in_write_order(checkpointer: Checkpointer, execution_id: str) -> list[dict[str, Any]]:
    """Every checkpoint of an execution, oldest write first.

    checkpointd's ``list`` is in write order (contract C4). The reference's ``list`` sorts by
    ``node_index`` first, so for it the order is taken from SQLite's ``rowid`` (its insertion
    order) and the rows themselves still come through the checkpointer's own ``list``.
    """
    rows = checkpointer.list(execution_id, limit=LIST_LIMIT)
    if isinstance(checkpointer, SQLiteCheckpointer):
        with sqlite3.connect(checkpointer.db_path) as conn:
            order = [
                r[0]
                for r in conn.execute(
                    "SELECT checkpoint_id FROM checkpoints WHERE execution_id = ? ORDER BY rowid",
                    (execution_id,),
                )
            ]
        by_id = {cp.checkpoint_id: cp for cp in rows}
        rows = [by_id[i] for i in order]
    return [checkpoint_row(cp) for cp in rows]


def pending_for(checkpointer: Checkpointer, execution_id: str) -> list[dict[str, Any]]:
    pending = checkpointer.list_pending_interrupts(limit=LIST_LIMIT)
    return [p.model_dump(mode="json") for p in pending if p.execution_id == execution_id]


def store_report(run: PhaseRun) -> dict[str, Any]:
    """What the store holds after a phase: rows and pending interrupts of every execution."""
    executions = {"main": run.execution_id, **run.memo.get("executions", {})}
    return {
        label: {
            "execution_id": exec_id,
            "rows": rows_in_write_order(run.checkpointer, exec_id),
            "pending": pending_for(run.checkpointer, exec_id),
        }
        for label, exec_id in executions.items()
    }


async def inspect_phase(run: PhaseRun) -> dict[str, Any]:
    """Change nothing; the runner reports the store."""
    return {}


# ---- model helpers


def answered_call_ids(messages: list[Message]) -> set[str]:
    """Ids of the tool calls that already have a result in the conversation."""
    return {m.tool_call_id for m in messages if m.role == MessageRole.tool and m.tool_call_id}


def tool_result(messages: list[Message], call_id: str) -> str:
    for m in messages:
        if m.role == MessageRole.tool and m.tool_call_id == call_id:
            return str(m.content)
    raise AssertionError(f"no result for tool call {call_id}")


def scripted_model(
    ws: Workspace, agent: str, steps: list[tuple[str, str, dict[str, Any]]], final: str
) -> FunctionModel:
    """A model that makes ``steps`` (call id, tool, args) one per turn, then answers ``final``.

    It decides from the conversation alone (which calls have results), never from a counter,
    so a model rebuilt in a new process continues where the saved history says it was.
    ``final`` may name earlier results as ``{call_id}``.
    """

    def respond(messages: list[Message]) -> str | tuple[str, list[dict[str, Any]]]:
        done = answered_call_ids(messages)
        ws.record("llm", agent=agent, answered=sorted(done))
        for call_id, tool, args in steps:
            if call_id not in done:
                return "", [{"id": call_id, "name": tool, "arguments": args}]
        return final.format(**{cid: tool_result(messages, cid) for cid, _, _ in steps})

    return FunctionModel(respond, model=f"scripted-{agent}")


# ---- 1. approval chain

APPROVAL_INPUT = {"account": "acct-42", "amount": 500}


def approval_chain(checkpointer: Checkpointer, ws: Workspace) -> Chain:
    """validate -> charge_and_approve (idempotent charge, then interrupt) -> ship."""

    @idempotent
    def charge_card(account: str, amount: int) -> dict[str, Any]:
        ws.record("charge_card", account=account, amount=amount)
        return {"charge_id": f"ch-{account}-{amount}", "account": account, "amount": amount}

    def validate_order(account: str, amount: int) -> dict[str, Any]:
        ws.record("validate_order")
        return {"account": account, "amount": amount, "valid": amount > 0}

    def charge_and_approve(account: str, amount: int) -> dict[str, Any]:
        ws.record("charge_and_approve")
        charge = charge_card(account, amount)
        decision = interrupt(
            "manager_approval",
            {"charge_id": charge["charge_id"], "account": account, "amount": amount},
        )
        ws.record("approval_decided", approved=decision.approved)
        return {
            "charge": charge,
            "approved": decision.approved,
            "resolver": decision.metadata.get("resolver"),
        }

    def ship(charge_id: str, approved: bool) -> str:
        ws.record("ship", charge_id=charge_id, approved=approved)
        return f"shipped {charge_id}" if approved else f"refunded {charge_id}"

    args = {"account": "{{state.account}}", "amount": "{{state.amount}}"}
    chain = Chain("approval-chain", checkpointer=checkpointer)
    chain.add_node(
        "validate",
        tool=FunctionTool(name="validate_order", fn=validate_order),
        input_mapping=args,
        output_key="order",
    )
    chain.add_node(
        "charge_and_approve",
        tool=FunctionTool(name="charge_and_approve", fn=charge_and_approve),
        input_mapping=args,
        output_key="approval",
    )
    chain.add_node(
        "ship",
        tool=FunctionTool(name="ship", fn=ship),
        input_mapping={
            "charge_id": "{{state.approval.charge.charge_id}}",
            "approved": "{{state.approval.approved}}",
        },
        output_key="shipment",
    )
    chain.connect("validate", "charge_and_approve")
    chain.connect("charge_and_approve", "ship")
    return chain


async def approval_start(run: PhaseRun) -> dict[str, Any]:
    chain = approval_chain(run.checkpointer, run.ws)
    result = await chain.aexecute(dict(APPROVAL_INPUT), execution_id=run.execution_id)
    return run_summary(result)


async def approval_resume(run: PhaseRun) -> dict[str, Any]:
    chain = approval_chain(run.checkpointer, run.ws)
    result = await chain.aresume(
        run.execution_id,
        resume_value=Resume(approved=True, metadata={"resolver": "manager@example.com"}),
    )
    return run_summary(result)


# ---- 2. agent + tool interrupt


def refund_agent(checkpointer: Checkpointer, ws: Workspace) -> Agent:
    """An agent whose ``issue_refund`` tool reserves (idempotently) and then asks a human."""

    @idempotent
    def reserve_refund(order_id: str, amount: int) -> dict[str, Any]:
        ws.record("reserve_refund", order_id=order_id, amount=amount)
        return {"reservation": f"rsv-{order_id}", "amount": amount}

    def issue_refund(order_id: str, amount: int) -> str:
        """Refund an order (needs a human's approval)."""
        ws.record("issue_refund")
        reservation = reserve_refund(order_id, amount)
        decision = interrupt("refund_approval", {"order_id": order_id, "amount": amount})
        ws.record("refund_decided", approved=decision.approved)
        verdict = "refunded" if decision.approved else "refund denied"
        return f"{verdict} {amount} on {order_id} ({reservation['reservation']})"

    model = scripted_model(
        ws,
        "refund-agent",
        [("call_refund", "issue_refund", {"order_id": "A-1001", "amount": 30})],
        final="Done: {call_refund}",
    )
    return Agent(
        name="refund-agent",
        system_prompt="You issue refunds.",
        llm=model,
        tools=[FunctionTool(name="issue_refund", fn=issue_refund)],
        checkpointer=checkpointer,
    )


async def agent_start(run: PhaseRun) -> dict[str, Any]:
    agent = refund_agent(run.checkpointer, run.ws)
    result = await agent.arun("Refund order A-1001, 30 EUR.", execution_id=run.execution_id)
    return run_summary(result)


async def agent_resume(run: PhaseRun) -> dict[str, Any]:
    agent = refund_agent(run.checkpointer, run.ws)
    result = await agent.aresume(
        run.execution_id,
        resume_value=Resume(approved=True, metadata={"resolver": "supervisor@example.com"}),
    )
    return run_summary(result)


# ---- 3. crash recovery

CRASH_INPUT = {"source": "3,1,2"}


def etl_chain(checkpointer: Checkpointer, ws: Workspace, *, hard: bool) -> Chain:
    """extract -> transform -> load -> notify; ``load`` dies on its very first attempt.

    ``hard=False``: it raises (the process survives and writes a ``failed`` run-end row).
    ``hard=True``: the process ``os._exit``s mid-node, leaving only what it had already written.
    """

    def extract(source: str) -> str:
        ws.record("extract")
        return source

    def transform(csv: str) -> str:
        ws.record("transform")
        return ",".join(sorted(csv.split(",")))

    def load(csv: str) -> str:
        first = ws.first_time("load-attempted")
        ws.record("load", first_attempt=first)
        if first:
            if hard:
                os._exit(HARD_CRASH_EXIT_CODE)
            raise RuntimeError("simulated crash in load")
        return f"loaded {csv}"

    def notify(summary: str) -> str:
        ws.record("notify")
        return f"notified: {summary}"

    chain = Chain("etl-chain", checkpointer=checkpointer)
    steps: list[tuple[str, Callable[..., str], dict[str, str]]] = [
        ("extract", extract, {"source": "{{state.source}}"}),
        ("transform", transform, {"csv": "{{state.extracted}}"}),
        ("load", load, {"csv": "{{state.transformed}}"}),
        ("notify", notify, {"summary": "{{state.loaded}}"}),
    ]
    keys = {"extract": "extracted", "transform": "transformed", "load": "loaded"}
    for node_id, fn, mapping in steps:
        chain.add_node(
            node_id,
            tool=FunctionTool(name=node_id, fn=fn),
            input_mapping=mapping,
            output_key=keys.get(node_id, "notified"),
        )
    chain.connect("extract", "transform")
    chain.connect("transform", "load")
    chain.connect("load", "notify")
    return chain


def crash_phases(*, hard: bool) -> dict[str, PhaseFn]:
    async def start(run: PhaseRun) -> dict[str, Any]:
        chain = etl_chain(run.checkpointer, run.ws, hard=hard)
        result = await chain.aexecute(dict(CRASH_INPUT), execution_id=run.execution_id)
        return run_summary(result)

    async def resume(run: PhaseRun) -> dict[str, Any]:
        chain = etl_chain(run.checkpointer, run.ws, hard=hard)
        result = await chain.aresume(run.execution_id)
        return run_summary(result)

    return {"start": start, "resume": resume, "inspect": inspect_phase}


# ---- 4. fork

FORK_INPUT = {"topic": "durability", "tone": "casual"}


def publishing_chain(checkpointer: Checkpointer, ws: Workspace) -> Chain:
    """draft -> review -> publish."""

    def draft(topic: str) -> str:
        ws.record("draft")
        return f"a post about {topic}"

    def review(text: str, tone: str) -> str:
        ws.record("review", tone=tone)
        return f"{text}, in a {tone} tone"

    def publish(text: str) -> str:
        ws.record("publish")
        return f"published: {text}"

    chain = Chain("publishing-chain", checkpointer=checkpointer)
    chain.add_node(
        "draft",
        tool=FunctionTool(name="draft", fn=draft),
        input_mapping={"topic": "{{state.topic}}"},
        output_key="drafted",
    )
    chain.add_node(
        "review",
        tool=FunctionTool(name="review", fn=review),
        input_mapping={"text": "{{state.drafted}}", "tone": "{{state.tone}}"},
        output_key="reviewed",
    )
    chain.add_node(
        "publish",
        tool=FunctionTool(name="publish", fn=publish),
        input_mapping={"text": "{{state.reviewed}}"},
        output_key="published",
    )
    chain.connect("draft", "review")
    chain.connect("review", "publish")
    return chain


async def fork_start(run: PhaseRun) -> dict[str, Any]:
    chain = publishing_chain(run.checkpointer, run.ws)
    return run_summary(await chain.aexecute(dict(FORK_INPUT), execution_id=run.execution_id))


async def fork_from_draft(run: PhaseRun) -> dict[str, Any]:
    """Branch the finished run from its ``draft`` step with a different tone."""
    chain = publishing_chain(run.checkpointer, run.ws)
    history = run.checkpointer.list(run.execution_id, limit=LIST_LIMIT)
    draft_cp = next(cp for cp in history if cp.node_id == "draft")
    result = await chain.afork(
        run.execution_id, checkpoint_id=draft_cp.checkpoint_id, modified_state={"tone": "formal"}
    )
    run.memo.setdefault("executions", {})["fork"] = result.execution_id
    return {**run_summary(result), "forked_from": draft_cp.checkpoint_id}


async def fork_latest(run: PhaseRun) -> dict[str, Any]:
    """Fork without naming a step: the last executed step of a linear chain is its end."""
    chain = publishing_chain(run.checkpointer, run.ws)
    return run_summary(await chain.afork(run.execution_id))


async def fork_resume(run: PhaseRun) -> dict[str, Any]:
    """Resume the (finished) fork: a finished branch is a finished run."""
    chain = publishing_chain(run.checkpointer, run.ws)
    return run_summary(await chain.aresume(run.memo["executions"]["fork"]))


# ---- 5. swarm

SWARM_REQUEST = "Customer C-7 was double billed; credit 25 EUR."


def support_swarm(checkpointer: Checkpointer, ws: Workspace, *, late_pause: bool) -> Swarm:
    """``intake`` verifies identity (pauses), hands off to ``billing``, which pauses to credit.

    ``late_pause=True`` gives ``intake`` a lookup turn first, so its pause is on turn 1 and
    ``billing``'s is on turn 0: the reference's ``list`` (``node_index`` first) then puts
    ``intake``'s older pause after ``billing``'s newer one.
    """

    def lookup_customer(customer_id: str) -> str:
        """Look a customer up."""
        ws.record("lookup_customer")
        return f"{customer_id}: gold tier"

    def verify_identity(customer_id: str) -> str:
        """Verify the customer's identity (a human checks)."""
        ws.record("verify_identity")
        decision = interrupt("identity_check", {"customer_id": customer_id})
        ws.record("identity_decided", approved=decision.approved)
        return "verified" if decision.approved else "not verified"

    def apply_credit(customer_id: str, amount: int) -> str:
        """Credit an account (a human approves)."""
        ws.record("apply_credit")
        decision = interrupt("credit_approval", {"customer_id": customer_id, "amount": amount})
        ws.record("credit_decided", approved=decision.approved)
        return f"credited {amount}" if decision.approved else "credit refused"

    intake_steps: list[tuple[str, str, dict[str, Any]]] = [
        ("call_verify", "verify_identity", {"customer_id": "C-7"}),
        (
            "call_handoff",
            "handoff_to_billing",
            {"reason": "identity verified", "context": {"customer_id": "C-7"}},
        ),
    ]
    if late_pause:
        intake_steps.insert(0, ("call_lookup", "lookup_customer", {"customer_id": "C-7"}))
    intake = Agent(
        name="intake",
        system_prompt="You verify customers, then hand off to billing.",
        llm=scripted_model(ws, "intake", intake_steps, final="handed off"),
        tools=[
            FunctionTool(name="lookup_customer", fn=lookup_customer),
            FunctionTool(name="verify_identity", fn=verify_identity),
        ],
    )
    billing = Agent(
        name="billing",
        system_prompt="You fix billing problems.",
        llm=scripted_model(
            ws,
            "billing",
            [("call_credit", "apply_credit", {"customer_id": "C-7", "amount": 25})],
            final="Billing done: {call_credit}",
        ),
        tools=[FunctionTool(name="apply_credit", fn=apply_credit)],
    )
    return Swarm(
        name="support",
        agents=[intake, billing],
        entrypoint="intake",
        handoffs={"intake": ["billing"], "billing": []},
        checkpointer=checkpointer,
    )


def swarm_phases(*, late_pause: bool) -> dict[str, PhaseFn]:
    async def start(run: PhaseRun) -> dict[str, Any]:
        swarm = support_swarm(run.checkpointer, run.ws, late_pause=late_pause)
        return run_summary(await swarm.arun(SWARM_REQUEST, execution_id=run.execution_id))

    async def resume(run: PhaseRun) -> dict[str, Any]:
        swarm = support_swarm(run.checkpointer, run.ws, late_pause=late_pause)
        result = await swarm.aresume(
            run.execution_id,
            resume_value=Resume(approved=True, metadata={"resolver": "ops@example.com"}),
        )
        return run_summary(result)

    return {"start": start, "resume": resume, "inspect": inspect_phase}


# ---- registry

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "approval_chain",
            "Chain: idempotent charge, then interrupt('manager_approval'); resume twice.",
            {"start": approval_start, "resume": approval_resume, "inspect": inspect_phase},
        ),
        Scenario(
            "agent_interrupt",
            "Agent whose tool calls interrupt(); resumed with Resume(...).",
            {"start": agent_start, "resume": agent_resume, "inspect": inspect_phase},
        ),
        Scenario(
            "crash_recovery",
            "Chain whose third node raises once; aresume continues from the last checkpoint.",
            crash_phases(hard=False),
        ),
        Scenario(
            "hard_crash_recovery",
            "Chain whose process dies (os._exit) in the third node; aresume continues.",
            crash_phases(hard=True),
        ),
        Scenario(
            "fork",
            "Finished chain, forked from its first step with a changed state.",
            {
                "start": fork_start,
                "fork": fork_from_draft,
                "fork_latest": fork_latest,
                "resume_fork": fork_resume,
                "inspect": inspect_phase,
            },
        ),
        Scenario(
            "swarm",
            "Swarm paused in agent A, resumed, paused in agent B, resumed, completed.",
            swarm_phases(late_pause=False),
        ),
        Scenario(
            "swarm_late_pause",
            "As 'swarm', but A pauses on its second turn and B on its first.",
            swarm_phases(late_pause=True),
        ),
    )
}
