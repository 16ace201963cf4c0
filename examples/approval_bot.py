"""An approval bot: it approves small orders by itself and escalates the rest to a person.

Orders run through a fastaiagent chain that charges the card and then pauses on
``interrupt("manager_approval", ...)``; checkpointd keeps the paused run. The bot watches the
namespace's pending interrupts (the current set, then every change as it happens), applies
its rule and records its **decision** (``submit_decision``); it never runs the order's code,
so it could be written in any language (``clients/node/examples/approval_bot.js`` is the
same bot in Node.js). Resume **workers**, which have the chain, carry each decision out::

    checkpointd serve &                                   # the sidecar
    python examples/approval_bot.py submit 120 2500 40    # three orders wait for approval
    python examples/approval_bot.py worker &              # resumes decided orders
    python examples/approval_bot.py run --limit 1000      # approves 120 and 40, escalates 2500

Run as many copies of either as you like. Each order takes one decision: a bot that decides
second gets ``ALREADY_DECIDED`` and passes over it quietly. Each decision is carried out once:
a worker holds a lease on it while it resumes the run, and if it dies mid-resume another
worker takes the run over from its newest checkpoint (the card is charged once, by
``@idempotent``). A person can decide an escalated order with ``checkpointd interrupts decide
ORDER --approve``. Both reconnect by themselves when the server restarts, and stop cleanly on
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from fastaiagent import Chain, FunctionTool, idempotent, interrupt

from checkpointd_client import (
    AsyncCheckpointdClient,
    FailedPreconditionError,
    InterruptEvent,
    NotFoundError,
    PendingInterrupt,
    SnapshotItem,
)
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer

CHAIN_NAME = "orders"
REASON = "manager_approval"


def build_chain(store: SidecarCheckpointer, ledger: Path | None) -> Chain:
    """The order chain: charge_and_approve (charge once, then wait for a person) -> fulfil.

    The app that starts orders and the bot that resumes them build it the same way: a resume
    re-enters the paused node of this very graph. ``ledger``, when given, gets one JSON line
    per order fulfilled or refunded (the side effect that must happen once per order).
    """

    @idempotent  # fires once per order, however often the node re-executes
    def charge_card(order_id: str, account: str, amount: int) -> dict[str, Any]:
        return {"charge_id": f"ch-{order_id}", "account": account, "amount": amount}

    def charge_and_approve(order_id: str, account: str, amount: int) -> dict[str, Any]:
        charge = charge_card(order_id, account, amount)
        decision = interrupt(REASON, {"order_id": order_id, **charge})
        return {**charge, "approved": decision.approved, "resolver": decision.metadata.get("by")}

    def fulfil(order_id: str, amount: int, approved: bool, resolver: str | None) -> str:
        outcome = "shipped" if approved else "refunded"
        if ledger is not None:
            line = {"order_id": order_id, "amount": amount, "outcome": outcome, "by": resolver}
            with ledger.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line, sort_keys=True) + "\n")
        return f"{outcome} {order_id}"

    chain = Chain(CHAIN_NAME, checkpointer=store)
    order = {
        "order_id": "{{state.order_id}}",
        "account": "{{state.account}}",
        "amount": "{{state.amount}}",
    }
    chain.add_node(
        "charge_and_approve",
        tool=FunctionTool(name="charge_and_approve", fn=charge_and_approve),
        input_mapping=order,
        output_key="approval",
    )
    chain.add_node(
        "fulfil",
        tool=FunctionTool(name="fulfil", fn=fulfil),
        input_mapping={
            "order_id": "{{state.order_id}}",
            "amount": "{{state.amount}}",
            "approved": "{{state.approval.approved}}",
            "resolver": "{{state.approval.resolver}}",
        },
        output_key="fulfilment",
    )
    chain.connect("charge_and_approve", "fulfil")
    return chain


async def submit(args: argparse.Namespace) -> int:
    """The app's side: start one order per amount; each pauses waiting for approval."""
    store = SidecarCheckpointer(args.target, namespace=args.namespace)
    try:
        chain = build_chain(store, args.ledger)
        for amount in args.amounts:
            order_id = f"order-{uuid.uuid4().hex[:12]}"
            state = {"order_id": order_id, "account": args.account, "amount": amount}
            result = await chain.aexecute(state, execution_id=order_id)
            print(f"{order_id} amount={amount} {result.status}", flush=True)
    finally:
        store.close()
    return 0


class Bot:
    """Approves orders under ``limit`` and escalates the rest, each order once per process."""

    def __init__(self, client: AsyncCheckpointdClient, *, limit: float, name: str) -> None:
        self.client = client
        self.limit = limit
        self.name = name
        self.escalated: set[str] = set()

    async def decide(self, pending: PendingInterrupt) -> None:
        """Apply the rule to one paused order that nobody has decided yet."""
        if pending.decision is not None:
            return
        amount = pending.context.get("amount")
        if not isinstance(amount, int | float) or amount >= self.limit:
            if pending.execution_id not in self.escalated:
                self.escalated.add(pending.execution_id)
                print(f"ESCALATE {pending.execution_id} amount={amount}", flush=True)
            return
        try:
            await self.client.submit_decision(
                pending.execution_id,
                approved=True,
                decided_by=self.name,
                resume_metadata={"by": self.name},  # the run reads it as Resume.metadata
                reason=f"amount {amount} is under {self.limit:g}",
            )
        except FailedPreconditionError as exc:
            if exc.reason == "ALREADY_DECIDED":
                return  # another copy of the bot (or a person) decided it first
            raise
        except NotFoundError:
            return  # resumed or deleted meanwhile
        print(f"APPROVED {pending.execution_id} amount={amount}", flush=True)

    async def run(self) -> None:
        """Watch the pending approvals until the watch is closed (Ctrl-C, SIGTERM)."""
        client = self.client
        watch = client.watch_interrupts(chain_name=CHAIN_NAME, reason=REASON)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, watch.close)
        print(f"{self.name}: watching namespace {client.namespace!r}", file=sys.stderr, flush=True)
        async for item in watch:
            match item:
                case SnapshotItem(pending=pending) | InterruptEvent(type="added", pending=pending):
                    await self.decide(pending)
                case _:
                    pass  # decided / claimed / resumed orders, the snapshot marker, progress
        print(f"{self.name}: stopped", file=sys.stderr, flush=True)


async def run_bot(args: argparse.Namespace) -> int:
    """The bot's side: watch and decide."""
    async with AsyncCheckpointdClient(args.target, namespace=args.namespace) as client:
        await Bot(client, limit=args.limit, name=args.name).run()
    return 0


async def run_worker(args: argparse.Namespace) -> int:
    """The worker's side: resume each decided order once, with the decision."""
    store = SidecarCheckpointer(args.target, namespace=args.namespace)
    worker = ResumeWorker(
        {CHAIN_NAME: build_chain(store, args.ledger)},
        target=args.target,
        namespace=args.namespace,
        name=args.name,
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, worker.stop)
    print(f"{worker.name}: resuming decided orders", file=sys.stderr, flush=True)
    try:
        await worker.arun()
    finally:
        store.close()
    print(f"{worker.name}: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="the checkpointd server [default: $CHECKPOINTD_TARGET]")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--ledger", type=Path, help="append one JSON line per fulfilled order")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("submit", help="start orders that wait for approval")
    start.add_argument("amounts", nargs="+", type=int)
    start.add_argument("--account", default="acct-42")
    bot = commands.add_parser("run", help="run the bot until Ctrl-C: decide paused orders")
    bot.add_argument("--limit", type=float, default=1000, help="approve amounts below this")
    bot.add_argument("--name", default=f"approval-bot-{os.getpid()}")
    worker = commands.add_parser("worker", help="resume decided orders until Ctrl-C")
    worker.add_argument("--name", default=f"resume-worker-{os.getpid()}")
    args = parser.parse_args(argv)
    command = {"submit": submit, "run": run_bot, "worker": run_worker}[args.command]
    return asyncio.run(command(args))


if __name__ == "__main__":
    raise SystemExit(main())
