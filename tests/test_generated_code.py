"""The committed protobuf code is what protoc generates from proto/ today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_fresh():
    """Regenerating from proto/ reproduces the committed code byte for byte."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_check_mode_detects_a_stale_file(tmp_path, monkeypatch):
    """The freshness check fails when a generated file differs (so the test above can fail)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    fresh = tmp_path / "fresh"
    gen_proto.generate(fresh)
    committed = tmp_path / "committed"
    gen_proto.generate(committed)
    target = next(committed.rglob("checkpoint_pb2.py"))
    target.write_text(target.read_text() + "\n# edited by hand\n")
    assert gen_proto._differences(fresh, committed) == [
        f"{target.relative_to(committed)} (differs)"
    ]
