"""Prometheus metrics: off by default; when on, RPCs by method and status code with latency
histograms, store operation latency, pending interrupts per namespace and the store's pool."""

from __future__ import annotations

import uuid

import pytest

from checkpointd_client import CheckpointdClient, NotFoundError
from tests.contract.helpers import checkpoint, interrupted
from tests.ops.helpers import EarlySidecar, sample, scrape

pytestmark = pytest.mark.own_server


def test_metrics_count_rpcs_by_method_and_code_and_report_the_store(store_spec):
    """After a few calls the scrape has their counters and latencies by method and code, the
    store operations they made, the pending interrupts per namespace and the pool state."""
    server = EarlySidecar(store_spec, extra_args=["--metrics-listen", "127.0.0.1:0"]).start()
    try:
        server.wait_for_log("serving on")
        run = f"run-{uuid.uuid4().hex}"
        # Unary writes, so each is an RPC of its own (the Write stream has its own test, S1).
        with CheckpointdClient(server.target, write_stream=False) as client:
            client.put_checkpoint(checkpoint(run))
            client.put_checkpoint(checkpoint(run))
            with pytest.raises(NotFoundError):
                client.get_checkpoint(run, "missing")
        with CheckpointdClient(server.target, namespace="team-a", write_stream=False) as team_a:
            for index in range(2):
                team_a.record_interrupt(*interrupted(f"{run}-{index}"))
        text = scrape(server.metrics_url)
        ckpt = "checkpointd.v1.CheckpointService"

        def handled(method: str, code: str) -> float | None:
            return sample(
                text,
                "grpc_server_handled_total",
                grpc_service=ckpt,
                grpc_method=method,
                grpc_type="unary",
                grpc_code=code,
            )

        assert handled("PutCheckpoint", "OK") == 2
        assert handled("GetCheckpoint", "NOT_FOUND") == 1
        assert handled("GetCheckpoint", "OK") is None
        assert sample(text, "grpc_server_started_total", grpc_method="PutCheckpoint") == 2
        assert sample(text, "grpc_server_handling_seconds_count", grpc_method="PutCheckpoint") == 2
        assert (
            sample(
                text,
                "grpc_server_handling_seconds_bucket",
                grpc_method="PutCheckpoint",
                le="+Inf",
            )
            == 2
        )
        assert (
            sample(
                text,
                "checkpointd_store_operation_seconds_count",
                operation="put_checkpoint",
                outcome="ok",
            )
            == 2
        )
        assert (
            sample(
                text,
                "checkpointd_store_operation_seconds_count",
                operation="record_interrupt",
                outcome="ok",
            )
            == 2
        )
        assert sample(text, "checkpointd_pending_interrupts", namespace="team-a") == 2
        assert sample(text, "checkpointd_pending_interrupts", namespace="default") is None
        assert sample(text, "checkpointd_rpcs_in_flight", grpc_method="PutCheckpoint") == 0
        assert sample(text, "checkpointd_watch_streams") == 0
        assert sample(text, "checkpointd_store_up") == 1
        assert sample(text, "process_resident_memory_bytes") is not None
        pool_max = sample(text, "checkpointd_store_pool_connections", state="max")
        if server.backend == "postgres":
            assert pool_max == 10
            size = sample(text, "checkpointd_store_pool_connections", state="size")
            idle = sample(text, "checkpointd_store_pool_connections", state="idle")
            assert size is not None
            assert idle is not None
            assert 0 <= idle <= size <= 10
        else:
            assert pool_max is None  # SQLite has no pool
    finally:
        server.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_metrics_are_off_unless_asked_for(sidecar):
    """Without --metrics-listen no HTTP port is opened, and the start line says so."""
    log = sidecar.log_path.read_text()
    assert "metrics_listen=off" in log
    assert "metrics on http" not in log
