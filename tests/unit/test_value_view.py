"""The run view's decoder (contract W3): values written by LangGraph's own serializer are
shown as plain JSON views, typed values it does not know as typed bytes, and bad bytes as an
error view; nothing named in a value is imported or called, and no exception escapes."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from checkpointd.graph.value_view import Limits, MalformedValue, decode_msgpack, view

SERDE = JsonPlusSerializer()


class Order(BaseModel):
    item: str
    amount: int


@dataclasses.dataclass
class Ticket:
    number: int
    opened: date


class Colour(enum.Enum):
    RED = "red"


def shown(value: Any, serde: JsonPlusSerializer = SERDE) -> Any:
    """The view of ``value`` as LangGraph's serializer stores it; always valid JSON."""
    kind, data = serde.dumps_typed(value)
    decoded = view(kind, data)
    json.dumps(decoded.view, allow_nan=False)  # the console's reply must be JSON
    return decoded.view


def test_w3_view_shows_messages_as_their_type_and_fields() -> None:
    """A LangChain message (a pydantic model) is its dotted type and its fields."""
    message = AIMessage(content="hi", tool_calls=[{"name": "refund", "args": {"a": 1}, "id": "c"}])
    got = shown([HumanMessage(content="refund A-1", id="h1"), message])
    assert got[0]["$type"] == "langchain_core.messages.human.HumanMessage"
    assert got[0]["value"]["content"] == "refund A-1"
    assert got[0]["value"]["id"] == "h1"
    assert got[1]["$type"] == "langchain_core.messages.ai.AIMessage"
    call = got[1]["value"]["tool_calls"][0]
    assert (call["name"], call["args"], call["id"]) == ("refund", {"a": 1}, "c")


def test_w3_view_shows_models_dataclasses_enums_and_times() -> None:
    """Pydantic models, dataclasses, enums, datetimes, dates, timedeltas and UUIDs are their
    type with the arguments LangGraph would build them from, as data."""
    assert shown(Order(item="A-1", amount=40)) == {
        "$type": f"{__name__}.Order",
        "value": {"item": "A-1", "amount": 40},
    }
    assert shown(Ticket(7, date(2024, 1, 2))) == {
        "$type": f"{__name__}.Ticket",
        "value": {"number": 7, "opened": {"$type": "datetime.date", "args": [2024, 1, 2]}},
    }
    assert shown(Colour.RED) == {"$type": f"{__name__}.Colour", "value": "red"}
    assert shown(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == {
        "$type": "datetime.datetime",
        "value": "2024-01-02T03:04:05+00:00",
    }
    assert shown(timedelta(seconds=3)) == {"$type": "datetime.timedelta", "args": [0, 3, 0]}
    value = uuid.uuid4()
    assert shown(value) == {"$type": "uuid.UUID", "value": str(value)}


def test_w3_view_shows_collections_sends_interrupts_and_nesting() -> None:
    """Sets, tuples, nested dicts, a Send and an Interrupt (a pause's request) as JSON."""
    assert shown({"b", "a"})["$type"] == "builtins.set"
    assert sorted(shown({"b", "a"})["value"]) == ["a", "b"]
    assert shown((1, "x")) == [1, "x"]
    nested = {"a": {"b": [1, {"c": None, "d": [True, 1.5]}]}}
    assert shown(nested) == nested
    assert shown(Send("review", {"item": "A-1"})) == {
        "$type": "langgraph.types.Send",
        "node": "review",
        "arg": {"item": "A-1"},
    }
    got = shown(Interrupt(value={"question": "ship?"}, id="i-1"))
    assert got["$type"] == "langgraph.types.Interrupt"
    assert got["value"]["value"] == {"question": "ship?"}


def test_w3_view_marks_what_json_cannot_hold_exactly() -> None:
    """Integers beyond 2^53 are text; NaN and infinities are named; a map with other keys
    than strings is a list of pairs; bytes are typed bytes."""
    assert shown(2**63) == {"$int": str(2**63)}
    assert shown(-(2**63)) == {"$int": str(-(2**63))}
    assert shown(2**53 - 1) == 2**53 - 1
    assert shown(float("nan")) == {"$float": "nan"}
    assert shown(float("-inf")) == {"$float": "-inf"}
    assert shown({1: "a", "b": 2}) == {"$map": [[1, "a"], ["b", 2]]}
    assert shown({"raw": b"\x00\x01"}) == {"raw": {"$bytes": "bin", "size": 2, "head": "0001"}}
    assert shown(b"\xff" * 40) == {"$bytes": "bytes", "size": 40, "head": "ff" * 16}


def test_w3_view_shows_pickle_and_unknown_types_as_typed_bytes() -> None:
    """A pickled value (an int beyond 64 bits with the pickle fallback) is never unpickled:
    typed bytes; so is a type tag the decoder does not know and an unknown extension code."""
    kind, data = JsonPlusSerializer(pickle_fallback=True).dumps_typed(2**70)
    assert kind == "pickle"
    assert view(kind, data).view == {"$bytes": "pickle", "size": len(data), "head": data[:16].hex()}
    assert view("cbor", b"\xa0").view == {"$bytes": "cbor", "size": 1, "head": "a0"}
    unknown = ormsgpack.packb(ormsgpack.Ext(42, b"xyz"))
    assert view("msgpack", unknown).view == {
        "$bytes": "msgpack ext 42",
        "size": 3,
        "head": "78797a",
    }


def test_w3_view_never_imports_what_a_value_names() -> None:
    """A value naming a module that does not exist, or one that would run code when
    imported, is shown by its name: the module is never imported."""
    payload = ormsgpack.packb(["checkpointd_no_such_module", "Boom", {"x": 1}])
    data = ormsgpack.packb(ormsgpack.Ext(2, payload))
    assert view("msgpack", data).view == {
        "$type": "checkpointd_no_such_module.Boom",
        "value": {"x": 1},
    }
    payload = ormsgpack.packb(["antigravity", "fly", "now", "fromisoformat"])
    assert view("msgpack", ormsgpack.packb(ormsgpack.Ext(3, payload))).view == {
        "$type": "antigravity.fly",
        "value": "now",
    }
    assert "antigravity" not in sys.modules


def test_w3_view_reads_json_values_and_langchain_envelopes() -> None:
    """A "json" value is JSON, LangChain's constructor envelopes shown as their type."""
    envelope = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain_core", "messages", "AIMessage"],
        "kwargs": {"content": "hi"},
    }
    data = json.dumps({"messages": [envelope], "n": 1}).encode()
    assert view("json", data).view == {
        "messages": [{"$type": "langchain_core.messages.AIMessage", "value": {"content": "hi"}}],
        "n": 1,
    }
    assert view("json", b"NaN").view == {"$float": "nan"}
    assert view("null", b"").view is None


@pytest.mark.parametrize(
    ("kind", "data", "said"),
    [
        ("msgpack", b"\x92\x01", "truncated"),
        ("msgpack", b"\xc1", "starts no msgpack value"),
        ("msgpack", b"\x01\x02", "bytes after the value"),
        ("msgpack", b"\xdb\xff\xff\xff\xff", "truncated"),
        ("msgpack", ormsgpack.packb(ormsgpack.Ext(0, b"\x01")), "no (module, name, value)"),
        ("msgpack", b"\xd4\xff\x01", "timestamp"),
        ("json", b'{"a": ', "not JSON"),
        ("json", b"[" * 100_000, "not JSON"),
    ],
)
def test_w3_view_of_malformed_bytes_is_an_error_view(kind: str, data: bytes, said: str) -> None:
    """Truncated or malformed bytes give an error view saying what is wrong, with the
    bytes' type, size and head: no exception escapes."""
    got = view(kind, data).view
    assert said in got["$error"]
    assert (got["$bytes"], got["size"]) == (kind, len(data))
    with pytest.raises(MalformedValue):
        decode_msgpack(b"\x92\x01")


def test_w3_view_every_truncation_of_a_real_value_is_an_error_view() -> None:
    """Every prefix of a real checkpoint value decodes to an error view, never raises."""
    kind, data = SERDE.dumps_typed({"messages": [AIMessage(content="x" * 40)], "n": 2**40})
    for end in range(len(data)):
        assert "$error" in view(kind, data[:end]).view


def test_w3_view_is_bounded_and_says_what_was_cut() -> None:
    """Long strings, long lists, deep nesting and large values are cut, each cut named."""
    limits = Limits(max_bytes=10_000, max_depth=4, max_items=3, max_string=5)
    kind, data = SERDE.dumps_typed({"s": "abcdefgh", "l": list(range(10))})
    decoded = view(kind, data, limits)
    assert decoded.view == {"s": "abcde…", "l": [0, 1, 2, {"$cut": "items beyond 3 of a list"}]}
    assert decoded.cut == ("items beyond 3 of a list", "strings longer than 5 characters")
    data = b"\x91" * 50_000 + b"\x01"  # 50,000 nested lists: deeper than Python recurses
    decoded = view("msgpack", data, Limits(max_depth=4))
    assert decoded.view == [[[[{"$cut": "containers nested deeper than 4"}]]]]
    assert decoded.cut == ("containers nested deeper than 4",)
    big = view("msgpack", b"\xc4\xff" + b"\x00" * 20_000, limits)
    assert big.view["$cut"] == "values larger than 10000 bytes (not decoded)"
    assert big.view["size"] == 20_002
