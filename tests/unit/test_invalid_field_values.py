"""E2: the `field` values of INVALID_FIELD listed in docs/protocol.md are exactly those the
server code can produce.

The server names fields in three ways, all read here from its source: a literal
(``InvalidField("older_than", ...)``, ``v.identifier("execution_id", ...)``), a validation
helper that passes on the name it was given (``field``), and a path inside a nested message
(``f"{field}.node_id"`` in convert.py, whose ``field`` is what the servicers pass:
``field="checkpoint"``). Any other way of naming a field fails this test, so a new one cannot
slip past the list. tests/contract/test_protocol_guide.py triggers every listed value on a
running server.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from checkpointd import validation

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server" / "checkpointd"
GUIDE = ROOT / "docs" / "protocol.md"
SECTION = "### The `field` of INVALID_FIELD"

#: Validation helpers whose first argument is the name of the field they check.
FIELD_HELPERS = frozenset(
    name
    for name, function in vars(validation).items()
    if inspect.isfunction(function)
    and function.__module__ == validation.__name__
    and next(iter(inspect.signature(function).parameters), None) == "field"
)


def documented_fields() -> set[str]:
    """The backquoted names in the first column of the guide's table of `field` values."""
    text = GUIDE.read_text()
    assert SECTION in text, f"docs/protocol.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    fields: set[str] = set()
    rows = section.split("|---|---|\n", 1)[1].split("\n\n", 1)[0]
    for line in rows.splitlines():
        first_column = line.split("|")[1]
        fields |= set(re.findall(r"`([a-z_.]+)`", first_column))
    return fields


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_field_call(call: ast.Call) -> bool:
    """A call whose first argument names a request field."""
    name = _called_name(call)
    if name == "InvalidField":
        return True
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in {"v", "validation"}
        and func.attr in FIELD_HELPERS
    )


#: The approvals console's HTTP API: its own body fields are listed in its own section.
CONSOLE = SERVER / "console"
CONSOLE_SECTION = "## The approvals console over HTTP"


def _grpc_sources() -> list[Path]:
    return [path for path in sorted(SERVER.rglob("*.py")) if CONSOLE not in path.parents]


def produced_fields(paths: list[Path] | None = None) -> set[str]:
    """Every field name the server's source (or ``paths``) can put in an INVALID_FIELD; by
    default the gRPC server's, without the console."""
    literals: set[str] = set()
    nested: dict[str, set[str]] = {}  # function -> suffixes of f"{field}.suffix"
    prefixes: dict[str, set[str]] = {}  # function -> literal field= it is called with
    unreadable: list[str] = []
    for path in _grpc_sources() if paths is None else paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                for keyword in node.keywords:
                    if keyword.arg == "field" and isinstance(keyword.value, ast.Constant):
                        callee = _called_name(node)
                        assert callee is not None
                        prefixes.setdefault(callee, set()).add(str(keyword.value.value))
                if not _is_field_call(node) or not node.args:
                    continue
                arg = node.args[0]
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    literals.add(arg.value)
                elif isinstance(arg, ast.Name) and arg.id == "field":
                    pass  # a helper passing on the name its caller gave it
                elif (
                    isinstance(arg, ast.JoinedStr)
                    and len(arg.values) == 2
                    and isinstance(arg.values[0], ast.FormattedValue)
                    and isinstance(arg.values[0].value, ast.Name)
                    and arg.values[0].value.id == "field"
                    and isinstance(arg.values[1], ast.Constant)
                    and str(arg.values[1].value).startswith(".")
                ):
                    nested.setdefault(function.name, set()).add(str(arg.values[1].value))
                else:
                    unreadable.append(f"{where}: {ast.unparse(arg)}")
    assert not unreadable, f"field names this test cannot read: {unreadable}"
    fields = set(literals)
    for name, suffixes in nested.items():
        assert prefixes.get(name), f"{name} is never called with a literal field="
        fields |= {prefix + suffix for prefix in prefixes[name] for suffix in suffixes}
    return fields


def test_e2_the_server_source_yields_the_known_shapes_of_field_names():
    """The extraction finds bare and dotted names (so the comparison below means something)."""
    fields = produced_fields()
    assert {"namespace", "execution_id", "after_cursor", "older_than"} <= fields
    assert {"checkpoint.state_snapshot_json", "pending.context_json"} <= fields
    assert "checkpoint.status" in fields  # both a literal and a nested path


def test_e2_documented_invalid_field_values_are_exactly_those_the_server_produces():
    """docs/protocol.md lists every `field` value the server can send, and no other."""
    documented, produced = documented_fields(), produced_fields()
    assert produced - documented == set(), "produced by the server but not documented"
    assert documented - produced == set(), "documented but never produced by the server"


def test_e2_the_console_documents_the_fields_only_it_checks() -> None:
    """The console's INVALID_FIELD values that no RPC produces (its JSON body, its token
    field) are named in the guide's console section."""
    own = produced_fields(sorted(CONSOLE.rglob("*.py"))) - documented_fields()
    assert own, "the console checks no fields of its own: this test reads nothing"
    section = GUIDE.read_text().split(CONSOLE_SECTION, 1)[1].split("\n## ", 1)[0]
    missing = sorted(name for name in own if f"`{name}`" not in section)
    assert missing == [], f"console fields missing from {CONSOLE_SECTION!r}: {missing}"
