"""Graceful shutdown: SIGTERM turns health NOT_SERVING, lets in-flight calls finish within
the grace period, then exits 0 and removes its socket; a second signal exits at once."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from checkpointd_client import CheckpointdClient, CheckpointdError, RetryPolicy, UnavailableError
from tests.contract.helpers import checkpoint
from tests.ops.helpers import (
    NOT_SERVING,
    SERVING,
    EarlySidecar,
    HealthProbe,
    StoreBlocker,
    next_status,
    wait_for_metric,
)

# Long enough that a test which waited for it would time out: every exit below is earlier.
LONG_GRACE = ["--shutdown-grace", "100", "--store-timeout", "100"]
HISTORY_ROWS = 400


def _start(store_spec, *args: str) -> EarlySidecar:
    server = EarlySidecar(
        store_spec,
        extra_args=[
            "--metrics-listen",
            "127.0.0.1:0",
            "--sqlite-busy-timeout-ms",
            "100000",
            *LONG_GRACE,
            *args,
        ],
    )
    server.start()
    server.wait_for_log("serving on")
    return server


def _process(server: EarlySidecar) -> subprocess.Popen[bytes]:
    assert server.process is not None, "the server is not running"
    return server.process


def _watch_until_it_ends(client: CheckpointdClient) -> BaseException | None:
    """Read a watch (without reconnecting) until it fails; return the error."""
    try:
        for _item in client.watch_interrupts(reconnect=False):
            pass
    except CheckpointdError as exc:
        return exc
    return None


def test_i5_sigterm_drains_in_flight_calls_ends_watches_then_exits_0(store_spec):
    """Calls in flight at SIGTERM (a write, and a 400-row ListCheckpoints) complete with their
    results while health reports NOT_SERVING; an open watch ends with UNAVAILABLE
    (SHUTTING_DOWN); then the server exits 0, removes its socket, and the write is durable."""
    server = _start(store_spec)
    execution_id = f"run-{uuid.uuid4().hex}"
    state = {"blob": "x" * 2000}
    try:
        # Unary writes, so the one in flight shows in its method's gauge (the Write stream's
        # shutdown is the next test's).
        with CheckpointdClient(server.target, timeout=110, write_stream=False) as client:
            for index in range(HISTORY_ROWS):
                client.put_checkpoint(
                    checkpoint(execution_id, node_index=index, state_snapshot=state)
                )
            probe = HealthProbe(server.target)
            health = probe.watch()
            next_status(health, SERVING)
            late = checkpoint(execution_id, node_id="in-flight")
            with StoreBlocker(server.store) as blocker, ThreadPoolExecutor(3) as pool:
                watch = pool.submit(_watch_until_it_ends, client)
                wait_for_metric(server.metrics_url, "checkpointd_watch_streams", 1)
                write = pool.submit(client.put_checkpoint, late)
                listing = pool.submit(client.list_checkpoints, execution_id, page_size=1000)
                wait_for_metric(
                    server.metrics_url, "checkpointd_rpcs_in_flight", 1, grpc_method="PutCheckpoint"
                )
                if server.backend == "postgres":  # SQLite reads are never blocked by a writer
                    wait_for_metric(
                        server.metrics_url,
                        "checkpointd_rpcs_in_flight",
                        1,
                        grpc_method="ListCheckpoints",
                    )
                _process(server).send_signal(signal.SIGTERM)
                next_status(health, NOT_SERVING)
                assert list(health) == []  # the health stream ends: it holds no drain open
                ended = watch.result(timeout=60)
                assert isinstance(ended, UnavailableError)
                assert ended.reason == "SHUTTING_DOWN"
                assert not write.done()
                blocker.release()
                stored = write.result(timeout=60)
                page = listing.result(timeout=60)
            assert _process(server).wait(60) == 0
            probe.close()
        assert stored.node_id == "in-flight"
        assert len(page.checkpoints) >= HISTORY_ROWS
        assert [cp.node_index for cp in page.checkpoints[:HISTORY_ROWS]] == list(
            range(HISTORY_ROWS)
        )
        assert not server.socket_path.exists()
        log = server.log_text()
        assert "shutting down" in log
        assert log.rstrip().endswith("stopped")
        server.start()
        server.wait_for_log("serving on")
        with CheckpointdClient(server.target) as client:
            assert client.get_latest_checkpoint(execution_id) == stored
    finally:
        server.close()


def test_s1_sigterm_answers_the_items_a_write_stream_read_then_ends_it(store_spec):
    """At SIGTERM a Write stream answers the item it is writing (held by a blocked store)
    with its result, then ends UNAVAILABLE (SHUTTING_DOWN), and an idle stream of another
    client ends too: neither holds the server for its grace period (100 s here)."""
    server = _start(store_spec)
    execution_id = f"run-{uuid.uuid4().hex}"
    try:
        with (
            CheckpointdClient(server.target, timeout=110, retry=RetryPolicy(max_attempts=1)) as a,
            CheckpointdClient(server.target, timeout=110, retry=RetryPolicy(max_attempts=1)) as b,
        ):
            a.put_checkpoint(checkpoint(execution_id, node_id="before"))
            b.put_checkpoint(checkpoint(f"{execution_id}-b"))  # b's stream stays open, idle
            wait_for_metric(
                server.metrics_url, "checkpointd_rpcs_in_flight", 2, grpc_method="Write"
            )
            late = checkpoint(execution_id, node_id="in-flight")
            with StoreBlocker(server.store) as blocker, ThreadPoolExecutor(1) as pool:
                write = pool.submit(a.put_checkpoint, late)
                # Time for the item to reach the server, where it waits on the store (no
                # metric shows one item; an item not read by SIGTERM would fail the test).
                time.sleep(1.0)
                process = server.process
                assert process is not None
                process.send_signal(signal.SIGTERM)
                wait_for_metric(
                    server.metrics_url, "checkpointd_rpcs_in_flight", 1, grpc_method="Write"
                )
                assert not write.done()
                blocker.release()
                stored = write.result(timeout=60)
            assert process.wait(30) == 0
        assert stored.node_id == "in-flight"
        server.start()
        server.wait_for_log("serving on")
        with CheckpointdClient(server.target) as client:
            assert client.get_latest_checkpoint(execution_id) == stored
    finally:
        server.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_second_signal_exits_at_once_with_a_non_zero_status(store_spec):
    """While a drain waits on a call that cannot finish, a second SIGTERM ends the process at
    once (status 128+15), long before the grace period, and still removes the socket."""
    server = _start(store_spec)
    try:
        probe = HealthProbe(server.target)
        health = probe.watch()
        next_status(health, SERVING)
        with (
            StoreBlocker(server.store),
            ThreadPoolExecutor(1) as pool,
            CheckpointdClient(
                server.target, retry=RetryPolicy(max_attempts=1), timeout=110, write_stream=False
            ) as client,
        ):
            stuck = pool.submit(client.put_checkpoint, checkpoint("run-stuck"))
            wait_for_metric(
                server.metrics_url, "checkpointd_rpcs_in_flight", 1, grpc_method="PutCheckpoint"
            )
            _process(server).send_signal(signal.SIGTERM)
            next_status(health, NOT_SERVING)
            _process(server).send_signal(signal.SIGTERM)
            assert _process(server).wait(30) == 128 + signal.SIGTERM
            # The process died under the call: the connection drops and the client reports it
            # as UNAVAILABLE. Bounded: a call still hanging here raises TimeoutError, and the
            # client closing first on the way out cancels it, so a hang fails, never waits.
            with pytest.raises(UnavailableError) as err:
                stuck.result(timeout=30)
            assert err.value.code == grpc.StatusCode.UNAVAILABLE
        probe.close()
        assert "exiting at once" in server.log_text()
        assert not server.socket_path.exists()
    finally:
        server.close()
