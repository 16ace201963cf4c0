"""The multi-process case: several processes, each with several threads, writing through one
store, the way a pod with several workers (or several services) uses it.

The parent starts ``processes`` copies of this module as workers; each opens its own
checkpointer (fastaiagent's ``SQLiteCheckpointer`` on one shared file, its
``PostgresCheckpointer`` on one shared schema, or ``SidecarCheckpointer`` on one server), runs
its setup, says it is ready, waits for the common start time the parent then sends, runs
``threads`` threads of ``put`` calls and prints one JSON line: its latencies, the errors it met
(by type and message; an error does not stop the thread) and when its last call ended, on the
system-wide clock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: About 2 KB of JSON, as in the other put cases.
STATE: dict[str, Any] = {"messages": [{"role": "user", "content": "x" * 100}] * 16}
#: The common start, this long after every worker said it is ready.
START_DELAY_S = 0.2


@dataclass(frozen=True)
class MultiResult:
    """What all the workers of one run measured together."""

    samples_us: list[float]
    errors: dict[str, int]
    elapsed_s: float
    client_cpu_s: float
    """The CPU of every worker over its own window (from the common start to its end)."""
    server_cpu_s: float | None
    """The server's CPU from the common start to the last worker's end (None: no server)."""


def _checkpointer(kind: str, where: str, schema: str, threads: int) -> Any:
    if kind == "sqlite":
        from fastaiagent.checkpointers import SQLiteCheckpointer

        return SQLiteCheckpointer(db_path=where)
    if kind == "postgres":
        from fastaiagent.checkpointers.postgres import PostgresCheckpointer

        return PostgresCheckpointer(where, schema=schema, max_pool_size=threads)
    from checkpointd_client.fastaiagent import SidecarCheckpointer

    return SidecarCheckpointer(where)


def _worker(args: argparse.Namespace) -> None:
    from fastaiagent.chain.checkpoint import Checkpoint

    from bench.cpu import self_cpu_s

    cp = _checkpointer(args.kind, args.where, args.schema, args.threads)
    samples: list[float] = []
    errors: Counter[str] = Counter()
    # Every worker runs its checkpointer's setup, as each process of a pod would. The tables
    # exist already; an error here (fastaiagent's Postgres migrations can deadlock when
    # several processes run them at once) is counted like any other, then setup is retried.
    for attempt in range(5):
        try:
            cp.setup()
            break
        except Exception as exc:
            errors[f"setup: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"] += 1
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    lock = threading.Lock()
    ends: list[float] = []

    def run(t: int) -> None:
        mine: list[float] = []
        for i in range(args.ops):
            checkpoint = Checkpoint(
                execution_id=f"{args.label}-t{t}",
                node_id=f"n{i}",
                node_index=i,
                state_snapshot=STATE,
            )
            started = time.perf_counter_ns()
            try:
                cp.put(checkpoint)
            except Exception as exc:  # counted and reported: the point of this case
                with lock:
                    errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
                continue
            mine.append((time.perf_counter_ns() - started) / 1000)
        with lock:
            samples.extend(mine)
            ends.append(time.time())

    threads = [threading.Thread(target=run, args=(t,)) for t in range(args.threads)]
    # Ready; the parent answers with the common start time once every worker is ready.
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    cpu_start = self_cpu_s()  # every thread of this worker, gRPC's too (bench/cpu.py)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu_s = self_cpu_s() - cpu_start
    cp.close()
    report = {"samples_us": samples, "errors": dict(errors), "end": max(ends), "cpu_s": cpu_s}
    print(json.dumps(report))


def run_multi(
    kind: str,
    where: str,
    *,
    schema: str = "",
    processes: int,
    threads: int,
    ops: int,
    server_pid: int | None = None,
) -> MultiResult:
    """``processes`` x ``threads`` callers, ``ops`` puts each, through ``kind`` at ``where``
    (served by ``server_pid``, if a server)."""
    from bench import cpu

    workers = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                f"--kind={kind}",
                f"--where={where}",
                f"--schema={schema}",
                f"--threads={threads}",
                f"--ops={ops}",
                f"--label=mp-{kind}-{uuid.uuid4().hex[:8]}-p{p}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in range(processes)
    ]
    for worker in workers:
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "ready":
            worker.wait(timeout=60)
            raise RuntimeError(f"a {kind} worker failed to start (exit {worker.returncode})")
    start = time.time() + START_DELAY_S
    server_start = cpu.sample(server_pid)  # the server is idle until the start
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(f"{start}\n")
        worker.stdin.flush()
    samples: list[float] = []
    errors: Counter[str] = Counter()
    end = start
    client_cpu_s = 0.0
    for worker in workers:
        out, _ = worker.communicate(timeout=600)  # closes stdin, reads the report
        if worker.returncode != 0:
            raise RuntimeError(f"a {kind} worker failed (exit {worker.returncode})")
        report = json.loads(out.strip().splitlines()[-1])
        samples += report["samples_us"]
        errors.update(report["errors"])
        end = max(end, report["end"])
        client_cpu_s += report["cpu_s"]
    server_cpu_s = cpu.since(server_start, server_pid).server_s
    return MultiResult(samples, dict(errors), end - start, client_cpu_s, server_cpu_s)


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "pyclient")]
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("sqlite", "postgres", "sidecar"), required=True)
    parser.add_argument("--where", required=True)
    parser.add_argument("--schema", default="")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--ops", type=int, required=True)
    parser.add_argument("--label", required=True)
    _worker(parser.parse_args())
