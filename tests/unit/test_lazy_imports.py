"""An SQLite server never imports the Postgres driver: every server start of a pod (and of
the test suite) would pay asyncpg's import for nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
