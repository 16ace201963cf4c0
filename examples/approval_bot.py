"""An approval bot: it approves small orders by itself and escalates the rest to a person.

Orders run through a fastaiagent chain that charges the card and then pauses on
``interrupt("manager_approval", ...)``; checkpointd keeps the paused run. The bot watches the
namespace's pending interrupts (the current set, then every change as it happens), applies
its rule, and resumes the run with ``Chain.aresume``, from any process, any time later::

    checkpointd serve &                                   # the sidecar
    python examples/approval_bot.py submit 120 2500 40    # three orders wait for approval
    python examples/approval_bot.py run --limit 1000      # approves 120 and 40, escalates 2500

Run as many copies of the bot as you like: each order is resumed exactly once, because the
resume starts with an atomic claim of the pending interrupt, and the copies that lose it get
``AlreadyResumed``, which the bot passes over quietly. The bot reconnects by itself when the
server restarts, and stops cleanly on Ctrl-C or SIGTERM, after the order in hand.
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

from fastaiagent import AlreadyResumed, Chain, FunctionTool, Resume, idempotent, interrupt

from checkpointd_client import (
    AsyncCheckpointdClient,
    InterruptEvent,
    PendingInterrupt,
    SnapshotItem,
)
from checkpointd_client.fastaiagent import SidecarCheckpointer

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

    def __init__(self, chain: Chain, *, limit: float, name: str) -> None:
        self.chain = chain
        self.limit = limit
        self.name = name
        self.escalated: set[str] = set()

    async def decide(self, pending: PendingInterrupt) -> None:
        """Apply the rule to one paused order."""
        amount = pending.context.get("amount")
        if not isinstance(amount, int | float) or amount >= self.limit:
            if pending.execution_id not in self.escalated:
                self.escalated.add(pending.execution_id)
                print(f"ESCALATE {pending.execution_id} amount={amount}", flush=True)
            return
        try:
            result = await self.chain.aresume(
                pending.execution_id, resume_value=Resume(approved=True, metadata={"by": self.name})
            )
        except AlreadyResumed:
            return  # another copy of the bot (or a person) resumed it first
        print(f"APPROVED {pending.execution_id} amount={amount} {result.status}", flush=True)

    async def run(self, client: AsyncCheckpointdClient) -> None:
        """Watch the pending approvals until the watch is closed (Ctrl-C, SIGTERM)."""
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
                    pass  # claimed / removed orders, the snapshot marker, progress
        print(f"{self.name}: stopped", file=sys.stderr, flush=True)


async def run_bot(args: argparse.Namespace) -> int:
    """The bot's side: watch, decide, resume."""
    store = SidecarCheckpointer(args.target, namespace=args.namespace)
    try:
        bot = Bot(build_chain(store, args.ledger), limit=args.limit, name=args.name)
        async with AsyncCheckpointdClient(args.target, namespace=args.namespace) as client:
            await bot.run(client)
    finally:
        store.close()
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
    bot = commands.add_parser("run", help="run the bot until Ctrl-C")
    bot.add_argument("--limit", type=float, default=1000, help="approve amounts below this")
    bot.add_argument("--name", default=f"approval-bot-{os.getpid()}")
    args = parser.parse_args(argv)
    return asyncio.run(submit(args) if args.command == "submit" else run_bot(args))


if __name__ == "__main__":
    raise SystemExit(main())
