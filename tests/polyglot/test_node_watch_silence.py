"""Contract P6 for the Node.js client: its watch() takes a stream silent for three progress
intervals for dead and reconnects from its cursor, through a proxy that black-holes the
stream while the connection stays up; on every backend."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from typing import Any

import pytest

from checkpointd_client import CheckpointdClient, RetryPolicy
from tests.contract.helpers import interrupted
from tests.support.sidecar import Sidecar
from tests.support.watch_blackhole_proxy import WatchBlackholeProxy

from .conftest import NODE_CLIENT

pytestmark = pytest.mark.own_server

#: Silence (3 intervals of 1 s), a reconnect's backoff and a busy machine's delays.
DARK_BOUND = 15.0

# Watches through the proxy; one JSON line per snapshot_complete and per event.
WATCHER = """
const { CheckpointdClient } = require('./src');
const client = new CheckpointdClient({ target: process.env.PROXY_TARGET });
(async () => {
  let events = 0;
  for await (const m of client.watch({ progressIntervalMs: 1000 })) {
    if (m.item === 'snapshot_complete') {
      console.log(JSON.stringify({ ready: m.snapshot_complete.cursor }));
    }
    if (m.item === 'event') {
      console.log(JSON.stringify({ id: m.event.pending.execution_id, cursor: m.event.cursor }));
      if (++events === 3) break;
    }
  }
  client.close();
})().catch((err) => { console.error(err); process.exit(1); });
"""


def _lines(process: subprocess.Popen[str]) -> queue.Queue[dict[str, Any] | None]:
    """The watcher's output lines, parsed, as they come (None at its end)."""
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(json.loads(line))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_p6_node_watch_through_a_black_hole_sees_every_later_event_once(
    node: str, sidecar: Sidecar
) -> None:
    """Events written after the Node.js watcher's stream went dark reach it once, in order,
    on a reconnected stream, within a bounded time."""
    with (
        WatchBlackholeProxy(sidecar.target) as proxy,
        CheckpointdClient(sidecar.target, retry=RetryPolicy(max_attempts=1)) as writer,
    ):
        cp, pending = interrupted("before")  # a cursor above 0: the reconnect resumes
        writer.record_interrupt(cp, pending)
        with subprocess.Popen(
            [node, "-e", WATCHER],
            cwd=NODE_CLIENT,
            env={**os.environ, "PROXY_TARGET": proxy.target},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            try:
                events = _watch_through(process, proxy, writer)
            finally:
                process.kill()
    assert [e["id"] for e in events] == [f"dark-{i}" for i in range(3)]
    cursors = [int(e["cursor"]) for e in events]
    assert cursors == sorted(set(cursors))
    assert proxy.streams_opened == 2


def _watch_through(
    process: subprocess.Popen[str], proxy: WatchBlackholeProxy, writer: CheckpointdClient
) -> list[dict[str, Any]]:
    """Black-hole the watcher's stream once it is live, write three events, and return what
    the watcher printed for them."""
    lines = _lines(process)
    ready = lines.get(timeout=30)
    assert ready is not None, process.stderr.read() if process.stderr else ""
    assert "ready" in ready
    assert proxy.go_dark() == 1
    dark_at = time.monotonic()
    for i in range(3):
        cp, pending = interrupted(f"dark-{i}")
        writer.record_interrupt(cp, pending)
    events = []
    for _ in range(3):
        line = lines.get(timeout=DARK_BOUND + 30)
        assert line is not None, process.stderr.read() if process.stderr else ""
        events.append(line)
    assert time.monotonic() - dark_at < DARK_BOUND
    assert process.wait(timeout=30) == 0
    return events
