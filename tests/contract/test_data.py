"""Contract J1-J4, N1, D1: what goes in comes out exactly; bad input changes nothing."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpointd_client import (
    CheckpointdClient,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    idempotency_service_pb2,
    idempotency_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY, WRITE_PATHS
from tests.contract.helpers import checkpoint, interrupted
from tests.support.grpc_errors import error_details
from tests.support.store_dump import dump_store


@pytest.fixture(params=WRITE_PATHS)
def write_path(request: pytest.FixtureRequest) -> str:
    """Every rule here holds on both write paths: the Write stream and unary calls (S1)."""
    return str(request.param)


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


BAD_CHECKPOINTS: list[tuple[str, dict[str, Any]]] = [
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


def test_j2_bad_checkpoint_fields_are_invalid_argument_and_write_nothing(sidecar_factory):
    """Each broken field of BAD_CHECKPOINTS gets INVALID_ARGUMENT naming it, and nothing is
    stored: every table of the store reads the same before and after each (a bad
    execution_id could land anywhere). The cases share one server, each meeting the store the
    previous one left, which must be the seeded one."""
    sidecar = sidecar_factory()  # requests in the default namespace, on a store of its own
    _seed(sidecar.target)
    before = dump_store(sidecar.store)
    problems: list[str] = []
    channel, checkpoints, _, _ = _raw_stubs(sidecar.target)
    with channel:
        for field, override in BAD_CHECKPOINTS:
            fields = {
                "execution_id": "exec-bad",
                "checkpoint_id": f"cp-{uuid.uuid4().hex}",
                "status": checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
                **override,
            }
            request = checkpoint_service_pb2.PutCheckpointRequest(
                request_id="r", checkpoint=checkpoint_pb2.Checkpoint(**fields)
            )
            try:
                checkpoints.PutCheckpoint(request, timeout=10)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    problems.append(f"{override}: {exc.code()} instead of INVALID_ARGUMENT")
                elif not (exc.details() or "").startswith(field + ":"):
                    problems.append(f"{override}: {exc.details()!r} does not name {field}")
            else:
                problems.append(f"{override}: accepted")
            if dump_store(sidecar.store) != before:
                problems.append(f"{override}: the store changed")
                before = dump_store(sidecar.store)
    assert problems == []


def test_j2_every_required_field_missing_names_the_field(sidecar_factory):
    """Requests missing a required field say which one; none is INTERNAL; none writes."""
    sidecar = sidecar_factory()  # requests in the default namespace, on a store of its own
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
            assert (err.value.details() or "").startswith(f"{field}:"), err.value.details()
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
        CheckpointdClient(sidecar.target, namespace=f"{sidecar.namespace}-a", retry=NO_RETRY) as a,
        CheckpointdClient(sidecar.target, namespace=f"{sidecar.namespace}-b", retry=NO_RETRY) as b,
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


def test_n1_default_namespace_is_the_empty_namespace(sidecar_factory, execution_id):
    """An empty namespace on the wire means "default"."""
    sidecar = sidecar_factory()  # the default namespace, on a store of its own
    channel, checkpoints, _, _ = _raw_stubs(sidecar.target)
    with (
        channel,
        CheckpointdClient(sidecar.target, namespace="default", retry=NO_RETRY) as client,
    ):
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


# --- bad input anywhere is INVALID_ARGUMENT, never INTERNAL (J2, E2) -------------------------


def _forged_token(scope: list[object], sequence_json: str) -> str:
    """A page token built by hand, as any caller can: base64url of [1, sequence, digest],
    where the digest (the first 16 hex digits of SHA-256 of the request's scope) is public."""
    digest = hashlib.sha256(json.dumps(scope).encode()).hexdigest()[:16]
    raw = f'[1,{sequence_json},"{digest}"]'
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


FORGED_SEQUENCES = [
    str(2**63),
    str(2**64 + 5),
    str(10**30),
    str(-(10**30)),
    str(-(2**63) - 1),
    "1.5",
    "true",
]


def _bad_page_tokens(scope: list[object]) -> dict[str, str]:
    tokens = {f"sequence {s}": _forged_token(scope, s) for s in FORGED_SEQUENCES}
    nested = "[" * 5000
    tokens["5000 nested ["] = base64.urlsafe_b64encode(nested.encode()).decode()
    tokens["oversize"] = "A" * 100_000
    tokens["not base64"] = "not a token!"
    return tokens


def test_e2_j2_forged_page_tokens_are_invalid_page_token_on_every_listing(
    sidecar_factory, execution_id
):
    """ListCheckpoints (both orders) and ListPendingInterrupts answer a forged token whose
    digest is right but whose sequence is outside the store's range, a deeply nested one, an
    oversize one and a non-base64 one with INVALID_ARGUMENT (INVALID_PAGE_TOKEN), never
    INTERNAL; the server keeps serving and nothing changes."""
    sidecar = sidecar_factory()  # a store of its own: the forged tokens name its sequences
    with CheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY) as client:
        for _ in range(3):
            client.put_checkpoint(checkpoint(execution_id))
        cp, pending = interrupted(execution_id)
        client.record_interrupt(cp, pending)
        calls: dict[str, Callable[[], object]] = {}
        for descending in (False, True):
            scope = ["checkpoints", client.namespace, execution_id, descending]
            for name, token in _bad_page_tokens(scope).items():
                calls[f"ListCheckpoints descending={descending} {name}"] = functools.partial(
                    client.list_checkpoints,
                    execution_id,
                    page_size=1,
                    page_token=token,
                    descending=descending,
                )
        for name, token in _bad_page_tokens(
            ["pending", client.namespace, None, None, None]
        ).items():
            calls[f"ListPendingInterrupts {name}"] = functools.partial(
                client.list_pending_interrupts, page_size=1, page_token=token
            )
        for name, call in calls.items():
            with pytest.raises(InvalidArgumentError) as err:
                call()
            assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, name
            assert err.value.reason == "INVALID_PAGE_TOKEN", (name, err.value)
            assert err.value.metadata == {"field": "page_token"}, name
            assert len(err.value.message) < 300, name

        # A forged token in range names a position the caller could page to anyway.
        page = client.list_checkpoints(
            execution_id,
            page_token=_forged_token(["checkpoints", client.namespace, execution_id, False], "1"),
        )
        assert [c.sequence for c in page.checkpoints] == [2, 3, 4]
        assert len(client.list_checkpoints(execution_id).checkpoints) == 4
        assert len(client.list_pending_interrupts().pending_interrupts) == 1


NON_FINITE_NUMBERS = ["1e999", "-1e999", "1E400", "-0.5e99999", "123456789.0e308"]


def _json_cases(number: str) -> list[tuple[str, str, object]]:
    """(rpc, field path, request) for every JSON field of every RPC, holding ``number``."""
    obj = f'{{"nested": {{"list": [1, {number}]}}}}'

    def cp(**fields: Any) -> checkpoint_pb2.Checkpoint:
        return checkpoint_pb2.Checkpoint(
            execution_id="exec-nonfinite",
            checkpoint_id=f"cp-{uuid.uuid4().hex}",
            chain_name="flow",
            node_id="node",
            status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
            **fields,
        )

    cases: list[tuple[str, str, object]] = []
    for name in (
        "state_snapshot_json",
        "node_input_json",
        "node_output_json",
        "interrupt_context_json",
    ):
        cases.append(
            (
                "PutCheckpoint",
                f"checkpoint.{name}",
                checkpoint_service_pb2.PutCheckpointRequest(
                    request_id="r", checkpoint=cp(**{name: obj})
                ),
            )
        )
    cases.append(
        (
            "PutCheckpoint",
            "checkpoint.iteration_counters_json",
            checkpoint_service_pb2.PutCheckpointRequest(
                checkpoint=cp(iteration_counters_json=f'{{"loop": {number}}}')
            ),
        )
    )
    interrupted_cp = cp(interrupt_context_json=obj)
    interrupted_cp.status = checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED
    cases.append(
        (
            "RecordInterrupt",
            "checkpoint.interrupt_context_json",
            interrupt_service_pb2.RecordInterruptRequest(
                checkpoint=interrupted_cp,
                pending=checkpoint_pb2.PendingInterrupt(reason="r", context_json="{}"),
            ),
        )
    )
    clean_cp = cp()
    clean_cp.status = checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED
    cases.append(
        (
            "RecordInterrupt",
            "pending.context_json",
            interrupt_service_pb2.RecordInterruptRequest(
                checkpoint=clean_cp,
                pending=checkpoint_pb2.PendingInterrupt(reason="r", context_json=obj),
            ),
        )
    )
    for result in (number, obj):
        cases.append(
            (
                "PutIdempotencyResult",
                "result_json",
                idempotency_service_pb2.PutIdempotencyResultRequest(
                    request_id=f"r-{uuid.uuid4().hex}",
                    execution_id="exec-nonfinite",
                    key="k",
                    result_json=result,
                ),
            )
        )
    return cases


def test_j2_numbers_that_overflow_to_infinity_are_refused_in_every_json_field(sidecar_factory):
    """1e999 and its kin (NON_FINITE_NUMBERS) are standard JSON syntax but no finite number:
    every JSON field of every RPC refuses them with INVALID_ARGUMENT (INVALID_FIELD) naming
    the field and the rule, and nothing is written."""
    sidecar = sidecar_factory()  # requests in the default namespace, on a store of its own
    channel, checkpoints, interrupts, idempotency = _raw_stubs(sidecar.target)
    methods = {
        "PutCheckpoint": checkpoints.PutCheckpoint,
        "RecordInterrupt": interrupts.RecordInterrupt,
        "PutIdempotencyResult": idempotency.PutIdempotencyResult,
    }
    with channel:
        for number in NON_FINITE_NUMBERS:
            for rpc, field, request in _json_cases(number):
                with pytest.raises(grpc.RpcError) as err:
                    methods[rpc](request, timeout=10)
                case = (number, rpc, field)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
                details = error_details(err.value)
                assert details.reason == "INVALID_FIELD", case
                assert details.metadata["field"] == field, case
                assert "finite" in details.metadata["rule"], (case, details.metadata)
                assert (err.value.details() or "").startswith(f"{field}:"), (
                    case,
                    err.value.details(),
                )
        listing = checkpoints.ListCheckpoints(
            checkpoint_service_pb2.ListCheckpointsRequest(execution_id="exec-nonfinite"),
            timeout=10,
        )
        assert list(listing.checkpoints) == []
        pending = interrupts.ListPendingInterrupts(
            interrupt_service_pb2.ListPendingInterruptsRequest(), timeout=10
        )
        assert list(pending.pending_interrupts) == []
        cached = idempotency.GetIdempotencyResult(
            idempotency_service_pb2.GetIdempotencyResultRequest(
                execution_id="exec-nonfinite", key="k"
            ),
            timeout=10,
        )
        assert not cached.found


def test_j2_finite_numbers_at_the_edges_of_double_are_accepted(client, execution_id):
    """The largest finite double, an underflow to zero and huge integers stay accepted."""
    stored = client.put_checkpoint(checkpoint(execution_id))
    channel, checkpoints, _, _ = _raw_stubs(client.target)
    with channel:
        text = '{"max": 1.7976931348623157e308, "tiny": 1e-999, "int": 1' + "0" * 400 + "}"
        request = checkpoint_service_pb2.PutCheckpointRequest(
            namespace=client.namespace,
            checkpoint=checkpoint_pb2.Checkpoint(
                execution_id=execution_id,
                status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
                state_snapshot_json=text,
            ),
        )
        reply = checkpoints.PutCheckpoint(request, timeout=10)
    assert reply.checkpoint.state_snapshot_json == text
    got = client.get_checkpoint(execution_id, reply.checkpoint.checkpoint_id).state_snapshot
    assert got == {"max": 1.7976931348623157e308, "tiny": 0.0, "int": 10**400}
    assert stored.sequence < reply.checkpoint.sequence


def test_e2_n1_no_error_echoes_unbounded_input(sidecar_factory):
    """Whatever a request holds, its refusal stays small: a 20,000-character namespace,
    JSON key or health service name, and the longest valid execution id, are refused with
    their own status (never a transport error about metadata size), the input cut short."""
    sidecar = sidecar_factory()  # requests in the default namespace, on a store of its own
    huge = "q" * 20_000
    channel, checkpoints, _, _ = _raw_stubs(sidecar.target)
    with channel:
        health = health_pb2_grpc.HealthStub(channel)
        calls = [
            (
                lambda: checkpoints.GetLatestCheckpoint(
                    checkpoint_service_pb2.GetLatestCheckpointRequest(
                        namespace=huge, execution_id="e"
                    ),
                    timeout=10,
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_FIELD",
            ),
            (
                lambda: checkpoints.GetCheckpoint(
                    checkpoint_service_pb2.GetCheckpointRequest(
                        execution_id="e" * 256, checkpoint_id="c" * 128
                    ),
                    timeout=10,
                ),
                grpc.StatusCode.NOT_FOUND,
                "CHECKPOINT_NOT_FOUND",
            ),
            (
                lambda: checkpoints.PutCheckpoint(
                    checkpoint_service_pb2.PutCheckpointRequest(
                        checkpoint=checkpoint_pb2.Checkpoint(
                            execution_id="e",
                            status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
                            iteration_counters_json=json.dumps({huge: "x"}),
                        )
                    ),
                    timeout=10,
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_FIELD",
            ),
            (
                lambda: health.Check(health_pb2.HealthCheckRequest(service=huge), timeout=10),
                grpc.StatusCode.NOT_FOUND,
                "",
            ),
        ]
        for call, code, reason in calls:
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == code, err.value
            assert len(err.value.details() or "") <= 512, err.value.details()
            assert huge[:1000] not in (err.value.details() or "")
            details = error_details(err.value)
            assert details.reason == reason
            assert all(len(value) <= 256 for value in details.metadata.values())
        listing = checkpoints.ListCheckpoints(
            checkpoint_service_pb2.ListCheckpointsRequest(execution_id="e"), timeout=10
        )
        assert list(listing.checkpoints) == []
