"""P5 end to end: fastaiagent's platform replication exports what a chain wrote through the
sidecar, on both backends.

fastaiagent is connected (``fastaiagent.connect``) to a local stand-in for its platform: a
real HTTP server on loopback that answers the auth check and records what reaches
``/public/v1/checkpoints/ingest``. A real ``Chain`` runs, pauses and resumes with a
``SidecarCheckpointer``; fastaiagent's own drain (``platform_replica``), kicked by the
adapter's writes as by its own checkpointers', must deliver every checkpoint and leave the
sidecar's outbox empty.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastaiagent import Chain, FunctionTool, Resume, interrupt
from fastaiagent.checkpointers import platform_replica

from checkpointd_client import Checkpoint
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

#: How long the background drain may take to deliver (a liveness bound, not a speed claim).
DELIVERY_WAIT_S = 60.0


class _Plane:
    """What the ingest stand-in received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posts: list[list[dict[str, Any]]] = []

    def ingested(self) -> list[dict[str, Any]]:
        with self.lock:
            return [row for post in self.posts for row in post]


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/public/v1/auth/check":
            self._json(200, {"ok": True, "domain_id": "dom", "project_id": "proj"})
        else:
            self._json(404, {"detail": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/checkpoints/ingest"):
            self._json(404, {"detail": "not found"})
            return
        rows = list(body.get("checkpoints") or [])
        plane: _Plane = self.server.plane
        with plane.lock:
            plane.posts.append(rows)
        self._json(201, {"ingested": len(rows)})


@pytest.fixture
def plane() -> Iterator[tuple[_Plane, str]]:
    """The ingest stand-in on loopback, and its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.plane = _Plane()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.plane, f"http://127.0.0.1:{server.server_port}"  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def connected(plane: tuple[_Plane, str]) -> Iterator[_Plane]:
    """fastaiagent connected to the stand-in (traces and registration off); disconnected and
    reset afterwards, so no other test sees the connection."""
    import fastaiagent
    from fastaiagent.client import _connection

    state, url = plane
    fastaiagent.connect(
        api_key="fa_k_checkpointd_test", target=url, export_traces=False, auto_register=False
    )
    try:
        yield state
    finally:
        # A failed disconnect must not hide the test's own result.
        with contextlib.suppress(Exception):
            fastaiagent.disconnect()
        for attr, value in (
            ("api_key", None),
            ("target", "https://app.fastaiagent.net"),
            ("project", None),
            ("project_id", None),
            ("domain_id", None),
            ("export_checkpoints", True),
        ):
            setattr(_connection, attr, value)


def _wait_for_any(state: _Plane) -> bool:
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while time.monotonic() < deadline:
        if state.ingested():
            return True
        time.sleep(0.05)
    return False


def _approve(amount: int) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"amount": amount})
    return {"approved": decision.approved}


async def test_p5_a_paused_and_resumed_chain_is_exported_from_the_sidecar(
    sidecar: Sidecar, connected: _Plane
) -> None:
    """Every checkpoint of a chain run through the sidecar (the pause, the resume and the
    run_end marker) reaches the ingest endpoint in fastaiagent's wire shape, each restores
    from its wire copy exactly, and the outbox is then empty."""
    from fastaiagent.client import _connection

    store = SidecarCheckpointer(sidecar.target, namespace=f"rep-{uuid.uuid4().hex[:8]}")
    store.setup()  # registers with the replicator, as SQLiteCheckpointer.setup does
    try:
        chain = Chain("checkout", checkpointer=store)
        chain.add_node(
            "approve",
            tool=FunctionTool(name="approve", fn=_approve),
            input_mapping={"amount": "{{state.amount}}"},
            output_key="approval",
        )
        run_id = f"order-{uuid.uuid4().hex[:8]}"
        paused = await chain.aexecute({"amount": 500}, execution_id=run_id)
        assert paused.status == "paused"
        done = await chain.aresume(run_id, resume_value=Resume(approved=True))
        assert done.status == "completed"

        written = store.list(run_id)
        ids = {cp.checkpoint_id for cp in written}
        assert len(ids) >= 3
        # The writes' kicks deliver in the background; fastaiagent's drain leaves the rows of
        # a write that raced an in-flight drain to the next kick, for its own checkpointers
        # too. One more drain, taken under the drain lock (as fastaiagent's own tests do, so
        # it cannot be skipped while a kicked drain finishes), sends whatever is left.
        assert _wait_for_any(connected), "no kick ever delivered a checkpoint"
        with platform_replica._lock_for(store):
            platform_replica._drain_checkpointer(store, _connection)
        by_id = {r["checkpoint_id"]: r for r in connected.ingested()}
        assert ids <= set(by_id)
        for cp in written:
            wire = by_id[cp.checkpoint_id]
            assert wire["execution_id"] == run_id
            assert wire["status"] == cp.status
            assert wire["step_type"] == cp.step_type
            assert wire["state_snapshot"] == cp.state_snapshot
            assert wire["created_at"] == cp.created_at
            restored = platform_replica._wire_to_checkpoint(wire)
            assert restored.model_dump() == cp.model_dump()
        assert store.fetch_unsynced(100) == []
        assert store.client.mark_checkpoints_synced(sorted(ids)) == []  # all settled already
    finally:
        store.close()


def test_p5_two_apps_draining_one_namespace_export_every_checkpoint(
    sidecar: Sidecar, connected: _Plane
) -> None:
    """Two processes' adapters on one namespace (each with its own drain lock, as two
    processes have) drain concurrently: every checkpoint is exported, none is left behind,
    and each is settled by exactly one of them."""
    from fastaiagent.client import _connection

    namespace = f"rep-{uuid.uuid4().hex[:8]}"
    apps = [SidecarCheckpointer(sidecar.target, namespace=namespace) for _ in range(2)]
    try:
        ids = set()
        for i in range(240):
            # Written with the plain client (no kick), so the two drains below find the
            # whole backlog.
            stored = apps[i % 2].client.put_checkpoint(
                Checkpoint(execution_id=f"run-{i % 5}", chain_name="flow", node_id=f"n{i}")
            )
            ids.add(stored.checkpoint_id)
        settled: list[list[str]] = []
        marks = threading.Lock()

        class _Recording(SidecarCheckpointer):
            def mark_synced(self, checkpoint_ids: list[str]) -> None:
                got = self.client.mark_checkpoints_synced(checkpoint_ids)
                with marks:
                    settled.append(got)

        drainers = [_Recording(sidecar.target, namespace=namespace) for _ in range(2)]
        threads = [
            threading.Thread(target=platform_replica._drain_checkpointer, args=(d, _connection))
            for d in drainers
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for d in drainers:
            d.close()
        assert {r["checkpoint_id"] for r in connected.ingested()} == ids
        flat = [cid for batch in settled for cid in batch]
        assert sorted(flat) == sorted(ids)  # settled once each
        assert apps[0].fetch_unsynced(1000) == []
    finally:
        for app in apps:
            app.close()
