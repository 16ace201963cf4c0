"""Contract J3 on every unary RPC, on both backends: a request over ``--max-message-bytes`` is
refused RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE) naming the limit and the flag, and writes nothing.

Every unary method of the three services is called through a raw channel with a valid request
padded past the limit (the clients would refuse nothing themselves); the whole store is dumped
before and after and must not have changed. The same request unpadded is then served.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import grpc
import pytest
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient
from checkpointd_client.v1 import checkpoint_service_pb2 as checkpoints_pb
from checkpointd_client.v1 import idempotency_service_pb2 as idempotency_pb
from checkpointd_client.v1 import interrupt_service_pb2 as interrupts_pb
from checkpointd_client.v1 import replication_service_pb2 as replication_pb
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.reliability.store_dump import StoreReader
from tests.support.sidecar import Sidecar, StoreSpec

LIMIT = 64 * 1024
#: An unknown field (number 1007, length-delimited) of 80 KiB: the server keeps and counts it
#: but no field rule looks at it, so only the size limit can refuse the request.
PADDING = b"\xfa\x3e" + b"\x80\x80\x05" + b"x" * (80 * 1024)
MUTATING = {
    "PutCheckpoint",
    "DeleteExecution",
    "PruneCheckpoints",
    "RecordInterrupt",
    "ClaimInterrupt",
    "PutIdempotencyResult",
    "SubmitDecision",
    "LeaseDecision",
    "ReportResume",
    "MarkCheckpointsSynced",
    "QuarantineCheckpoints",
}
SERVICES = [
    service
    for module in (checkpoints_pb, interrupts_pb, idempotency_pb, replication_pb)
    for service in module.DESCRIPTOR.services_by_name.values()
]


def _valid_request(client: CheckpointdClient, method: str) -> Message:
    """A request for ``method`` that the server accepts (OK) on a fresh execution, which is
    prepared here; the mutating ones would change the store."""
    run = f"exec-{method}"
    stored = client.put_checkpoint(checkpoint(run))
    client.record_interrupt(*interrupted(f"{run}-paused"))
    client.put_idempotent(run, "fn", {"r": 1})
    core = client._core
    cp, pending = interrupted(f"{run}-new")
    # Decisions: one pause decided and leased (to report on), one paused to decide, one
    # decided to lease.
    reported = client.record_interrupt(*interrupted(f"{run}-reported")).checkpoint
    client.submit_decision(f"{run}-reported", approved=True, decided_by="tester")
    client.lease_decision(f"{run}-reported", reported.checkpoint_id, lease_token="t")
    client.record_interrupt(*interrupted(f"{run}-undecided"))
    leased = client.record_interrupt(*interrupted(f"{run}-decided")).checkpoint
    client.submit_decision(f"{run}-decided", approved=False, decided_by="tester")
    builders: dict[str, Callable[[], Message]] = {
        "PutCheckpoint": lambda: core.put_checkpoint(checkpoint(f"{run}-new"), None),
        "GetCheckpoint": lambda: core.get_checkpoint(run, stored.checkpoint_id),
        "GetLatestCheckpoint": lambda: core.get_latest_checkpoint(run),
        "ListCheckpoints": lambda: core.list_checkpoints(run, 10, "", False),
        "DeleteExecution": lambda: core.delete_execution(run, None),
        "PruneCheckpoints": lambda: core.prune(timedelta(0), None),
        "GetResumePoint": lambda: core.get_resume_point(run),
        "GetForkPoint": lambda: core.get_fork_point(run, None),
        "ListExecutions": lambda: core.list_executions(10, "", None, None, None),
        "GetExecution": lambda: core.get_execution(run),
        "ListNamespaces": lambda: core.list_namespaces(10, ""),
        "RecordInterrupt": lambda: core.record_interrupt(cp, pending, None),
        "ClaimInterrupt": lambda: core.claim_interrupt(f"{run}-paused", None, None),
        "ListPendingInterrupts": lambda: core.list_pending_interrupts(10, "", None, None, None),
        "PutIdempotencyResult": lambda: core.put_idempotent(run, "fn", {"r": 2}, None),
        "GetIdempotencyResult": lambda: core.get_idempotent(run, "fn"),
        "SubmitDecision": lambda: core.submit_decision(
            f"{run}-undecided", True, None, "tester", None, None
        ),
        "LeaseDecision": lambda: core.lease_decision(
            f"{run}-decided", leased.checkpoint_id, "w", 30, None
        ),
        "ReportResume": lambda: core.report_resume(
            f"{run}-reported", reported.checkpoint_id, "t", None, None
        ),
        "ListDecisions": lambda: core.list_decisions(10, "", False),
        "ListUnsyncedCheckpoints": lambda: core.list_unsynced_checkpoints(10, ""),
        "MarkCheckpointsSynced": lambda: core.mark_checkpoints_synced([stored.checkpoint_id]),
        "QuarantineCheckpoints": lambda: core.quarantine_checkpoints(
            {stored.checkpoint_id: "refused"}
        ),
    }
    return builders[method]()


def _reason(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)
    for detail in status.details if status else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


def test_j3_every_unary_rpc_refuses_an_oversize_request_and_writes_nothing(
    sidecar_factory: Callable[..., Sidecar], store_spec: StoreSpec
) -> None:
    """Each unary RPC answers a request over the limit RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE)
    naming the limit and --max-message-bytes, and the store is unchanged; the same request
    without the padding is then served (and, for the mutating ones, does change the store),
    so the size alone was refused."""
    server = sidecar_factory("--max-message-bytes", str(LIMIT))
    unary = [
        (service, method)
        for service in SERVICES
        for method in service.methods
        if not method.server_streaming and not method.client_streaming
    ]
    assert len(unary) == 23
    reader = StoreReader(store_spec)  # after the count, which would leave it open
    problems: list[str] = []
    try:
        with (
            CheckpointdClient(server.target, retry=NO_RETRY) as client,
            grpc.insecure_channel(server.target) as channel,
        ):
            for service, method in unary:
                request = _valid_request(client, method.name).SerializeToString()
                call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                    f"/{service.full_name}/{method.name}", request_serializer=lambda b: b
                )
                before = reader.dump()
                try:
                    call(request + PADDING, timeout=30)
                    problems.append(f"{method.name}: an oversize request was served")
                    continue
                except grpc.RpcError as error:
                    details = error.details() or ""
                    if (error.code(), _reason(error)) != (
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        "MESSAGE_TOO_LARGE",
                    ) or not (str(LIMIT) in details and "--max-message-bytes" in details):
                        problems.append(f"{method.name}: {error.code()} {details}")
                if reader.dump() != before:
                    problems.append(f"{method.name}: the refused request changed the store")
                call(request, timeout=30)  # without the padding: served
                if (reader.dump() != before) != (method.name in MUTATING):
                    problems.append(f"{method.name}: the served request's effect is unexpected")
    finally:
        reader.close()
    assert problems == []


def test_j3_an_oversize_watch_request_is_refused(sidecar_factory: Callable[..., Sidecar]):
    """The streaming RPC keeps the size limit too: an oversize WatchInterrupts request (padded
    with an unknown field, so no field rule answers first) is RESOURCE_EXHAUSTED
    (MESSAGE_TOO_LARGE), not served."""
    server = sidecar_factory("--max-message-bytes", str(LIMIT))
    # Field 1007, length-delimited, 80 KiB: unknown to the server, counted by ByteSize().
    padding = b"\xfa\x3e" + b"\x80\x80\x05" + b"x" * (80 * 1024)
    request = interrupts_pb.WatchInterruptsRequest().SerializeToString() + padding
    with grpc.insecure_channel(server.target) as channel:
        call: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            "/checkpointd.v1.InterruptService/WatchInterrupts",
            request_serializer=lambda raw: raw,
        )
        with pytest.raises(grpc.RpcError) as refused:
            next(call(request, timeout=10))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    assert _reason(refused.value) == "MESSAGE_TOO_LARGE"
