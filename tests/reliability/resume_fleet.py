"""Paused order runs and the resume workers that carry out their decisions, one process per
role, for the K2 suite.

    python tests/reliability/resume_fleet.py start --target T --namespace NS --events F --count N
    python tests/reliability/resume_fleet.py worker --target T --namespace NS --events F --name W

``start`` runs N orders of the ``orders`` chain until each pauses for approval and prints
their execution ids, one a line. ``worker`` runs a :class:`ResumeWorker` for that chain until
SIGTERM. Every side effect is appended to the events file (one JSON line, with the pid): the
``@idempotent`` ones (``charge``, ``ship``, ``refund``) only when their body runs, and
``fulfil`` each time the node runs (a re-driven run may run it again).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from fastaiagent import Chain, FunctionTool, idempotent, interrupt

from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer

CHAIN_NAME = "orders"


def log(events: Path, event: str, **data: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), **data}, sort_keys=True)
    with events.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def build_chain(store: SidecarCheckpointer, events: Path, slow: float) -> Chain:
    """charge_and_approve (charge once, then wait for a decision) -> fulfil (ship or refund
    once, then linger, so that a kill often lands mid-resume)."""

    @idempotent
    def charge(order_id: str, amount: int) -> dict[str, Any]:
        log(events, "charge", order_id=order_id)
        return {"charge_id": f"ch-{order_id}", "amount": amount}

    @idempotent
    def ship(order_id: str) -> str:
        log(events, "ship", order_id=order_id)
        return f"shipped {order_id}"

    @idempotent
    def refund(order_id: str) -> str:
        log(events, "refund", order_id=order_id)
        return f"refunded {order_id}"

    def charge_and_approve(order_id: str, amount: int) -> dict[str, Any]:
        receipt = charge(order_id, amount)
        decision = interrupt("manager_approval", {"order_id": order_id, **receipt})
        return {"approved": decision.approved, "by": decision.metadata.get("by")}

    def fulfil(order_id: str, approved: bool) -> str:
        log(events, "fulfil", order_id=order_id)
        time.sleep(slow)
        outcome: str = ship(order_id) if approved else refund(order_id)
        return outcome

    chain = Chain(CHAIN_NAME, checkpointer=store)
    chain.add_node(
        "charge_and_approve",
        tool=FunctionTool(name="charge_and_approve", fn=charge_and_approve),
        input_mapping={"order_id": "{{state.order_id}}", "amount": "{{state.amount}}"},
        output_key="approval",
    )
    chain.add_node(
        "fulfil",
        tool=FunctionTool(name="fulfil", fn=fulfil),
        input_mapping={
            "order_id": "{{state.order_id}}",
            "approved": "{{state.approval.approved}}",
        },
        output_key="fulfilment",
    )
    chain.connect("charge_and_approve", "fulfil")
    return chain


def start(args: argparse.Namespace) -> int:
    import asyncio

    store = SidecarCheckpointer(args.target, namespace=args.namespace)
    chain = build_chain(store, args.events, 0.0)

    async def run_all() -> None:
        for n in range(args.count):
            order_id = f"order-{n:04d}-{uuid.uuid4().hex[:8]}"
            state = {"order_id": order_id, "amount": 10 + n}
            result = await chain.aexecute(state, execution_id=order_id)
            if result.status != "paused":
                raise SystemExit(f"{order_id} did not pause: {result.status}")
            print(order_id, flush=True)

    try:
        asyncio.run(run_all())
    finally:
        store.close()
    return 0


def worker(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format=f"{args.name}: %(name)s: %(message)s")
    logging.getLogger("checkpointd_client.resume_worker").setLevel(logging.DEBUG)
    store = SidecarCheckpointer(args.target, namespace=args.namespace)
    resume_worker = ResumeWorker(
        {CHAIN_NAME: build_chain(store, args.events, args.slow)},
        target=args.target,
        namespace=args.namespace,
        name=args.name,
        lease_seconds=args.lease_seconds,
    )
    signal.signal(signal.SIGTERM, lambda *_: resume_worker.stop())
    print(f"{args.name}: ready", file=sys.stderr, flush=True)
    try:
        resume_worker.run()
    finally:
        store.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("start", "worker"))
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--name", default=f"worker-{os.getpid()}")
    parser.add_argument("--lease-seconds", type=int, default=2)
    parser.add_argument("--slow", type=float, default=0.05)
    args = parser.parse_args()
    return start(args) if args.role == "start" else worker(args)


if __name__ == "__main__":
    raise SystemExit(main())
