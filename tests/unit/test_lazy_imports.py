"""An SQLite server never imports the Postgres driver: every server start of a pod (and of
the test suite) would pay asyncpg's import for nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.sidecar import Sidecar, StoreSpec

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
from pathlib import Path
from checkpointd import app
from checkpointd.store.sqlite import SQLiteStore

store = SQLiteStore(Path(sys.argv[1]) / "x.db", busy_timeout_ms=1000, timeout=5)
app.build_graph_store(store)
app.build_execution_reader(store)
postgres = ("asyncpg", "checkpointd.store.postgres")
print(sorted(m for m in sys.modules if m.startswith(postgres)))
"""


def test_an_sqlite_server_builds_its_wings_without_importing_asyncpg(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# A server started as ``checkpointd serve`` starts it, which writes the modules it holds once
# Health/Check answers SERVING (the store open), then stops itself with SIGTERM.
_SERVING_PROBE = """
import json, os, signal, sys, threading, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

def probe(out, target):
    with grpc.insecure_channel(target) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        while True:
            try:
                status = check(health_pb2.HealthCheckRequest(), timeout=5).status
            except grpc.RpcError:
                status = None
            if status == health_pb2.HealthCheckResponse.SERVING:
                break
            time.sleep(0.05)
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
    os.kill(os.getpid(), signal.SIGTERM)

out, target, *argv = sys.argv[1:]
threading.Thread(target=probe, args=(out, target), daemon=True).start()
from checkpointd.cli import main
raise SystemExit(main(argv))
"""

#: What a serving sidecar without a metrics listener never needs: the metrics (and the
#: http.server and email modules prometheus_client brings), the client-side commands and
#: the client library's own modules, the console.
_NOT_SERVED = (
    "prometheus_client",
    "http.server",
    "email",
    "checkpointd.metrics",
    "checkpointd.metrics_store",
    "checkpointd.graph.metrics",
    "checkpointd.cli.import_cmd",
    "checkpointd.cli.interrupts",
    "checkpointd.cli.runs",
    "checkpointd.cli.store_cmd",
    "checkpointd.console",
    "checkpointd_client.models",
    "checkpointd_client._convert",
)


def _modules_while_serving(sidecar: Sidecar, out: Path) -> list[str]:
    command = sidecar.command()
    assert command[1:4] == ["-m", "checkpointd", "serve"]
    argv = [sys.executable, "-c", _SERVING_PROBE, str(out), sidecar.target, *command[3:]]
    subprocess.run(argv, capture_output=True, check=True, cwd=ROOT, timeout=60)
    modules: list[str] = json.loads(out.read_text())
    return modules


def test_a_serving_sidecar_holds_no_module_it_does_not_serve(
    store_spec: StoreSpec, tmp_path: Path
) -> None:
    """``checkpointd serve`` without ``--metrics-listen`` imports neither the metrics nor the
    other commands' modules (the client-side commands, the store tools), on every backend."""
    sidecar = Sidecar(store_spec)
    try:
        modules = _modules_while_serving(sidecar, tmp_path / "modules.json")
    finally:
        shutil.rmtree(sidecar.socket_dir, ignore_errors=True)
    held = [m for m in modules if m.startswith(_NOT_SERVED)]
    assert "checkpointd.watch" in modules  # the probe saw a started server
    assert held == []
