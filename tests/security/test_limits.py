"""Limits against abuse of the watch stream, on both backends: open streams per server and per
connection (RESOURCE_EXHAUSTED, TOO_MANY_WATCH_STREAMS, contract E2), and a maximum lifetime
that ends a stream with UNAVAILABLE (WATCH_EXPIRED), from which the client resumes at its
cursor without losing or repeating an event (I5, P4)."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

import pytest

from checkpointd_client import (
    CheckpointdClient,
    InterruptEvent,
    InterruptWatch,
    ResourceExhaustedError,
    SnapshotComplete,
    UnavailableError,
)
from tests.contract.helpers import checkpoint, interrupted
from tests.ops.helpers import wait_for_metric
from tests.security.conftest import NO_RETRY
from tests.support.sidecar import Sidecar

# One TCP connection per client: gRPC would otherwise share one between equal channels.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def _open(client: CheckpointdClient) -> InterruptWatch:
    """A watch that has started (its snapshot is complete), so the server counts it."""
    watch = client.watch_interrupts(reconnect=False, timeout=60)
    assert isinstance(next(watch), SnapshotComplete)
    return watch


def test_e2_watch_streams_are_limited_per_connection_and_per_server(
    sidecar_factory: Callable[..., Sidecar],
):
    """Past --max-watch-streams-per-peer on one connection, or --max-watch-streams on the
    server, a new watch is RESOURCE_EXHAUSTED (TOO_MANY_WATCH_STREAMS, naming the scope and
    limit); unary calls still work, and closing a watch frees its place."""
    server = sidecar_factory("--max-watch-streams", "3", "--max-watch-streams-per-peer", "2")
    first = CheckpointdClient(server.tcp_target, retry=NO_RETRY, channel_options=OWN_CONNECTION)
    second = CheckpointdClient(server.tcp_target, retry=NO_RETRY, channel_options=OWN_CONNECTION)
    open_watches: list[InterruptWatch] = []
    try:
        open_watches += [_open(first), _open(first)]
        with pytest.raises(ResourceExhaustedError) as per_peer:
            _open(first)
        assert per_peer.value.reason == "TOO_MANY_WATCH_STREAMS"
        assert per_peer.value.metadata == {"limit": "2", "scope": "peer"}
        assert "--max-watch-streams-per-peer" in per_peer.value.message

        open_watches.append(_open(second))
        with pytest.raises(ResourceExhaustedError) as per_server:
            _open(second)
        assert per_server.value.metadata == {"limit": "3", "scope": "server"}
        second.put_checkpoint(checkpoint("run-1"))  # unary calls are not limited

        open_watches.pop(0).close()
        for _ in range(100):  # the server sees the cancelled stream end a moment later
            try:
                open_watches.append(_open(second))
                break
            except ResourceExhaustedError:
                time.sleep(0.05)
        else:
            pytest.fail("a closed watch never gave its place back")
    finally:
        for watch in open_watches:
            watch.close()
        first.close()
        second.close()


def test_i5_watch_lifetime_ends_the_stream_and_the_client_resumes_without_loss(
    sidecar_factory: Callable[..., Sidecar], caplog: pytest.LogCaptureFixture
):
    """With --watch-max-lifetime a stream ends UNAVAILABLE (WATCH_EXPIRED); a reconnecting
    watch resumes after its last cursor and delivers each later event exactly once."""
    server = sidecar_factory("--watch-max-lifetime", "0.5", "--metrics-listen", "127.0.0.1:0")
    metrics = re.search(r"metrics on (?P<url>http://\S+/metrics)", server.log_path.read_text())
    assert metrics, server.log_path.read_text()
    run = f"run-{uuid.uuid4().hex[:8]}"
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        with client.watch_interrupts(reconnect=False, timeout=60) as raw:
            assert isinstance(next(raw), SnapshotComplete)
            with pytest.raises(UnavailableError) as expired:
                for _ in raw:
                    pass
        assert expired.value.reason == "WATCH_EXPIRED"
        assert expired.value.metadata == {"max_lifetime_s": "0.5"}

        caplog.set_level(logging.INFO, logger="checkpointd_client.watch")
        with client.watch_interrupts(timeout=60) as watch:
            assert isinstance(next(watch), SnapshotComplete)
            seen: list[str] = []
            for index in range(3):
                cp, pending = interrupted(f"{run}-{index}")
                client.record_interrupt(cp, pending)
                event = next(item for item in watch if isinstance(item, InterruptEvent))
                seen.append(event.pending.execution_id)
                if index < 2:
                    # The server has ended the stream (its lifetime ran out) before the next
                    # write, so that event can only arrive on a resumed stream.
                    wait_for_metric(metrics["url"], "checkpointd_watch_streams", 0)
        assert seen == [f"{run}-0", f"{run}-1", f"{run}-2"]
        resumed = [r for r in caplog.records if "WATCH_EXPIRED" in r.getMessage()]
        assert len(resumed) == 2


def test_e2_unix_socket_clients_are_not_one_peer(sidecar_factory: Callable[..., Sidecar]):
    """gRPC names every Unix-socket client alike, so the per-peer limit does not apply there
    (it would cap all local clients together); the per-server limit still does."""
    server = sidecar_factory("--max-watch-streams", "4", "--max-watch-streams-per-peer", "1")
    clients = [
        CheckpointdClient(server.target, retry=NO_RETRY, channel_options=OWN_CONNECTION)
        for _ in range(5)
    ]
    open_watches: list[InterruptWatch] = []
    try:
        open_watches += [_open(client) for client in clients[:4]]
        with pytest.raises(ResourceExhaustedError) as per_server:
            _open(clients[4])
        assert per_server.value.metadata == {"limit": "4", "scope": "server"}
    finally:
        for watch in open_watches:
            watch.close()
        for client in clients:
            client.close()
