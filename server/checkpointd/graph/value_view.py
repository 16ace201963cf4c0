"""A stored LangGraph value as plain JSON a person can read, decoded without LangGraph and
never executed: the run view of the approvals page shows a checkpoint's state with it.

A value is the serializer's type tag and its bytes. ``json`` is parsed as JSON; ``msgpack``
is read by the small decoder here: the msgpack format itself, and the extension types
LangGraph's ``JsonPlusSerializer`` writes (a module, a name and the arguments it would call
them with), shown as ``{"$type": "module.Name", ...}`` with the arguments as data. Nothing
named in a value is imported or called. Whatever is not decoded (``pickle``, other
serializers' types, unknown extension codes, raw bytes) is shown as typed bytes:
``{"$bytes": type, "size": n, "head": the first bytes in hex}``; a value that does not parse
is shown as ``{"$error": what is wrong, ...typed bytes}``, never an exception.

Other marks: ``{"$int": "digits"}`` for an integer JavaScript cannot hold exactly,
``{"$float": "nan" | "inf" | "-inf"}``, ``{"$map": [[key, value], ...]}`` for a map whose
keys are not all strings, ``{"$cut": what}`` where a limit stopped the view (strings end in
``…``). Each cut is named in :attr:`Decoded.cut`.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["Decoded", "Limits", "MalformedValue", "decode_msgpack", "typed_bytes", "view"]

#: JavaScript's largest exact integer: beyond it an integer is shown as text.
_SAFE_INT: Final = 2**53 - 1
#: Bytes shown of a value that is not decoded.
_HEAD_BYTES: Final = 16

#: The extension codes of ``langgraph.checkpoint.serde.jsonplus``: each payload is a msgpack
#: array (module, name, argument[, method]).
EXT_CONSTRUCTOR_SINGLE_ARG: Final = 0
EXT_CONSTRUCTOR_POS_ARGS: Final = 1
EXT_CONSTRUCTOR_KW_ARGS: Final = 2
EXT_METHOD_SINGLE_ARG: Final = 3
EXT_PYDANTIC_V1: Final = 4
EXT_PYDANTIC_V2: Final = 5
EXT_NUMPY_ARRAY: Final = 6
EXT_DELTA_SNAPSHOT: Final = 7
#: msgpack's own timestamp extension.
EXT_TIMESTAMP: Final = -1
#: Collections written as one tuple of their items (shown as a list).
_COLLECTIONS: Final = frozenset({"builtins.set", "builtins.frozenset", "collections.deque"})


#: The format bytes other than the fixed ranges: what each starts, and how its length or
#: value is written.
_SIMPLE: Final[dict[int, tuple[str, Any]]] = {
    0xC0: ("nil", None),
    0xC2: ("bool", False),
    0xC3: ("bool", True),
}
_SIZED: Final = {
    0xC4: ("bin", ">B"), 0xC5: ("bin", ">H"), 0xC6: ("bin", ">I"),
    0xD9: ("str", ">B"), 0xDA: ("str", ">H"), 0xDB: ("str", ">I"),
    0xDC: ("array", ">H"), 0xDD: ("array", ">I"),
    0xDE: ("map", ">H"), 0xDF: ("map", ">I"),
    0xC7: ("ext", ">B"), 0xC8: ("ext", ">H"), 0xC9: ("ext", ">I"),
}  # fmt: skip
_NUMBERS: Final = {
    0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
}  # fmt: skip
_FIXEXT: Final = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class MalformedValue(Exception):
    """The bytes are not what their type tag says (truncated, an unknown format byte)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How much of one value is shown."""

    max_bytes: int = 1024 * 1024
    """A larger value is shown as typed bytes, not decoded."""
    max_depth: int = 32
    """Containers nested deeper are cut."""
    max_items: int = 200
    """Items shown of one list or map."""
    max_string: int = 2000
    """Characters shown of one string."""
    max_nodes: int = 20_000
    """Values shown in all (the rest is cut)."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A value's view and what its limits cut (empty when it is whole)."""

    view: Any
    cut: tuple[str, ...] = ()


def typed_bytes(kind: str, data: bytes) -> dict[str, Any]:
    """The view of bytes that are not decoded: their type, size and first bytes."""
    return {"$bytes": kind, "size": len(data), "head": data[:_HEAD_BYTES].hex()}


@dataclass(slots=True)
class _Budget:
    limits: Limits
    nodes: int = 0
    cut: set[str] = field(default_factory=set)

    def note(self, what: str) -> dict[str, str]:
        self.cut.add(what)
        return {"$cut": what}


class _Reader:
    """One msgpack document; every read checks the bytes are there."""

    def __init__(self, data: bytes, budget: _Budget, depth: int) -> None:
        self.data = data
        self.pos = 0
        self.budget = budget
        self.base_depth = depth

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise MalformedValue(
                f"truncated: {n} bytes wanted at byte {self.pos} of {len(self.data)}"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def document(self) -> Any:
        value = self.value(self.base_depth)
        if self.pos != len(self.data):
            raise MalformedValue(f"{len(self.data) - self.pos} bytes after the value")
        return value

    def header(self) -> tuple[str, Any]:
        """The next object's kind and its scalar value or length."""
        b = self.take(1)[0]
        if b <= 0x7F:
            return "int", b
        if b >= 0xE0:
            return "int", b - 0x100
        if 0x80 <= b <= 0x8F:
            return "map", b & 0x0F
        if 0x90 <= b <= 0x9F:
            return "array", b & 0x0F
        if 0xA0 <= b <= 0xBF:
            return "str", b & 0x1F
        if b in _SIMPLE:
            return _SIMPLE[b]
        if b in _SIZED:
            kind, fmt = _SIZED[b]
            return kind, self.unpack(fmt)
        if b in _NUMBERS:
            fmt = _NUMBERS[b]
            return ("float" if fmt in (">f", ">d") else "int"), self.unpack(fmt)
        if b in _FIXEXT:
            return "ext", _FIXEXT[b]
        raise MalformedValue(f"byte 0x{b:02x} at {self.pos - 1} starts no msgpack value")

    def value(self, depth: int) -> Any:
        budget = self.budget
        budget.nodes += 1
        if budget.nodes > budget.limits.max_nodes:
            self.skip_rest()
            return budget.note(f"more than {budget.limits.max_nodes} values")
        kind, arg = self.header()
        if kind in ("nil", "bool"):
            return arg
        if kind == "int":
            return arg if -_SAFE_INT <= arg <= _SAFE_INT else {"$int": str(arg)}
        if kind == "float":
            return arg if math.isfinite(arg) else {"$float": str(arg)}
        if kind == "str":
            return self.text(arg)
        if kind == "bin":
            return typed_bytes("bin", self.take(arg))
        if kind == "ext":
            code = self.unpack(">b")
            return self.ext(code, self.take(arg), depth)
        if depth >= budget.limits.max_depth:
            self.skip_items(arg * 2 if kind == "map" else arg)
            return budget.note(f"containers nested deeper than {budget.limits.max_depth}")
        if kind == "array":
            return self.array(arg, depth)
        return self.map(arg, depth)

    def text(self, length: int) -> str:
        raw = self.take(length)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            # ormsgpack writes lone surrogates replaced; another writer may not.
            text = raw.decode("utf-8", "replace")
        limit = self.budget.limits.max_string
        if len(text) > limit:
            self.budget.cut.add(f"strings longer than {limit} characters")
            return text[:limit] + "…"
        return text

    def array(self, length: int, depth: int) -> list[Any]:
        limit = self.budget.limits.max_items
        items = [self.value(depth + 1) for _ in range(min(length, limit))]
        if length > limit:
            self.skip_items(length - limit)
            items.append(self.budget.note(f"items beyond {limit} of a list"))
        return items

    def map(self, length: int, depth: int) -> Any:
        limit = self.budget.limits.max_items
        pairs = [(self.value(depth + 1), self.value(depth + 1)) for _ in range(min(length, limit))]
        extra = None
        if length > limit:
            self.skip_items(2 * (length - limit))
            extra = self.budget.note(f"entries beyond {limit} of a map")
        if all(isinstance(k, str) for k, _ in pairs):
            shown: dict[str, Any] = dict(pairs)
            if extra is not None:
                shown["$cut"] = extra["$cut"]
            return shown
        listed = [[k, v] for k, v in pairs]
        return {"$map": listed} if extra is None else {"$map": listed, "$cut": extra["$cut"]}

    def skip_items(self, count: int) -> None:
        """Reads past ``count`` values without showing them (iteratively: no depth limit)."""
        remaining = count
        while remaining > 0:
            remaining -= 1
            kind, arg = self.header()
            if kind in ("str", "bin"):
                self.take(arg)
            elif kind == "ext":
                self.take(1 + arg)
            elif kind == "array":
                remaining += arg
            elif kind == "map":
                remaining += 2 * arg

    def skip_rest(self) -> None:
        self.skip_items(1)

    def ext(self, code: int, payload: bytes, depth: int) -> Any:
        if code == EXT_TIMESTAMP:
            return _timestamp(payload)
        if not EXT_CONSTRUCTOR_SINGLE_ARG <= code <= EXT_DELTA_SNAPSHOT:
            return typed_bytes(f"msgpack ext {code}", payload)
        limit = self.budget.limits.max_depth
        if depth >= limit:
            return self.budget.note(f"containers nested deeper than {limit}")
        inner = _Reader(payload, self.budget, depth + 1).document()
        if code == EXT_DELTA_SNAPSHOT:
            return {"$type": "langgraph.checkpoint.serde.types._DeltaSnapshot", "value": inner}
        if not isinstance(inner, list) or len(inner) < 3:
            raise MalformedValue(f"msgpack ext {code} holds no (module, name, value)")
        if code == EXT_NUMPY_ARRAY:
            dtype, shape, order, data = inner[:4] if len(inner) >= 4 else (*inner, None)
            return {
                "$type": "numpy.ndarray",
                "dtype": dtype,
                "shape": shape,
                "order": order,
                "data": data,
            }
        module, name, arg = inner[0], inner[1], inner[2]
        if not isinstance(module, str) or not isinstance(name, str):
            raise MalformedValue(f"msgpack ext {code} names no module and type")
        return _constructed(code, f"{module}.{name}", arg, inner[3:])


def _constructed(code: int, type_name: str, arg: Any, rest: list[Any]) -> dict[str, Any]:
    """The view of a value LangGraph would build by calling ``type_name`` with ``arg``."""
    if type_name == "uuid.UUID" and isinstance(arg, str) and len(arg) == 32:
        arg = f"{arg[:8]}-{arg[8:12]}-{arg[12:16]}-{arg[16:20]}-{arg[20:]}"
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        if type_name == "langgraph.types.Send" and isinstance(arg, list) and len(arg) >= 2:
            shown = {"$type": type_name, "node": arg[0], "arg": arg[1]}
            return shown if len(arg) < 3 else {**shown, "timeout": arg[2]}
        return {"$type": type_name, "args": arg}
    if code == EXT_METHOD_SINGLE_ARG and rest and rest[0] != "fromisoformat":
        return {"$type": type_name, "method": rest[0], "value": arg}
    return {"$type": type_name, "value": arg}


def _timestamp(payload: bytes) -> Any:
    """msgpack's timestamp extension, as seconds and nanoseconds since the epoch."""
    if len(payload) == 4:
        return {"$timestamp": struct.unpack(">I", payload)[0], "nanoseconds": 0}
    if len(payload) == 8:
        both = struct.unpack(">Q", payload)[0]
        return {"$timestamp": both & 0x3_FFFF_FFFF, "nanoseconds": both >> 34}
    if len(payload) == 12:
        nanos, seconds = struct.unpack(">Iq", payload)
        return {"$timestamp": seconds, "nanoseconds": nanos}
    raise MalformedValue(f"a msgpack timestamp of {len(payload)} bytes")


def decode_msgpack(data: bytes, limits: Limits | None = None) -> Decoded:
    """``data`` read as one msgpack document; raises :class:`MalformedValue`."""
    budget = _Budget(limits or Limits())
    try:
        shown = _Reader(data, budget, 0).document()
    except (struct.error, RecursionError) as exc:  # pragma: no cover - guarded reads
        raise MalformedValue(str(exc)) from None
    return Decoded(shown, tuple(sorted(budget.cut)))


def _json_view(data: bytes, limits: Limits) -> Decoded:
    """JSON as it is, but LangChain's constructor envelopes shown as ``$type`` views and
    non-finite numbers marked (the reply must stay JSON)."""
    try:
        parsed = json.loads(data, parse_constant=lambda name: {"$float": name.lower()})
    except (ValueError, RecursionError) as exc:
        raise MalformedValue(f"not JSON: {exc}") from None
    budget = _Budget(limits)
    return Decoded(_bounded(parsed, budget, 0), tuple(sorted(budget.cut)))


def _bounded(value: Any, budget: _Budget, depth: int) -> Any:
    limits = budget.limits
    budget.nodes += 1
    if budget.nodes > limits.max_nodes:
        return budget.note(f"more than {limits.max_nodes} values")
    if isinstance(value, str) and len(value) > limits.max_string:
        budget.cut.add(f"strings longer than {limits.max_string} characters")
        return value[: limits.max_string] + "…"
    if isinstance(value, bool) or value is None or isinstance(value, float | str):
        return value
    if isinstance(value, int):
        return value if -_SAFE_INT <= value <= _SAFE_INT else {"$int": str(value)}
    if depth >= limits.max_depth and isinstance(value, list | dict):
        return budget.note(f"containers nested deeper than {limits.max_depth}")
    if isinstance(value, list):
        items = [_bounded(v, budget, depth + 1) for v in value[: limits.max_items]]
        if len(value) > limits.max_items:
            items.append(budget.note(f"items beyond {limits.max_items} of a list"))
        return items
    assert isinstance(value, dict)
    envelope = _lc_envelope(value)
    if envelope is not None:
        type_name, kwargs = envelope
        return {"$type": type_name, "value": _bounded(kwargs, budget, depth + 1)}
    shown = {k: _bounded(v, budget, depth + 1) for k, v in list(value.items())[: limits.max_items]}
    if len(value) > limits.max_items:
        shown["$cut"] = budget.note(f"entries beyond {limits.max_items} of a map")["$cut"]
    return shown


def _lc_envelope(value: dict[str, Any]) -> tuple[str, Any] | None:
    """``(type, kwargs)`` of LangChain's serialized constructor, ``{"lc": 1 or 2, "type":
    "constructor", "id": [...], "kwargs": {...}}`` (how JSON writes a message)."""
    ident = value.get("id")
    if (
        value.get("lc") in (1, 2)
        and value.get("type") == "constructor"
        and isinstance(ident, list)
        and ident
        and all(isinstance(part, str) for part in ident)
    ):
        return ".".join(ident), value.get("kwargs", {})
    return None


def view(kind: str, data: bytes, limits: Limits | None = None) -> Decoded:
    """The view of a value stored with type tag ``kind``; never raises for bad bytes."""
    limits = limits or Limits()
    if kind in ("null", "empty"):
        return Decoded(None)
    if kind in ("json", "msgpack") and len(data) > limits.max_bytes:
        cut = f"values larger than {limits.max_bytes} bytes (not decoded)"
        return Decoded({**typed_bytes(kind, data), "$cut": cut}, (cut,))
    try:
        if kind == "msgpack":
            return decode_msgpack(data, limits)
        if kind == "json":
            return _json_view(data, limits)
    except MalformedValue as exc:
        return Decoded({"$error": f"{kind}: {exc}", **typed_bytes(kind, data)})
    return Decoded(typed_bytes(kind, data))
