"""docs/contract.md and the suite name the same rules: each rule tested, each cited rule defined."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"

# A rule is defined as "- **C2 Title.**" (or "- **P1** ...") and proved by "def test_c2_...".
RULE_DEFINITION = re.compile(r"^- \*\*([A-Z][0-9]+)[ *]", re.MULTILINE)
RULE_IN_TEST_NAME = re.compile(r"def test_([a-z][0-9]+)_")


def defined_rules() -> set[str]:
    return set(RULE_DEFINITION.findall(CONTRACT.read_text(encoding="utf-8")))


def rules_named_by_tests() -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for rule in RULE_IN_TEST_NAME.findall(path.read_text(encoding="utf-8")):
            files = named.setdefault(rule.upper(), [])
            if str(path.relative_to(ROOT)) not in files:
                files.append(str(path.relative_to(ROOT)))
    return named


def test_contract_defines_rules() -> None:
    """The rule pattern finds the rules, so the two checks below cannot pass on an empty set."""
    rules = defined_rules()
    assert {"C1", "C9", "I3", "J2", "E2", "B1", "P2"} <= rules
    assert len(rules) >= 25


def test_every_rule_has_a_test() -> None:
    """A rule with no test named after it is a promise nobody checks."""
    untested = sorted(defined_rules() - set(rules_named_by_tests()))
    assert untested == [], f"rules in docs/contract.md with no test_<id>_ test: {untested}"


def test_every_rule_a_test_names_is_defined() -> None:
    """A test citing an id the contract does not define points a reader nowhere."""
    named = rules_named_by_tests()
    unknown = {rule: files for rule, files in named.items() if rule not in defined_rules()}
    assert unknown == {}, f"tests name rules docs/contract.md does not define: {unknown}"
