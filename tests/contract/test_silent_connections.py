"""Contract P8: a connection that goes silent is left within a bounded time.

Through a TCP proxy that, on the connections open at that moment, still forwards what the
client sends but drops everything the server sends (replies, headers, trailers, PING acks:
a half-open path, a wedged middlebox; tests/support/tcp_proxy.py), each client notices the
silence by its keepalive pings and opens a new connection: the blocking and the asyncio
client, on the Write stream and on unary calls, and a watch. Before, every call went on to
the silent connection until its deadline, for as long as the connection lived.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from checkpointd_client import (
    AsyncCheckpointdClient,
    CheckpointdClient,
    CheckpointdError,
    InterruptEvent,
    RetryPolicy,
)
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedSidecar
from tests.support.tcp_proxy import TcpProxy

#: Each call's deadline, as a latency-bound caller sets it.
TIMEOUT = 1.5
RETRY = RetryPolicy(max_attempts=6)
#: Three times the promised 15 s, for a loaded machine; gRPC's own ping timeout, which the
#: clients had until they set theirs, is a minute.
GIVE_UP_S = 45.0
#: Calls that must be answered in a row once the client is on a new connection.
AFTER = 3


def _keep_putting(put: Callable[[str], Any], name: str) -> int:
    """Put until one is answered, then AFTER more; return how many calls failed first."""
    failed = 0
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        try:
            put(f"{name}-{uuid.uuid4().hex[:8]}")
        except CheckpointdError:
            failed += 1
            continue
        for _ in range(AFTER):
            put(f"{name}-after-{uuid.uuid4().hex[:8]}")
        return failed
    raise AssertionError(f"{name}: no call answered within {GIVE_UP_S:g}s of the silence")


def _sync_writer(target: str, namespace: str, write_stream: bool) -> Callable[[], int]:
    client = CheckpointdClient(target, namespace=namespace, retry=RETRY, write_stream=write_stream)
    client.put_checkpoint(checkpoint("warm"), timeout=30)
    name = f"sync-{'stream' if write_stream else 'unary'}"

    def run() -> int:
        try:
            return _keep_putting(
                lambda run_id: client.put_checkpoint(checkpoint(run_id), timeout=TIMEOUT), name
            )
        finally:
            client.close()

    return run


def _async_writer(target: str, namespace: str, write_stream: bool) -> Callable[[], int]:
    """The asyncio client, on an event loop of its own thread."""
    loop = asyncio.new_event_loop()
    client = AsyncCheckpointdClient(
        target, namespace=namespace, retry=RETRY, write_stream=write_stream
    )
    loop.run_until_complete(client.put_checkpoint(checkpoint("warm"), timeout=30))
    name = f"async-{'stream' if write_stream else 'unary'}"

    def run() -> int:
        try:
            return _keep_putting(
                lambda run_id: loop.run_until_complete(
                    client.put_checkpoint(checkpoint(run_id), timeout=TIMEOUT)
                ),
                name,
            )
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()

    return run


def test_p8_a_silent_connection_is_left_on_every_write_path_and_the_watch(
    sidecar: SharedSidecar,
) -> None:
    """Four writers and a watch through the proxy; their connections are silenced; every
    writer is answered again on a new connection, and the watch delivers an event written
    after the silence, once."""
    host, port = sidecar.tcp_target.rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    target, namespace = f"127.0.0.1:{proxy.port}", sidecar.namespace
    try:
        writers = {
            f"{kind}-{'stream' if stream else 'unary'}": make(target, namespace, stream)
            for kind, make in (("sync", _sync_writer), ("async", _async_writer))
            for stream in (True, False)
        }
        with (
            CheckpointdClient(target, namespace=namespace) as watching,
            CheckpointdClient(sidecar.target, namespace=namespace) as direct,
            watching.watch_interrupts(progress_interval=1.0, timeout=GIVE_UP_S) as watch,
        ):
            next(watch)  # the (empty) snapshot's marker: the watch's connection is open
            # An event first, so the watch resumes from a cursor, not with a new snapshot.
            direct.record_interrupt(*interrupted("paused-before-silence"))
            first = next(item for item in watch if isinstance(item, InterruptEvent))
            assert first.pending.execution_id == "paused-before-silence"
            # gRPC shares one connection among channels to one target: all of them go silent.
            before = proxy.connections
            assert proxy.silence() == before

            failures: dict[str, int | BaseException] = {}

            def run(name: str, writer: Callable[[], int]) -> None:
                try:
                    failures[name] = writer()
                except BaseException as exc:  # reported below, with the writer's name
                    failures[name] = exc

            threads = [
                threading.Thread(target=run, args=item, daemon=True) for item in writers.items()
            ]
            for thread in threads:
                thread.start()
            direct.record_interrupt(*interrupted("paused-after-silence"))
            event = next(item for item in watch if isinstance(item, InterruptEvent))
            assert (event.type, event.pending.execution_id) == ("added", "paused-after-silence")
            for thread in threads:
                thread.join(GIVE_UP_S + 30)
            errors = {n: f for n, f in failures.items() if isinstance(f, BaseException)}
            assert not errors, errors
            assert set(failures) == set(writers)
        # The clients left the silenced connections for new ones.
        assert proxy.connections > before
    finally:
        proxy.close()
