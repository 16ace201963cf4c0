"""Fuzzing every method (contract J2, J3, N1, E2): hypothesis builds requests of every
checkpointd.v1 method (valid and invalid ids, JSON, sizes, unicode, namespaces, page tokens,
timestamps and durations far in the past and future, unknown enum values) and raw malformed
bytes, and sends them to a real server as raw bytes.

Whatever arrives: the answer is never INTERNAL or UNKNOWN (a client mistake is never a
server error), a unary call never runs into its deadline, the message never leaks a stack
trace or SQL, the server process stays alive and serving, and a rejected mutating request
changes nothing (every table of the store, read directly, is the same before and after).
Full size: 10,000 cases per backend; reduced: 300, derandomized so CI is deterministic.
"""

from __future__ import annotations

import json
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
)
from tests.reliability.figures import FULL, record, size
from tests.reliability.store_dump import StoreReader
from tests.support.grpc_errors import error_details
from tests.support.sidecar import Sidecar

pytestmark = [pytest.mark.own_server, pytest.mark.timeout(size(120, 3600))]

CASES = size(300, 10_000)
_BASE = settings(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one server serves every example, on purpose
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
settings.register_profile(
    "checkpointd-fuzz-reduced", parent=_BASE, max_examples=CASES, derandomize=True
)
settings.register_profile("checkpointd-fuzz-full", parent=_BASE, max_examples=CASES)
PROFILE = settings.get_profile("checkpointd-fuzz-full" if FULL else "checkpointd-fuzz-reduced")

CHECKPOINTS = "/checkpointd.v1.CheckpointService/"
INTERRUPTS = "/checkpointd.v1.InterruptService/"
IDEMPOTENCY = "/checkpointd.v1.IdempotencyService/"
WATCH = INTERRUPTS + "WatchInterrupts"
MUTATING = frozenset(
    {
        CHECKPOINTS + "PutCheckpoint",
        CHECKPOINTS + "DeleteExecution",
        CHECKPOINTS + "PruneCheckpoints",
        INTERRUPTS + "RecordInterrupt",
        INTERRUPTS + "ClaimInterrupt",
        IDEMPOTENCY + "PutIdempotencyResult",
    }
)
SERVER_FAULTS = frozenset(
    {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS}
)
LEAKS = ("Traceback", 'File "', "SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", " WHERE ")

# --- strategies ------------------------------------------------------------------------------

# Valid UTF-8 only: protobuf cannot serialize lone surrogates (raw bytes cover invalid UTF-8).
_unicode = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
_long = st.integers(0, 1100).map(lambda n: "x" * n)
_ids = st.one_of(
    st.sampled_from(["e1", "e2", "run-3", "exec.4_x", "", " ", "ü", "a\x00b", "tab\tid"]),
    _unicode,
    _long,
)
_namespaces = st.one_of(
    st.sampled_from(["", "default", "fuzz", "fuzz-2", "a" * 63]),
    st.sampled_from(["a" * 64, "-x", ".x", "UPPER_ok", "has space", "slash/ns", "名前", "\n"]),
    _unicode,
)
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _unicode
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_unicode, inner, max_size=4),
    max_leaves=12,
)
_json_text = st.one_of(
    st.dictionaries(_unicode, _json_values, max_size=5).map(json.dumps),
    _json_values.map(json.dumps),
    st.sampled_from(
        [
            "",
            "{",
            "NaN",
            '{"a": NaN}',
            '{"a": Infinity}',
            '{"a": -Infinity}',
            "1e999",
            '{"a": 1e999}',
            "[" * 5000 + "]" * 5000,
            '{"a":' * 3000 + "1" + "}" * 3000,
            '{"a": 1} trailing',
            "\ufeff{}",
            '{"\\ud800": 1}',
            '{"a": "\\u0000"}',
            "null",
            "[]",
            '{"n": 123456789012345678901234567890}',
            '{"k": 1, "k": 2}',
        ]
    ),
    _unicode,
)
_int64 = st.integers(-(2**63), 2**63 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)
_small_ints = st.integers(-3, 1500)
_page_tokens = st.one_of(
    st.just(""),
    _unicode,
    st.binary(max_size=60).map(lambda b: b.hex()),
    st.text(string.ascii_letters + string.digits + "-_=", max_size=80),
)
_enum = st.integers(-3, 8)


_valid_namespaces = st.sampled_from(["", "default", "fuzz", "fuzz-2"])
_valid_executions = st.sampled_from(["e1", "e2", "run-3"])
_valid_ids = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=24)
_valid_objects = st.dictionaries(_unicode, _json_values, max_size=4).map(json.dumps)
_valid_counters = st.dictionaries(_unicode, st.integers(0, 2**40), max_size=3).map(json.dumps)


class Picker:
    """Draws each field valid or fuzzed. Half the requests are fuzzed in every field; the other
    half are valid except (maybe) one field, so the fuzz also reaches the store and the deep
    code paths behind validation."""

    def __init__(self, draw: st.DrawFn, fields: list[str]) -> None:
        self.draw = draw
        self.all_fuzzed = draw(st.booleans())
        self.fuzzed = draw(st.sampled_from([*fields, ""]))

    def __call__(
        self, name: str, valid: st.SearchStrategy[Any], fuzz: st.SearchStrategy[Any]
    ) -> Any:
        if self.all_fuzzed or name == self.fuzzed:
            return self.draw(valid | fuzz)
        return self.draw(valid)


_CHECKPOINT_FIELDS = [f.name for f in checkpoint_pb2.Checkpoint.DESCRIPTOR.fields]
_PENDING_FIELDS = [f.name for f in checkpoint_pb2.PendingInterrupt.DESCRIPTOR.fields]


def _time(pick: Picker, name: str, message: Any) -> None:
    """Fill a Timestamp or Duration field: absent, ordinary, or far out of range."""
    kind = pick(name, st.sampled_from(["absent", "ordinary"]), st.just("extreme"))
    if kind == "ordinary":
        message.seconds = pick.draw(st.integers(0, 4 * 10**9))
        message.nanos = pick.draw(st.integers(0, 999_999).map(lambda us: us * 1000))
    elif kind == "extreme":
        message.seconds = pick.draw(_int64 | st.integers(-(10**12), 10**12))
        message.nanos = pick.draw(_int32)


def _optional(pick: Picker, message: Any, name: str, valid: st.SearchStrategy[str]) -> None:
    value = pick(name, st.none() | valid, _ids)
    if value is not None:
        setattr(message, name, value)


def _checkpoint(pick: Picker, target: checkpoint_pb2.Checkpoint, execution_id: str) -> None:
    target.execution_id = pick("execution_id", st.just(execution_id), _ids)
    target.checkpoint_id = pick("checkpoint_id", st.just("") | _valid_ids, _ids)
    _optional(pick, target, "parent_checkpoint_id", _valid_ids)
    target.chain_name = pick("chain_name", st.just("flow") | _valid_ids, _ids)
    target.node_id = pick("node_id", st.sampled_from(["n", "run_end", "turn:1/tool:x"]), _ids)
    target.node_index = pick("node_index", _small_ints, _int64)
    _optional(pick, target, "step_type", st.sampled_from(["node", "run_end", "tool_call"]))
    target.status = pick("status", st.integers(1, 3), _enum)
    for name in ("state_snapshot_json", "node_input_json", "node_output_json"):
        setattr(target, name, pick(name, _valid_objects, _json_text))
    target.iteration = pick("iteration", _small_ints, _int64)
    target.iteration_counters_json = pick("iteration_counters_json", _valid_counters, _json_text)
    _optional(pick, target, "interrupt_reason", _valid_ids)
    target.interrupt_context_json = pick("interrupt_context_json", _valid_objects, _json_text)
    _optional(pick, target, "agent_path", st.sampled_from(["swarm:s/agent:a", "a/b"]))
    _time(pick, "created_at", target.created_at)
    target.sequence = pick("sequence", st.just(0), _int64)


def _pending(pick: Picker, target: checkpoint_pb2.PendingInterrupt, execution_id: str) -> None:
    target.execution_id = pick("execution_id", st.sampled_from(["", execution_id]), _ids)
    target.chain_name = pick("chain_name", st.just("flow"), _ids)
    target.node_id = pick("node_id", st.just("n"), _ids)
    target.reason = pick("reason", st.sampled_from(["approval", ""]), _ids)
    target.context_json = pick("context_json", _valid_objects, _json_text)
    _optional(pick, target, "agent_path", st.sampled_from(["swarm:s/agent:a", "a/b"]))
    _time(pick, "created_at", target.created_at)
    target.checkpoint_id = pick("checkpoint_id", st.just(""), _ids)


@st.composite
def _request(draw: st.DrawFn, method: str, message: type[Message]) -> tuple[str, bytes]:
    """A request of ``method``: every field drawn valid or fuzzed (see :class:`Picker`)."""
    request: Any = message()
    fields = [f.name for f in message.DESCRIPTOR.fields]
    pick = Picker(draw, fields + _CHECKPOINT_FIELDS + _PENDING_FIELDS)
    execution_id = draw(_valid_executions)
    for field in message.DESCRIPTOR.fields:
        name = field.name
        if name == "namespace":
            request.namespace = pick(name, _valid_namespaces, _namespaces)
        elif name == "execution_id":
            request.execution_id = pick(name, st.just(execution_id), _ids)
        elif name in ("request_id", "claim_token", "checkpoint_id"):
            setattr(request, name, pick(name, st.just("") | _valid_ids, _ids))
        elif name == "key":
            request.key = pick(name, st.sampled_from(["k1", "k2"]), _ids)
        elif name == "checkpoint":
            if pick(name, st.just(True), st.booleans()):
                _checkpoint(pick, request.checkpoint, execution_id)
        elif name == "pending":
            if pick(name, st.just(True), st.booleans()):
                _pending(pick, request.pending, execution_id)
        elif name == "page_size":
            request.page_size = pick(name, st.integers(0, 1500), _int32)
        elif name == "page_token":
            request.page_token = pick(name, st.just(""), _page_tokens)
        elif name == "descending":
            request.descending = draw(st.booleans())
        elif name == "older_than":
            _time(pick, name, request.older_than)
        elif name == "result_json":
            request.result_json = pick(name, _json_values.map(json.dumps), _json_text)
        elif name in ("chain_name", "reason", "agent_path_prefix"):
            _optional(pick, request, name, st.sampled_from(["flow", "approval", "swarm:s"]))
        elif name == "after_cursor":
            request.after_cursor = pick(name, st.integers(0, 50), _int64)
        elif field.type == field.TYPE_STRING:  # a field this suite does not know yet
            setattr(request, name, draw(_ids))
    return method, request.SerializeToString()


REQUESTS: dict[str, type[Message]] = {
    CHECKPOINTS + "PutCheckpoint": checkpoint_service_pb2.PutCheckpointRequest,
    CHECKPOINTS + "GetCheckpoint": checkpoint_service_pb2.GetCheckpointRequest,
    CHECKPOINTS + "GetLatestCheckpoint": checkpoint_service_pb2.GetLatestCheckpointRequest,
    CHECKPOINTS + "ListCheckpoints": checkpoint_service_pb2.ListCheckpointsRequest,
    CHECKPOINTS + "DeleteExecution": checkpoint_service_pb2.DeleteExecutionRequest,
    CHECKPOINTS + "PruneCheckpoints": checkpoint_service_pb2.PruneCheckpointsRequest,
    CHECKPOINTS + "GetResumePoint": checkpoint_service_pb2.GetResumePointRequest,
    CHECKPOINTS + "GetForkPoint": checkpoint_service_pb2.GetForkPointRequest,
    INTERRUPTS + "RecordInterrupt": interrupt_service_pb2.RecordInterruptRequest,
    INTERRUPTS + "ClaimInterrupt": interrupt_service_pb2.ClaimInterruptRequest,
    INTERRUPTS + "ListPendingInterrupts": interrupt_service_pb2.ListPendingInterruptsRequest,
    WATCH: interrupt_service_pb2.WatchInterruptsRequest,
    IDEMPOTENCY + "PutIdempotencyResult": idempotency_service_pb2.PutIdempotencyResultRequest,
    IDEMPOTENCY + "GetIdempotencyResult": idempotency_service_pb2.GetIdempotencyResultRequest,
}
_methods = st.sampled_from(sorted(REQUESTS))


@st.composite
def _mangled(draw: st.DrawFn) -> tuple[str, bytes]:
    """Raw bytes: random, or a valid request truncated or with bytes flipped."""
    method = draw(_methods)
    if draw(st.booleans()):
        return method, draw(st.binary(max_size=300))
    _, raw = draw(_request(method, REQUESTS[method]))
    data = bytearray(raw)
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)) :]
    for _ in range(draw(st.integers(1, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return method, bytes(data)


CASES_STRATEGY = st.one_of(
    _methods.flatmap(lambda m: _request(m, REQUESTS[m])),
    _mangled(),
)

# --- the harness -----------------------------------------------------------------------------


class Harness:
    """Sends raw requests to one server and checks every answer; keeps the figures."""

    def __init__(self, server: Sidecar, reader: StoreReader) -> None:
        self.server = server
        self.reader = reader
        self.channel = grpc.insecure_channel(server.target)
        self.codes: Counter[str] = Counter()
        self.problems: list[str] = []
        self._dump: dict[str, list[tuple[Any, ...]]] | None = None

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        if self._dump is None:
            self._dump = self.reader.dump()
        return self._dump

    def send(self, method: str, raw: bytes) -> None:
        before = self.dump() if method in MUTATING else None
        code, details = self._call(method, raw)
        self.codes[code.name] += 1
        problem = self._check(method, raw, code, details)
        if code == grpc.StatusCode.OK and method in MUTATING:
            self._dump = None  # it may have changed the store
        elif before is not None:
            self._dump = None
            if self.dump() != before:
                problem = problem or f"a rejected {method} ({code.name}) changed the store"
        if self.server.process is None or self.server.process.poll() is not None:
            problem = problem or "the server process died"
        if problem:
            self.problems.append(f"{problem}; request {raw[:120]!r}")
        assert not problem, f"{problem}; request {raw[:200]!r}"

    def _call(self, method: str, raw: bytes) -> tuple[grpc.StatusCode, str]:
        try:
            if method == WATCH:
                rpc: grpc.UnaryStreamMultiCallable[bytes, bytes] = self.channel.unary_stream(
                    method, request_serializer=None, response_deserializer=None
                )
                stream: Any = rpc(raw, timeout=1.0)
                try:
                    for n, response in enumerate(stream):
                        snapshot_complete = (
                            interrupt_service_pb2.WatchInterruptsResponse.FromString(
                                response
                            ).HasField("snapshot_complete")
                        )
                        if snapshot_complete or n >= 20:
                            break
                finally:
                    stream.cancel()
                return grpc.StatusCode.OK, ""
            call: Callable[..., Any] = self.channel.unary_unary(
                method, request_serializer=None, response_deserializer=None
            )
            call(raw, timeout=10.0)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            code = exc.code()
            if method == WATCH and code in (
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.CANCELLED,
            ):
                return grpc.StatusCode.OK, ""  # a valid watch waits for events
            return code, exc.details() or ""

    @staticmethod
    def _check(method: str, raw: bytes, code: grpc.StatusCode, details: str) -> str:
        if code in SERVER_FAULTS:
            return f"{method} answered {code.name}: {details[:200]}"
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
            return f"{method} answered {code.name} on a healthy server: {details[:200]}"
        for leak in LEAKS:
            if leak in details and leak.encode() not in raw:
                return f"{method}'s message leaks {leak!r}: {details[:200]}"
        return ""

    def close(self) -> None:
        self.channel.close()


def test_e2_j2_fuzzed_requests_never_fail_the_server(sidecar: Sidecar, store_spec) -> None:
    """Generated and malformed requests to every method: never INTERNAL/UNKNOWN, no leak, no
    hang, the server stays up, and a rejected write changes nothing."""
    reader = StoreReader(store_spec)
    harness = Harness(sidecar, reader)

    @PROFILE
    @given(case=CASES_STRATEGY)
    def run(case: tuple[str, bytes]) -> None:
        harness.send(*case)

    try:
        run()
        # Still serving: a plain, valid call works after everything the fuzzer sent.
        harness.send(CHECKPOINTS + "GetLatestCheckpoint", b"\x12\x02e1")
    finally:
        harness.close()
        reader.close()
    cases = sum(harness.codes.values())
    record(
        f"fuzz ({store_spec.backend})",
        cases=cases,
        internal_or_unknown=sum(harness.codes[c.name] for c in SERVER_FAULTS),
        problems=len(harness.problems),
        **{f"answered_{code}": n for code, n in sorted(harness.codes.items())},
    )
    assert not harness.problems
    assert cases >= CASES


def _send_raw(channel: grpc.Channel, method: str, raw: bytes) -> None:
    """Send ``raw`` as the request of ``method`` and read every response."""
    if method == WATCH:
        stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)
        list(stream(raw, timeout=10))
    else:
        unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
        unary(raw, timeout=10)


def test_e2_undecodable_request_is_invalid_argument(sidecar: Sidecar) -> None:
    """Bytes that are not a protobuf message (or hold a string that is not UTF-8) are answered
    INVALID_ARGUMENT, reason MALFORMED_REQUEST, naming no parser internals (gRPC's own answer
    would be UNKNOWN with the exception text), on every method, streams and health included."""
    with grpc.insecure_channel(sidecar.target) as channel:
        for method in [*sorted(REQUESTS), "/grpc.health.v1.Health/Check"]:
            for raw in (b"\xff\xff\xff", b"\x0a\x02\xc3\x28"):
                with pytest.raises(grpc.RpcError) as err:
                    _send_raw(channel, method, raw)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                assert "is not a valid" in (err.value.details() or "")
                assert "DecodeError" not in (err.value.details() or "")
                info = error_details(err.value)
                assert info.reason == "MALFORMED_REQUEST"
