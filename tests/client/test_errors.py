"""Error mapping, rich status decoding, retry policy and configuration of the client (E2, P3)."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import checkpointd_client as cc
from checkpointd_client import _base, _status
from checkpointd_client.config import DEFAULT_TARGET, TARGET_ENV_VAR, RetryPolicy, resolve_target
from checkpointd_client.errors import error_from_rpc_error, map_rpc_errors
from checkpointd_client.v1.error_reason_pb2 import ErrorReason as ProtoErrorReason

DETAILS_KEY = "grpc-status-details-bin"


def _status_bytes(
    code: grpc.StatusCode = grpc.StatusCode.ALREADY_EXISTS,
    message: str = "checkpoint cp-1 already exists",
    reason: str = "CHECKPOINT_EXISTS",
    domain: str = "checkpointd.v1",
    metadata: dict[str, str] | None = None,
    extra: Sequence[Any] = (),
) -> bytes:
    """A real grpc-status-details-bin payload, built with googleapis-common-protos."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in extra:
        status.details.add().Pack(detail)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata or {})
    status.details.add().Pack(info)
    data: bytes = status.SerializeToString()
    return data


class FakeRpcError(grpc.RpcError):
    """A sync-style RpcError that is also a grpc.Call, as grpc raises it."""

    def __init__(self, code: Any, details: str | None = "boom", trailing: Any = ()) -> None:
        super().__init__()
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> Any:
        return self._code

    def details(self) -> str | None:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


# --- rich status --------------------------------------------------------------------------


def test_status_details_are_decoded_from_a_real_payload() -> None:
    """reason, domain, metadata and message come out of a googleapis-built Status."""
    data = _status_bytes(metadata={"field": "checkpoint.checkpoint_id", "rule": "unique"})
    details = _status.details_from_metadata([("other", "x"), (DETAILS_KEY, data)])
    assert details.reason == "CHECKPOINT_EXISTS"
    assert details.domain == "checkpointd.v1"
    assert details.metadata == {"field": "checkpoint.checkpoint_id", "rule": "unique"}
    assert details.message == "checkpoint cp-1 already exists"


def test_status_details_skip_other_detail_types_and_prefer_our_domain() -> None:
    """Other details are skipped; an ErrorInfo of checkpointd.v1 wins over a foreign one."""
    foreign = error_details_pb2.ErrorInfo(reason="PROXY_SAYS_NO", domain="proxy.example")
    retry = error_details_pb2.RetryInfo()
    data = _status_bytes(reason="NO_CHECKPOINTS", extra=[retry, foreign])
    assert _status.parse_status(data).reason == "NO_CHECKPOINTS"


def test_status_details_fall_back_to_a_foreign_error_info() -> None:
    """Without our domain, the first ErrorInfo is used."""
    data = _status_bytes(reason="QUOTA", domain="proxy.example")
    assert _status.parse_status(data).reason == "QUOTA"


def _garbage_any_status() -> bytes:
    status = status_pb2.Status(code=3, message="m")
    status.details.append(
        any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=b"\xff\xff\xff")
    )
    data: bytes = status.SerializeToString()
    return data


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xff\xff\xff\xff", b"\x0a\x80", _status_bytes()[:-3], _garbage_any_status()],
)
def test_malformed_status_details_never_raise(payload: bytes) -> None:
    """Corrupt or truncated details give reason "" instead of an exception."""
    assert _status.parse_status(payload).reason == ""


@pytest.mark.parametrize(
    "trailing",
    [None, (), [(DETAILS_KEY, "not bytes")], [("a",)], 42, [(DETAILS_KEY, b"\xff")]],
)
def test_odd_trailing_metadata_never_raises(trailing: Any) -> None:
    """Trailing metadata of any shape decodes to empty details."""
    assert _status.details_from_metadata(trailing) == _status.StatusDetails()


def test_private_pool_does_not_clash_with_googleapis_in_either_import_order() -> None:
    """The client's google.rpc messages live in a private pool, so both orders import cleanly."""
    script = (
        "import {first}, {second}\n"
        "from google.protobuf import descriptor_pool\n"
        "d = descriptor_pool.Default().FindMessageTypeByName('google.rpc.Status')\n"
        "assert d.file.name == 'google/rpc/status.proto', d.file.name\n"
    )
    ours, theirs = "checkpointd_client", "google.rpc.status_pb2"
    for first, second in ((ours, theirs), (theirs, ours)):
        subprocess.run(
            [sys.executable, "-W", "error", "-c", script.format(first=first, second=second)],
            check=True,
            timeout=60,
        )


# --- mapping ------------------------------------------------------------------------------

EXPECTED: dict[grpc.StatusCode, type[cc.CheckpointdError]] = {
    grpc.StatusCode.OK: cc.CheckpointdError,
    grpc.StatusCode.CANCELLED: cc.CheckpointdError,
    grpc.StatusCode.UNKNOWN: cc.InternalError,
    grpc.StatusCode.INVALID_ARGUMENT: cc.InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: cc.DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: cc.NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: cc.AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: cc.PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: cc.ResourceExhaustedError,
    grpc.StatusCode.FAILED_PRECONDITION: cc.FailedPreconditionError,
    grpc.StatusCode.ABORTED: cc.CheckpointdError,
    grpc.StatusCode.OUT_OF_RANGE: cc.OutOfRangeError,
    grpc.StatusCode.UNIMPLEMENTED: cc.CheckpointdError,
    grpc.StatusCode.INTERNAL: cc.InternalError,
    grpc.StatusCode.UNAVAILABLE: cc.UnavailableError,
    grpc.StatusCode.DATA_LOSS: cc.InternalError,
    grpc.StatusCode.UNAUTHENTICATED: cc.UnauthenticatedError,
}


def test_the_mapping_table_covers_every_status_code() -> None:
    """The test table names every grpc.StatusCode."""
    assert set(EXPECTED) == set(grpc.StatusCode)


@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
def test_e2_every_status_code_maps_to_its_exception(code: grpc.StatusCode) -> None:
    """Each code becomes exactly the expected class, with code, reason, metadata and message."""
    data = _status_bytes(code=code, reason="SOME_REASON", metadata={"field": "f"})
    err = error_from_rpc_error(FakeRpcError(code, "the message", [(DETAILS_KEY, data)]))
    assert type(err) is EXPECTED[code]
    assert code.name in str(err)
    assert "SOME_REASON" in str(err)
    assert err.code is code
    assert err.reason == "SOME_REASON"
    assert err.metadata == {"field": "f"}
    assert err.message == "the message"


@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
def test_e2_asyncio_errors_map_the_same_way(code: grpc.StatusCode) -> None:
    """grpc.aio.AioRpcError (with aio Metadata) maps like the sync error."""
    trailing = grpc.aio.Metadata((DETAILS_KEY, _status_bytes(code=code, reason="R")))
    err = error_from_rpc_error(grpc.aio.AioRpcError(code, None, trailing, "aio message"))
    assert type(err) is EXPECTED[code]
    assert (err.reason, err.message) == ("R", "aio message")


def test_c2_duplicate_error_has_integrity_error_in_its_mro() -> None:
    """ALREADY_EXISTS raises a class whose MRO contains one named IntegrityError (C2)."""
    err = error_from_rpc_error(FakeRpcError(grpc.StatusCode.ALREADY_EXISTS))
    assert "IntegrityError" in [k.__name__ for k in type(err).__mro__]
    assert isinstance(err, cc.IntegrityError)


def test_error_without_details_has_empty_reason() -> None:
    """No trailer: reason "" and metadata {}."""
    err = error_from_rpc_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "missing"))
    assert (err.reason, err.metadata, err.message) == ("", {}, "missing")
    assert str(err) == "missing (NOT_FOUND)"


def test_error_without_message_falls_back_to_the_status_message_then_the_code() -> None:
    """An empty grpc message is replaced by Status.message, else the code name."""
    data = _status_bytes(message="from status")
    err = error_from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "", [(DETAILS_KEY, data)]))
    assert err.message == "from status"
    assert error_from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, None)).message == "INTERNAL"


def test_bare_rpc_error_without_a_call_maps_to_the_base_class() -> None:
    """An RpcError that is not a grpc.Call still maps, with code None."""
    err = error_from_rpc_error(grpc.RpcError("raw"))
    assert type(err) is cc.CheckpointdError
    assert err.code is None


def test_a_checkpointd_reason_becomes_an_error_reason_member() -> None:
    """A known reason of the checkpointd.v1 domain is the ErrorReason member (still equal to the
    string callers compare with), and the error's text and repr show the plain string."""
    data = _status_bytes(code=grpc.StatusCode.FAILED_PRECONDITION, reason="LEASE_HELD")
    err = error_from_rpc_error(
        FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "held", [(DETAILS_KEY, data)])
    )
    assert err.reason is cc.ErrorReason.LEASE_HELD
    assert err.reason == "LEASE_HELD"
    assert str(err) == "held (FAILED_PRECONDITION, LEASE_HELD)"
    assert "reason='LEASE_HELD'" in repr(err)
    back = pickle.loads(pickle.dumps(err))
    assert back.reason is cc.ErrorReason.LEASE_HELD


@pytest.mark.parametrize(
    ("reason", "domain"),
    [("LEASE_HELD", "proxy.example"), ("A_REASON_FROM_A_NEWER_SERVER", "checkpointd.v1")],
)
def test_a_foreign_or_unknown_reason_stays_the_string_sent(reason: str, domain: str) -> None:
    """Another domain's reason is not read as checkpointd's, even with the same spelling; a
    reason this client does not know yet is kept as sent."""
    data = _status_bytes(code=grpc.StatusCode.NOT_FOUND, reason=reason, domain=domain)
    err = error_from_rpc_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "x", [(DETAILS_KEY, data)]))
    assert err.reason == reason
    assert type(err.reason) is str


def test_error_reason_is_the_protocol_enum_without_its_prefix() -> None:
    """checkpointd_client.ErrorReason holds one member per ErrorReason value of the protocol
    but UNSPECIFIED, named and valued by the wire string."""
    names = [v.name for v in ProtoErrorReason.DESCRIPTOR.values if v.number != 0]
    assert [m.value for m in cc.ErrorReason] == [n.removeprefix("ERROR_REASON_") for n in names]
    assert all(m.name == m.value for m in cc.ErrorReason)


def test_errors_survive_pickling() -> None:
    """code, reason and metadata are kept when an error crosses a process boundary."""
    err = cc.AlreadyExistsError(
        "dup", code=grpc.StatusCode.ALREADY_EXISTS, reason="CHECKPOINT_EXISTS", metadata={"a": "b"}
    )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cc.AlreadyExistsError
    assert (back.message, back.code, back.reason, back.metadata) == (
        "dup",
        grpc.StatusCode.ALREADY_EXISTS,
        "CHECKPOINT_EXISTS",
        {"a": "b"},
    )


def test_map_rpc_errors_chains_the_original() -> None:
    """The context manager raises from the grpc error and lets other errors through."""
    original = FakeRpcError(grpc.StatusCode.NOT_FOUND)
    with pytest.raises(cc.NotFoundError) as info, map_rpc_errors():
        raise original
    assert info.value.__cause__ is original
    with pytest.raises(KeyError), map_rpc_errors():
        raise KeyError("not grpc")


# --- retry policy (P3) --------------------------------------------------------------------


def test_p3_retry_policy_defaults() -> None:
    """The defaults are 5 attempts, 50 ms doubling to 2 s, up to 25 % jitter."""
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.initial_backoff, policy.max_backoff) == (5, 0.05, 2.0)
    assert (policy.multiplier, policy.jitter) == (2.0, 0.25)


@pytest.mark.parametrize("retry", range(1, 40))
def test_p3_backoff_stays_within_bounds(retry: int) -> None:
    """Every wait lies in [base, min(max, base * 1.25)] where base grows geometrically."""
    policy = RetryPolicy()
    base = min(policy.initial_backoff * policy.multiplier ** (retry - 1), policy.max_backoff)
    rng = random.Random(retry)
    for _ in range(200):
        delay = policy.backoff(retry, rng=rng)
        assert policy.initial_backoff <= base <= delay <= min(policy.max_backoff, base * 1.25)


def test_p3_backoff_grows_then_caps() -> None:
    """Without jitter the waits are 0.05, 0.1, 0.2, ... capped at max_backoff."""
    policy = RetryPolicy(jitter=0.0)
    assert [policy.backoff(n) for n in range(1, 8)] == pytest.approx(
        [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    )
    assert policy.backoff(10_000) == 2.0


def test_p3_jitter_reaches_its_upper_bound() -> None:
    """A maximal random draw adds the full jitter fraction."""

    class Top(random.Random):
        def random(self) -> float:
            return 1.0

    assert RetryPolicy().backoff(1, rng=Top()) == pytest.approx(0.0625)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_backoff": 0},
        {"initial_backoff": float("nan")},
        {"max_backoff": 0.01},
        {"multiplier": 0.5},
        {"jitter": -0.1},
        {"jitter": 1.5},
    ],
)
def test_p3_invalid_retry_policy_is_refused(kwargs: dict[str, Any]) -> None:
    """Nonsensical limits fail at construction."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


def test_p3_backoff_retry_numbers_start_at_one() -> None:
    """Retry 0 is a programming error."""
    with pytest.raises(ValueError, match="start at 1"):
        RetryPolicy().backoff(0)


def _core(**kwargs: Any) -> _base.ClientCore:
    options: dict[str, Any] = {
        "namespace": "default",
        "timeout": 10.0,
        "retry": None,
        "metadata": (),
        "channel_options": (),
    }
    options.update(kwargs)
    return _base.ClientCore("t:1", **options)


def test_p3_retry_stops_after_max_attempts() -> None:
    """Attempts 1..max-1 get a wait; the last attempt's failure is final."""
    core = _core(retry=RetryPolicy(max_attempts=3))
    deadline = time.monotonic() + 60
    assert core.retry_delay(1, deadline) is not None
    assert core.retry_delay(2, deadline) is not None
    assert core.retry_delay(3, deadline) is None


def test_p3_retry_stops_when_the_wait_would_pass_the_deadline() -> None:
    """No retry is scheduled past the call's overall deadline."""
    core = _core(retry=RetryPolicy(initial_backoff=1.0, max_backoff=1.0))
    assert core.retry_delay(1, time.monotonic() + 0.5) is None
    assert core.retry_delay(1, time.monotonic() + 5) == pytest.approx(1.0)


def test_p3_every_call_has_a_deadline() -> None:
    """The call's timeout wins over the client default; both must be positive and finite."""
    core = _core(timeout=3.0)
    now = time.monotonic()
    assert core.deadline(None) == pytest.approx(now + 3.0, abs=0.5)
    assert core.deadline(0.25) == pytest.approx(now + 0.25, abs=0.5)
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            core.deadline(bad)
        with pytest.raises(ValueError, match="timeout"):
            _core(timeout=bad)


def test_call_metadata_is_client_then_call() -> None:
    """Client metadata is sent first, then the call's own."""
    core = _core(metadata=[("authorization", "Bearer x")])
    assert core.call_metadata([("x-trace", "1")]) == (
        ("authorization", "Bearer x"),
        ("x-trace", "1"),
    )


# --- configuration (P1) ---------------------------------------------------------------------


def test_p1_default_target_when_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without argument or environment the target is 127.0.0.1:7470."""
    monkeypatch.delenv(TARGET_ENV_VAR, raising=False)
    assert DEFAULT_TARGET == "127.0.0.1:7470"
    assert resolve_target(None) == DEFAULT_TARGET
    assert cc.CheckpointdClient().target == DEFAULT_TARGET


def test_p1_environment_overrides_the_default_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHECKPOINTD_TARGET is read when the client is built."""
    monkeypatch.setenv(TARGET_ENV_VAR, "unix:///run/checkpointd.sock")
    assert resolve_target(None) == "unix:///run/checkpointd.sock"
    with cc.CheckpointdClient() as client:
        assert client.target == "unix:///run/checkpointd.sock"
    assert resolve_target("10.0.0.1:9") == "10.0.0.1:9"


@pytest.mark.parametrize(
    "target", ["unix:///tmp/cp.sock", "unix:relative/cp.sock", "localhost:7470", "dns:///h:1"]
)
def test_p1_targets_are_passed_to_grpc_unchanged(target: str) -> None:
    """Every target form reaches gRPC as given."""
    with cc.CheckpointdClient(target) as client:
        assert client.target == target


def test_channel_options_defaults_and_overrides() -> None:
    """Unlimited message sizes, keepalive, no gRPC retries; caller options replace by key."""
    options = dict(_base.merge_channel_options([("grpc.keepalive_time_ms", 5_000), ("x", 1)]))
    assert options["grpc.max_receive_message_length"] == -1
    assert options["grpc.max_send_message_length"] == -1
    assert options["grpc.keepalive_timeout_ms"] == 5_000
    assert options["grpc.http2.ping_timeout_ms"] == 5_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.enable_retries"] == 0
    assert options["grpc.keepalive_time_ms"] == 5_000
    assert options["x"] == 1
    assert dict(_base.DEFAULT_CHANNEL_OPTIONS)["grpc.keepalive_time_ms"] == 10_000


def test_closed_client_refuses_calls() -> None:
    """A call after close() is a RuntimeError, and close() is idempotent."""
    client = cc.CheckpointdClient("127.0.0.1:1")
    client.close()
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.get_latest_checkpoint("e")
