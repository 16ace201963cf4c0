"""Request validation: every rule a field must keep, and the documented limits (J2, J4, N1).

Each check raises :class:`~checkpointd.errors.InvalidField` naming the field (with its path
inside the request, e.g. ``checkpoint.execution_id``) and the rule. Validation runs before
anything touches the store, so a rejected request changes nothing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from checkpointd.errors import InvalidField, echo
from checkpointd.store.times import EPOCH

__all__ = [
    "AGENT_PATH_MAX",
    "CHAIN_NAME_MAX",
    "CHECKPOINT_ID_MAX",
    "DEFAULT_NAMESPACE",
    "EXECUTION_ID_MAX",
    "FINITE_RULE",
    "IDEMPOTENCY_KEY_MAX",
    "NAMESPACE_RULE",
    "NODE_ID_MAX",
    "REASON_MAX",
    "REQUEST_ID_MAX",
    "STEP_TYPE_MAX",
    "duration_to_timedelta",
    "identifier",
    "is_namespace_name",
    "json_object",
    "json_value",
    "namespace",
    "optional_identifier",
    "optional_text",
    "page_size",
    "parse_json",
    "text",
    "timestamp_to_datetime",
]

DEFAULT_NAMESPACE: Final = "default"
NAMESPACE_RULE: Final = (
    "must be 1 to 63 characters of ASCII letters, digits, '.', '_' and '-', "
    "starting with a letter or a digit"
)
_NAMESPACE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")

EXECUTION_ID_MAX: Final = 256
CHECKPOINT_ID_MAX: Final = 128
#: A graph interrupt id (LangGraph's are 32 hex digits).
INTERRUPT_ID_MAX: Final = 128
REQUEST_ID_MAX: Final = 128
IDEMPOTENCY_KEY_MAX: Final = 512
CHAIN_NAME_MAX: Final = 256
NODE_ID_MAX: Final = 512
STEP_TYPE_MAX: Final = 64
REASON_MAX: Final = 256
AGENT_PATH_MAX: Final = 1024

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 1000

# Ids are keys: no control characters at all. Free text may hold anything but NUL, which
# Postgres TEXT cannot store (both backends must accept exactly the same input).
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")

# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_MIN_SECONDS: Final = -62_135_596_800
_MAX_SECONDS: Final = 253_402_300_799


def is_namespace_name(value: str) -> bool:
    """Whether ``value`` is a namespace name (the one rule, for requests and token grants)."""
    return _NAMESPACE_RE.fullmatch(value) is not None


def namespace(value: str) -> str:
    """Resolve the request's namespace; empty means ``default`` (N1)."""
    if not value:
        return DEFAULT_NAMESPACE
    if not is_namespace_name(value):
        raise InvalidField("namespace", NAMESPACE_RULE, got=value)
    return value


def identifier(field: str, value: str, max_len: int) -> str:
    """A required id: non-empty, at most ``max_len`` characters, no control characters."""
    if not value:
        raise InvalidField(field, "is required")
    return optional_identifier(field, value, max_len)


def required(field: str, request: Message) -> None:
    """Refuse ``request`` when its message field ``field`` is unset."""
    if not request.HasField(field):
        raise InvalidField(field, "is required")


def optional_identifier(field: str, value: str, max_len: int) -> str:
    """An id that may be empty; when set, the rules of :func:`identifier` apply."""
    if len(value) > max_len:
        raise InvalidField(field, f"must be at most {max_len} characters (got {len(value)})")
    if _CONTROL_RE.search(value):
        raise InvalidField(field, "must not contain control characters")
    return value


def text(field: str, value: str, max_len: int) -> str:
    """Free text (names, reasons, paths): at most ``max_len`` characters, no NUL."""
    if len(value) > max_len:
        raise InvalidField(field, f"must be at most {max_len} characters (got {len(value)})")
    if "\x00" in value:
        raise InvalidField(field, "must not contain NUL characters")
    return value


def optional_text(field: str, value: str | None, max_len: int) -> str | None:
    """Like :func:`text` for a proto3 ``optional`` field; None when unset."""
    return None if value is None else text(field, value, max_len)


#: The rule of a number that does not fit a double (``1e999`` parses as infinity).
FINITE_RULE: Final = (
    "must hold only finite numbers (a number beyond about 1.8e308, such as 1e999, "
    "is read as infinity by most JSON parsers)"
)


class _NotFinite(ValueError):
    """A number literal that overflows a double: valid JSON syntax, but no finite value."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NotFinite(literal)
    return value


#: Every reader of these fields parses numbers as doubles (Python, JavaScript, Go's float64):
#: a literal that overflows would come back as infinity, which JSON cannot write again, so it
#: is refused here like NaN and Infinity. One decoder for every call: ``json.loads`` with
#: hooks would build a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_json(field: str, raw: str) -> Any:
    """The value of standard JSON text (finite numbers, nesting within reason), or
    INVALID_ARGUMENT naming ``field``."""
    try:
        return _DECODER.decode(raw)
    except RecursionError:
        raise InvalidField(field, "must be JSON nested at most about 900 levels deep") from None
    except _NotFinite:
        raise InvalidField(field, FINITE_RULE) from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, over-long integers
        raise InvalidField(field, f"must be standard JSON text ({exc})") from None


def json_object(field: str, raw: str) -> str:
    """JSON text that must hold an object; empty text means ``{}``. Returns the text to store."""
    if not raw:
        return "{}"
    if raw == "{}":  # the usual value of most of these fields: nothing to parse
        return raw
    if not isinstance(parse_json(field, raw), dict):
        raise InvalidField(field, "must be a JSON object")
    return raw


def json_int_object(field: str, raw: str) -> str:
    """A JSON object whose values are all integers (iteration counters)."""
    if not raw:
        return "{}"
    if raw == "{}":
        return raw
    value = parse_json(field, raw)
    if not isinstance(value, dict):
        raise InvalidField(field, "must be a JSON object")
    for key, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidField(
                field, f"must map names to integers ({echo(key, 64)!r} is not an integer)"
            )
    return raw


def json_value(field: str, raw: str) -> str:
    """Required JSON text holding any value, ``null`` included."""
    if not raw:
        raise InvalidField(field, "is required (send JSON text; 'null' caches a null)")
    parse_json(field, raw)
    return raw


def timestamp_to_datetime(field: str, ts: Timestamp) -> datetime:
    """A Timestamp within protobuf's valid range, truncated to microseconds (J4)."""
    if not _MIN_SECONDS <= ts.seconds <= _MAX_SECONDS or not 0 <= ts.nanos <= 999_999_999:
        raise InvalidField(field, "must be a valid timestamp between years 0001 and 9999")
    return EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def duration_to_timedelta(field: str, duration: Duration) -> timedelta:
    """A non-negative Duration that fits a Python timedelta."""
    if duration.seconds < 0 or duration.nanos < 0:
        raise InvalidField(field, "must not be negative")
    if not 0 <= duration.nanos <= 999_999_999:
        raise InvalidField(field, "must be a valid duration")
    try:
        return timedelta(seconds=duration.seconds, microseconds=duration.nanos // 1000)
    except OverflowError:
        raise InvalidField(field, "must be at most 999999999 days") from None


def int_text(field: str, raw: str | None, default: int, low: int, high: int) -> int:
    """An integer sent as text (an HTTP query parameter): absent means ``default``."""
    if raw is None:
        return default
    try:
        value = int(raw)
    except (ValueError, OverflowError):
        raise InvalidField(field, "must be an integer") from None
    if not low <= value <= high:
        raise InvalidField(field, f"must be {low} to {high}")
    return value


def at_most(field: str, count: int, most: int, what: str) -> None:
    """Refuse a repeated field of more than ``most`` entries (``what`` names them)."""
    if count > most:
        raise InvalidField(field, f"must name at most {most} {what} (got {count})")


def identifiers(field: str, values: Sequence[str], max_len: int, most: int, what: str) -> list[str]:
    """A repeated identifier field: at most ``most`` entries, each checked as ``identifier``."""
    at_most(field, len(values), most, what)
    return [identifier(field, value, max_len) for value in values]


def page_size(field: str, value: int) -> int:
    """0 means the default; larger than the cap is capped; negative is an error."""
    if value < 0:
        raise InvalidField(field, "must not be negative")
    if value == 0:
        return DEFAULT_PAGE_SIZE
    return min(value, MAX_PAGE_SIZE)
