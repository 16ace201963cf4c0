"""The one table of settings: the command line's defaults are the settings' defaults, and the
operations guide's table is the one tools/settings_table.py writes from it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpointd.cli import build_parser, serve
from checkpointd.config import OPTIONS, Settings

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "settings_table.py"
GUIDE = ROOT / "docs" / "operations.md"


def _check(guide: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--check", "--doc", str(guide)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_operations_guide_settings_table_is_generated_from_the_options():
    """docs/operations.md's table is what the tool writes (make lint runs the same check)."""
    result = _check(GUIDE)
    assert result.returncode == 0, result.stderr


def test_a_stale_table_fails_the_check_until_rewritten(tmp_path: Path):
    """A row edited by hand is caught, and the tool puts the table back."""
    guide = tmp_path / "operations.md"
    original = GUIDE.read_text()
    guide.write_text(original.replace("| `--store-timeout` |", "| `--store-timeout-old` |"))
    stale = _check(guide)
    assert stale.returncode == 1
    assert "stale" in stale.stderr
    subprocess.run([sys.executable, str(TOOL), "--doc", str(guide)], check=True, timeout=60)
    assert guide.read_text() == original


def test_every_option_names_a_setting_and_its_own_variable():
    """Each option's setting exists and each variable is named once across the table."""
    fields = {item.name for item in dataclasses.fields(Settings)}
    names = [name for option in OPTIONS for name in option.env]
    assert len(names) == len(set(names))
    for option in OPTIONS:
        assert option.setting is None or option.setting in fields, option
        assert all(name.startswith("CHECKPOINTD_") for name in option.env)


def test_command_line_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch):
    """With no flag and no variable, `serve` builds exactly Settings' defaults."""
    for name in list(os.environ):
        if name.startswith("CHECKPOINTD_"):
            monkeypatch.delenv(name)
    parser = build_parser("serve")
    args = parser.parse_args(["serve", "--store", "sqlite:///tmp/unused.db"])
    assert serve._settings(args, parser) == Settings(store="sqlite:///tmp/unused.db")
