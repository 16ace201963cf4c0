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
CASES = {"put (2 KB state)", "get_last", "list(100)", "record + claim", "put/get idempotent"}
FLOORS = {"floor: grpc.aio unary echo", "floor: bidi stream round trip", "floor: Health/Check"}
#: The commit floor of a put: one caller, no server (bench/raw_commit.py).
COMMIT_FLOOR = "floor: raw commit of a put's row"
MULTI = "put multi-process (2x2)"


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
            "--concurrency=1,4",
            "--scale-rows=100,200",
            "--scale-ops=3",
            "--watch-streams=20",
            "--idle-seconds=0.5",
            "--multi-process=2x2",
            "--graph-turns=12",
            "--graph-reads=3",
            "--graph-threads=2",
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
            (f, c) for f in FLOORS for c in (1, 4)
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
        assert {r["concurrency"] for r in rows} == {1, 4}
        assert all(r["sidecar_p50_us"] > 0 and r["baseline_p50_us"] > 0 for r in rows)
        assert all(r["ratio_p50"] > 0 and r["ratio_ops_s"] > 0 for r in rows)
        assert all(r["ratio_floor_p50"] > 0 for r in rows)
        assert all(r["baseline_cpu_us"] > 0 and r["ratio_cpu"] > 0 for r in rows)
        (graph,) = [r for r in report["graph"] if r["backend"] == backend]
        assert graph["saver"] == "CheckpointdSaver"
        assert graph["baseline"] == GRAPH_BASELINES[backend]
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
    assert {t["result"] for t in report["targets"]} <= {"PASS", "MISS"}
    # Per backend: put p50 and CPU at one caller, get_last and Health/Check against the echo,
    # record + claim, the multi-process ops/s and errors, two scale ratios, idle CPU and RSS,
    # RSS with watchers, the graph's last turns against in-process, its flatness and
    # get_state (the 32-writer targets need --concurrency 32).
    assert len(report["targets"]) == 2 * 15
    assert _bench_schemas(pg_dsn) <= schemas_before
