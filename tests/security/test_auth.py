"""Token authentication and per-namespace, per-role authorization (contract E2: UNAUTHENTICATED,
PERMISSION_DENIED; N1 namespaces), for unary calls and the watch stream, on both backends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from checkpointd_client import (
    AsyncCheckpointdClient,
    CheckpointdClient,
    CheckpointdError,
    InterruptEvent,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    SnapshotComplete,
    SnapshotItem,
    UnauthenticatedError,
)
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.contract.helpers import checkpoint, interrupted
from tests.security.conftest import NO_RETRY, Tokens
from tests.support.sidecar import Sidecar


def _client(server: Sidecar, token: str | None, namespace: str = "default") -> CheckpointdClient:
    return CheckpointdClient(server.target, namespace=namespace, token=token, retry=NO_RETRY)


def _first_watch_item(client: CheckpointdClient) -> Any:
    with client.watch_interrupts(reconnect=False, timeout=10) as watch:
        return next(iter(watch))


def _every_rpc(client: CheckpointdClient, run: str) -> dict[str, Callable[[], Any]]:
    """One call of each RPC (the writes first), watch included."""
    cp, pending = interrupted(run)
    return {
        "PutCheckpoint": lambda: client.put_checkpoint(checkpoint(run)),
        "DeleteExecution": lambda: client.delete_execution(run),
        "PruneCheckpoints": lambda: client.prune(timedelta(days=1)),
        "RecordInterrupt": lambda: client.record_interrupt(cp, pending),
        "ClaimInterrupt": lambda: client.claim_interrupt(run),
        "PutIdempotencyResult": lambda: client.put_idempotent(run, "k", 1),
        "SubmitDecision": lambda: client.submit_decision(run, approved=True, decided_by="x"),
        "LeaseDecision": lambda: client.lease_decision(run, "c", lease_token="t"),
        "ReportResume": lambda: client.report_resume(run, "c", lease_token="t"),
        "GetCheckpoint": lambda: client.get_checkpoint(run, "missing"),
        "GetLatestCheckpoint": lambda: client.get_latest_checkpoint(run),
        "ListCheckpoints": lambda: client.list_checkpoints(run),
        "GetResumePoint": lambda: client.get_resume_point(run),
        "GetForkPoint": lambda: client.get_fork_point(run),
        "ListPendingInterrupts": lambda: client.list_pending_interrupts(),
        "GetIdempotencyResult": lambda: client.get_idempotent(run, "k"),
        "WatchInterrupts": lambda: _first_watch_item(client),
    }


WRITES = (
    "PutCheckpoint",
    "DeleteExecution",
    "PruneCheckpoints",
    "RecordInterrupt",
    "ClaimInterrupt",
    "PutIdempotencyResult",
    "SubmitDecision",
    "LeaseDecision",
    "ReportResume",
)


def _log_lines(server: Sidecar) -> list[str]:
    return server.log_path.read_text(errors="replace").splitlines()


def test_e2_calls_without_a_valid_token_are_unauthenticated_and_no_token_is_logged(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """Every RPC, watch included, is UNAUTHENTICATED without a token (MISSING_TOKEN) or with
    an unknown or malformed one (INVALID_TOKEN); nothing is written; health and reflection
    answer without a token; no token appears in any log line or error message."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    with _client(auth_sidecar, None) as anonymous, _client(auth_sidecar, tokens.wrong) as wrong:
        for client, reason in ((anonymous, "MISSING_TOKEN"), (wrong, "INVALID_TOKEN")):
            for name, call in _every_rpc(client, run).items():
                with pytest.raises(UnauthenticatedError) as refused:
                    call()
                assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED, name
                assert refused.value.reason == reason, name
                assert tokens.wrong not in str(refused.value), name

    not_bearer = [("authorization", f"Basic {tokens.admin}")]
    with _client(auth_sidecar, None) as raw:
        with pytest.raises(UnauthenticatedError) as malformed:
            raw.get_latest_checkpoint(run, metadata=not_bearer)
        assert malformed.value.reason == "INVALID_TOKEN"
        assert tokens.admin not in str(malformed.value)

    with grpc.insecure_channel(auth_sidecar.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (answer,) = list(reflect.ServerReflectionInfo(iter([request]), timeout=5))
        services = {s.name for s in answer.list_services_response.service}
        assert "checkpointd.v1.CheckpointService" in services

    with _client(auth_sidecar, tokens.admin) as admin:
        assert admin.list_pending_interrupts().pending_interrupts == []
        with pytest.raises(NotFoundError):
            admin.get_latest_checkpoint(run)
        assert admin.get_idempotent(run, "k").found is False

    lines = _log_lines(auth_sidecar)
    assert any("MISSING_TOKEN" in line for line in lines)
    assert any("INVALID_TOKEN" in line for line in lines)
    for token in tokens.all():
        leaked = [line for line in lines if token in line or token[4:20] in line]
        assert leaked == [], leaked


def test_e2_n1_namespace_outside_the_grant_is_permission_denied_for_unary_and_watch(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """A token granted team-a works there; in team-b and in the default namespace every RPC,
    watch included, is PERMISSION_DENIED (NAMESPACE_NOT_ALLOWED) and nothing is written."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    with _client(auth_sidecar, tokens.bot, "team-a") as allowed:
        stored = allowed.put_checkpoint(checkpoint(run))
        assert allowed.get_latest_checkpoint(run).checkpoint_id == stored.checkpoint_id
        assert isinstance(_first_watch_item(allowed), SnapshotComplete)

    for namespace in ("team-b", "default", ""):
        with _client(auth_sidecar, tokens.bot, namespace) as outside:
            for name, call in _every_rpc(outside, run).items():
                with pytest.raises(PermissionDeniedError) as denied:
                    call()
                assert denied.value.reason == "NAMESPACE_NOT_ALLOWED", (namespace, name)
                assert denied.value.metadata == {
                    "namespace": namespace or "default",
                    "token_name": "bot",
                }

    with _client(auth_sidecar, tokens.admin, "team-b") as admin:
        with pytest.raises(NotFoundError):
            admin.get_latest_checkpoint(run)
        assert admin.list_pending_interrupts().pending_interrupts == []
    with _client(auth_sidecar, tokens.admin, "team-a") as admin:
        assert [c.checkpoint_id for c in admin.iter_checkpoints(run)] == [stored.checkpoint_id]


# Echoed input is cut to 128 characters (an ellipsis included); messages and metadata values
# stay far below gRPC's 8 KiB default metadata limit.
ECHO_MAX = 128


def _assert_bounded(error: CheckpointdError) -> None:
    assert len(error.message) <= 512, len(error.message)
    for key, value in error.metadata.items():
        assert len(value) <= 256, (key, len(value))


@pytest.mark.parametrize("token_name", ["bot", "admin"])
def test_e2_n1_bad_namespace_is_invalid_argument_before_the_permission_check(
    auth_sidecar: Sidecar, tokens: Tokens, token_name: str
):
    """A namespace outside the syntax (20,000 characters, a space, 64 characters) is
    INVALID_ARGUMENT (INVALID_FIELD, field namespace) for every RPC, watch included, whether
    or not the token is granted every namespace: never PERMISSION_DENIED echoing it whole
    (which made the client see a metadata-size transport error instead). The message shows
    the input cut short with an ellipsis; nothing is written."""
    token = tokens.bot if token_name == "bot" else tokens.admin
    run = f"run-{uuid.uuid4().hex[:8]}"
    for namespace in ("n" * 20_000, "team a", "x" * 64):
        with _client(auth_sidecar, token, namespace) as bad:
            for name, call in _every_rpc(bad, run).items():
                with pytest.raises(InvalidArgumentError) as refused:
                    call()
                error = refused.value
                assert error.code == grpc.StatusCode.INVALID_ARGUMENT, (name, error)
                assert error.reason == "INVALID_FIELD", (name, error)
                assert error.metadata["field"] == "namespace", name
                assert "63 characters" in error.metadata["rule"], name
                assert error.message.startswith("namespace: "), name
                _assert_bounded(error)
                if len(namespace) > ECHO_MAX:
                    assert namespace[:32] in error.message, error.message
                    assert f"{len(namespace)} characters" in error.message, error.message
                    assert "…" in error.message, error.message
    with _client(auth_sidecar, tokens.admin, "team-a") as admin:
        assert list(admin.iter_checkpoints(run)) == []
        assert admin.list_pending_interrupts().pending_interrupts == []
        assert admin.get_idempotent(run, "k").found is False


def test_e2_n1_ungranted_namespace_is_echoed_whole_only_because_it_is_short(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """A valid namespace (at most 63 characters) outside the grant is PERMISSION_DENIED
    naming it; the refusal's message and metadata stay small."""
    namespace = "t" * 63
    with (
        _client(auth_sidecar, tokens.bot, namespace) as outside,
        pytest.raises(PermissionDeniedError) as denied,
    ):
        outside.get_latest_checkpoint("run")
    assert denied.value.reason == "NAMESPACE_NOT_ALLOWED"
    assert denied.value.metadata == {"namespace": namespace, "token_name": "bot"}
    _assert_bounded(denied.value)


def test_e2_read_only_token_reads_and_watches_but_cannot_write(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """A read-only token gets PERMISSION_DENIED (READ_ONLY_TOKEN) for each write RPC, which
    changes nothing, and reads and watches, seeing what a read-write token writes."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    with _client(auth_sidecar, tokens.bot, "team-a") as writer:
        writer.put_checkpoint(checkpoint(run))
        writer.put_idempotent(run, "k", {"charge": 1})
        cp, pending = interrupted(f"{run}-paused")
        writer.record_interrupt(cp, pending)

    with _client(auth_sidecar, tokens.viewer, "team-a") as viewer:
        calls = _every_rpc(viewer, f"{run}-paused")
        for name in WRITES:
            with pytest.raises(PermissionDeniedError) as denied:
                calls[name]()
            assert denied.value.reason == "READ_ONLY_TOKEN", name
            assert denied.value.metadata == {"method": name, "token_name": "viewer"}

        assert viewer.get_latest_checkpoint(run).execution_id == run
        assert viewer.get_idempotent(run, "k").value == {"charge": 1}
        assert [p.execution_id for p in viewer.list_pending_interrupts().pending_interrupts] == [
            f"{run}-paused"
        ]
        assert len(list(viewer.iter_checkpoints(run))) == 1  # the refused writes left no trace

        with viewer.watch_interrupts(timeout=30) as watch:
            items = iter(watch)
            first = next(items)
            assert isinstance(first, SnapshotItem)
            assert first.pending.execution_id == f"{run}-paused"
            assert isinstance(next(items), SnapshotComplete)
            with _client(auth_sidecar, tokens.bot, "team-a") as writer:
                writer.claim_interrupt(f"{run}-paused")
            event = next(i for i in items if isinstance(i, InterruptEvent))
            assert (event.type, event.pending.execution_id) == ("claimed", f"{run}-paused")


def test_k1_read_only_token_cannot_decide_but_sees_decisions(auth_sidecar: Sidecar, tokens: Tokens):
    """Deciding writes: a read-only token is refused (READ_ONLY_TOKEN) and the pause stays
    undecided; once a read-write token decides, the read-only token sees the decision."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    with _client(auth_sidecar, tokens.bot, "team-a") as writer:
        cp, pending = interrupted(run)
        writer.record_interrupt(cp, pending)
        with _client(auth_sidecar, tokens.viewer, "team-a") as viewer:
            with pytest.raises(PermissionDeniedError) as denied:
                viewer.submit_decision(run, approved=True, decided_by="viewer")
            assert denied.value.reason == "READ_ONLY_TOKEN"
            [row] = viewer.list_pending_interrupts().pending_interrupts
            assert row.decision is None
            writer.submit_decision(run, approved=False, decided_by="bot")
            [row] = viewer.list_pending_interrupts().pending_interrupts
            assert row.decision is not None
            assert row.decision.decided_by == "bot"


def test_e2_environment_token_and_clients_configured_by_environment(
    sidecar_factory: Callable[..., Sidecar], tokens: Tokens, monkeypatch: pytest.MonkeyPatch
):
    """CHECKPOINTD_AUTH_TOKEN is read-write in every namespace; the sync, asyncio and
    fastaiagent clients send CHECKPOINTD_TOKEN on every call, the watch included."""
    server = sidecar_factory(CHECKPOINTD_AUTH_TOKEN=tokens.admin)
    monkeypatch.setenv("CHECKPOINTD_TOKEN", tokens.admin)
    run = f"run-{uuid.uuid4().hex[:8]}"
    for namespace in ("default", "team-z"):
        with CheckpointdClient(server.target, namespace=namespace, retry=NO_RETRY) as client:
            client.put_checkpoint(checkpoint(run))
            assert isinstance(_first_watch_item(client), SnapshotComplete)

    async def watch_and_write() -> str:
        async with (
            AsyncCheckpointdClient(server.target, namespace="team-z") as client,
            client.watch_interrupts(timeout=30) as watch,
        ):
            items = aiter(watch)
            assert isinstance(await anext(items), SnapshotComplete)
            cp, pending = interrupted(f"{run}-async")
            await client.record_interrupt(cp, pending)
            event = await anext(items)
            assert isinstance(event, InterruptEvent)
            return event.pending.execution_id

    assert asyncio.run(watch_and_write()) == f"{run}-async"

    with SidecarCheckpointer(server.target, namespace="team-z") as adapter:
        assert adapter.get_last(run) is not None

    monkeypatch.delenv("CHECKPOINTD_TOKEN")
    with (
        SidecarCheckpointer(server.target, token=tokens.wrong, retry=NO_RETRY) as adapter,
        pytest.raises(UnauthenticatedError),
    ):
        adapter.get_last(run)
    with (
        CheckpointdClient(server.target, retry=NO_RETRY) as client,
        pytest.raises(CheckpointdError) as anonymous,
    ):
        client.get_latest_checkpoint(run)
    assert anonymous.value.reason == "MISSING_TOKEN"


def test_s1_e2_n1_the_write_stream_checks_each_item_as_its_unary_call(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """On one Write stream of a read-only token each write item is refused PERMISSION_DENIED
    (READ_ONLY_TOKEN, naming the unary method), writes nothing, and the stream goes on; with
    a token granted team-a only, an item in team-b is NAMESPACE_NOT_ALLOWED while the next
    item, in team-a, is written; a stream without a valid token ends UNAUTHENTICATED before
    any item."""
    from google.rpc import error_details_pb2

    from checkpointd_client.v1 import (
        idempotency_service_pb2,
        interrupt_service_pb2,
        write_service_pb2,
        write_service_pb2_grpc,
    )

    run = f"run-{uuid.uuid4().hex[:8]}"

    def put(correlation_id: int, namespace: str) -> write_service_pb2.WriteRequest:
        return write_service_pb2.WriteRequest(
            correlation_id=correlation_id,
            put_idempotency_result=idempotency_service_pb2.PutIdempotencyResultRequest(
                namespace=namespace, execution_id=run, key="k", result_json="1"
            ),
        )

    def claim(correlation_id: int) -> write_service_pb2.WriteRequest:
        return write_service_pb2.WriteRequest(
            correlation_id=correlation_id,
            claim_interrupt=interrupt_service_pb2.ClaimInterruptRequest(
                namespace="team-a", execution_id=run
            ),
        )

    def reason(answer: write_service_pb2.WriteResponse) -> tuple[int, str, dict[str, str]]:
        info = error_details_pb2.ErrorInfo()
        answer.error.details[0].Unpack(info)
        return answer.error.code, info.reason, dict(info.metadata)

    def write(token: str | None, items: list[Any]) -> dict[int, Any]:
        metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        with grpc.insecure_channel(auth_sidecar.target) as channel:
            stub = write_service_pb2_grpc.WriteServiceStub(channel)
            return {
                a.correlation_id: a for a in stub.Write(iter(items), metadata=metadata, timeout=30)
            }

    denied = grpc.StatusCode.PERMISSION_DENIED.value[0]
    viewer = write(tokens.viewer, [put(1, "team-a"), claim(2)])
    assert reason(viewer[1]) == (
        denied,
        "READ_ONLY_TOKEN",
        {"method": "PutIdempotencyResult", "token_name": "viewer"},
    )
    with _client(auth_sidecar, tokens.admin, "team-a") as admin:
        assert admin.get_idempotent(run, "k").found is False  # the refused item wrote nothing
    assert reason(viewer[2]) == (
        denied,
        "READ_ONLY_TOKEN",
        {"method": "ClaimInterrupt", "token_name": "viewer"},
    )

    bot = write(tokens.bot, [put(1, "team-b"), put(2, "team-a")])
    assert reason(bot[1])[:2] == (denied, "NAMESPACE_NOT_ALLOWED")
    assert bot[2].WhichOneof("result") == "put_idempotency_result"
    with _client(auth_sidecar, tokens.admin, "team-b") as admin:
        assert admin.get_idempotent(run, "k").found is False
    with _client(auth_sidecar, tokens.admin, "team-a") as admin:
        assert admin.get_idempotent(run, "k").value == 1

    for token, expected in ((None, "MISSING_TOKEN"), (tokens.wrong, "INVALID_TOKEN")):
        with pytest.raises(grpc.RpcError) as refused:
            write(token, [put(1, "team-a")])
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with _client(auth_sidecar, token, "team-a") as client:
            with pytest.raises(UnauthenticatedError) as mapped:
                client.put_idempotent(run, "k", 2)  # over the stream, as the client's default
            assert mapped.value.reason == expected


def test_s4_e2_n1_graph_items_on_the_write_stream_are_checked_as_their_unary_calls(
    auth_sidecar: Sidecar, tokens: Tokens
):
    """A read-only token's graph items (PutGraphCheckpoint, PutGraphWrites) are each refused
    PERMISSION_DENIED (READ_ONLY_TOKEN, naming the unary method) and write nothing; with a
    token granted team-a only, a graph item in team-b is NAMESPACE_NOT_ALLOWED while the
    next, in team-a, is written."""
    from google.rpc import error_details_pb2

    from checkpointd_client.v1 import graph_service_pb2 as g
    from checkpointd_client.v1 import write_service_pb2, write_service_pb2_grpc

    thread = f"t-{uuid.uuid4().hex[:8]}"

    def put(correlation_id: int, namespace: str) -> write_service_pb2.WriteRequest:
        return write_service_pb2.WriteRequest(
            correlation_id=correlation_id,
            put_graph_checkpoint=g.PutGraphCheckpointRequest(
                namespace=namespace,
                checkpoint=g.GraphCheckpoint(
                    thread_id=thread,
                    checkpoint_id="c1",
                    checkpoint=g.TypedValue(type="json", data=b"{}"),
                    metadata_json="{}",
                ),
            ),
        )

    def writes(correlation_id: int) -> write_service_pb2.WriteRequest:
        return write_service_pb2.WriteRequest(
            correlation_id=correlation_id,
            put_graph_writes=g.PutGraphWritesRequest(
                namespace="team-a", thread_id=thread, checkpoint_id="c1", task_id="task"
            ),
        )

    def reason(answer: write_service_pb2.WriteResponse) -> tuple[int, str, dict[str, str]]:
        info = error_details_pb2.ErrorInfo()
        answer.error.details[0].Unpack(info)
        return answer.error.code, info.reason, dict(info.metadata)

    def write(token: str, items: list[Any]) -> dict[int, Any]:
        with grpc.insecure_channel(auth_sidecar.target) as channel:
            stub = write_service_pb2_grpc.WriteServiceStub(channel)
            metadata = (("authorization", f"Bearer {token}"),)
            return {
                a.correlation_id: a for a in stub.Write(iter(items), metadata=metadata, timeout=30)
            }

    def stored(namespace: str) -> bool:
        with _client(auth_sidecar, tokens.admin, namespace) as admin:
            found = admin.call_graph(
                "GetGraphCheckpoint",
                g.GetGraphCheckpointRequest(namespace=namespace, thread_id=thread),
            )
        return bool(found.HasField("checkpoint_tuple"))

    denied = grpc.StatusCode.PERMISSION_DENIED.value[0]
    viewer = write(tokens.viewer, [put(1, "team-a"), writes(2)])
    assert reason(viewer[1]) == (
        denied,
        "READ_ONLY_TOKEN",
        {"method": "PutGraphCheckpoint", "token_name": "viewer"},
    )
    assert reason(viewer[2]) == (
        denied,
        "READ_ONLY_TOKEN",
        {"method": "PutGraphWrites", "token_name": "viewer"},
    )
    assert not stored("team-a")

    bot = write(tokens.bot, [put(1, "team-b"), put(2, "team-a")])
    assert reason(bot[1])[:2] == (denied, "NAMESPACE_NOT_ALLOWED")
    assert bot[2].WhichOneof("result") == "put_graph_checkpoint"
    assert not stored("team-b")
    assert stored("team-a")
