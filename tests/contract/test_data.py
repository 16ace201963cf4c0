"""Contract J1-J4, N1, D1: what goes in comes out exactly; bad input changes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from checkpointd_client import (
    CheckpointdClient,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from checkpointd_client._proto.checkpointd.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.support.store_dump import dump_store

AWKWARD_JSON = {
    "big": 2**70,
    "negative_big": -(2**64) - 1,
    "int": 42,
    "float": 0.1,
    "exp": 1e300,
    "unicode": "日本語 ✓ émoji 🚀 \u0000-free",
    "nested": {"a": [1, {"b": [None, True, False, {}]}], "empty": {}, "list": []},
    "": "empty key",
}


def test_j1_json_round_trips_exactly(client, execution_id):
    """Big integers, floats, unicode, nesting and empty objects come back value-equal and
    typed as sent (42 stays an int)."""
    stored = client.put_checkpoint(
        checkpoint(
            execution_id,
            state_snapshot=AWKWARD_JSON,
            node_input={"x": AWKWARD_JSON},
            node_output={},
            iteration_counters={"loop": 2**40},
            interrupt_context={"list": [2**53 + 1]},
        )
    )
    got = client.get_checkpoint(execution_id, stored.checkpoint_id)
    assert got.state_snapshot == AWKWARD_JSON
    assert type(got.state_snapshot["int"]) is int
    assert got.state_snapshot["big"] == 2**70
    assert got.node_input == {"x": AWKWARD_JSON}
    assert got.iteration_counters == {"loop": 2**40}
    assert got.interrupt_context == {"list": [2**53 + 1]}
    client.put_idempotent(execution_id, "k", AWKWARD_JSON)
    assert client.get_idempotent(execution_id, "k").value == AWKWARD_JSON


def _seed(target: str) -> None:
    """Give the store one row of every kind, in the execution the bad requests name and in
    another, so "nothing changed" is checked against a store that has something to lose."""
    with CheckpointdClient(target, retry=NO_RETRY) as client:
        for execution_id in ("exec-bad", "bystander"):
            client.put_checkpoint(checkpoint(execution_id))
            client.record_interrupt(*interrupted(execution_id))
            client.put_idempotent(execution_id, "k", {"v": 1}, request_id=f"{execution_id}-k")


def _raw_stubs(target: str):
    channel = grpc.insecure_channel(target)
    return (
        channel,
        checkpoint_service_pb2_grpc.CheckpointServiceStub(channel),
        interrupt_service_pb2_grpc.InterruptServiceStub(channel),
        idempotency_service_pb2_grpc.IdempotencyServiceStub(channel),
    )


BAD_CHECKPOINTS = [
    ("checkpoint.execution_id", {"execution_id": ""}),
    ("checkpoint.execution_id", {"execution_id": "x" * 257}),
    ("checkpoint.execution_id", {"execution_id": "tab\there"}),
    ("checkpoint.checkpoint_id", {"checkpoint_id": "c" * 129}),
    ("checkpoint.status", {"status": checkpoint_pb2.CHECKPOINT_STATUS_UNSPECIFIED}),
    ("checkpoint.state_snapshot_json", {"state_snapshot_json": "[1, 2]"}),
    ("checkpoint.state_snapshot_json", {"state_snapshot_json": '{"a": NaN}'}),
    ("checkpoint.node_input_json", {"node_input_json": "{not json"}),
    ("checkpoint.node_output_json", {"node_output_json": "null"}),
    ("checkpoint.iteration_counters_json", {"iteration_counters_json": '{"a": "1"}'}),
    ("checkpoint.interrupt_context_json", {"interrupt_context_json": '"text"'}),
    ("checkpoint.node_id", {"node_id": "n\x00"}),
    ("checkpoint.chain_name", {"chain_name": "c" * 257}),
    ("checkpoint.agent_path", {"agent_path": "p" * 1025}),
]


@pytest.mark.parametrize(
    ("field", "override"), BAD_CHECKPOINTS, ids=[f for f, _ in BAD_CHECKPOINTS]
)
def test_j2_bad_checkpoint_fields_are_invalid_argument_and_write_nothing(sidecar, field, override):
    """Each broken field gets INVALID_ARGUMENT naming it, and nothing is stored: every table
    of the store reads the same before and after (a bad execution_id could land anywhere)."""
    _seed(sidecar.target)
    before = dump_store(sidecar.store)
    channel, checkpoints, _, _ = _raw_stubs(sidecar.target)
    with channel:
        fields = {
            "execution_id": "exec-bad",
            "checkpoint_id": f"cp-{uuid.uuid4().hex}",
            "status": checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
            **override,
        }
        request = checkpoint_service_pb2.PutCheckpointRequest(
            request_id="r", checkpoint=checkpoint_pb2.Checkpoint(**fields)
        )
        with pytest.raises(grpc.RpcError) as err:
            checkpoints.PutCheckpoint(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field + ":")
    assert dump_store(sidecar.store) == before


def test_j2_every_required_field_missing_names_the_field(sidecar):
    """Requests missing a required field say which one; none is INTERNAL; none writes."""
    _seed(sidecar.target)
    before = dump_store(sidecar.store)
    channel, checkpoints, interrupts, idempotency = _raw_stubs(sidecar.target)
    cases = [
        (checkpoints.PutCheckpoint, checkpoint_service_pb2.PutCheckpointRequest(), "checkpoint"),
        (
            checkpoints.GetCheckpoint,
            checkpoint_service_pb2.GetCheckpointRequest(execution_id="e"),
            "checkpoint_id",
        ),
        (
            checkpoints.GetLatestCheckpoint,
            checkpoint_service_pb2.GetLatestCheckpointRequest(),
            "execution_id",
        ),
        (
            checkpoints.ListCheckpoints,
            checkpoint_service_pb2.ListCheckpointsRequest(),
            "execution_id",
        ),
        (
            checkpoints.DeleteExecution,
            checkpoint_service_pb2.DeleteExecutionRequest(),
            "execution_id",
        ),
        (
            checkpoints.PruneCheckpoints,
            checkpoint_service_pb2.PruneCheckpointsRequest(),
            "older_than",
        ),
        (
            checkpoints.PruneCheckpoints,
            checkpoint_service_pb2.PruneCheckpointsRequest(older_than=Duration(seconds=-5)),
            "older_than",
        ),
        (
            checkpoints.GetResumePoint,
            checkpoint_service_pb2.GetResumePointRequest(),
            "execution_id",
        ),
        (checkpoints.GetForkPoint, checkpoint_service_pb2.GetForkPointRequest(), "execution_id"),
        (
            interrupts.RecordInterrupt,
            interrupt_service_pb2.RecordInterruptRequest(
                checkpoint=checkpoint_pb2.Checkpoint(
                    execution_id="e", status=checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED
                )
            ),
            "pending",
        ),
        (interrupts.ClaimInterrupt, interrupt_service_pb2.ClaimInterruptRequest(), "execution_id"),
        (
            interrupts.ListPendingInterrupts,
            interrupt_service_pb2.ListPendingInterruptsRequest(page_size=-1),
            "page_size",
        ),
        (
            idempotency.PutIdempotencyResult,
            idempotency_service_pb2.PutIdempotencyResultRequest(execution_id="e", key="k"),
            "result_json",
        ),
        (
            idempotency.PutIdempotencyResult,
            idempotency_service_pb2.PutIdempotencyResultRequest(execution_id="e", result_json="1"),
            "key",
        ),
        (
            idempotency.GetIdempotencyResult,
            idempotency_service_pb2.GetIdempotencyResultRequest(key="k"),
            "execution_id",
        ),
    ]
    with channel:
        for method, request, field in cases:
            with pytest.raises(grpc.RpcError) as err:
                method(request, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, err.value)
            assert err.value.details().startswith(f"{field}:"), err.value.details()
    assert dump_store(sidecar.store) == before


def test_j3_oversize_request_is_refused_naming_the_limit_and_writes_nothing(
    sidecar_factory, execution_id
):
    """A request over --max-message-bytes gets RESOURCE_EXHAUSTED naming the limit and the
    flag that raises it; nothing is stored."""
    server = sidecar_factory("--max-message-bytes", str(1024 * 1024))
    _seed(server.target)
    before = dump_store(server.store)
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        with pytest.raises(ResourceExhaustedError) as err:
            client.put_checkpoint(checkpoint(execution_id, state_snapshot={"b": "x" * 2_000_000}))
        assert err.value.reason == "MESSAGE_TOO_LARGE"
        assert "1048576" in err.value.message
        assert "--max-message-bytes" in err.value.message
    assert dump_store(server.store) == before


def test_j3_default_limit_accepts_a_several_mib_history(client, execution_id):
    """The default limit takes a real agent history of several MiB."""
    history = {"messages": [{"role": "user", "content": "x" * 1000} for _ in range(6000)]}
    stored = client.put_checkpoint(checkpoint(execution_id, state_snapshot=history))
    assert client.get_checkpoint(execution_id, stored.checkpoint_id).state_snapshot == history


def test_j4_created_at_supplied_is_kept_with_microseconds(client, execution_id):
    """A caller-supplied created_at (even far in the past) is stored to the microsecond."""
    for when in [
        datetime(2020, 5, 17, 3, 4, 5, 678901, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]:
        stored = client.put_checkpoint(checkpoint(execution_id, created_at=when))
        assert client.get_checkpoint(execution_id, stored.checkpoint_id).created_at == when


def test_n1_namespaces_are_isolated(sidecar, execution_id):
    """The same execution id in two namespaces is two executions; nothing crosses over."""
    with (
        CheckpointdClient(sidecar.target, namespace="team-a", retry=NO_RETRY) as a,
        CheckpointdClient(sidecar.target, namespace="team-b", retry=NO_RETRY) as b,
    ):
        a.put_checkpoint(checkpoint(execution_id, checkpoint_id="same-id", node_id="a"))
        b.put_checkpoint(checkpoint(execution_id, checkpoint_id="same-id", node_id="b"))
        cp, pending = interrupted(execution_id)
        a.record_interrupt(cp, pending)
        a.put_idempotent(execution_id, "k", "a")

        assert b.get_latest_checkpoint(execution_id).node_id == "b"
        assert b.list_pending_interrupts().pending_interrupts == []
        assert not b.get_idempotent(execution_id, "k").found
        with pytest.raises(NotFoundError):
            b.claim_interrupt(execution_id)
        assert b.delete_execution(execution_id).checkpoints_deleted == 1
        assert a.get_latest_checkpoint(execution_id).status == "interrupted"
        assert a.claim_interrupt(execution_id).execution_id == execution_id


def test_n1_default_namespace_is_the_empty_namespace(sidecar, execution_id):
    """An empty namespace on the wire means "default"."""
    channel, checkpoints, _, _ = _raw_stubs(sidecar.target)
    with channel, CheckpointdClient(sidecar.target, retry=NO_RETRY) as client:
        client.put_checkpoint(checkpoint(execution_id))
        reply = checkpoints.GetLatestCheckpoint(
            checkpoint_service_pb2.GetLatestCheckpointRequest(
                namespace="", execution_id=execution_id
            ),
            timeout=10,
        )
        assert reply.checkpoint.execution_id == execution_id


def test_n1_invalid_namespace_is_invalid_argument(sidecar):
    """A namespace outside the documented syntax is refused, naming the field."""
    with CheckpointdClient(sidecar.target, namespace="bad namespace!", retry=NO_RETRY) as client:
        with pytest.raises(InvalidArgumentError) as err:
            client.list_pending_interrupts()
        assert err.value.metadata["field"] == "namespace"


def test_d1_idempotency_put_get_replace_and_null(client, execution_id):
    """Put replaces, get returns found/not found, and a cached null is found."""
    assert not client.get_idempotent(execution_id, "k").found
    client.put_idempotent(execution_id, "k", {"v": 1})
    client.put_idempotent(execution_id, "k", {"v": 2})
    assert client.get_idempotent(execution_id, "k").value == {"v": 2}
    client.put_idempotent(execution_id, "none", None)
    cached_null = client.get_idempotent(execution_id, "none")
    assert cached_null.found
    assert cached_null.value is None
    assert not client.get_idempotent("other", "k").found


def test_d1_idempotency_put_retried_is_one_value(client, execution_id):
    """A late retry of a put (its reply was lost, and a newer put has replaced the value
    since) writes nothing: the newer value stays. A plain upsert would bring back v1."""
    client.put_idempotent(execution_id, "k", {"v": 1}, request_id="request-a")
    client.put_idempotent(execution_id, "k", {"v": 2}, request_id="request-b")
    client.put_idempotent(execution_id, "k", {"v": 1}, request_id="request-a")
    assert client.get_idempotent(execution_id, "k").value == {"v": 2}


def test_e2_prune_with_a_huge_age_deletes_nothing_and_is_no_error(client, execution_id):
    """An age reaching before year 1 is clamped, not an overflow error."""
    client.put_checkpoint(checkpoint(execution_id, created_at=datetime(1, 1, 2, tzinfo=UTC)))
    result = client.prune(timedelta(days=999_999_999))
    assert result.checkpoints_deleted == 0
