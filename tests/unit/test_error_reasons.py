"""The server's reasons and the ErrorReason enum of error_reason.proto are the same list."""

from __future__ import annotations

import re
from pathlib import Path

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

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "checkpointd" / "v1" / "error_reason.proto"
GUIDE = ROOT / "docs" / "protocol.md"
SENDABLE = {v.number for v in ErrorReason.DESCRIPTOR.values if v.number != 0}


def _sent_codes() -> dict[str, str]:
    """Wire string -> name of the status code carrying it, as the server sends them."""
    return {wire_reason(reason): code.name for reason, code in sent_reasons().items()}


def test_every_enum_value_is_sent_and_every_sent_reason_is_in_the_enum():
    """Adding a reason to the .proto without an error that sends it (or the reverse) fails."""
    assert set(sent_reasons()) == SENDABLE
    assert ErrorReason.ERROR_REASON_UNSPECIFIED not in sent_reasons()


def test_each_value_comment_names_the_code_the_server_sends_it_with():
    """The "Code:" line of every value's comment in error_reason.proto is the server's code."""
    documented: dict[str, str] = {}
    comment: list[str] = []
    for line in PROTO.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped)
            continue
        value = re.fullmatch(rf"{REASON_PREFIX}(\w+) = \d+;", stripped)
        if value and value.group(1) != "UNSPECIFIED":
            codes = re.findall(r"Code: ([A-Z_]+)\.", " ".join(comment))
            assert len(codes) == 1, f"{value.group(1)}: no single 'Code:' in its comment"
            documented[value.group(1)] = codes[0]
        comment = []
    assert documented == _sent_codes()


def test_the_protocol_guide_lists_every_reason_with_its_code():
    """The table of docs/protocol.md "Errors" has one row per reason, with the server's code."""
    section = GUIDE.read_text().split("\n## Errors\n", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| `([A-Z_]+)` \|", section, re.MULTILINE)
    assert len(rows) == len({reason for _, reason in rows})
    assert {reason: code for code, reason in rows} == _sent_codes()


def test_the_wire_string_is_the_value_name_without_the_prefix():
    """ERROR_REASON_NO_PENDING_INTERRUPT goes out as "NO_PENDING_INTERRUPT", as before the enum."""
    assert wire_reason(ErrorReason.ERROR_REASON_NO_PENDING_INTERRUPT) == "NO_PENDING_INTERRUPT"
    for value in ErrorReason.DESCRIPTOR.values:
        assert value.name.startswith(REASON_PREFIX)
        assert wire_reason(ErrorReason.Value(value.name)) == value.name[len(REASON_PREFIX) :]


def test_the_python_enum_holds_exactly_the_wire_strings_the_server_sends():
    """checkpointd_client.v1.reasons (generated) matches what the server puts on the wire."""
    assert {m.value for m in PyErrorReason} == set(_sent_codes())
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
