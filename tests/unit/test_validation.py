"""Field rules (J2, J4, N1) and page tokens, checked without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from checkpointd import validation as v
from checkpointd.convert import checkpoint_from_proto, checkpoint_to_proto
from checkpointd.errors import InvalidField, InvalidPageToken
from checkpointd.paging import decode_token, encode_token
from checkpointd_client.v1 import checkpoint_pb2 as pb

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("name", ["default", "team-a", "a", "A.b_c-1", "x" * 63])
def test_n1_valid_namespaces(name):
    """Namespaces of letters, digits, '.', '_' and '-' up to 63 characters are accepted."""
    assert v.namespace(name) == name


def test_n1_empty_namespace_is_default():
    """An empty namespace means "default"."""
    assert v.namespace("") == "default"


@pytest.mark.parametrize("name", ["-lead", ".lead", "has space", "x" * 64, "ümlaut", "a/b"])
def test_n1_invalid_namespaces(name):
    """Anything else is refused, naming the field and the rule."""
    with pytest.raises(InvalidField) as err:
        v.namespace(name)
    assert err.value.metadata["field"] == "namespace"
    assert "63 characters" in err.value.message


def test_j2_required_identifier():
    """An empty required id is refused as required."""
    with pytest.raises(InvalidField, match=r"execution_id: is required"):
        v.identifier("execution_id", "", v.EXECUTION_ID_MAX)


def test_j2_identifier_length_and_control_characters():
    """Ids have a maximum length and no control characters."""
    with pytest.raises(InvalidField, match=r"at most 256 characters \(got 257\)"):
        v.identifier("execution_id", "x" * 257, v.EXECUTION_ID_MAX)
    with pytest.raises(InvalidField, match="control characters"):
        v.identifier("execution_id", "a\nb", v.EXECUTION_ID_MAX)
    assert v.identifier("execution_id", "é" * 256, v.EXECUTION_ID_MAX) == "é" * 256


@pytest.mark.parametrize("raw", ["NaN", '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}'])
def test_j2_non_standard_json_is_refused(raw):
    """NaN and Infinity are not standard JSON."""
    with pytest.raises(InvalidField, match="standard JSON"):
        v.json_value("result_json", raw)


@pytest.mark.parametrize("raw", ["[]", "1", '"s"', "null", "true"])
def test_j2_dict_fields_must_be_objects(raw):
    """Fields the reference models as dicts must hold a JSON object."""
    with pytest.raises(InvalidField, match="must be a JSON object"):
        v.json_object("checkpoint.state_snapshot_json", raw)


def test_j2_malformed_and_deeply_nested_json():
    """Malformed JSON and nesting beyond the parser's depth get a clear error, not a crash."""
    with pytest.raises(InvalidField, match="standard JSON"):
        v.json_object("f", "{")
    with pytest.raises(InvalidField, match="nested"):
        v.json_value("f", "[" * 100_000 + "]" * 100_000)


def test_j1_json_text_is_kept_exactly():
    """Valid JSON text is stored as sent: big integers and unicode keep every character."""
    raw = '{"big": 123456789012345678901234567890, "f": 0.1, "u": "日本\\u00e9", "e": {}}'
    assert v.json_object("f", raw) == raw
    assert v.json_object("f", "") == "{}"


def test_iteration_counters_must_be_integers():
    """iteration_counters maps names to integers, as the reference model does."""
    assert v.json_int_object("f", '{"loop": 3}') == '{"loop": 3}'
    with pytest.raises(InvalidField, match="integers"):
        v.json_int_object("f", '{"loop": 1.5}')
    with pytest.raises(InvalidField, match="integers"):
        v.json_int_object("f", '{"loop": true}')


def test_j4_timestamps_in_range_are_truncated_to_microseconds():
    """Timestamps keep microsecond precision and are refused outside years 1-9999."""
    ts = Timestamp(seconds=1, nanos=123_456_789)
    assert v.timestamp_to_datetime("t", ts) == datetime(1970, 1, 1, 0, 0, 1, 123_456, tzinfo=UTC)
    with pytest.raises(InvalidField, match="valid timestamp"):
        v.timestamp_to_datetime("t", Timestamp(seconds=253_402_300_800))


def test_durations_must_not_be_negative():
    """A negative prune age is refused."""
    with pytest.raises(InvalidField, match="negative"):
        v.duration_to_timedelta("older_than", Duration(seconds=-1))


@pytest.mark.parametrize(("given", "expected"), [(0, 100), (5, 5), (1000, 1000), (5000, 1000)])
def test_page_size_default_and_cap(given, expected):
    """0 means the default; larger values are capped."""
    assert v.page_size("page_size", given) == expected


def test_negative_page_size_is_refused():
    """A negative page size is INVALID_ARGUMENT."""
    with pytest.raises(InvalidField, match="page_size: must not be negative"):
        v.page_size("page_size", -1)


def test_c1_server_fills_id_and_created_at():
    """A checkpoint without id or created_at gets a UUID and the server clock."""
    msg = pb.Checkpoint(execution_id="e", status=pb.CHECKPOINT_STATUS_COMPLETED)
    record = checkpoint_from_proto(msg, field="checkpoint", now=NOW)
    assert len(record.checkpoint_id) == 36
    assert record.created_at == NOW
    assert record.state_snapshot_json == "{}"


def test_checkpoint_round_trips_through_proto():
    """Every field survives proto -> record -> proto."""
    msg = pb.Checkpoint(
        execution_id="e",
        checkpoint_id="c",
        parent_checkpoint_id="p",
        chain_name="chain",
        node_id="turn:1/tool:x",
        node_index=-3,
        step_type="tool_call",
        status=pb.CHECKPOINT_STATUS_INTERRUPTED,
        state_snapshot_json='{"a": 1}',
        node_input_json='{"b": 2}',
        node_output_json='{"c": 3}',
        iteration=4,
        iteration_counters_json='{"n": 5}',
        interrupt_reason="approve",
        interrupt_context_json='{"d": 6}',
        agent_path="agent:x",
        created_at=Timestamp(seconds=1_800_000_000, nanos=123_456_000),
    )
    record = checkpoint_from_proto(msg, field="checkpoint", now=NOW)
    assert checkpoint_to_proto(record) == msg


def test_missing_status_is_refused():
    """A checkpoint must say how its step ended."""
    with pytest.raises(InvalidField, match=r"checkpoint\.status: is required"):
        checkpoint_from_proto(pb.Checkpoint(execution_id="e"), field="checkpoint", now=NOW)


def test_page_tokens_round_trip_and_are_bound_to_their_request():
    """A token resumes its own listing and is refused by any other."""
    scope = ("checkpoints", "default", "e", False)
    assert decode_token("", scope) is None
    assert decode_token(encode_token(42, scope), scope) == 42
    with pytest.raises(InvalidPageToken):
        decode_token(encode_token(42, scope), ("checkpoints", "default", "other", False))
    for garbage in ["x", "!!!", "e30", "W10"]:
        with pytest.raises(InvalidPageToken):
            decode_token(garbage, scope)


@pytest.mark.parametrize(
    "raw",
    ["1e999", "-1e999", "1E400", "-0.5e99999", "[1, 2e308]", '{"a": {"b": [1e999]}}'],
)
def test_j2_numbers_that_overflow_to_infinity_are_refused(raw):
    """Standard JSON syntax, but no finite number: refused naming the field and the rule."""
    for check in (v.json_value, v.json_object, v.json_int_object):
        with pytest.raises(InvalidField) as err:
            check("checkpoint.state_snapshot_json", raw)
        assert err.value.metadata["field"] == "checkpoint.state_snapshot_json"
        if check is v.json_value or raw.startswith("{"):
            assert err.value.metadata["rule"] == v.FINITE_RULE


def test_j2_finite_numbers_at_the_edges_are_accepted():
    """The largest double, an underflow to zero and very long integers are finite."""
    raw = '{"max": 1.7976931348623157e308, "tiny": 1e-999, "int": 1' + "0" * 400 + "}"
    assert v.json_object("f", raw) == raw


def test_j2_repeated_identifiers_have_a_most_and_each_is_an_identifier():
    """A repeated id field is refused past its most entries, and each entry as an id."""
    assert v.identifiers("run_ids", ["a", "b"], 8, 2, "runs") == ["a", "b"]
    assert v.identifiers("run_ids", [], 8, 2, "runs") == []
    with pytest.raises(InvalidField, match=r"run_ids: must name at most 2 runs \(got 3\)"):
        v.identifiers("run_ids", ["a", "b", "c"], 8, 2, "runs")
    with pytest.raises(InvalidField, match=r"run_ids: is required"):
        v.identifiers("run_ids", ["a", ""], 8, 2, "runs")
