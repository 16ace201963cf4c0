"""Watch delivery: how soon an acknowledged RecordInterrupt reaches every watcher, and how many
events per second one server fans out.

Usage: python bench/watch_latency.py [--watchers 1,100] [--events 300] [--burst 1000]
                                     [--pg-dsn DSN]

For each backend (SQLite always; Postgres when --pg-dsn or CHECKPOINTD_TEST_PG_DSN is set) and
each watcher count, it starts a real server (tests/support/sidecar.py), opens the watchers in a
separate process (grpc.aio, ten streams per channel, on the Unix socket), then records:

* ``--events`` interrupts one at a time, paced at 100/s: latency is from the moment the
  writer has the RecordInterrupt reply to the moment a watcher has the event (both read from
  the system-wide monotonic clock); p50/p99 over every (event, watcher) pair.
* ``--burst`` interrupts from four writer threads as fast as the store takes them: fan-out is
  (events x watchers) / (last delivery - first acknowledgement).

Prints one table. Numbers are from this machine; compare runs, not machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkpointd_client import Checkpoint, CheckpointdClient, PendingInterrupt
from tests.support.sidecar import Sidecar, StoreSpec

PACE_SECONDS = 0.01
BURST_WRITERS = 4
STREAMS_PER_CHANNEL = 10


# --- the watcher process -----------------------------------------------------------------------


async def _watch(target: str, count: int, expected: int) -> list[dict[str, int]]:
    """Open ``count`` streams, say "ready" once every snapshot is complete, and return when
    each has seen ``expected`` events: per stream, execution_id -> monotonic ns of receipt."""
    import grpc

    from checkpointd_client.v1 import interrupt_service_pb2 as svc
    from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc

    channels = [
        grpc.aio.insecure_channel(target)
        for _ in range((count + STREAMS_PER_CHANNEL - 1) // STREAMS_PER_CHANNEL)
    ]
    received: list[dict[str, int]] = [{} for _ in range(count)]
    ready = asyncio.Semaphore(0)

    async def one(index: int) -> None:
        stub = svc_grpc.InterruptServiceStub(channels[index // STREAMS_PER_CHANNEL])
        mine = received[index]
        async for message in stub.WatchInterrupts(svc.WatchInterruptsRequest()):
            if message.HasField("snapshot_complete"):
                ready.release()
            elif message.HasField("event"):
                mine[message.event.pending.execution_id] = time.monotonic_ns()
                if len(mine) >= expected:
                    return

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    for _ in range(count):
        await ready.acquire()
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    for channel in channels:
        await channel.close()
    return received


# --- the writer and the table ------------------------------------------------------------------


def _record(client: CheckpointdClient, execution_id: str) -> int:
    client.record_interrupt(
        Checkpoint(
            execution_id=execution_id, chain_name="bench", node_id="review", status="interrupted"
        ),
        PendingInterrupt(
            execution_id=execution_id,
            chain_name="bench",
            node_id="review",
            reason="approve",
            context={"amount": 500},
        ),
    )
    return time.monotonic_ns()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _run(spec: StoreSpec, watchers: int, events: int, burst: int) -> dict[str, Any]:
    server = Sidecar(spec).start()
    acks: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "received.json"
            watcher = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--watcher",
                    server.target,
                    str(watchers),
                    str(events + burst),
                    str(out),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert watcher.stdout is not None
            if watcher.stdout.readline().strip() != "ready":
                raise RuntimeError("the watcher process did not start")
            run = uuid.uuid4().hex[:8]
            with CheckpointdClient(server.target) as client:
                for i in range(events):
                    execution_id = f"{run}-lat-{i}"
                    acks[execution_id] = _record(client, execution_id)
                    time.sleep(PACE_SECONDS)
                burst_ids = [f"{run}-burst-{i}" for i in range(burst)]

                def write(part: list[str]) -> None:
                    for execution_id in part:
                        acks[execution_id] = _record(client, execution_id)

                threads = [
                    threading.Thread(target=write, args=(burst_ids[n::BURST_WRITERS],))
                    for n in range(BURST_WRITERS)
                ]
                burst_started = time.monotonic_ns()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                burst_written = time.monotonic_ns()
            if watcher.wait(timeout=300) != 0:
                raise RuntimeError("the watcher process failed")
            received: list[dict[str, int]] = json.loads(out.read_text())
    finally:
        server.close()
    latencies = [
        (seen[eid] - acks[eid]) / 1e6 for seen in received for eid in seen if "-lat-" in eid
    ]
    last_delivery = max(seen[eid] for seen in received for eid in seen if "-burst-" in eid)
    fanned = watchers * burst / ((last_delivery - burst_started) / 1e9)
    return {
        "backend": spec.backend,
        "watchers": watchers,
        "p50_ms": statistics.median(latencies),
        "p99_ms": _percentile(latencies, 0.99),
        "writes_per_s": burst / ((burst_written - burst_started) / 1e9),
        "fanned_per_s": fanned,
    }


def _postgres_spec(dsn: str) -> tuple[StoreSpec, str]:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    return StoreSpec("postgres", dsn, pg_schema=schema), schema


def _drop_schema(dsn: str, schema: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def main() -> int:
    """Run the benchmark and print the table (or, with --watcher, be the watcher process)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--watcher":
        target, count, expected, out = sys.argv[2:6]
        received = asyncio.run(_watch(target, int(count), int(expected)))
        Path(out).write_text(json.dumps(received))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", default="1,100", help="watcher counts, comma-separated")
    parser.add_argument("--events", type=int, default=300, help="paced events (latency)")
    parser.add_argument("--burst", type=int, default=1000, help="burst events (fan-out)")
    parser.add_argument("--pg-dsn", default=os.environ.get("CHECKPOINTD_TEST_PG_DSN", ""))
    args = parser.parse_args()
    counts = [int(n) for n in args.watchers.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            spec = StoreSpec("sqlite", f"sqlite://{Path(tmp) / f'bench-{n}.db'}")
            rows.append(_run(spec, n, args.events, args.burst))
    if args.pg_dsn:
        for n in counts:
            spec, schema = _postgres_spec(args.pg_dsn)
            try:
                rows.append(_run(spec, n, args.events, args.burst))
            finally:
                _drop_schema(args.pg_dsn, schema)
    header = f"{'backend':<9} {'watchers':>8} {'p50 ms':>8} {'p99 ms':>8} {'writes/s':>9} "
    header += f"{'events/s fanned out':>20}"
    print(header)
    for row in rows:
        print(
            f"{row['backend']:<9} {row['watchers']:>8} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {row['writes_per_s']:>9.0f} {row['fanned_per_s']:>20.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
