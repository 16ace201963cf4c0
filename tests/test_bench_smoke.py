"""The benchmark harness runs end to end on both backends and writes the documented JSON.

It checks that bench/run.py works, never how fast anything is: the figures themselves are
for ``make bench`` to print.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

ROOT = Path(__file__).resolve().parent.parent

CASE_KEYS = {
    "case",
    "backend",
    "concurrency",
    "sidecar_p50_us",
    "sidecar_p99_us",
    "sidecar_ops_s",
    "baseline",
    "baseline_p50_us",
    "baseline_ops_s",
    "ratio_p50",
    "ratio_ops_s",
    # CPU per operation (bench/cpu.py).
    "sidecar_client_cpu_us",
    "sidecar_server_cpu_us",
    "sidecar_cpu_us",
    "baseline_cpu_us",
    "ratio_cpu",
}
GRAPH_BASELINES = {"sqlite": "langgraph SqliteSaver", "postgres": "langgraph PostgresSaver"}
ASYNC_GRAPH_BASELINES = {
    "sqlite": "langgraph AsyncSqliteSaver",
    "postgres": "langgraph AsyncPostgresSaver",
}
#: The graph rows of each backend, in order: (saver, pipeline, asyncio).
GRAPH_SAVERS = [
    ("CheckpointdSaver", False, False),
    ("CheckpointdSaver pipeline", True, False),
    ("AsyncCheckpointdSaver", False, True),
    ("AsyncCheckpointdSaver pipeline", True, True),
]
CASES = {"put (2 KB state)", "get_last", "list(100)", "record + claim", "put/get idempotent"}
FLOORS = {"floor: grpc.aio unary echo", "floor: bidi stream round trip", "floor: Health/Check"}
#: The commit floor of a put: one caller, no server (bench/raw_commit.py).
COMMIT_FLOOR = "floor: raw commit of a put's row"
MULTI = "put multi-process (2x2)"
#: The current targets, each printed and written once per backend (bench/README.md).
TARGETS = {
    "graph turn CPU (cli+srv) / SqliteSaver turn",
    "graph turn CPU, pipelined saver (G22) / SqliteSaver turn",
    "graph turn CPU, asyncio saver / AsyncSqliteSaver turn",
    "graph turn CPU, asyncio pipelined saver (G22) / AsyncSqliteSaver turn",
    "graph get_state at turn 12 p50 / in-process",
    "graph turns 7-12 / turns 1-6 (p50)",
    "put srv CPU, 1 caller / (bidi srv msg + raw commit)",
    "put cli CPU, 1 caller / bidi cli msg",
    "put CPU, 32 callers (adapter) / in-process",
    "put CPU, 32 callers (asyncio) / in-process",
    "puts/s, 32 callers (adapter) / in-process",
    "puts/s, 32 callers (asyncio) / in-process",
}
#: The server's CPU is read in 10 ms clock ticks: a put window of a tiny run may hold none,
#: and that target then has no figure.
TICK_BOUND_TARGET = "put srv CPU, 1 caller / (bidi srv msg + raw commit)"


def _bench_schemas(dsn: str) -> set[str]:
    async def query() -> set[str]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cpdbench%'"
            )
        finally:
            await conn.close()
        return {row["nspname"] for row in rows}

    return asyncio.run(query())


#: Only a guard against a hung harness, far above a quick run on a loaded machine: the test
#: checks outputs, never speed (pytest's default 120 s per test would be a timing assertion).
HANG_GUARD_S = 540


@pytest.mark.timeout(HANG_GUARD_S + 60)
def test_bench_quick_run_writes_documented_json(pg_dsn: str, tmp_path: Path) -> None:
    """A tiny --quick run covers every case, both clients and both backends, seeds the scale
    series through the store's own tables, measures RSS with open watch streams, runs the
    LangGraph chat thread on both savers with CPU per operation everywhere, and drops every
    Postgres schema it created."""
    schemas_before = _bench_schemas(pg_dsn)
    output = tmp_path / "latest.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--iterations=5",
            "--concurrency=1,32",  # 32: the level the 32-caller targets read
            "--scale-rows=100,200",
            "--scale-ops=3",
            "--watch-streams=20",
            "--idle-seconds=0.5",
            "--multi-process=2x2",
            "--graph-turns=12",
            "--graph-reads=3",
            "--graph-threads=2",
            "--graph-delta-turns=30",
            f"--pg-dsn={pg_dsn}",
            f"--output={output}",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
        cwd=tmp_path,  # fastaiagent writes its local folder into the working directory
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "machine: " in result.stdout.splitlines()[0]
    report = json.loads(output.read_text())

    assert {"nproc", "memory_gib", "cpu_model"} <= report["machine"].keys()
    (delta,) = report["graph_delta"]
    assert delta["turns"] == 30
    assert delta["sidecar_stored_bytes"] > 0
    assert delta["baseline_stored_bytes"] > 0
    cases = report["cases"]
    assert all(row.keys() >= CASE_KEYS for row in cases)
    for backend in ("sqlite", "postgres"):
        every = [r for r in cases if r["backend"] == backend]
        assert {r["case"] for r in every} == (
            CASES | {f"{c} [async]" for c in CASES} | FLOORS | {COMMIT_FLOOR, MULTI}
        )
        # The floors: the same fields, the floor's figures in the sidecar ones, no baseline.
        floors = [r for r in every if r["case"] in FLOORS]
        assert {(r["case"], r["concurrency"]) for r in floors} == {
            (f, c) for f in FLOORS for c in (1, 32)
        }
        assert all(r["sidecar_p50_us"] > 0 and r["baseline"] is None for r in floors)
        # The commit floor: one caller, all of it in this process (no server).
        (commit,) = [r for r in every if r["case"] == COMMIT_FLOOR]
        assert commit["concurrency"] == 1
        assert commit["ops"] == 5
        assert commit["baseline"] is None
        assert commit["sidecar_server_cpu_us"] is None
        served = [r for r in every if r["case"] != COMMIT_FLOOR]
        # Every row has its CPU: the client's always spent some; a server's is counted in
        # whole clock ticks, so a tiny window may show none of it.
        assert all(r["sidecar_client_cpu_us"] > 0 for r in every)
        assert all(r["sidecar_server_cpu_us"] >= 0 for r in served)
        assert all(r["sidecar_cpu_us"] >= r["sidecar_client_cpu_us"] for r in every)
        (multi,) = [r for r in every if r["case"] == MULTI]
        assert multi["concurrency"] == 4
        assert multi["processes"] == 2
        assert multi["sidecar_errors"] == {}
        assert multi["ops"] == 4 * 5  # every put through the sidecar succeeded
        assert isinstance(multi["baseline_errors"], dict)
        rows = [r for r in every if r["case"] not in FLOORS | {COMMIT_FLOOR, MULTI}]
        assert {r["concurrency"] for r in rows} == {1, 32}
        assert all(r["sidecar_p50_us"] > 0 and r["baseline_p50_us"] > 0 for r in rows)
        assert all(r["ratio_p50"] > 0 and r["ratio_ops_s"] > 0 for r in rows)
        assert all(r["ratio_floor_p50"] > 0 for r in rows)
        assert all(r["baseline_cpu_us"] > 0 and r["ratio_cpu"] > 0 for r in rows)
        graphs = [r for r in report["graph"] if r["backend"] == backend]
        assert [(r["saver"], r["pipeline"], r["aio"]) for r in graphs] == GRAPH_SAVERS
        for graph in graphs:
            baselines = ASYNC_GRAPH_BASELINES if graph["aio"] else GRAPH_BASELINES
            assert graph["baseline"] == baselines[backend]
            assert (graph["turns"], graph["threads"], graph["window"]) == (12, 2, 6)
            assert graph["get_state_calls"] == 3
            for who in ("sidecar", "baseline"):
                for figure in ("first_ms", "last_ms", "final_turn_ms", "flat", "get_state_ms"):
                    assert graph[f"{who}_{figure}"] > 0
            assert graph["ratio_last"] > 0
            assert graph["ratio_get_state"] > 0
            assert graph["sidecar_client_cpu_us"] > 0
            assert graph["baseline_cpu_us"] > 0
            assert graph["sidecar_server_cpu_us"] >= 0
            assert graph["get_state_sidecar_client_cpu_us"] > 0
        scale = [r for r in report["scale"] if r["backend"] == backend]
        assert [r["rows"] for r in scale] == [100, 200]
        assert all(r["get_last_p50_us"] > 0 and r["claim_p50_us"] > 0 for r in scale)
        (rss,) = [r for r in report["rss"] if r["backend"] == backend]
        assert rss["watch_error"] is None
        assert rss["idle_rss_mb"] > 0
        assert rss["idle_cpu_mcpu"] >= 0
        assert rss["watch_rss_mb"] > 0
    earlier = report["earlier_targets"]
    assert {t["result"] for t in earlier} <= {"PASS", "MISS"}
    # Per backend: put p50 and CPU at one caller, put CPU at 32 callers (adapter and asyncio
    # client), 32 writers' ops/s, get_last and Health/Check against the echo, record + claim,
    # the multi-process ops/s and errors, two scale ratios, idle CPU and RSS, RSS with
    # watchers, the graph's last turns against in-process, its flatness and get_state.
    assert len(earlier) == 2 * 18
    _check_targets(report["targets"], result.stdout)
    assert _bench_schemas(pg_dsn) <= schemas_before


def _check_targets(targets: list[dict[str, Any]], stdout: str) -> None:
    """Every current target, on each backend, is a row of the JSON and a line of the table
    printed last, with its ratio, bound and verdict; what the verdicts are is not checked."""
    assert {(t["target"], t["backend"]) for t in targets} == {
        (name, backend) for name in TARGETS for backend in ("sqlite", "postgres")
    }
    for t in targets:
        allowed = {"PASS", "MISS", "n/a"} if t["target"] == TICK_BOUND_TARGET else {"PASS", "MISS"}
        assert t["result"] in allowed, t
        assert t["bound"] in {"<=", ">="}
        assert t["limit"] > 0
        assert t["denominator"] > 0, t  # every figure a target divides by was measured
        if t["result"] != "n/a":
            assert t["value"] == round(t["numerator"] / t["denominator"], 3)
    table = stdout[stdout.rindex("targets (ratios of this run's figures)") :].splitlines()
    for t in targets:
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}"
        cells = [t["backend"], value, t["bound"], f"{t['limit']:.1f}", t["result"]]
        printed = [
            line[len(t["target"]) :].split()[:5]
            for line in table
            if line.startswith(f"{t['target']} ")
        ]
        assert cells in printed, (cells, table)
