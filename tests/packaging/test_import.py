"""``checkpointd import``: a real fastaiagent 1.94.0 SQLiteCheckpointer file into a namespace.

The source file is written by fastaiagent itself, one process per phase (tests/e2e's
scenario runner on ``reference:<file>``): an approval chain paused on ``interrupt()`` after an
``@idempotent`` charge, and a second one resumed to completion. It is imported into a running
server on each backend; the paused run is then resumed through ``SidecarCheckpointer`` in
another process, and the charge must not fire again. A second import changes nothing.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from checkpointd_client import CheckpointdClient, NotFoundError
from tests.e2e.test_fastaiagent_e2e import CheckpointerSpec, ScenarioRun
from tests.support.shared import built_once
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

SCENARIO = "approval_chain"
IMPORT_TIMEOUT_S = 60


@dataclass(frozen=True)
class SourceFile:
    """The fastaiagent file and the work directory of its paused run (events, state)."""

    db: Path
    paused_dir: Path
    paused_id: str
    completed_id: str


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> SourceFile:
    """One fastaiagent file for the test run (built once, shared by the pytest-xdist workers,
    which only read it): a paused run and a completed run."""

    def build(tmp: Path) -> None:
        reference = CheckpointerSpec.reference(tmp / "fastaiagent.db")
        paused = ScenarioRun.create(reference, SCENARIO, tmp / "paused")
        assert paused.phase("start")["result"]["status"] == "paused"
        completed = ScenarioRun.create(reference, SCENARIO, tmp / "completed")
        assert completed.phase("start")["result"]["status"] == "paused"
        assert completed.phase("resume")["result"]["status"] == "completed"
        made = {
            "paused": paused.execution_id,
            "paused_dir": str(paused.workdir.relative_to(tmp)),
            "completed": completed.execution_id,
        }
        (tmp / "made.json").write_text(json.dumps(made))

    tmp = built_once(tmp_path_factory, "fastaiagent-source", build)
    made = json.loads((tmp / "made.json").read_text())
    return SourceFile(
        db=tmp / "fastaiagent.db",
        paused_dir=tmp / made["paused_dir"],
        paused_id=made["paused"],
        completed_id=made["completed"],
    )


def run_import(
    db: Path, target: str, namespace: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m checkpointd import`` as a user runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "checkpointd",
            "import",
            str(db),
            "--target",
            target,
            "--namespace",
            namespace,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=False,
    )


def source_rows(db: Path, table: str) -> list[dict[str, Any]]:
    """A table of the fastaiagent file, in write order."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    return [dict(row) for row in rows]


def as_time(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def summary(stdout: str) -> dict[str, tuple[int, int]]:
    """``{"checkpoints": (imported, skipped), ...}`` from the import's report."""
    out = {}
    for line in stdout.splitlines()[1:]:
        what, _, counts = line.strip().partition(": ")
        imported, _, rest = counts.partition(" imported, ")
        out[what] = (int(imported), int(rest.split()[0]))
    return out


def test_import_keeps_history_paused_runs_and_idempotency_and_reruns_change_nothing(
    sidecar: Sidecar, source: SourceFile, tmp_path: Path
):
    """The import copies every checkpoint in write order with its created_at, re-creates the
    paused run's pending row (original created_at) and the cached charges; the paused run
    then resumes through the sidecar without charging again (C2, I1, D1); a second import
    skips everything and does not pause the resumed run again."""
    namespace = f"import-{uuid.uuid4().hex[:8]}"
    checkpoints = source_rows(source.db, "checkpoints")
    pendings = source_rows(source.db, "pending_interrupts")
    cached = source_rows(source.db, "idempotency_cache")
    assert [p["execution_id"] for p in pendings] == [source.paused_id]
    assert {c["execution_id"] for c in cached} == {source.paused_id, source.completed_id}
    interrupted = [c for c in checkpoints if c["status"] == "interrupted"]
    assert {c["execution_id"] for c in interrupted} == {source.paused_id, source.completed_id}

    first = run_import(source.db, sidecar.target, namespace, "--progress-every", "1")
    assert first.returncode == 0, first.stderr
    assert summary(first.stdout) == {
        "checkpoints": (len(checkpoints), 0),
        "pending interrupts": (1, 0),
        "idempotency results": (len(cached), 0),
    }
    progress = [line for line in first.stderr.splitlines() if " checkpoints " in line]
    assert len(progress) == len(checkpoints)
    assert progress[-1].endswith(f"checkpoints {len(checkpoints)}/{len(checkpoints)} (100%)")

    with CheckpointdClient(sidecar.target, namespace=namespace) as client:
        for execution_id in (source.paused_id, source.completed_id):
            stored = list(client.iter_checkpoints(execution_id))
            expected = [c for c in checkpoints if c["execution_id"] == execution_id]
            assert [s.checkpoint_id for s in stored] == [e["checkpoint_id"] for e in expected]
            for got, want in zip(stored, expected, strict=True):
                assert got.created_at == as_time(want["created_at"])
                assert (got.node_id, got.status, got.step_type, got.node_index) == (
                    want["node_id"],
                    want["status"],
                    want["step_type"],
                    want["node_index"],
                )
                assert got.state_snapshot == json.loads(want["state_snapshot"])
                assert got.interrupt_context == json.loads(want["interrupt_context"])
        (pending,) = list(client.iter_pending_interrupts())
        assert pending.execution_id == source.paused_id
        assert pending.created_at == as_time(pendings[0]["created_at"])
        assert (pending.reason, pending.context) == (
            pendings[0]["reason"],
            json.loads(pendings[0]["context"]),
        )
        paused_rows = [c for c in checkpoints if c["execution_id"] == source.paused_id]
        assert pending.checkpoint_id == paused_rows[-1]["checkpoint_id"]
        for row in cached:
            result = client.get_idempotent(row["execution_id"], row["function_key"])
            assert result.found
            assert result.value == json.loads(row["result"])

    # Resume the paused run through the sidecar, in its own process, in a copy of the work
    # directory whose event log holds the charge made before the import.
    workdir = tmp_path / "paused"
    shutil.copytree(source.paused_dir, workdir)
    spec = CheckpointerSpec(f"sidecar-{sidecar.backend}", sidecar.target, namespace)
    resumed = ScenarioRun(spec, SCENARIO, workdir, source.paused_id).phase("resume")
    assert resumed["result"]["status"] == "completed"
    events = [e["event"] for e in resumed["events"]]
    assert events.count("charge_card") == 1  # the charge made by fastaiagent before the import
    assert events.count("ship") == 1
    assert [e["phase"] for e in resumed["events"] if e["event"] == "charge_card"] == ["start"]

    with CheckpointdClient(sidecar.target, namespace=namespace) as client:
        history = [c.checkpoint_id for c in client.iter_checkpoints(source.paused_id)]
        second = run_import(source.db, sidecar.target, namespace, "--quiet")
        assert second.returncode == 0, second.stderr
        assert second.stderr == ""
        assert summary(second.stdout) == {
            "checkpoints": (0, len(checkpoints)),
            "pending interrupts": (0, 1),
            "idempotency results": (0, len(cached)),
        }
        assert list(client.iter_pending_interrupts()) == []
        assert [c.checkpoint_id for c in client.iter_checkpoints(source.paused_id)] == history
        assert len(list(client.iter_checkpoints(source.completed_id))) == len(
            [c for c in checkpoints if c["execution_id"] == source.completed_id]
        )


def _with_nan(source: SourceFile, tmp_path: Path, number: str = "NaN") -> Path:
    copy = tmp_path / "nan.db"
    shutil.copy(source.db, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute(
            "UPDATE checkpoints SET state_snapshot = ? "
            "WHERE rowid = (SELECT max(rowid) FROM checkpoints)",
            (f'{{"x": {number}}}',),
        )
    return copy


def _with_overflow(source: SourceFile, tmp_path: Path) -> Path:
    return _with_nan(source, tmp_path, "1e999")


def _not_sqlite(source: SourceFile, tmp_path: Path) -> Path:
    path = tmp_path / "notes.db"
    path.write_text("not a database, just text that is long enough to have a header\n" * 10)
    return path


def _other_sqlite(source: SourceFile, tmp_path: Path) -> Path:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.close()
    return path


def _missing(source: SourceFile, tmp_path: Path) -> Path:
    return tmp_path / "no-such.db"


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_missing, "no such file: "),
        (_not_sqlite, "is not an SQLite database"),
        (_other_sqlite, "has no checkpoints table: expected the file of a fastaiagent"),
        (_with_nan, "nothing was imported:\n  checkpoints row "),
        (_with_overflow, "nothing was imported:\n  checkpoints row "),
    ],
    ids=["missing", "not-sqlite", "not-fastaiagent", "nan-row", "overflow-row"],
)
def test_import_of_a_bad_file_says_why_and_writes_nothing(
    sidecar: Sidecar, source: SourceFile, tmp_path: Path, make, message: str
):
    """A missing file, a file that is not SQLite, an SQLite file that is not fastaiagent's,
    and a fastaiagent file with a NaN (J2) are refused with exit status 1, a message that
    says what is wrong, and nothing written to the namespace."""
    namespace = f"bad-{uuid.uuid4().hex[:8]}"
    path = make(source, tmp_path)
    result = run_import(path, sidecar.target, namespace)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("checkpointd: error: ")
    assert message in result.stderr
    if make is _with_nan:
        assert "state_snapshot: NaN is not standard JSON" in result.stderr
    if make is _with_overflow:
        assert "state_snapshot: the number 1e999 overflows to infinity" in result.stderr
    with CheckpointdClient(sidecar.target, namespace=namespace) as client:
        assert list(client.iter_pending_interrupts()) == []
        for row in source_rows(source.db, "idempotency_cache"):
            assert not client.get_idempotent(row["execution_id"], row["function_key"]).found
        with pytest.raises(NotFoundError):
            client.get_latest_checkpoint(source.paused_id)


def test_import_names_an_unreachable_server(source: SourceFile, tmp_path: Path):
    """A target where no server listens ends with exit status 1 naming the target."""
    target = f"unix://{tmp_path / 'nobody.sock'}"
    result = run_import(source.db, target, "default", "--timeout", "1")
    assert result.returncode == 1
    assert result.stderr.startswith(f"checkpointd: error: {target}: ")


def _import_on_a_terminal(
    db: Path, target: str, namespace: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The import with its stderr on a pseudo-terminal (as a person runs it) and its stdout
    piped: the result, and what the terminal showed."""
    master, terminal = pty.openpty()
    command = [sys.executable, "-m", "checkpointd", "import", str(db)]
    command += ["--target", target, "--namespace", namespace, *extra]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=terminal, text=True) as proc:
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        stdout, _ = proc.communicate(timeout=IMPORT_TIMEOUT_S)
    os.close(master)
    result = subprocess.CompletedProcess(command, proc.returncode, stdout, "")
    return result, shown.decode()


def test_import_draws_its_progress_on_a_terminal_only_and_ends_with_its_summary(
    sidecar: Sidecar, source: SourceFile
):
    """Without --progress-every the import's progress is the shared line of `store copy`:
    redrawn in place on a terminal and ended before the summary; nothing when stderr is
    piped; nothing on a terminal with --quiet. Each way stdout holds the same summary: one
    line saying what was imported where and how long it took, then the counts."""
    checkpoints = len(source_rows(source.db, "checkpoints"))
    cached = len(source_rows(source.db, "idempotency_cache"))
    counts = {
        "checkpoints": (checkpoints, 0),
        "pending interrupts": (1, 0),
        "idempotency results": (cached, 0),
    }

    piped = run_import(source.db, sidecar.target, f"piped-{uuid.uuid4().hex[:8]}")
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert summary(piped.stdout) == counts

    namespace = f"tty-{uuid.uuid4().hex[:8]}"
    drawn, shown = _import_on_a_terminal(source.db, sidecar.target, namespace)
    assert drawn.returncode == 0, shown
    assert summary(drawn.stdout) == counts
    assert re.fullmatch(
        rf"imported {re.escape(str(source.db))} into namespace '{namespace}' in \d+s",
        drawn.stdout.splitlines()[0],
    )
    assert "\r" in shown
    redraws = [part.strip() for part in shown.replace("\r\n", "\n").split("\r") if part.strip()]
    assert redraws[-1].startswith(f"checkpoints: {checkpoints}/{checkpoints} rows  100%")
    assert shown.endswith("\r\n")  # the line is ended: the shell's prompt starts afresh
    assert "checkpointd import: " not in shown  # no log lines

    quiet, shown_quiet = _import_on_a_terminal(
        source.db, sidecar.target, f"quiet-{uuid.uuid4().hex[:8]}", "--quiet"
    )
    assert quiet.returncode == 0
    assert shown_quiet == ""
    assert summary(quiet.stdout) == counts
