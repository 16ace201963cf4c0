"""The server's reasons and the ErrorReason enum of error_reason.proto are the same list."""

from __future__ import annotations

import grpc
import pytest

from checkpointd.errors import (
    REASON_PREFIX,
    InvalidField,
    NoPendingInterrupt,
    internal_status,
    sent_reasons,
    status_for,
    wire_reason,
)
from checkpointd_client.v1.error_reason_pb2 import ErrorReason
from checkpointd_client.v1.reasons import ErrorReason as PyErrorReason

SENDABLE = {v.number for v in ErrorReason.DESCRIPTOR.values if v.number != 0}


def test_every_enum_value_is_sent_and_every_sent_reason_is_in_the_enum():
    """Adding a reason to the .proto without an error that sends it (or the reverse) fails."""
    assert set(sent_reasons()) == SENDABLE
    assert ErrorReason.ERROR_REASON_UNSPECIFIED not in sent_reasons()


def test_the_wire_string_is_the_value_name_without_the_prefix():
    """ERROR_REASON_NO_PENDING_INTERRUPT goes out as "NO_PENDING_INTERRUPT", as before the enum."""
    assert wire_reason(ErrorReason.ERROR_REASON_NO_PENDING_INTERRUPT) == "NO_PENDING_INTERRUPT"
    for value in ErrorReason.DESCRIPTOR.values:
        assert value.name.startswith(REASON_PREFIX)
        assert wire_reason(ErrorReason.Value(value.name)) == value.name[len(REASON_PREFIX) :]


def test_the_python_enum_holds_exactly_the_wire_strings_the_server_sends():
    """checkpointd_client.v1.reasons (generated) matches what the server puts on the wire."""
    assert {m.value for m in PyErrorReason} == {wire_reason(r) for r in sent_reasons()}
    assert all(m.name == m.value for m in PyErrorReason)


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (NoPendingInterrupt("run-1"), grpc.StatusCode.NOT_FOUND, "NO_PENDING_INTERRUPT"),
        (InvalidField("namespace", "bad"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        (TimeoutError(), grpc.StatusCode.DEADLINE_EXCEEDED, "STORE_TIMEOUT"),
    ],
    ids=lambda x: type(x).__name__,
)
def test_status_for_sends_the_wire_string(error, code, reason):
    """The table's enum values reach the status as the strings clients switch on."""
    info = status_for(error)
    assert info is not None
    assert (info.code, info.reason) == (code, reason)
    assert type(info.reason) is str


def test_a_bug_is_internal_with_an_incident():
    """The status of an unexpected exception names INTERNAL and the incident, nothing else."""
    info = internal_status("abc123")
    assert (info.code, info.reason, info.metadata) == (
        grpc.StatusCode.INTERNAL,
        "INTERNAL",
        {"incident": "abc123"},
    )
    assert status_for(ZeroDivisionError()) is None
