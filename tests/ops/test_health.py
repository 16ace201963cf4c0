"""Health: SERVING only while the store answers, from a start before the database exists
through an outage and back (contract E3), on both backends."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd_client import CheckpointdClient, NotFoundError, RetryPolicy, UnavailableError
from tests.conftest import run_sql
from tests.contract.helpers import checkpoint
from tests.ops.helpers import NOT_SERVING, SERVING, EarlySidecar, HealthProbe, Outage, next_status
from tests.support.sidecar import Sidecar, StoreSpec

SERVICES = (
    "",
    "checkpointd.v1.CheckpointService",
    "checkpointd.v1.InterruptService",
    "checkpointd.v1.IdempotencyService",
    "checkpointd.v1.ReplicationService",
)


def test_e3_server_waits_for_a_missing_database_then_serves_without_restart(store_spec):
    """Started while the database is away, the server answers NOT_SERVING and UNAVAILABLE
    (STORE_UNAVAILABLE, never INTERNAL), says what it waits for, then serves when it comes."""
    with Outage.around(store_spec) as outage:
        outage.begin()
        server = EarlySidecar(
            outage.spec,
            extra_args=["--health-interval", "0.2", "--sqlite-busy-timeout-ms", "100"],
        )
        try:
            server.start()
            server.wait_for_log("waiting for the store")
            probe = HealthProbe(server.target)
            for service in SERVICES:
                assert probe.check(service) == NOT_SERVING, service
            no_retry = RetryPolicy(max_attempts=1)
            with CheckpointdClient(server.target, retry=no_retry) as client:
                with pytest.raises(UnavailableError) as refused:
                    client.get_latest_checkpoint("run-1")
                assert refused.value.reason == "STORE_UNAVAILABLE"
                with pytest.raises(UnavailableError) as refused_watch:
                    next(iter(client.watch_interrupts(reconnect=False)))
                assert refused_watch.value.reason == "STORE_UNAVAILABLE"
                watch = probe.watch()
                next_status(watch, NOT_SERVING)
                outage.end()
                next_status(watch, SERVING)
                watch.cancel()
                for service in SERVICES:
                    assert probe.check(service) == SERVING, service
                stored = client.put_checkpoint(checkpoint(f"run-{uuid.uuid4().hex}"))
                assert client.get_latest_checkpoint(stored.execution_id) == stored
            probe.close()
            log = server.log_text()
            assert "store connected" in log
            assert "serving on" in log
            assert server.stop() == 0
        finally:
            server.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_e3_health_goes_not_serving_while_postgres_is_lost_and_back_when_it_returns(store_spec):
    """A database lost after start turns health NOT_SERVING and back to SERVING by itself;
    both transitions are logged once."""
    with Outage.around(store_spec) as outage:
        server = EarlySidecar(outage.spec, extra_args=["--health-interval", "0.2"])
        try:
            server.start()
            probe = HealthProbe(server.target)
            watch = probe.watch()
            next_status(watch, SERVING)
            outage.begin()
            next_status(watch, NOT_SERVING)
            with CheckpointdClient(server.target, retry=RetryPolicy(max_attempts=1)) as client:
                with pytest.raises(UnavailableError) as refused:
                    client.get_latest_checkpoint("run-1")
                assert refused.value.reason == "STORE_UNAVAILABLE"
                outage.end()
                next_status(watch, SERVING)
                watch.cancel()
                client.put_checkpoint(checkpoint("run-after-outage"))
            probe.close()
            log = server.log_text()
            assert log.count("store lost") == 1
            assert log.count("store recovered") == 1
        finally:
            server.close()


def _wait_for_status(probe: HealthProbe, wanted: int, timeout: float = 60.0) -> None:
    """Poll Check until it reports ``wanted``; ``timeout`` is only a generous safety net."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = probe.check()
        if status == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"health stayed {status}, expected {wanted}")


@pytest.mark.parametrize("backend", ["postgres"])
def test_e3_health_goes_not_serving_while_postgres_stops_answering(store_spec):
    """Postgres only (SQLite is a local file; there is no network to partition): when every
    packet to and from the database stops, without a connection being closed, health turns
    NOT_SERVING because a ping gets no answer, not after --store-timeout (set far beyond
    the wait here), and SERVING again once packets flow."""
    with Outage.around(store_spec) as outage:
        server = EarlySidecar(
            outage.spec, extra_args=["--health-interval", "0.5", "--store-timeout", "300"]
        )
        try:
            server.start()
            probe = HealthProbe(server.target)
            _wait_for_status(probe, SERVING)
            outage.partition()
            _wait_for_status(probe, NOT_SERVING)
            outage.end()
            _wait_for_status(probe, SERVING)
            probe.close()
            log = server.log_text()
            assert log.count("store lost") == 1
            assert log.count("store recovered") == 1
            assert server.stop() == 0
        finally:
            server.close()


def _first_status(stream) -> int | grpc.StatusCode:
    """The first status a health Watch stream reports, or the code it was refused with."""
    try:
        response: health_pb2.HealthCheckResponse = next(stream)
        return response.status
    except grpc.RpcError as exc:
        return exc.code()


def test_b1_health_watch_streams_are_bounded_and_end_on_shutdown(tmp_path):
    """Health Watch needs no token, so its streams are bounded by a setting: past
    --max-health-watch-streams a new one is refused RESOURCE_EXHAUSTED (saying which
    setting), a closed one frees its place, Check still answers, and shutdown ends the
    streams (NOT_SERVING, then OK). Health does not depend on the backend: SQLite only."""
    server = Sidecar(
        StoreSpec("sqlite", f"sqlite://{tmp_path / 'store.db'}"),
        extra_args=["--max-health-watch-streams", "3"],
    ).start()
    channel = grpc.insecure_channel(server.tcp_target)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        held = [stub.Watch(request, timeout=120) for _ in range(3)]
        for stream in held:
            assert next(stream).status == SERVING
        refused = stub.Watch(request, timeout=30)
        with pytest.raises(grpc.RpcError) as error:
            next(refused)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-health-watch-streams" in (error.value.details() or "")
        assert stub.Check(request, timeout=10).status == SERVING
        held.pop().cancel()
        deadline = time.monotonic() + 30
        while True:  # the cancelled stream's place frees once the server has seen it go
            again = stub.Watch(request, timeout=120)
            first = _first_status(again)
            if first == SERVING:
                break
            assert first == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the cancelled stream never freed its place"
            time.sleep(0.1)
        held.append(again)
        assert server.stop() == 0
        for stream in held:
            assert [response.status for response in stream] == [NOT_SERVING]
            assert stream.code() == grpc.StatusCode.OK
    finally:
        channel.close()
        server.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_e3_a_postgres_that_takes_no_writes_is_unavailable_and_not_serving(store_spec):
    """A connection that lands where Postgres takes no writes (a standby, a primary demoted
    by a failover: here the server's role made read-only, its connections cut) answers writes
    UNAVAILABLE (STORE_UNAVAILABLE, never INTERNAL) and health NOT_SERVING, and both come back
    once writes are taken again, without a restart."""
    role = f"cpd_{uuid.uuid4().hex[:12]}"
    admin = store_spec.url
    scheme, rest = admin.split("://", 1)
    as_role = f"{scheme}://{role}@{rest.split('@', 1)[1]}"
    cut = f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
    run_sql(admin, f"CREATE ROLE {role} LOGIN SUPERUSER")
    server = EarlySidecar(
        StoreSpec("postgres", as_role, pg_schema=store_spec.pg_schema),
        extra_args=["--health-interval", "0.2"],
    )
    try:
        server.start()
        probe = HealthProbe(server.target)
        watch = probe.watch()
        next_status(watch, SERVING)
        with CheckpointdClient(server.target, retry=RetryPolicy(max_attempts=1)) as client:
            client.put_checkpoint(checkpoint("run-before"))
            run_sql(admin, f"ALTER ROLE {role} SET default_transaction_read_only = on", cut)
            next_status(watch, NOT_SERVING)
            for attempt in range(3):  # each a fresh connection, each refused the same way
                with pytest.raises(UnavailableError) as refused:
                    client.put_checkpoint(checkpoint(f"run-refused-{attempt}"))
                assert refused.value.reason == "STORE_UNAVAILABLE"
                assert "takes no writes" in str(refused.value)
            run_sql(admin, f"ALTER ROLE {role} RESET default_transaction_read_only", cut)
            next_status(watch, SERVING)
            client.put_checkpoint(checkpoint("run-after"))
            for attempt in range(3):  # nothing refused was written
                with pytest.raises(NotFoundError):
                    client.get_latest_checkpoint(f"run-refused-{attempt}")
        watch.cancel()
        probe.close()
        assert "Traceback" not in server.log_text()
    finally:
        server.close()
        run_sql(admin, cut, f"DROP OWNED BY {role} CASCADE", f"DROP ROLE {role}")
