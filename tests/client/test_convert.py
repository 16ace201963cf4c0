"""Conversion between the client's dataclasses and the checkpointd.v1 messages (J1, J2, J4)."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from checkpointd_client import Checkpoint, CheckpointdClient, PendingInterrupt, _base, _convert
from checkpointd_client.v1 import (
    checkpoint_pb2,
    idempotency_service_pb2,
)


def _wire_round_trip(cp: Checkpoint) -> Checkpoint:
    """Encode, serialize, parse and decode a checkpoint, as a put and a get would."""
    data = _convert.checkpoint_to_proto(cp).SerializeToString()
    return _convert.checkpoint_from_proto(checkpoint_pb2.Checkpoint.FromString(data))


JSON_VALUES: list[Any] = [
    2**70,
    -(2**70),
    2**53 + 1,
    42,
    0.1,
    1e308,
    -0.0,
    "héllo wörld ✓ 中文 🌍",
    '\u0000 control \n\t and "quotes"',
    {"nested": {"deeper": [1, [2, [3, {"k": None}]]]}},
    {},
    [],
    {"empty": {}, "list": []},
    None,
    True,
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_j1_json_fields_round_trip_exactly(value: Any) -> None:
    """Every JSON field keeps value equality and types (big ints stay ints, 42 stays 42)."""
    cp = Checkpoint(
        execution_id="e",
        state_snapshot={"v": value},
        node_input={"v": value},
        node_output={"v": value},
        interrupt_context={"v": value},
    )
    back = _wire_round_trip(cp)
    for name in ("state_snapshot", "node_input", "node_output", "interrupt_context"):
        got = getattr(back, name)["v"]
        assert got == value or (isinstance(value, float) and math.isnan(value))
        assert type(got) is type(value)


def test_j1_big_integers_keep_every_digit() -> None:
    """Integers above 2**53 are carried as JSON text, not doubles."""
    back = _wire_round_trip(Checkpoint(execution_id="e", state_snapshot={"n": 2**70 + 1}))
    assert back.state_snapshot["n"] == 1180591620717411303425
    assert isinstance(back.state_snapshot["n"], int)


def test_j1_json_text_is_compact_and_not_ascii_escaped() -> None:
    """The wire text uses no spaces and keeps non-ASCII characters as UTF-8."""
    msg = _convert.checkpoint_to_proto(
        Checkpoint(execution_id="e", state_snapshot={"a": [1, 2], "é": "ü"})
    )
    assert msg.state_snapshot_json == '{"a":[1,2],"é":"ü"}'
    assert msg.iteration_counters_json == "{}"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_j2_nan_and_infinity_are_rejected_with_the_field_named(bad: float) -> None:
    """NaN and Infinity are not JSON: ValueError naming the field."""
    with pytest.raises(ValueError, match="node_output"):
        _convert.checkpoint_to_proto(Checkpoint(execution_id="e", node_output={"x": bad}))
    with pytest.raises(ValueError, match="context"):
        _convert.pending_to_proto(PendingInterrupt(execution_id="e", context={"x": [bad]}))


def test_j2_nan_is_rejected_before_anything_is_sent() -> None:
    """put_checkpoint fails while building the request, without touching the network."""
    with CheckpointdClient("127.0.0.1:1", timeout=0.5) as client:
        with pytest.raises(ValueError, match="state_snapshot"):
            client.put_checkpoint(Checkpoint(execution_id="e", state_snapshot={"x": math.nan}))
        with pytest.raises(ValueError, match="value"):
            client.put_idempotent("e", "k", [math.nan])


def test_non_json_values_raise_type_error() -> None:
    """A value json cannot encode fails early with TypeError naming the field."""
    with pytest.raises(TypeError, match="node_input"):
        _convert.checkpoint_to_proto(Checkpoint(execution_id="e", node_input={"s": {1, 2}}))


def test_empty_json_text_decodes_as_empty_object() -> None:
    """The protocol allows "" for an object field; it reads back as {}."""
    cp = _convert.checkpoint_from_proto(
        checkpoint_pb2.Checkpoint(execution_id="e", status=checkpoint_pb2.CHECKPOINT_STATUS_FAILED)
    )
    assert cp.state_snapshot == {}
    assert cp.node_input == {}
    assert cp.node_output == {}
    assert cp.iteration_counters == {}
    assert cp.interrupt_context == {}
    assert cp.status == "failed"
    assert cp.created_at is None


def test_every_checkpoint_field_round_trips() -> None:
    """All scalar, optional and JSON fields survive a wire round trip."""
    cp = Checkpoint(
        execution_id="exec-1",
        checkpoint_id="cp-1",
        parent_checkpoint_id="cp-0",
        chain_name="chain",
        node_id="turn:3/tool:charge",
        node_index=2**40,
        step_type="tool_call",
        status="interrupted",
        state_snapshot={"messages": [{"role": "user", "content": "hi"}]},
        node_input={"a": 1},
        node_output={"b": 2.5},
        iteration=7,
        iteration_counters={"loop": 3},
        interrupt_reason="manager_approval",
        interrupt_context={"amount": 10_000},
        agent_path="swarm:s/agent:a",
        created_at=datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
    )
    assert _wire_round_trip(cp) == cp


def test_optional_strings_distinguish_none_from_empty() -> None:
    """step_type "" and None are different values and both survive."""
    assert _wire_round_trip(Checkpoint(execution_id="e", step_type="")).step_type == ""
    assert _wire_round_trip(Checkpoint(execution_id="e")).step_type is None
    assert _wire_round_trip(Checkpoint(execution_id="e", agent_path="")).agent_path == ""


def test_sequence_is_output_only() -> None:
    """The sequence is read from the server and never sent."""
    assert _convert.checkpoint_to_proto(Checkpoint(execution_id="e", sequence=9)).sequence == 0
    msg = checkpoint_pb2.Checkpoint(
        execution_id="e", sequence=9, status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED
    )
    assert _convert.checkpoint_from_proto(msg).sequence == 9


def test_pending_interrupt_round_trips() -> None:
    """A pending row keeps its fields; checkpoint_id is read back from the server."""
    pending = PendingInterrupt(
        execution_id="e",
        chain_name="c",
        node_id="n",
        reason="approval",
        context={"big": 2**70, "s": "ü"},
        agent_path="supervisor:x",
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    msg = _convert.pending_to_proto(pending)
    msg.checkpoint_id = "cp"
    back = _convert.pending_from_proto(
        checkpoint_pb2.PendingInterrupt.FromString(msg.SerializeToString())
    )
    assert back == PendingInterrupt(**{**_asdict(pending), "checkpoint_id": "cp"})


def _asdict(pending: PendingInterrupt) -> dict[str, Any]:
    return {name: getattr(pending, name) for name in pending.__slots__}


# --- time (J4) ---------------------------------------------------------------------------


def test_j4_aware_datetime_keeps_microseconds() -> None:
    """A UTC datetime round-trips to the microsecond and comes back aware."""
    when = datetime(2030, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    back = _convert.timestamp_to_datetime(_convert.datetime_to_timestamp(when))
    assert back == when
    assert back.tzinfo is not None
    assert back.utcoffset() == timedelta(0)


def test_j4_naive_datetime_is_taken_as_utc() -> None:
    """A naive datetime means UTC."""
    ts = _convert.datetime_to_timestamp(datetime(1970, 1, 1, 0, 0, 1, 500000))
    assert (ts.seconds, ts.nanos) == (1, 500_000_000)


def test_j4_other_time_zones_are_converted_to_utc() -> None:
    """An aware datetime in another zone names the same instant, returned in UTC."""
    tz = timezone(timedelta(hours=5, minutes=30))
    when = datetime(2024, 3, 1, 12, 0, 0, 42, tzinfo=tz)
    back = _convert.timestamp_to_datetime(_convert.datetime_to_timestamp(when))
    assert back == when
    assert back.hour == 6
    assert back.minute == 30
    assert back.microsecond == 42


def test_j4_dates_before_the_epoch() -> None:
    """Negative timestamps keep microseconds (nanos stay positive on the wire)."""
    when = datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC)
    ts = _convert.datetime_to_timestamp(when)
    assert ts.seconds < 0
    assert 0 <= ts.nanos < 1_000_000_000
    assert _convert.timestamp_to_datetime(ts) == when


def test_j4_sub_microsecond_digits_are_dropped() -> None:
    """Nanoseconds from the server truncate to microseconds."""
    ts = checkpoint_pb2.Checkpoint().created_at
    ts.seconds, ts.nanos = 10, 123_456_789
    assert _convert.timestamp_to_datetime(ts).microsecond == 123456


def test_j4_unset_created_at_is_none_and_is_not_sent() -> None:
    """created_at None leaves the field unset so the server fills it."""
    msg = _convert.checkpoint_to_proto(Checkpoint(execution_id="e"))
    assert not msg.HasField("created_at")
    assert not _convert.pending_to_proto(PendingInterrupt(execution_id="e")).HasField("created_at")


@pytest.mark.parametrize(
    ("delta", "seconds", "nanos"),
    [
        (timedelta(days=1, microseconds=5), 86_400, 5_000),
        (timedelta(0), 0, 0),
        (timedelta(microseconds=-1), 0, -1_000),
        (timedelta(seconds=-90, microseconds=-500), -90, -500_000),
    ],
)
def test_timedelta_to_duration(delta: timedelta, seconds: int, nanos: int) -> None:
    """Durations keep microseconds, with seconds and nanos of the same sign."""
    d = _convert.timedelta_to_duration(delta)
    assert (d.seconds, d.nanos) == (seconds, nanos)
    assert d.ToTimedelta() == delta


# --- status ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("completed", checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED),
        ("interrupted", checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED),
        ("failed", checkpoint_pb2.CHECKPOINT_STATUS_FAILED),
    ],
)
def test_status_strings_map_to_the_enum(text: str, value: int) -> None:
    """Each status string maps to its enum value and back."""
    assert _convert.status_to_proto(text) == value
    assert _convert.status_from_proto(value) == text


@pytest.mark.parametrize("bad", ["COMPLETED", "paused", ""])
def test_unknown_status_is_a_value_error_naming_the_choices(bad: str) -> None:
    """An unknown status string fails before sending and lists the allowed values."""
    with pytest.raises(ValueError, match="'completed', 'interrupted', 'failed'"):
        _convert.checkpoint_to_proto(Checkpoint(execution_id="e", status=bad))


def test_unknown_status_from_the_server_does_not_raise() -> None:
    """A status value this client does not know reads back as a marker string."""
    assert _convert.status_from_proto(0) == "unknown:0"
    assert _convert.status_from_proto(77) == "unknown:77"


# --- request building (C1, C2, I3, D1) ----------------------------------------------------


def _core() -> _base.ClientCore:
    return _base.ClientCore(
        "t:1", namespace="ns", timeout=5, retry=None, metadata=(), channel_options=()
    )


def test_c1_put_fills_a_checkpoint_id_and_request_id_before_sending() -> None:
    """An empty checkpoint_id becomes a UUID4 in the request; a request_id is generated."""
    request = _core().put_checkpoint(Checkpoint(execution_id="e"), None)
    assert uuid.UUID(request.checkpoint.checkpoint_id).version == 4
    assert uuid.UUID(request.request_id).version == 4
    assert request.namespace == "ns"


def test_c2_given_ids_are_kept() -> None:
    """A caller's checkpoint_id and request_id are sent unchanged."""
    request = _core().put_checkpoint(Checkpoint(execution_id="e", checkpoint_id="mine"), "rid")
    assert (request.checkpoint.checkpoint_id, request.request_id) == ("mine", "rid")


def test_c1_record_interrupt_fills_the_checkpoint_id() -> None:
    """record_interrupt fills the id like put, and sends the pending row."""
    request = _core().record_interrupt(
        Checkpoint(execution_id="e", status="interrupted"),
        PendingInterrupt(execution_id="e", reason="r"),
        None,
    )
    assert request.checkpoint.checkpoint_id
    assert request.request_id
    assert request.pending.reason == "r"


def test_i3_claim_token_defaults_to_a_fresh_uuid() -> None:
    """Each claim without a token gets its own UUID4 token; a given one is kept."""
    core = _core()
    first = core.claim_interrupt("e", None, None).claim_token
    second = core.claim_interrupt("e", None, None).claim_token
    assert first != second
    assert uuid.UUID(first).version == 4
    assert core.claim_interrupt("e", "tok", None).claim_token == "tok"


def test_list_pending_filters_are_unset_when_none() -> None:
    """None filters are not sent; given ones are, even when empty."""
    request = _core().list_pending_interrupts(0, "", None, "", "swarm:")
    assert not request.HasField("chain_name")
    assert request.HasField("reason")
    assert request.reason == ""
    assert request.agent_path_prefix == "swarm:"


def test_negative_page_size_is_refused() -> None:
    """A negative page size is a ValueError before sending."""
    with pytest.raises(ValueError, match="page_size"):
        _core().list_checkpoints("e", -1, "", False)


def test_fork_point_without_id_sends_empty() -> None:
    """get_fork_point(None) asks for the newest forkable checkpoint."""
    assert _core().get_fork_point("e", None).checkpoint_id == ""


@pytest.mark.parametrize("value", [None, 0, 2**70, "s", [1, {"a": None}], {"k": "ü"}])
def test_d1_idempotent_values_round_trip(value: Any) -> None:
    """Any JSON value, null included, is cached and read back exactly."""
    request = _core().put_idempotent("e", "k", value, None)
    assert json.loads(request.result_json) == value
    found = _convert.idempotency_result(
        idempotency_service_pb2.GetIdempotencyResultResponse(
            found=True, result_json=request.result_json
        )
    )
    assert found.found
    assert found.value == value


def test_d1_missing_idempotent_result_is_not_found() -> None:
    """found=false reads back as not found with value None."""
    result = _convert.idempotency_result(idempotency_service_pb2.GetIdempotencyResultResponse())
    assert not result.found
    assert result.value is None


def test_p2_adapter_carries_every_field_of_fastaiagents_models():
    """The adapter's field lists cover fastaiagent's Checkpoint and PendingInterrupt exactly,
    so a field added there cannot be dropped silently on the way through the sidecar."""
    from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
    from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt

    from checkpointd_client.fastaiagent import _models as adapter

    assert set(FastCheckpoint.model_fields) == {*adapter.CHECKPOINT_FIELDS, "created_at"}
    assert set(FastPendingInterrupt.model_fields) == {*adapter.PENDING_FIELDS, "created_at"}


@pytest.mark.parametrize("text", ["1e999", "-1e999", '{"x": [1E400]}', "NaN", '{"x": -Infinity}'])
def test_j2_reading_a_non_finite_number_is_a_value_error_naming_the_field(text: str) -> None:
    """The client reads JSON by the server's rule: what it decodes it can write back, so a
    number that overflows to infinity (or NaN, Infinity) is refused, not read as inf."""
    with pytest.raises(ValueError, match=r"^value: "):
        _convert.load_json(text)
    msg = checkpoint_pb2.Checkpoint(
        execution_id="e",
        status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
        node_output_json=f'{{"v": {text}}}',
    )
    with pytest.raises(ValueError, match=r"^node_output: "):
        _convert.checkpoint_from_proto(msg)
    reply = idempotency_service_pb2.GetIdempotencyResultResponse(found=True, result_json=text)
    with pytest.raises(ValueError, match=r"^value: "):
        _convert.idempotency_result(reply)


def test_j2_finite_edges_still_read() -> None:
    """The largest double and an underflow to zero are finite and read as floats."""
    assert _convert.load_json("[1.7976931348623157e308, 1e-999, -0.0]") == [
        1.7976931348623157e308,
        0.0,
        -0.0,
    ]
