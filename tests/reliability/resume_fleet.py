"""Paused order runs and the resume workers that carry out their decisions, one process per
role, for the K2 and K4 suites.

    python tests/reliability/resume_fleet.py start --target T --namespace NS --events F --count N
    python tests/reliability/resume_fleet.py worker --target T --namespace NS --events F --name W
        [--stall DIR]

``start`` runs N orders of the ``orders`` chain until each pauses for approval and prints
their execution ids, one a line. ``worker`` runs a :class:`ResumeWorker` for that chain until
SIGTERM. Every side effect is appended to the events file (one JSON line, with the pid): the
``@idempotent`` ones (``charge``, ``ship``, ``refund``) only when their body runs, and
``fulfil`` each time the node runs (a re-driven run may run it again); so is every write
a worker makes (``write``, with ``ok`` or the reason the server refused it).

With ``--stall DIR``, the first worker of the fleet to fulfil an order logs ``stall`` and then
blocks in the node, its whole event loop with it (as a process stopped by SIGSTOP or a long
GC: it cannot renew its lease), until ``DIR/<order_id>.go`` exists; then it goes on as if
nothing happened. Such a worker resumes an order marked ``DIR/<order_id>.unfenced`` without
K4's fence on its writes (the worker before K4), to show what the fence prevents.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastaiagent import Chain, FunctionTool, idempotent, interrupt

from checkpointd_client import CheckpointdError
from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer
from checkpointd_client.fencing import LeaseFence, current_fence

CHAIN_NAME = "orders"


def log(events: Path, event: str, **data: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), **data}, sort_keys=True)
    with events.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


class LoggedCheckpointer(SidecarCheckpointer):
    """The sidecar checkpointer, noting each write and how the server answered it (``ok``, or
    the refusal's reason) in the events file."""

    events: Path
    stall: Path | None = None

    @contextlib.contextmanager
    def _noted(self, method: str, order_id: str, *, end: bool = False) -> Iterator[None]:
        # Whether it started after a stall in this order's resume was over.
        after_stall = self.stall is not None and (self.stall / f"{order_id}.go").exists()
        note = {"method": method, "order_id": order_id, "after_stall": after_stall}
        try:
            yield
        except CheckpointdError as exc:
            log(self.events, "write", outcome=str(exc.reason), **note)
            raise
        log(self.events, "write", outcome="ok", end=end, **note)

    def put(self, checkpoint: Any) -> None:
        end = checkpoint.step_type == "run_end"
        with self._noted("put", checkpoint.execution_id, end=end):
            super().put(checkpoint)

    def record_interrupt(self, checkpoint: Any, pending: Any) -> None:
        with self._noted("record_interrupt", checkpoint.execution_id):
            super().record_interrupt(checkpoint, pending)

    def put_idempotent(self, execution_id: str, function_key: str, result: Any) -> None:
        with self._noted("put_idempotent", execution_id):
            super().put_idempotent(execution_id, function_key, result)


def stall_once(stall: Path | None, events: Path, order_id: str) -> None:
    """With ``--stall DIR`` (given to workers only): the first fulfil of the order in the
    fleet blocks the process until ``DIR/<order_id>.go`` exists."""
    if stall is None:
        return
    try:
        os.close(os.open(stall / f"{order_id}.stall", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    fence = current_fence()
    log(events, "stall", order_id=order_id, attempt=fence.attempt if fence else 0)
    while not (stall / f"{order_id}.go").exists():
        time.sleep(0.02)


def build_chain(
    store: SidecarCheckpointer, events: Path, slow: float, stall: Path | None = None
) -> Chain:
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
        stall_once(stall, events, order_id)
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
    if args.stall is not None:
        unfence_marked(args.stall)
    store = LoggedCheckpointer(args.target, namespace=args.namespace)
    store.events = args.events
    store.stall = args.stall
    resume_worker = ResumeWorker(
        {CHAIN_NAME: build_chain(store, args.events, args.slow, args.stall)},
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


def unfence_marked(directory: Path) -> None:
    """Resumes of the orders marked ``DIR/<order_id>.unfenced`` write without K4's fence, as
    the worker did before K4: the control that shows what the fence prevents."""
    from checkpointd_client import fencing, resume_worker

    @contextlib.contextmanager
    def writes_under(fence: LeaseFence) -> Iterator[LeaseFence]:
        if (directory / f"{fence.execution_id}.unfenced").exists():
            yield fence
            return
        with fencing.writes_under(fence):
            yield fence

    resume_worker.writes_under = writes_under  # type: ignore[attr-defined]


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
    parser.add_argument("--stall", type=Path)
    args = parser.parse_args()
    return start(args) if args.role == "start" else worker(args)


if __name__ == "__main__":
    raise SystemExit(main())
