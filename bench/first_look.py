"""A first look at speed: fastaiagent's calls through the sidecar against its in-process
SQLiteCheckpointer, measured in the same run and printed as ratios.

Usage: python bench/first_look.py [--iterations N] [--pg-dsn DSN]

Each operation runs N times, one caller, through ``SidecarCheckpointer`` (a real server
subprocess on a Unix socket) and through ``SQLiteCheckpointer`` on a file in the same
temporary directory. p50 and p99 are in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastaiagent.chain.checkpoint import Checkpoint
from fastaiagent.checkpointers import PendingInterrupt, SQLiteCheckpointer

from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.support.sidecar import Sidecar, StoreSpec

STATE = {"messages": [{"role": "user", "content": "x" * 100} for _ in range(16)]}  # ~2 KB


def _timed(op: Callable[[int], Any], n: int) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def _cases(cp: Any, n: int) -> dict[str, list[float]]:
    run = uuid.uuid4().hex
    history = f"{run}-history"
    for i in range(100):
        cp.put(
            Checkpoint(execution_id=history, node_id=f"n{i}", node_index=i, state_snapshot=STATE)
        )

    def put(i: int) -> None:
        cp.put(Checkpoint(execution_id=run, node_id=f"n{i}", node_index=i, state_snapshot=STATE))

    def record_and_claim(i: int) -> None:
        exec_id = f"{run}-pause-{i}"
        cp.record_interrupt(
            Checkpoint(execution_id=exec_id, node_id="review", status="interrupted"),
            PendingInterrupt(execution_id=exec_id, chain_name="c", node_id="review", reason="r"),
        )
        assert cp.delete_pending_interrupt_atomic(exec_id) is not None

    return {
        "put (2 KB state)": _timed(put, n),
        "get_last": _timed(lambda i: cp.get_last(run), n),
        "list(100)": _timed(lambda i: cp.list(history, limit=100), n),
        "record + claim": _timed(record_and_claim, n),
    }


def _drop_schema(spec: StoreSpec) -> None:
    import asyncio

    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(spec.url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{spec.pg_schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def _p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--pg-dsn", default="")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cpd-bench-"))
    baseline = SQLiteCheckpointer(db_path=str(work / "inprocess.db"))
    base = _cases(baseline, args.iterations)
    baseline.close()
    stores = [StoreSpec("sqlite", f"sqlite://{work / 'sidecar.db'}")]
    if args.pg_dsn:
        stores.append(StoreSpec("postgres", args.pg_dsn, pg_schema=f"bench_{uuid.uuid4().hex[:8]}"))
    print(
        f"{'case':<18} {'store':<9} {'sidecar p50':>11} {'p99':>8} {'in-proc p50':>11} {'ratio':>6}"
    )
    for spec in stores:
        server = Sidecar(spec).start()
        try:
            with SidecarCheckpointer(server.target) as adapter:
                side = _cases(adapter, args.iterations)
        finally:
            server.close()
            if spec.backend == "postgres":
                _drop_schema(spec)
        for case, samples in side.items():
            ratio = _p(samples, 50) / _p(base[case], 50)
            print(
                f"{case:<18} {spec.backend:<9} {_p(samples, 50):>9.0f}us {_p(samples, 99):>6.0f}us "
                f"{_p(base[case], 50):>9.0f}us {ratio:>5.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
