"""checkpointd benchmark: fastaiagent's calls through the sidecar against fastaiagent's own
in-process checkpointers, on SQLite and on Postgres, measured in the same run.

Usage: python bench/run.py [--quick] [--iterations N] [--multi-process PxT] [--no-multi-process]
                           [--no-scale] [--no-rss] [--output PATH]

For each backend it starts a real ``checkpointd serve`` subprocess (Unix socket) and, in the
same process as the callers, fastaiagent's ``SQLiteCheckpointer`` or ``PostgresCheckpointer``
on the same kind of store (the same Postgres server, in a schema of its own). Every case runs
at each concurrency level through ``SidecarCheckpointer`` (threads) and through
``AsyncCheckpointdClient`` (asyncio tasks), and through the in-process checkpointer (threads).
Then, per backend, a scale series (get_last and claim with 1k to 1M stored rows, seeded with
bulk SQL) and the server's RSS idle and with open WatchInterrupts streams. It prints a table,
the earlier targets and then the current ones (each the ratio of two figures of this run
against its bound: PASS or MISS), and writes the same figures as JSON (schema in
bench/README.md).
"""

# ruff: noqa: E402  (the imports below need the repository root on sys.path first)

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asyncpg
import grpc
from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
from fastaiagent.checkpointers import PendingInterrupt as FastPending
from fastaiagent.checkpointers import SQLiteCheckpointer
from fastaiagent.checkpointers.postgres import PostgresCheckpointer

from bench import cpu, floors, multiproc, raw_commit
from bench import graph as graph_bench
from checkpointd_client import AsyncCheckpointdClient, Checkpoint, PendingInterrupt
from checkpointd_client.fastaiagent import SidecarCheckpointer
from checkpointd_client.v1 import (
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
)
from tests.support.sidecar import Sidecar, StoreSpec

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_OUTPUT = ROOT / "bench" / "results" / "latest.json"
BACKENDS = ("sqlite", "postgres")
#: About 2 KB of JSON: 16 chat messages of 100 characters.
STATE: dict[str, Any] = {"messages": [{"role": "user", "content": "x" * 100}] * 16}
#: The state of the seeded rows of the scale series: small, so 1M rows seed in seconds.
SEED_STATE = json.dumps({"messages": [{"role": "user", "content": "seeded"}]})
#: Checkpoints per seeded execution; the last one is interrupted and has a pending row.
SEED_RUN_LENGTH = 10


# --- measuring ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """Latencies of one (case, runner, concurrency), the throughput over its wall time, and
    the CPU the window cost per operation: this process's (the callers) and the server's
    (None when the operations reach no server)."""

    p50_us: float
    p99_us: float
    ops_s: float
    ops: int
    client_cpu_us: float = 0.0
    server_cpu_us: float | None = None

    @property
    def cpu_us(self) -> float:
        """Client and server CPU microseconds per operation together."""
        return self.client_cpu_us + (self.server_cpu_us or 0.0)


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0-100) of ``samples``."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _measurement(
    samples: list[float], elapsed: float, used: cpu.CpuUsage | None = None
) -> Measurement:
    client_us, server_us = used.per_op_us(len(samples)) if used else (0.0, None)
    return Measurement(
        p50_us=percentile(samples, 50),
        p99_us=percentile(samples, 99),
        ops_s=len(samples) / elapsed,
        ops=len(samples),
        client_cpu_us=client_us,
        server_cpu_us=server_us,
    )


def run_threads(
    op: Callable[[int, int], None], concurrency: int, ops: int, server_pid: int | None = None
) -> Measurement:
    """Run ``op(worker, i)`` for i in range(ops), spread over ``concurrency`` threads; the
    CPU of this process and of ``server_pid`` is read over the same window as the wall time."""
    ops = max(ops, concurrency)
    samples: list[list[float]] = [[] for _ in range(concurrency)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(concurrency + 1)

    def worker(w: int) -> None:
        barrier.wait()
        try:
            for i in range(w, ops, concurrency):
                started = time.perf_counter_ns()
                op(w, i)
                samples[w].append((time.perf_counter_ns() - started) / 1000)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for thread in threads:
        thread.start()
    cpu_start = cpu.sample(server_pid)
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    used = cpu.since(cpu_start, server_pid)
    if failures:
        raise failures[0]
    return _measurement([s for worker_samples in samples for s in worker_samples], elapsed, used)


async def run_tasks(
    op: Callable[[int, int], Awaitable[None]],
    concurrency: int,
    ops: int,
    server_pid: int | None = None,
) -> Measurement:
    """Run ``await op(worker, i)`` for i in range(ops), spread over ``concurrency`` tasks."""
    ops = max(ops, concurrency)
    samples: list[float] = []

    async def worker(w: int) -> None:
        for i in range(w, ops, concurrency):
            started = time.perf_counter_ns()
            await op(w, i)
            samples.append((time.perf_counter_ns() - started) / 1000)

    cpu_start = cpu.sample(server_pid)
    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    return _measurement(samples, elapsed, cpu.since(cpu_start, server_pid))


# --- the cases ----------------------------------------------------------------------------

CASES = ("put (2 KB state)", "get_last", "list(100)", "record + claim", "put/get idempotent")


def _fast_checkpoint(execution_id: str, i: int, state: dict[str, Any]) -> FastCheckpoint:
    return FastCheckpoint(
        execution_id=execution_id, node_id=f"n{i}", node_index=i, state_snapshot=state
    )


def setup_reads(cp: Any, base: str) -> None:
    """Write what the read cases read: a run of 10 checkpoints and a run of 100."""
    for i in range(10):
        cp.put(_fast_checkpoint(f"{base}-last", i, STATE))
    for i in range(100):
        cp.put(_fast_checkpoint(f"{base}-hist", i, STATE))


def sync_ops(cp: Any, reads: str, writes: str) -> dict[str, Callable[[int, int], None]]:
    """One operation per case over a fastaiagent ``Checkpointer``: the read cases read the
    runs of ``setup_reads(cp, reads)``, the others write new runs named after ``writes``."""

    def put(w: int, i: int) -> None:
        cp.put(_fast_checkpoint(f"{writes}-w{w}", i, STATE))

    def get_last(w: int, i: int) -> None:
        assert cp.get_last(f"{reads}-last") is not None

    def list_100(w: int, i: int) -> None:
        assert len(cp.list(f"{reads}-hist", limit=100)) == 100

    def record_claim(w: int, i: int) -> None:
        run = f"{writes}-pause-{i}"
        cp.record_interrupt(
            FastCheckpoint(execution_id=run, node_id="review", status="interrupted"),
            FastPending(execution_id=run, chain_name="c", node_id="review", reason="approval"),
        )
        assert cp.delete_pending_interrupt_atomic(run) is not None

    def idempotent(w: int, i: int) -> None:
        value = {"charge_id": f"ch-{i}", "amount": i}
        cp.put_idempotent(f"{writes}-w{w}", f"charge:{i}", value)
        assert cp.get_idempotent(f"{writes}-w{w}", f"charge:{i}") == value

    return dict(zip(CASES, (put, get_last, list_100, record_claim, idempotent), strict=True))


def async_ops(
    client: AsyncCheckpointdClient, reads: str, writes: str
) -> dict[str, Callable[[int, int], Awaitable[None]]]:
    """The same operations through the asyncio client."""

    async def put(w: int, i: int) -> None:
        checkpoint = Checkpoint(
            execution_id=f"{writes}-w{w}", node_id=f"n{i}", node_index=i, state_snapshot=STATE
        )
        # The reply is thrown away, so it need not carry the state back (as in the adapter).
        await client.put_checkpoint(checkpoint, view="basic")

    async def get_last(w: int, i: int) -> None:
        await client.get_latest_checkpoint(f"{reads}-last")

    async def list_100(w: int, i: int) -> None:
        page = await client.list_checkpoints(f"{reads}-hist", page_size=100, descending=True)
        assert len(page.checkpoints) == 100

    async def record_claim(w: int, i: int) -> None:
        run = f"{writes}-pause-{i}"
        await client.record_interrupt(
            Checkpoint(execution_id=run, node_id="review", status="interrupted"),
            PendingInterrupt(execution_id=run, chain_name="c", node_id="review", reason="approval"),
        )
        await client.claim_interrupt(run)

    async def idempotent(w: int, i: int) -> None:
        value = {"charge_id": f"ch-{i}", "amount": i}
        await client.put_idempotent(f"{writes}-w{w}", f"charge:{i}", value)
        assert (await client.get_idempotent(f"{writes}-w{w}", f"charge:{i}")).value == value

    return dict(zip(CASES, (put, get_last, list_100, record_claim, idempotent), strict=True))


Results = dict[tuple[str, int], Measurement]


def measure_sync(
    cp: Any, levels: Sequence[int], ops: int, label: str, server_pid: int | None = None
) -> Results:
    """Every case at every concurrency level through one fastaiagent ``Checkpointer`` (whose
    server, if it has one, is ``server_pid``)."""
    base = f"{label}-{uuid.uuid4().hex[:8]}"
    setup_reads(cp, base)
    for op in sync_ops(cp, base, f"{base}-warm").values():
        run_threads(op, 1, min(ops, 20))  # warm-up, not recorded
    results: Results = {}
    for level in levels:
        level_ops = sync_ops(cp, base, f"{base}-c{level}")
        for case in CASES:
            results[(case, level)] = run_threads(level_ops[case], level, ops, server_pid)
    return results


def measure_async(target: str, levels: Sequence[int], ops: int, server_pid: int) -> Results:
    """Every case at every concurrency level through ``AsyncCheckpointdClient``."""

    async def main() -> Results:
        base = f"async-{uuid.uuid4().hex[:8]}"
        async with AsyncCheckpointdClient(target) as client:
            for run, count in ((f"{base}-last", 10), (f"{base}-hist", 100)):
                for i in range(count):
                    await client.put_checkpoint(
                        Checkpoint(execution_id=run, node_id=f"n{i}", state_snapshot=STATE)
                    )
            for op in async_ops(client, base, f"{base}-warm").values():
                await run_tasks(op, 1, min(ops, 20))  # warm-up, not recorded
            results: Results = {}
            for level in levels:
                level_ops = async_ops(client, base, f"{base}-c{level}")
                for case in CASES:
                    results[(case, level)] = await run_tasks(
                        level_ops[case], level, ops, server_pid
                    )
            return results

    return asyncio.run(main())


# --- stores -------------------------------------------------------------------------------


@dataclass
class Stores:
    """Where one run keeps its data; every Postgres schema it names is dropped at the end."""

    workdir: Path
    pg_dsn: str
    schemas: list[str]

    def spec(self, backend: str, label: str) -> StoreSpec:
        """A fresh, empty store for one sidecar."""
        if backend == "sqlite":
            return StoreSpec("sqlite", f"sqlite://{self.workdir / f'{label}.db'}")
        schema = f"cpdbench_{label}_{uuid.uuid4().hex[:8]}"
        self.schemas.append(schema)
        return StoreSpec("postgres", self.pg_dsn, pg_schema=schema)

    def baseline(self, backend: str) -> Any:
        """fastaiagent's in-process checkpointer of the backend, on a fresh store."""
        if backend == "sqlite":
            return SQLiteCheckpointer(db_path=str(self.workdir / "inprocess.db"))
        schema = f"cpdbench_fastaiagent_{uuid.uuid4().hex[:8]}"
        self.schemas.append(schema)
        return PostgresCheckpointer(self.pg_dsn, schema=schema)

    def drop_schemas(self) -> None:
        """Drop every Postgres schema this run created."""
        if not self.schemas:
            return

        async def drop() -> None:
            conn = await asyncpg.connect(self.pg_dsn)
            try:
                for schema in self.schemas:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()

        asyncio.run(drop())
        self.schemas.clear()


BASELINE_NAMES = {
    "sqlite": "fastaiagent SQLiteCheckpointer",
    "postgres": "fastaiagent PostgresCheckpointer",
}


@contextmanager
def running(spec: StoreSpec, *extra_args: str) -> Iterator[Sidecar]:
    """A started sidecar on ``spec`` (with ``extra_args`` for ``serve``), closed on exit."""
    server = Sidecar(spec, extra_args=list(extra_args)).start()
    try:
        yield server
    finally:
        server.close()


def _pid(server: Sidecar) -> int:
    assert server.process is not None
    return server.process.pid


FLOOR_UNARY = "floor: grpc.aio unary echo"
FLOOR_STREAM = "floor: bidi stream round trip"
FLOOR_HEALTH = "floor: Health/Check"
FLOORS = (FLOOR_UNARY, FLOOR_STREAM, FLOOR_HEALTH)
#: The commit floor of a put (bench/raw_commit.py), one caller only: not a gRPC floor.
FLOOR_COMMIT = "floor: raw commit of a put's row"
#: Round trips of the one-caller stream floor at the least: its server side is read in 10 ms
#: clock ticks, and the put targets divide by it, so its window must last about a second
#: even in --quick (about 0.3 ms a round trip here).
STREAM_FLOOR_MIN_OPS = 2000


def measure_floors(
    echo_server: floors.EchoServer, sidecar: Sidecar, levels: Sequence[int], ops: int
) -> Results:
    """The floors at every level: a bare unary echo and a round trip on an open bidi stream
    (both on the echo server), and Health/Check on the sidecar; sync grpcio, Unix sockets.
    The server CPU of each is its own server's."""
    results: Results = {}
    echo_pid, cpd_pid = echo_server.pid, _pid(sidecar)
    with (
        grpc.insecure_channel(echo_server.target) as echo,
        grpc.insecure_channel(sidecar.target) as cpd,
    ):
        floors.wait_ready(echo)
        floors.wait_ready(cpd)
        unary, health = floors.unary_echo(echo), floors.health_check(cpd)
        run_threads(lambda w, i: unary(), 1, min(ops, 20))  # warm-up, not recorded
        run_threads(lambda w, i: health(), 1, min(ops, 20))
        for level in levels:
            results[(FLOOR_UNARY, level)] = run_threads(lambda w, i: unary(), level, ops, echo_pid)
            streams = [floors.StreamRoundTrip(echo) for _ in range(level)]
            stream_ops = max(ops, STREAM_FLOOR_MIN_OPS) if level == 1 else ops
            try:
                for stream in streams:
                    stream()  # open it: the first message is not measured

                def round_trip(w: int, i: int, s: list[floors.StreamRoundTrip] = streams) -> None:
                    s[w]()

                results[(FLOOR_STREAM, level)] = run_threads(
                    round_trip, level, stream_ops, echo_pid
                )
            finally:
                for stream in streams:
                    stream.close()
            results[(FLOOR_HEALTH, level)] = run_threads(lambda w, i: health(), level, ops, cpd_pid)
    return results


def measure_raw_commit(spec: StoreSpec, ops: int) -> Measurement:
    """The commit floor (bench/raw_commit.py): ``ops`` rows of the put case, each committed
    alone through sqlite3 or asyncpg in this process, into the store ``spec`` names (migrated
    by its server, which is closed by now); CPU is this process's."""
    warm = min(ops, 20)
    rows = raw_commit.put_rows(STATE, warm + ops)
    if spec.backend == "sqlite":
        with raw_commit.sqlite_commit(spec.url.removeprefix("sqlite://"), rows) as op:
            run_threads(op, 1, warm)  # warm-up, not recorded
            return run_threads(lambda w, i: op(w, warm + i), 1, ops)

    async def measure() -> Measurement:
        async with raw_commit.postgres_commit(spec.url, spec.pg_schema, rows) as op:
            await run_tasks(op, 1, warm)  # warm-up, not recorded
            return await run_tasks(lambda w, i: op(w, warm + i), 1, ops)

    return asyncio.run(measure())


def _floor_row(backend: str, case: str, level: int, m: Measurement) -> dict[str, Any]:
    """A floor as a row of ``cases``: the sidecar fields hold the floor, no baseline."""
    return {
        "case": case,
        "backend": backend,
        "client": "sync",
        "concurrency": level,
        "ops": m.ops,
        "sidecar_p50_us": round(m.p50_us, 1),
        "sidecar_p99_us": round(m.p99_us, 1),
        "sidecar_ops_s": round(m.ops_s, 1),
        "baseline": None,
        "baseline_p50_us": None,
        "baseline_p99_us": None,
        "baseline_ops_s": None,
        "ratio_p50": None,
        "ratio_ops_s": None,
        **_cpu_fields(m, None),
    }


def _cpu_fields(side: Measurement, base: Measurement | None) -> dict[str, Any]:
    """The CPU columns of a row (bench/cpu.py): the in-process baseline has no server, so
    its figure is its client's."""
    return cpu.row_fields(side.client_cpu_us, side.server_cpu_us, base.cpu_us if base else None)


def benchmark_backend(
    backend: str, stores: Stores, levels: Sequence[int], ops: int, echo: floors.EchoServer
) -> list[dict[str, Any]]:
    """The case rows of one backend: the floors, then the sidecar (threads and tasks) against
    in-process; each sidecar row also carries its ratio to the unary echo floor."""
    baseline_cp = stores.baseline(backend)
    try:
        baseline_cp.setup()
        baseline = measure_sync(baseline_cp, levels, ops, "inproc")
    finally:
        baseline_cp.close()
    spec = stores.spec(backend, "cases")
    with running(spec) as server:
        floor = measure_floors(echo, server, levels, ops)
        with SidecarCheckpointer(server.target) as adapter:
            sidecar = measure_sync(adapter, levels, ops, "sidecar", _pid(server))
        tasks = measure_async(server.target, levels, ops, _pid(server))
    commit = measure_raw_commit(spec, ops)
    rows = [
        _floor_row(backend, case, level, floor[(case, level)])
        for case in FLOORS
        for level in levels
    ]
    rows.append(_floor_row(backend, FLOOR_COMMIT, 1, commit))
    for client, results in (("sync", sidecar), ("async", tasks)):
        for case in CASES:
            for level in levels:
                side, base = results[(case, level)], baseline[(case, level)]
                unary = floor[(FLOOR_UNARY, level)]
                rows.append(
                    {
                        "case": case if client == "sync" else f"{case} [async]",
                        "backend": backend,
                        "client": client,
                        "concurrency": level,
                        "ops": side.ops,
                        "sidecar_p50_us": round(side.p50_us, 1),
                        "sidecar_p99_us": round(side.p99_us, 1),
                        "sidecar_ops_s": round(side.ops_s, 1),
                        "baseline": BASELINE_NAMES[backend],
                        "baseline_p50_us": round(base.p50_us, 1),
                        "baseline_p99_us": round(base.p99_us, 1),
                        "baseline_ops_s": round(base.ops_s, 1),
                        "ratio_p50": round(side.p50_us / base.p50_us, 3),
                        "ratio_ops_s": round(side.ops_s / base.ops_s, 3),
                        "floor_p50_us": round(unary.p50_us, 1),
                        "ratio_floor_p50": round(side.p50_us / unary.p50_us, 3),
                        **_cpu_fields(side, base),
                    }
                )
    return rows


MULTI_CASE = "put multi-process"


def multi_process_row(
    backend: str, stores: Stores, processes: int, threads: int, ops: int
) -> dict[str, Any]:
    """``processes`` x ``threads`` writers through fastaiagent's in-process checkpointer on one
    shared store (one SQLite file, one Postgres schema), then through one sidecar; with the
    errors each side raised."""
    if backend == "sqlite":
        where, schema = str(stores.workdir / "multiprocess.db"), ""
    else:
        where, schema = stores.pg_dsn, f"cpdbench_fastaiagent_mp_{uuid.uuid4().hex[:8]}"
        stores.schemas.append(schema)
    # The baseline's tables, made once before the workers start (each also runs its setup).
    baseline_cp = (
        SQLiteCheckpointer(db_path=where)
        if backend == "sqlite"
        else PostgresCheckpointer(stores.pg_dsn, schema=schema)
    )
    baseline_cp.setup()
    baseline_cp.close()
    base = multiproc.run_multi(
        backend, where, schema=schema, processes=processes, threads=threads, ops=ops
    )
    with running(stores.spec(backend, "multi")) as server:
        side = multiproc.run_multi(
            "sidecar",
            server.target,
            processes=processes,
            threads=threads,
            ops=ops,
            server_pid=_pid(server),
        )
    s, b = _measured(side), _measured(base)
    return {
        "case": f"{MULTI_CASE} ({processes}x{threads})",
        "backend": backend,
        "client": "sync",
        "concurrency": processes * threads,
        "processes": processes,
        "ops": s.ops,
        "sidecar_p50_us": round(s.p50_us, 1),
        "sidecar_p99_us": round(s.p99_us, 1),
        "sidecar_ops_s": round(s.ops_s, 1),
        "sidecar_errors": side.errors,
        "baseline": BASELINE_NAMES[backend],
        "baseline_p50_us": round(b.p50_us, 1),
        "baseline_p99_us": round(b.p99_us, 1),
        "baseline_ops_s": round(b.ops_s, 1),
        "baseline_errors": base.errors,
        "ratio_p50": round(s.p50_us / b.p50_us, 3) if s.ops and b.ops else None,
        "ratio_ops_s": round(s.ops_s / b.ops_s, 3) if b.ops_s else None,
        **_cpu_fields(s, b),
    }


def _measured(result: multiproc.MultiResult) -> Measurement:
    """Latency, throughput and CPU per successful call (zeros when every call failed)."""
    if not result.samples_us:
        return Measurement(p50_us=0.0, p99_us=0.0, ops_s=0.0, ops=0)
    used = cpu.CpuUsage(result.client_cpu_s, result.server_cpu_s)
    return _measurement(result.samples_us, result.elapsed_s, used)


#: The graph rows of each backend: (asyncio saver, pipeline).
GRAPH_SAVERS = ((False, False), (False, True), (True, False), (True, True))


def graph_row(
    backend: str,
    stores: Stores,
    turns: int,
    reads: int,
    threads: int,
    *,
    pipeline: bool = False,
    aio: bool = False,
) -> dict[str, Any]:
    """The LangGraph chat thread through a fresh sidecar against LangGraph's in-process saver
    of the backend (bench/graph.py); the Postgres one in a schema of its own. ``pipeline``:
    the saver sends writes ahead (G22); ``aio``: the asyncio savers."""
    schema = f"cpdbench_langgraph_{uuid.uuid4().hex[:8]}"
    if backend == "postgres":
        stores.schemas.append(schema)
    return graph_bench.benchmark(
        backend,
        stores.spec(backend, "graph"),
        stores.workdir,
        stores.pg_dsn,
        schema,
        turns,
        reads,
        threads,
        log=lambda line: print(line, flush=True),
        pipeline=pipeline,
        aio=aio,
    )


# --- scale series -------------------------------------------------------------------------

_SEED_COLUMNS = (
    "namespace",
    "execution_id",
    "checkpoint_id",
    "chain_name",
    "node_id",
    "node_index",
    "status",
    "state_snapshot_json",
    "node_input_json",
    "node_output_json",
    "iteration",
    "iteration_counters_json",
    "interrupt_reason",
    "interrupt_context_json",
    "created_at",
)
#: Every seeded run's interrupted checkpoint becomes its pending interrupt, as RecordInterrupt
#: would write it ({after} is the highest sequence before the batch).
_SEED_PENDING = """
INSERT INTO {prefix}pending_interrupts
    (namespace, execution_id, chain_name, node_id, reason, context_json, agent_path,
     created_at, checkpoint_id, sequence)
SELECT namespace, execution_id, chain_name, node_id, interrupt_reason, interrupt_context_json,
       agent_path, created_at, checkpoint_id, sequence
FROM {prefix}checkpoints
WHERE namespace = 'default' AND status = 'interrupted' AND sequence > {after}
"""


def _seed_rows(first_run: int, runs: int, created_at: Any) -> Iterator[tuple[Any, ...]]:
    for r in range(first_run, first_run + runs):
        run = f"scale-{r:07d}"
        for j in range(SEED_RUN_LENGTH):
            last = j == SEED_RUN_LENGTH - 1
            yield (
                "default",
                run,
                f"{run}-{j}",
                "scale",
                f"n{j}",
                j,
                "interrupted" if last else "completed",
                SEED_STATE,
                "{}",
                "{}",
                0,
                "{}",
                "approval" if last else None,
                "{}",
                created_at,
            )


def seed_sqlite(path: str, first_run: int, runs: int) -> None:
    """Append ``runs`` seeded runs to the sidecar's SQLite file in one transaction."""
    conn = sqlite3.connect(path, timeout=60)
    try:
        after = conn.execute("SELECT coalesce(max(sequence), 0) FROM checkpoints").fetchone()[0]
        now_us = int(time.time() * 1_000_000)
        columns = ", ".join(_SEED_COLUMNS)
        marks = ", ".join("?" * len(_SEED_COLUMNS))
        with conn:
            conn.executemany(
                f"INSERT INTO checkpoints ({columns}) VALUES ({marks})",
                _seed_rows(first_run, runs, now_us),
            )
            conn.execute(_SEED_PENDING.format(prefix="", after=int(after)))
    finally:
        conn.close()


def seed_postgres(dsn: str, schema: str, first_run: int, runs: int) -> None:
    """Append ``runs`` seeded runs to the sidecar's Postgres schema with COPY."""

    async def seed() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            after = await conn.fetchval(
                f'SELECT coalesce(max(sequence), 0) FROM "{schema}".checkpoints'
            )
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "checkpoints",
                    schema_name=schema,
                    columns=_SEED_COLUMNS,
                    records=_seed_rows(first_run, runs, datetime.now(UTC)),
                )
                await conn.execute(_SEED_PENDING.format(prefix=f'"{schema}".', after=int(after)))
            # What autovacuum does soon after a bulk load; the planner needs the new sizes.
            await conn.execute(f'ANALYZE "{schema}".checkpoints')
            await conn.execute(f'ANALYZE "{schema}".pending_interrupts')
        finally:
            await conn.close()

    asyncio.run(seed())


def scale_series(
    backend: str, stores: Stores, points: Sequence[int], ops: int
) -> list[dict[str, Any]]:
    """get_last and claim latency (one caller, through the adapter) as the store grows."""
    spec = stores.spec(backend, "scale")
    rows = []
    with running(spec) as server, SidecarCheckpointer(server.target) as adapter:
        seeded_runs = 0
        claimed: set[int] = set()
        rng = random.Random(7)
        for point in points:
            runs = max(point // SEED_RUN_LENGTH - seeded_runs, 0)
            started = time.perf_counter()
            if backend == "sqlite":
                seed_sqlite(spec.url.removeprefix("sqlite://"), seeded_runs, runs)
            else:
                seed_postgres(spec.url, spec.pg_schema, seeded_runs, runs)
            seed_s = time.perf_counter() - started
            seeded_runs += runs
            available = [r for r in range(seeded_runs) if r not in claimed]
            picks = rng.sample(available, min(len(available), ops))
            claimed.update(picks)

            def get_last(w: int, i: int, picks: list[int] = picks) -> None:
                assert adapter.get_last(f"scale-{picks[i % len(picks)]:07d}") is not None

            def claim(w: int, i: int, picks: list[int] = picks) -> None:
                assert adapter.delete_pending_interrupt_atomic(f"scale-{picks[i]:07d}") is not None

            run_threads(get_last, 1, 5)  # warm-up
            last = run_threads(get_last, 1, ops)
            claims = run_threads(claim, 1, len(picks))
            rows.append(
                {
                    "backend": backend,
                    "rows": seeded_runs * SEED_RUN_LENGTH,
                    "pending": len(available),
                    "seed_s": round(seed_s, 2),
                    "get_last_p50_us": round(last.p50_us, 1),
                    "get_last_p99_us": round(last.p99_us, 1),
                    "claim_p50_us": round(claims.p50_us, 1),
                    "claim_p99_us": round(claims.p99_us, 1),
                }
            )
            print(
                f"  scale {backend:<8} {rows[-1]['rows']:>9} rows (seeded in {seed_s:5.1f}s): "
                f"get_last p50 {last.p50_us:7.0f}us  claim p50 {claims.p50_us:7.0f}us",
                flush=True,
            )
    return rows


# --- server memory ------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    """The resident set size of a process, in MiB, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def idle_mcpu(pid: int, seconds: float) -> float:
    """The server's CPU over ``seconds`` of doing nothing (no call, no watcher), in
    milli-CPUs (1 mCPU: a thousandth of one CPU's time), from /proc/<pid>/stat."""
    start = cpu.process_cpu_s(pid)
    time.sleep(seconds)
    return round((cpu.process_cpu_s(pid) - start) / seconds * 1000, 2)


async def _open_watches(target: str, streams: int, channels: int) -> tuple[list[Any], list[Any]]:
    """Open ``streams`` WatchInterrupts calls over ``channels`` channels; wait for each to
    deliver its first message (the end of the empty snapshot)."""
    opened = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(channels)
    ]
    calls = []
    for i in range(streams):
        stub = interrupt_service_pb2_grpc.InterruptServiceStub(opened[i % channels])
        request = interrupt_service_pb2.WatchInterruptsRequest(namespace="bench-watch")
        calls.append(stub.WatchInterrupts(request))
    return opened, calls


def measure_rss(
    backend: str, stores: Stores, streams: int, idle_seconds: float = 10.0
) -> dict[str, Any]:
    """The server's CPU over ``idle_seconds`` and RSS idle (after a few calls, no watcher)
    and its RSS with ``streams`` open watch streams."""
    # Every stream comes from this one process, which the per-client limit would refuse
    # (over a Unix socket all clients are one peer); the figure is memory, not the limit.
    no_watch_limits = ("--max-watch-streams", "0", "--max-watch-streams-per-peer", "0")
    with running(stores.spec(backend, "rss"), *no_watch_limits) as server:
        assert server.process is not None
        pid = server.process.pid
        with SidecarCheckpointer(server.target) as adapter:
            setup_reads(adapter, "rss")
            for i in range(50):
                assert adapter.get_last("rss-last") is not None
                adapter.put(_fast_checkpoint("rss-w", i, STATE))
        time.sleep(0.5)
        row: dict[str, Any] = {
            "backend": backend,
            "idle_cpu_mcpu": idle_mcpu(pid, idle_seconds),
            "idle_rss_mb": round(rss_mb(pid), 1),
            "watch_streams": streams,
            "watch_rss_mb": None,
            "watch_error": None,
        }

        async def watch() -> None:
            channels, calls = await _open_watches(server.target, streams, max(1, streams // 100))
            try:
                await asyncio.wait_for(asyncio.gather(*(call.read() for call in calls)), 30)
                await asyncio.sleep(1.0)
                row["watch_rss_mb"] = round(rss_mb(pid), 1)
            finally:
                for call in calls:
                    call.cancel()
                for channel in channels:
                    await channel.close()

        try:
            asyncio.run(watch())
        except (grpc.RpcError, TimeoutError) as exc:
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else "timed out"
            row["watch_error"] = f"{type(exc).__name__}: {detail}"
        return row


# --- report -------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def _case_row(
    cases: list[dict[str, Any]], backend: str, case: str, level: int
) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in cases
            if r["backend"] == backend and r["case"] == case and r["concurrency"] == level
        ),
        None,
    )


def earlier_targets(
    cases: list[dict[str, Any]],
    scale: list[dict[str, Any]],
    rss: list[dict[str, Any]],
    graph: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The targets set before the current ones (bench/README.md), each PASS or MISS from
    this run's figures; a target whose figures the run did not take is left out."""
    out: list[dict[str, Any]] = []

    def add(name: str, backend: str, value: float | None, limit: float, higher: bool) -> None:
        passed = value is not None and (value >= limit if higher else value <= limit)
        out.append(
            {
                "target": name,
                "backend": backend,
                "value": value,
                "limit": limit,
                "result": "PASS" if passed else "MISS",
            }
        )

    def row(backend: str, case: str, level: int) -> dict[str, Any] | None:
        return _case_row(cases, backend, case, level)

    for backend, limit in (("sqlite", 1.5), ("postgres", 1.0)):
        put = row(backend, CASES[0], 1)
        if put:
            add("put p50 / in-process p50", backend, put["ratio_p50"], limit, higher=False)
    for backend in BACKENDS:
        put32 = row(backend, CASES[0], 32)
        if put32:
            add("32 writers ops/s / in-process", backend, put32["ratio_ops_s"], 3.0, higher=True)
    # CPU per put, the sidecar's client and server together against the in-process
    # checkpointer's: the figure a pod pays, which a loaded machine disturbs least.
    for backend in BACKENDS:
        for case, level, limit in (
            (CASES[0], 1, 2.0),
            (CASES[0], 32, 1.0),
            (f"{CASES[0]} [async]", 32, 1.0),
        ):
            put = row(backend, case, level)
            if put and put.get("ratio_cpu") is not None:
                name = f"{case} CPU, {level} caller{'s' if level > 1 else ''} / in-process"
                add(name, backend, put["ratio_cpu"], limit, higher=False)
    for backend, limit in (("sqlite", 5.0), ("postgres", 3.0)):
        multi = next(
            (r for r in cases if r["backend"] == backend and r["case"].startswith(MULTI_CASE)),
            None,
        )
        if multi:
            name = f"{multi['case']} ops/s / in-process"
            add(name, backend, multi["ratio_ops_s"], limit, higher=True)
            errors = sum(multi["sidecar_errors"].values())
            add(f"{MULTI_CASE}: errors through the sidecar", backend, errors, 0, higher=False)
    for backend in BACKENDS:
        echo = row(backend, FLOOR_UNARY, 1)
        for case, limit in ((CASES[1], 1.5), (FLOOR_HEALTH, 1.15)):
            measured = row(backend, case, 1)
            if echo and measured:
                ratio = round(measured["sidecar_p50_us"] / echo["sidecar_p50_us"], 3)
                add(f"{case} p50 / unary echo p50", backend, ratio, limit, higher=False)
    for backend in BACKENDS:
        claim = row(backend, CASES[3], 1)
        if claim:
            add("record + claim p50 / in-process p50", backend, claim["ratio_p50"], 2.0, False)
    for backend in BACKENDS:
        series = sorted((r for r in scale if r["backend"] == backend), key=lambda r: r["rows"])
        if len(series) >= 2:
            small, large = series[0], series[-1]
            for op in ("get_last", "claim"):
                ratio = round(large[f"{op}_p50_us"] / small[f"{op}_p50_us"], 3)
                name = f"{op} p50 at {large['rows']} rows / at {small['rows']}"
                add(name, backend, ratio, 1.2, higher=False)
    for r in rss:
        add("server idle mCPU (no watcher)", r["backend"], r.get("idle_cpu_mcpu"), 2.0, False)
        add("server idle RSS MB (no watcher)", r["backend"], r["idle_rss_mb"], 50.0, False)
        name = f"server RSS MB with {r['watch_streams']} watch streams"
        add(name, r["backend"], r["watch_rss_mb"], 100.0, higher=False)
    for g in graph:
        if g.get("pipeline") or g.get("aio"):
            continue  # the earlier targets hold the blocking saver as it was then
        first, last = f"1-{g['window']}", f"{g['turns'] - g['window'] + 1}-{g['turns']}"
        add(f"graph turns {last} p50 / in-process", g["backend"], g["ratio_last"], 1.5, False)
        add(
            f"graph turns {last} / turns {first} (flat)",
            g["backend"],
            g["sidecar_flat"],
            1.2,
            False,
        )
        add("graph get_state p50 ms", g["backend"], g["sidecar_get_state_ms"], 2.0, False)
    return out


def targets(
    cases: list[dict[str, Any]], graph: Sequence[dict[str, Any]], backends: Sequence[str]
) -> list[dict[str, Any]]:
    """The current targets (bench/README.md, "Targets"), one row per target and backend:
    the ratio of two figures of this run, its bound, and PASS or MISS; ``n/a`` where the run
    did not take one of the two (a part skipped, no level of 32 callers, no SQLite graph
    row for the Postgres turn). CPU where the target names CPU, wall time otherwise; never
    an absolute time against a bound."""
    out: list[dict[str, Any]] = []

    def add(
        name: str,
        backend: str,
        numerator: float | None,
        denominator: float | None,
        unit: str,
        limit: float,
        higher: bool = False,
    ) -> None:
        value = None
        if numerator is not None and denominator:
            value = round(numerator / denominator, 3)
        result = "n/a"
        if value is not None:
            result = "PASS" if (value >= limit if higher else value <= limit) else "MISS"
        out.append(
            {
                "target": name,
                "backend": backend,
                "value": value,
                "bound": ">=" if higher else "<=",
                "limit": limit,
                "result": result,
                "numerator": numerator,
                "denominator": denominator,
                "unit": unit,
            }
        )

    def field(row: dict[str, Any] | None, key: str) -> float | None:
        return None if row is None else row.get(key)

    blocking = [g for g in graph if not g.get("aio")]
    graphs = {g["backend"]: g for g in blocking if not g.get("pipeline")}
    pipelined = {g["backend"]: g for g in blocking if g.get("pipeline")}
    # The Postgres turn too is held to SqliteSaver's, the cheapest in-process saver (the
    # target names it): its figure comes from the SQLite graph row of the same run.
    sqlite_saver_turn = field(graphs.get("sqlite"), "baseline_cpu_us")
    for backend in backends:
        g = graphs.get(backend)
        add(
            "graph turn CPU (cli+srv) / SqliteSaver turn",
            backend,
            field(g, "sidecar_cpu_us"),
            sqlite_saver_turn,
            "us CPU",
            1.5,
        )
    # The pipelined rows ran minutes after the plain ones, each alternating with a
    # SqliteSaver of its own: that one's figure is the divisor, taken in the same seconds.
    pipelined_sqlite_saver_turn = field(pipelined.get("sqlite"), "baseline_cpu_us")
    for backend in backends:
        add(
            "graph turn CPU, pipelined saver (G22) / SqliteSaver turn",
            backend,
            field(pipelined.get(backend), "sidecar_cpu_us"),
            pipelined_sqlite_saver_turn,
            "us CPU",
            1.5,
        )
    # The asyncio savers, each held to AsyncSqliteSaver's turn of its own row's SQLite run.
    for pipeline, name in (
        (False, "graph turn CPU, asyncio saver / AsyncSqliteSaver turn"),
        (True, "graph turn CPU, asyncio pipelined saver (G22) / AsyncSqliteSaver turn"),
    ):
        rows = {
            g["backend"]: g for g in graph if g.get("aio") and bool(g.get("pipeline")) == pipeline
        }
        async_sqlite_saver_turn = field(rows.get("sqlite"), "baseline_cpu_us")
        for backend in backends:
            add(
                name,
                backend,
                field(rows.get(backend), "sidecar_cpu_us"),
                async_sqlite_saver_turn,
                "us CPU",
                1.5,
            )
    for backend in backends:
        g = graphs.get(backend)
        turn = g["turns"] if g else "N"
        add(
            f"graph get_state at turn {turn} p50 / in-process",
            backend,
            field(g, "sidecar_get_state_ms"),
            field(g, "baseline_get_state_ms"),
            "ms",
            2.0,
        )
    for backend in backends:
        g = graphs.get(backend)
        late = f"{g['turns'] - g['window'] + 1}-{g['turns']}" if g else "late"
        early = f"1-{g['window']}" if g else "early"
        add(
            f"graph turns {late} / turns {early} (p50)",
            backend,
            field(g, "sidecar_last_ms"),
            field(g, "sidecar_first_ms"),
            "ms",
            1.2,
        )
    for backend in backends:
        put = _case_row(cases, backend, CASES[0], 1)
        stream = _case_row(cases, backend, FLOOR_STREAM, 1)
        commit = _case_row(cases, backend, FLOOR_COMMIT, 1)
        floor = None
        stream_server = field(stream, "sidecar_server_cpu_us")
        commit_cpu = field(commit, "sidecar_client_cpu_us")
        if stream_server is not None and commit_cpu is not None:
            floor = round(stream_server + commit_cpu, 1)
        # The server's clock counts 10 ms ticks: a window with none in it (a tiny run) is
        # not a free put, and is no figure.
        server = field(put, "sidecar_server_cpu_us") or None
        add(
            "put srv CPU, 1 caller / (bidi srv msg + raw commit)",
            backend,
            server,
            floor,
            "us CPU",
            1.5,
        )
    for backend in backends:
        put = _case_row(cases, backend, CASES[0], 1)
        stream = _case_row(cases, backend, FLOOR_STREAM, 1)
        add(
            "put cli CPU, 1 caller / bidi cli msg",
            backend,
            field(put, "sidecar_client_cpu_us"),
            field(stream, "sidecar_client_cpu_us"),
            "us CPU",
            2.0,
        )
    for case, who in ((CASES[0], "adapter"), (f"{CASES[0]} [async]", "asyncio")):
        for backend in backends:
            put = _case_row(cases, backend, case, 32)
            add(
                f"put CPU, 32 callers ({who}) / in-process",
                backend,
                field(put, "sidecar_cpu_us"),
                field(put, "baseline_cpu_us"),
                "us CPU",
                1.0,
            )
    for case, who in ((CASES[0], "adapter"), (f"{CASES[0]} [async]", "asyncio")):
        for backend in backends:
            put = _case_row(cases, backend, case, 32)
            add(
                f"puts/s, 32 callers ({who}) / in-process",
                backend,
                field(put, "sidecar_ops_s"),
                field(put, "baseline_ops_s"),
                "ops/s",
                2.0,
                higher=True,
            )
    return out


def print_cases(rows: list[dict[str, Any]]) -> None:
    """The case table: the floors, then the sidecar against in-process (ratios sidecar /
    in-process) and against the unary echo floor of the same level (``/echo``), then CPU
    microseconds per operation: the client's, the server's, both, the in-process
    checkpointer's and the ratio of the totals."""
    if not rows:
        return
    header = (
        f"{'case':<30} {'backend':<8} {'conc':>4} {'p50 us':>8} {'p99 us':>8} {'ops/s':>8} "
        f"{'base p50':>9} {'base ops/s':>10} {'p50 x':>6} {'ops/s x':>7} {'/echo':>6} "
        f"{'cli cpu':>8} {'srv cpu':>8} {'cpu us':>7} {'base cpu':>8} {'cpu x':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        line = (
            f"{r['case']:<30} {r['backend']:<8} {r['concurrency']:>4} "
            f"{r['sidecar_p50_us']:>8.0f} {r['sidecar_p99_us']:>8.0f} {r['sidecar_ops_s']:>8.0f} "
        )
        if r["baseline"] is None:  # a floor
            line += f"{'':>9} {'':>10} {'':>6} {'':>7} {'':>6} "
        else:
            line += (
                f"{r['baseline_p50_us']:>9.0f} {r['baseline_ops_s']:>10.0f} "
                f"{_num(r['ratio_p50'], 6)} {_num(r['ratio_ops_s'], 7)} "
                f"{_num(r.get('ratio_floor_p50'), 6)} "
            )
        print(line + _cpu_columns(r))


def _cpu_columns(r: dict[str, Any]) -> str:
    return (
        f"{_num(r['sidecar_client_cpu_us'], 8, 0)} {_num(r['sidecar_server_cpu_us'], 8, 0)} "
        f"{_num(r['sidecar_cpu_us'], 7, 0)} {_num(r['baseline_cpu_us'], 8, 0)} "
        f"{_num(r['ratio_cpu'], 6)}"
    )


def _num(value: float | None, width: int, places: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{places}f}"


def print_multi(r: dict[str, Any]) -> None:
    """One line for the multi-process case, with the errors of each side."""
    print(
        f"  {r['case']} {r['backend']}: sidecar {r['sidecar_ops_s']:.0f} ops/s, "
        f"p50 {r['sidecar_p50_us']:.0f} us, errors {r['sidecar_errors'] or 'none'}; "
        f"in-process {r['baseline_ops_s']:.0f} ops/s, p50 {r['baseline_p50_us']:.0f} us, "
        f"errors {r['baseline_errors'] or 'none'}; CPU per put "
        f"{_num(r['sidecar_cpu_us'], 0, 0)} us (client {_num(r['sidecar_client_cpu_us'], 0, 0)}, "
        f"server {_num(r['sidecar_server_cpu_us'], 0, 0)}), "
        f"in-process {_num(r['baseline_cpu_us'], 0, 0)} us",
        flush=True,
    )


def print_earlier_targets(rows: list[dict[str, Any]]) -> None:
    """The earlier targets with PASS/MISS."""
    print(f"\n{'earlier target':<48} {'backend':<8} {'value':>8} {'limit':>7}  result")
    for t in rows:
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        print(f"{t['target']:<48} {t['backend']:<8} {value:>8} {t['limit']:>7.2f}  {t['result']}")


def print_targets(rows: list[dict[str, Any]]) -> None:
    """The current targets: the ratio, its bound, PASS/MISS/n/a, and the two figures of
    this run it divides."""
    print(
        f"\ntargets (ratios of this run's figures)\n"
        f"{'target':<52} {'backend':<8} {'ratio':>6} {'bound':>7}  {'result':<6} from"
    )
    for t in rows:
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        bound = f"{t['bound']} {t['limit']:.1f}"
        figures = f"{_figure(t['numerator'])} / {_figure(t['denominator'])} {t['unit']}"
        print(
            f"{t['target']:<52} {t['backend']:<8} {value:>6} {bound:>7}  {t['result']:<6} {figures}"
        )


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; --quick changes the defaults of the counts, never an explicit flag."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts; scale 1k and 10k rows")
    parser.add_argument("--iterations", type=int, help="operations per case and level")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated caller counts")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="sqlite,postgres")
    parser.add_argument(
        "--pg-dsn", default=os.environ.get("CHECKPOINTD_TEST_PG_DSN", DEFAULT_PG_DSN)
    )
    parser.add_argument("--scale-rows", help="comma-separated stored-row counts")
    parser.add_argument("--scale-ops", type=int, help="get_last and claim calls per scale point")
    parser.add_argument("--no-scale", action="store_true", help="skip the scale series")
    parser.add_argument(
        "--watch-streams", type=int, default=1000, help="streams for the RSS figure"
    )
    parser.add_argument("--no-rss", action="store_true", help="skip the server RSS figures")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=10.0,
        help="the window of the idle CPU figure (10 ms clock ticks: 10 s reads 0.1 mCPU)",
    )
    parser.add_argument(
        "--multi-process", default="8x4", help="processes x threads of the multi-process case"
    )
    parser.add_argument(
        "--multi-process-ops", type=int, help="puts per thread in the multi-process case"
    )
    parser.add_argument(
        "--no-multi-process", action="store_true", help="skip the multi-process case"
    )
    parser.add_argument(
        "--graph-turns", type=int, default=200, help="turns of the LangGraph chat thread"
    )
    parser.add_argument(
        "--graph-reads", type=int, help="get_state calls after the LangGraph chat thread"
    )
    parser.add_argument(
        "--graph-threads", type=int, default=3, help="LangGraph chat threads, turn by turn"
    )
    parser.add_argument(
        "--graph-delta-turns",
        type=int,
        default=500,
        help="turns of the LangGraph DeltaChannel chat thread (SQLite; 0 skips it)",
    )
    parser.add_argument("--no-graph", action="store_true", help="skip the LangGraph rows")
    parser.add_argument(
        "--graph-only", action="store_true", help="only the LangGraph rows (no cases, floors, ...)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the JSON file")
    args = parser.parse_args(argv)
    if args.iterations is None:
        args.iterations = 100 if args.quick else 1000
    if args.scale_rows is None:
        args.scale_rows = "1000,10000" if args.quick else "1000,100000,1000000"
    if args.scale_ops is None:
        args.scale_ops = 30 if args.quick else 300
    if args.graph_reads is None:
        args.graph_reads = 30 if args.quick else 100
    if args.graph_only:
        args.no_scale = args.no_rss = args.no_multi_process = True
    if args.multi_process_ops is None:
        args.multi_process_ops = max(5, args.iterations // 10)
    processes, _, threads = args.multi_process.partition("x")
    args.mp_processes, args.mp_threads = int(processes), int(threads or 1)
    args.levels = [int(x) for x in args.concurrency.split(",")]
    args.scale_points = [int(x) for x in args.scale_rows.split(",")]
    args.backend_list = [b for b in args.backends.split(",") if b]
    unknown = set(args.backend_list) - set(BACKENDS)
    if (
        unknown
        or args.iterations < 1
        or min(args.levels) < 1
        or args.graph_turns < 2
        or args.graph_threads < 1
    ):
        parser.error(f"bad --backends/--iterations/--concurrency/--graph-turns ({sorted(unknown)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine()
    mode = "quick" if args.quick else "full"
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
        f"load {info['load_average']}, Python {info['python']}; mode {mode}, "
        f"{args.iterations} ops per case and level",
        flush=True,
    )
    stores = Stores(Path(tempfile.mkdtemp(prefix="cpd-bench-")), args.pg_dsn, [])
    cases: list[dict[str, Any]] = []
    scale: list[dict[str, Any]] = []
    rss: list[dict[str, Any]] = []
    graph: list[dict[str, Any]] = []
    graph_delta: list[dict[str, Any]] = []
    try:
        with floors.echo_server(stores.workdir) as echo:
            for backend in args.backend_list:
                print(f"{backend} ...", flush=True)
                if not args.graph_only:
                    cases += benchmark_backend(backend, stores, args.levels, args.iterations, echo)
                if not args.no_graph:
                    for aio, pipeline in GRAPH_SAVERS:
                        graph.append(
                            graph_row(
                                backend,
                                stores,
                                args.graph_turns,
                                args.graph_reads,
                                args.graph_threads,
                                pipeline=pipeline,
                                aio=aio,
                            )
                        )
                if not args.no_graph and backend == "sqlite" and args.graph_delta_turns > 1:
                    graph_delta.append(
                        graph_bench.delta_benchmark(
                            stores.workdir,
                            args.graph_delta_turns,
                            args.graph_reads,
                            log=lambda line: print(line, flush=True),
                        )
                    )
                if not args.no_multi_process:
                    cases.append(
                        multi_process_row(
                            backend,
                            stores,
                            args.mp_processes,
                            args.mp_threads,
                            args.multi_process_ops,
                        )
                    )
                    print_multi(cases[-1])
                if not args.no_scale:
                    scale += scale_series(backend, stores, args.scale_points, args.scale_ops)
                if not args.no_rss:
                    rss.append(measure_rss(backend, stores, args.watch_streams, args.idle_seconds))
                    r = rss[-1]
                    print(
                        f"  rss {backend:<8} idle {r['idle_cpu_mcpu']} mCPU, "
                        f"{r['idle_rss_mb']} MB, with {r['watch_streams']} "
                        f"watch streams {r['watch_rss_mb']} MB {r['watch_error'] or ''}",
                        flush=True,
                    )
                stores.drop_schemas()
    finally:
        stores.drop_schemas()
        shutil.rmtree(stores.workdir, ignore_errors=True)
    print()
    print_cases(cases)
    graph_bench.print_rows(graph)
    graph_bench.print_delta_rows(graph_delta)
    earlier = earlier_targets(cases, scale, rss, graph)
    print_earlier_targets(earlier)
    results = targets(cases, graph, args.backend_list)
    print_targets(results)
    report = {
        "machine": info,
        "mode": mode,
        "iterations": args.iterations,
        "created_at": datetime.now(UTC).isoformat(),
        "cases": cases,
        "scale": scale,
        "rss": rss,
        "graph": graph,
        "graph_delta": graph_delta,
        "earlier_targets": earlier,
        "targets": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
