"""`checkpointd store backup` and `store check` on a real SQLite store that a running server
keeps writing to: the backup holds every write acknowledged before it started, opens with
`checkpointd serve`, and checks clean. (Postgres is backed up with pg_dump: docs/operations.md.)"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient
from checkpointd_client.errors import CheckpointdError
from tests.contract.helpers import checkpoint, interrupted
from tests.reliability.faults import capability_missing
from tests.support.sidecar import Sidecar, StoreSpec

TIMEOUT = 120


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `checkpointd ...` to completion, as a script does (no terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "checkpointd", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def live_store(tmp_path: Path) -> Iterator[tuple[Sidecar, Path]]:
    """A server on an SQLite file."""
    path = tmp_path / "store.db"
    server = Sidecar(StoreSpec("sqlite", f"sqlite://{path}")).start()
    try:
        yield server, path
    finally:
        server.close()


class Writer(threading.Thread):
    """Writes checkpoints (with a large state) as fast as the server acknowledges them, and
    remembers each acknowledged id with the number of acknowledgements before it."""

    def __init__(self, target: str) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.acked: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        with CheckpointdClient(self.target) as client:
            n = 0
            while not self.stop.is_set():
                run = f"load-{n % 50}"
                try:
                    stored = client.put_checkpoint(
                        checkpoint(run, state_snapshot={"n": n, "pad": "x" * 4000})
                    )
                except CheckpointdError as exc:
                    self.errors.append(exc)
                    return
                with self.lock:
                    self.acked.append((run, stored.checkpoint_id))
                n += 1

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.acked)


def test_backup_under_load_holds_every_acknowledged_write_and_serves(
    live_store: tuple[Sidecar, Path], tmp_path: Path
):
    """While a writer keeps the server busy, the backup is taken; every write acknowledged
    before the command started is in it; `store check` passes; a server opened on the copy
    answers every one of those reads, a paused run still paused and its idempotency result."""
    server, path = live_store
    paused = f"paused-{uuid.uuid4().hex[:6]}"
    with CheckpointdClient(server.target) as client:
        for i in range(1500):  # some megabytes, so the copy takes many steps
            client.put_checkpoint(checkpoint(f"pre-{i % 30}", state_snapshot={"pad": "y" * 4000}))
        client.record_interrupt(*interrupted(paused))
        client.put_idempotent(paused, "charge:1", {"charged": 500})
    writer = Writer(server.target)
    writer.start()
    try:
        while len(writer.snapshot()) < 200 and not writer.errors:
            threading.Event().wait(0.01)
        before = writer.snapshot()
        backup = tmp_path / "backup.db"
        result = cli("store", "backup", "--store", f"sqlite://{path}", "--to", str(backup))
        after = len(writer.snapshot())
        # The server still takes writes: the backup held no lock that stops them.
        while len(writer.snapshot()) < after + 50 and not writer.errors:
            threading.Event().wait(0.01)
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    assert writer.errors == []
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"backed up {path} to {backup}: ")
    assert result.stderr == ""  # no terminal: no progress line
    assert not list(tmp_path.glob(".backup.db.*.partial"))

    checked = cli("store", "check", "--store", f"sqlite://{backup}", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["integrity"] == "ok"
    assert report["schema_version"] == report["known_schema_version"]
    assert report["tables"]["checkpoints"] >= 1500 + 1 + len(before)
    assert report["tables"]["pending_interrupts"] == 1

    restored = Sidecar(StoreSpec("sqlite", f"sqlite://{backup}")).start()
    try:
        with CheckpointdClient(restored.target) as client:
            for run, checkpoint_id in before:
                assert client.get_checkpoint(run, checkpoint_id).checkpoint_id == checkpoint_id
            pending = [p.execution_id for p in client.list_pending_interrupts().pending_interrupts]
            assert pending == [paused]
            assert client.get_idempotent(paused, "charge:1").value == {"charged": 500}
            assert client.get_execution(paused).execution.status == "paused"
    finally:
        restored.close()


def test_backup_refuses_to_overwrite_and_leaves_nothing_on_failure(
    live_store: tuple[Sidecar, Path], tmp_path: Path
):
    """An existing FILE is kept unless --force; a missing store is refused without creating
    a file; a Postgres URL points to pg_dump; --force replaces FILE with a sound copy."""
    server, path = live_store
    with CheckpointdClient(server.target) as client:
        client.put_checkpoint(checkpoint("run-1"))
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    refused = cli("store", "backup", "--store", f"sqlite://{path}", "--to", str(existing))
    assert refused.returncode == 1
    assert "exists: pass --force" in refused.stderr
    assert existing.read_bytes() == b"keep me"

    missing = tmp_path / "nope.db"
    gone = cli("store", "backup", "--store", f"sqlite://{missing}", "--to", str(tmp_path / "b"))
    assert gone.returncode == 1
    assert "is not a file" in gone.stderr
    assert not missing.exists()
    assert not (tmp_path / "b").exists()

    pg = cli("store", "backup", "--store", "postgresql://x@127.0.0.1/db", "--to", "f.db")
    assert pg.returncode == 1
    assert "pg_dump -n SCHEMA" in pg.stderr

    forced = cli("store", "backup", "--store", f"sqlite://{path}", "--to", str(existing), "--force")
    assert forced.returncode == 0, forced.stderr
    with sqlite3.connect(existing) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert (existing.stat().st_mode & 0o777) == (path.stat().st_mode & 0o777)


def test_store_check_reports_a_damaged_or_foreign_file(tmp_path: Path):
    """A file that is no checkpointd store, or one damaged on disk, fails the check (exit 1)
    with the reason."""
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    result = cli("store", "check", "--store", f"sqlite://{foreign}")
    assert result.returncode == 1
    assert "not a checkpointd store" in result.stdout

    store = tmp_path / "store.db"
    server = Sidecar(StoreSpec("sqlite", f"sqlite://{store}")).start()
    try:
        with CheckpointdClient(server.target) as client:
            for i in range(300):
                client.put_checkpoint(checkpoint(f"r{i}", state_snapshot={"pad": "z" * 3000}))
    finally:
        server.close()
    backup = tmp_path / "copy.db"
    assert (
        cli("store", "backup", "--store", f"sqlite://{store}", "--to", str(backup)).returncode == 0
    )
    size = backup.stat().st_size
    with backup.open("r+b") as file:  # scribble over pages in the middle of the file
        file.seek(size // 2)
        file.write(os.urandom(8192))
    damaged = cli("store", "check", "--store", f"sqlite://{backup}")
    assert damaged.returncode == 1, damaged.stdout


def test_store_check_counts_every_table_on_each_backend(sidecar_factory, store_spec: StoreSpec):
    """`store check` reads the store's own catalog: every table with its rows (the graph
    store's too), the schema version this server knows, exit 0."""
    server = sidecar_factory()
    with CheckpointdClient(server.target, namespace="team-a") as client:
        client.put_checkpoint(checkpoint("run-1"))
        client.record_interrupt(*interrupted("run-2"))
        client.put_idempotent("run-2", "k", 1)
    args = ["--store", store_spec.url]
    if store_spec.backend != "sqlite":
        args += ["--pg-schema", store_spec.pg_schema]
    result = cli("store", "check", *args, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["problems"] == []
    tables = report["tables"]
    assert (tables["checkpoints"], tables["pending_interrupts"]) == (2, 1)
    assert tables["idempotency_results"] == 1
    assert {"graph_checkpoints", "graph_blobs", "graph_writes", "schema_migrations"} <= set(tables)
    text = cli("store", "check", *args)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1].endswith(": ok")


def test_backup_to_a_directory_it_cannot_write_names_that_directory(
    live_store: tuple[Sidecar, Path], tmp_path: Path
):
    """A destination whose directory refuses new files (immutable: read only even for root)
    is named in the error, not the store, and nothing is left behind."""
    _, path = live_store
    locked = tmp_path / "locked"
    locked.mkdir()
    made = subprocess.run(["chattr", "+i", str(locked)], capture_output=True, check=False)
    if made.returncode != 0:
        capability_missing(f"chattr +i is not possible here: {made.stderr.decode().strip()}")
    try:
        refused = cli("store", "backup", "--store", f"sqlite://{path}", "--to", f"{locked}/b.db")
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(f"cannot write to {locked}: Operation not permitted")
    assert str(path) not in refused.stderr
    assert list(locked.iterdir()) == []
