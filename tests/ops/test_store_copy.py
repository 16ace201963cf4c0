"""`checkpointd store copy` from SQLite to Postgres and back, with real servers before and
after: paused runs, decided pauses, idempotency results, tombstones, request-id memory and
the watch outbox survive the move; a copy killed with SIGKILL leaves the destination empty;
a destination holding the namespaces is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from checkpointd_client import (
    CheckpointdClient,
    FailedPreconditionError,
    InterruptEvent,
    SnapshotComplete,
    WatchProgress,
)
from checkpointd_client.v1 import graph_service_pb2 as gsvc
from checkpointd_client.v1 import graph_service_pb2_grpc
from tests.contract.helpers import checkpoint, interrupted
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = pytest.mark.postgres

TIMEOUT = 300


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


def _populate(target: str) -> dict[str, Any]:
    """Two namespaces: a paused run, a decided-not-resumed pause, a resumed run, idempotency
    results, a deleted run (tombstones) and remembered request ids; returns what to check."""
    facts: dict[str, Any] = {}
    with CheckpointdClient(target, namespace="team-a") as client:
        facts["put_1"] = checkpoint("paused", node_id="a")
        client.put_checkpoint(facts["put_1"], request_id="req-put-1")
        facts["gone"] = checkpoint("gone")
        client.record_interrupt(*interrupted("paused", node_id="review"))
        client.put_idempotent("paused", "charge:1", {"charged": 500}, request_id="req-idem-1")
        client.record_interrupt(*interrupted("decided", node_id="review"))
        client.submit_decision("decided", approved=False, decided_by="bob", reason="too much")
        client.put_checkpoint(facts["gone"], request_id="req-gone")
        client.delete_execution("gone", request_id="req-delete")
        with client.watch_interrupts(reconnect=False, timeout=10) as watch:
            for item in watch:
                if isinstance(item, SnapshotComplete):
                    facts["cursor"] = item.cursor
                    break
    with CheckpointdClient(target, namespace="team-b") as client:
        for i in range(30):
            client.put_checkpoint(checkpoint(f"run-{i % 3}", state_snapshot={"i": i}))
    return facts


def _executions(target: str, namespace: str) -> list[tuple[str, str, int, int]]:
    with CheckpointdClient(target, namespace=namespace) as client:
        page = client.list_executions(page_size=1000)
    return [
        (e.execution_id, e.status, e.checkpoint_count, e.last_sequence) for e in page.executions
    ]


def _pg_count(dsn: str, schema: str, table: str) -> int:
    async def run() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))
        finally:
            await conn.close()

    return asyncio.run(run())


def test_copy_sqlite_to_postgres_and_back_keeps_runs_retries_and_cursors(
    tmp_path: Path, pg_dsn: str, pg_schema: str
):
    """After the copy a server on Postgres lists the same runs with the same sequences; the
    paused run is still paused with its idempotency result; a retried put answers the first
    row; a retry of a deleted run's put is REQUEST_APPLIED_THEN_DELETED; the decided pause
    keeps its decision; a watcher resuming from a pre-copy cursor gets only later events.
    Copying back gives the same rows; a destination with the namespaces is refused."""
    source_path = tmp_path / "source.db"
    source = Sidecar(StoreSpec("sqlite", f"sqlite://{source_path}")).start()
    try:
        facts = _populate(source.target)
        before = {ns: _executions(source.target, ns) for ns in ("team-a", "team-b")}
    finally:
        source.close()

    result = cli(
        "store", "copy", "--from", f"sqlite://{source_path}",
        "--to", pg_dsn, "--to-pg-schema", pg_schema,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("copied ")
    assert "2 namespaces (team-a, team-b)" in summary
    assert "verified" in summary
    assert "sequences and cursors kept" in summary
    assert result.stderr == ""

    moved = Sidecar(StoreSpec("postgres", pg_dsn, pg_schema=pg_schema)).start()
    try:
        assert {ns: _executions(moved.target, ns) for ns in ("team-a", "team-b")} == before
        with CheckpointdClient(moved.target, namespace="team-a") as client:
            detail = client.get_execution("paused")
            assert detail.execution.status == "paused"
            assert detail.idempotency_keys == ["charge:1"]
            assert client.get_idempotent("paused", "charge:1").value == {"charged": 500}
            again = client.put_checkpoint(facts["put_1"], request_id="req-put-1")
            assert again.checkpoint_id == facts["put_1"].checkpoint_id
            assert client.get_execution("paused").execution.checkpoint_count == 2
            with pytest.raises(FailedPreconditionError) as late:
                client.put_checkpoint(facts["gone"], request_id="req-gone")
            assert late.value.reason == "REQUEST_APPLIED_THEN_DELETED"
            decided = client.get_execution("decided")
            assert decided.pending is not None
            assert decided.pending.decision is not None
            assert decided.pending.decision.decided_by == "bob"
            # New events continue above the copied cursors: a resumed watch sees them once.
            client.record_interrupt(*interrupted("after-copy"))
            with client.watch_interrupts(
                after_cursor=facts["cursor"], reconnect=False, timeout=10
            ) as watch:
                seen: list[InterruptEvent] = []
                for item in watch:
                    if isinstance(item, InterruptEvent):
                        seen.append(item)
                    if seen or isinstance(item, WatchProgress):
                        break
            assert [(e.type, e.pending.execution_id) for e in seen] == [("added", "after-copy")]
            assert seen[0].cursor > facts["cursor"]
    finally:
        moved.close()

    back = tmp_path / "back.db"
    returned = cli(
        "store", "copy", "--from", pg_dsn, "--from-pg-schema", pg_schema,
        "--to", f"sqlite://{back}", "--namespace", "team-b",
    )  # fmt: skip
    assert returned.returncode == 0, returned.stderr
    with sqlite3.connect(source_path) as a, sqlite3.connect(back) as b:
        query = (
            "SELECT sequence, execution_id, checkpoint_id, created_at, state_snapshot_json "
            "FROM checkpoints WHERE namespace = 'team-b' ORDER BY sequence"
        )
        assert a.execute(query).fetchall() == b.execute(query).fetchall()
        assert (
            b.execute("SELECT count(*) FROM checkpoints WHERE namespace = 'team-a'").fetchone()[0]
            == 0
        )

    refused = cli(
        "store", "copy", "--from", f"sqlite://{source_path}",
        "--to", pg_dsn, "--to-pg-schema", pg_schema, "--namespace", "team-b",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "already holds rows of 'team-b'" in refused.stderr
    assert "--merge" in refused.stderr


def test_copy_killed_midway_leaves_the_destination_empty(
    tmp_path: Path, pg_dsn: str, pg_schema: str
):
    """SIGKILL while the copy is inserting: the destination has its schema and no row; the
    copy run again completes and verifies."""
    path = tmp_path / "big.db"
    seed = Sidecar(StoreSpec("sqlite", f"sqlite://{path}")).start()
    try:
        with CheckpointdClient(seed.target, namespace="bulk") as client:
            client.put_checkpoint(checkpoint("seed"))
    finally:
        seed.close()
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(checkpoints)")]
        template = dict(
            zip(columns, conn.execute("SELECT * FROM checkpoints").fetchone(), strict=True)
        )
        del template["sequence"]
        rows = []
        for i in range(40000):
            row = dict(template)
            row.update(
                checkpoint_id=uuid.uuid4().hex,
                request_id="",
                execution_id=f"bulk-{i % 400}",
                state_snapshot_json='{"pad": "' + "p" * 1000 + '"}',
            )
            rows.append(tuple(row.values()))
        names = ", ".join(template)
        marks = ", ".join("?" * len(template))
        conn.executemany(f"INSERT INTO checkpoints ({names}) VALUES ({marks})", rows)

    args = [sys.executable, "-m", "checkpointd", "store", "copy"]
    args += ["--from", f"sqlite://{path}", "--to", pg_dsn, "--to-pg-schema", pg_schema]
    errors = (tmp_path / "copy.err").open("w+")
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        deadline = time.monotonic() + 120
        while not _inserting(pg_dsn, pg_schema):
            assert process.poll() is None, (tmp_path / "copy.err").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        errors.close()
    assert process.returncode == -signal.SIGKILL
    time.sleep(0.5)  # the server notices the dropped connection and rolls back
    assert _pg_count(pg_dsn, pg_schema, "checkpoints") == 0

    again = cli(*args[3:])
    assert again.returncode == 0, again.stderr
    assert _pg_count(pg_dsn, pg_schema, "checkpoints") == 40001


def _inserting(dsn: str, schema: str) -> bool:
    """Whether a session is inserting checkpoints into ``schema`` right now."""

    async def run() -> bool:
        conn = await asyncpg.connect(dsn)
        try:
            found = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND query LIKE $1",
                f'INSERT INTO "{schema}"."checkpoints"%',
            )
            return bool(found)
        finally:
            await conn.close()

    return asyncio.run(run())


def test_copy_into_a_store_with_other_namespaces_shifts_numbers_and_keeps_order(tmp_path: Path):
    """Into a store that already serves another namespace, the copied rows take numbers above
    the destination's, one shift for every column that holds a sequence, so each run keeps
    its order and its pause points at its checkpoint; --merge copies into a namespace that
    already has rows, and a row already there fails the copy, which writes nothing."""
    source_path, dest_path = tmp_path / "a.db", tmp_path / "b.db"
    for path, namespace in ((source_path, "team-a"), (dest_path, "team-z")):
        server = Sidecar(StoreSpec("sqlite", f"sqlite://{path}")).start()
        try:
            with CheckpointdClient(server.target, namespace=namespace) as client:
                for i in range(5):
                    client.put_checkpoint(checkpoint("run", node_id=f"step-{i}"))
                client.record_interrupt(*interrupted("paused"))
        finally:
            server.close()
    copied = cli(
        "store", "copy", "--from", f"sqlite://{source_path}", "--to", f"sqlite://{dest_path}"
    )
    assert copied.returncode == 0, copied.stderr
    assert "sequences shifted by 6, cursors by 1" in copied.stdout

    server = Sidecar(StoreSpec("sqlite", f"sqlite://{dest_path}")).start()
    try:
        with CheckpointdClient(server.target, namespace="team-a") as client:
            history = client.list_checkpoints("run").checkpoints
            assert [c.node_id for c in history] == [f"step-{i}" for i in range(5)]
            assert [c.sequence for c in history] == list(range(7, 12))
            detail = client.get_execution("paused")
            assert detail.execution.status == "paused"
            assert detail.pending is not None
            assert detail.pending.checkpoint_id == detail.execution.last_checkpoint_id
            assert client.put_checkpoint(checkpoint("new")).sequence == 13
        with CheckpointdClient(server.target, namespace="team-z") as client:
            assert len(client.list_checkpoints("run").checkpoints) == 5
    finally:
        server.close()

    twice = cli(
        "store", "copy", "--from", f"sqlite://{source_path}", "--to", f"sqlite://{dest_path}",
        "--merge",
    )  # fmt: skip
    assert twice.returncode == 1
    assert "the destination is unchanged" in twice.stderr
    with sqlite3.connect(dest_path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (6 + 6 + 1,)


def test_a_fastaiagent_chain_paused_before_the_copy_resumes_on_the_destination(
    tmp_path: Path, pg_dsn: str, pg_schema: str
):
    """A real fastaiagent chain pauses on the SQLite sidecar after its @idempotent charge;
    the store is copied to Postgres; a new process resumes it through a sidecar on Postgres,
    and the charge is not made again."""
    from tests.e2e.test_fastaiagent_e2e import CheckpointerSpec, ScenarioRun, events_named

    source_path = tmp_path / "source.db"
    source = Sidecar(StoreSpec("sqlite", f"sqlite://{source_path}")).start()
    try:
        run = ScenarioRun.create(
            CheckpointerSpec("sidecar-sqlite", source.target, "shop"), "approval_chain", tmp_path
        )
        first = run.phase("start")
        assert first["result"]["status"] == "paused"
        assert len(events_named(first, "charge_card")) == 1
    finally:
        source.close()

    copied = cli(
        "store", "copy", "--from", f"sqlite://{source_path}",
        "--to", pg_dsn, "--to-pg-schema", pg_schema,
    )  # fmt: skip
    assert copied.returncode == 0, copied.stderr

    moved = Sidecar(StoreSpec("postgres", pg_dsn, pg_schema=pg_schema)).start()
    try:
        resumed = dataclasses.replace(
            run, spec=CheckpointerSpec("sidecar-postgres", moved.target, "shop")
        ).phase("resume")
    finally:
        moved.close()
    assert resumed["result"]["status"] == "completed"
    assert resumed["result"]["output"] == {"output": "shipped ch-acct-42-500", "error": None}
    assert len(events_named(resumed, "charge_card")) == 1


def _graph_put(target: str) -> None:
    """One graph checkpoint with a binary body, a channel value and a pending write."""
    with grpc.insecure_channel(target) as channel:
        stub = graph_service_pb2_grpc.GraphServiceStub(channel)
        stub.PutGraphCheckpoint(
            gsvc.PutGraphCheckpointRequest(
                namespace="graphs",
                request_id="g-put-1",
                checkpoint=gsvc.GraphCheckpoint(
                    thread_id="t1",
                    checkpoint_id="c1",
                    checkpoint=gsvc.TypedValue(type="msgpack", data=b"\x00\xffbody"),
                    metadata_json='{"run_id": "r1", "step": 1}',
                    channel_versions={"messages": "1"},
                ),
                new_values=[
                    gsvc.GraphChannelValue(
                        channel="messages",
                        version="1",
                        value=gsvc.TypedValue(type="bytes", data=b"\x01\x02"),
                    )
                ],
            ),
            timeout=10,
        )
        stub.PutGraphWrites(
            gsvc.PutGraphWritesRequest(
                namespace="graphs",
                request_id="g-writes-1",
                thread_id="t1",
                checkpoint_id="c1",
                task_id="task",
                writes=[
                    gsvc.GraphWrite(
                        idx=0, channel="out", value=gsvc.TypedValue(type="json", data=b"{}")
                    )
                ],
            ),
            timeout=10,
        )


def _graph_get(target: str) -> gsvc.GraphCheckpointTuple:
    with grpc.insecure_channel(target) as channel:
        stub = graph_service_pb2_grpc.GraphServiceStub(channel)
        found = stub.GetGraphCheckpoint(
            gsvc.GetGraphCheckpointRequest(namespace="graphs", thread_id="t1", checkpoint_id="c1"),
            timeout=10,
        )
        return found.checkpoint_tuple


def _runs_everywhere(target: str) -> list[tuple[str, ...]]:
    """What step 4 of "Moving a store" reads: ``checkpointd runs list -A --json``, each run's
    namespace, id, framework, status and checkpoint count."""
    listed = cli("runs", "list", "-A", "--target", target, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    keys = ("namespace", "execution_id", "framework", "status", "checkpoint_count")
    return sorted(tuple(str(row[k]) for k in keys) for row in rows)


def test_copy_carries_the_graph_wing_both_ways(tmp_path: Path, pg_dsn: str, pg_schema: str):
    """A LangGraph checkpoint (binary body, JSON metadata, channel versions), its channel
    value and its pending write read back the same after SQLite -> Postgres -> SQLite, and
    ``checkpointd runs list -A`` (the check of "Moving a store") lists the same thread beside
    the same fastaiagent run on each store."""
    first = tmp_path / "first.db"
    server = Sidecar(StoreSpec("sqlite", f"sqlite://{first}")).start()
    try:
        _graph_put(server.target)
        with CheckpointdClient(server.target, namespace="graphs") as client:
            client.put_checkpoint(checkpoint("run-1"))
        original = _graph_get(server.target)
        runs = _runs_everywhere(server.target)
    finally:
        server.close()
    assert runs == [
        ("graphs", "run-1", "fastaiagent", "running", "1"),
        ("graphs", "t1", "langgraph", "running", "1"),
    ]
    assert original.checkpoint.checkpoint.data == b"\x00\xffbody"
    to_pg = cli(
        "store", "copy", "--from", f"sqlite://{first}", "--to", pg_dsn, "--to-pg-schema", pg_schema
    )  # fmt: skip
    assert to_pg.returncode == 0, to_pg.stderr
    server = Sidecar(StoreSpec("postgres", pg_dsn, pg_schema=pg_schema)).start()
    try:
        on_pg = _graph_get(server.target)
        assert _runs_everywhere(server.target) == runs
    finally:
        server.close()
    last = tmp_path / "last.db"
    to_sqlite = cli(
        "store", "copy", "--from", pg_dsn, "--from-pg-schema", pg_schema, "--to", f"sqlite://{last}"
    )  # fmt: skip
    assert to_sqlite.returncode == 0, to_sqlite.stderr
    server = Sidecar(StoreSpec("sqlite", f"sqlite://{last}")).start()
    try:
        back = _graph_get(server.target)
        assert _runs_everywhere(server.target) == runs
    finally:
        server.close()
    for copy in (on_pg, back):
        assert copy.checkpoint.checkpoint == original.checkpoint.checkpoint
        assert json.loads(copy.checkpoint.metadata_json) == json.loads(
            original.checkpoint.metadata_json
        )
        assert dict(copy.checkpoint.channel_versions) == {"messages": "1"}
        assert list(copy.channel_values) == list(original.channel_values)
        assert list(copy.pending_writes) == list(original.pending_writes)
