"""The committed protobuf code is what protoc generates from proto/ today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def _unasync():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import unasync
    finally:
        sys.path.pop(0)
    return unasync


def test_sync_client_is_generated_from_the_async_client():
    """The committed blocking client is what tools/unasync.py writes from the asyncio one."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "unasync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_unasync_check_fails_on_a_stale_sync_client(tmp_path, monkeypatch):
    """An edit to the asyncio client that was not carried over makes --check fail, naming the
    file and showing the difference (so the test above can fail)."""
    unasync = _unasync()
    source = tmp_path / "_async_client.py"
    source.write_text(
        unasync.SOURCE.read_text().replace(
            '_CLOSED = "the checkpointd client has been closed"',
            '_CLOSED = "the checkpointd client is closed"',
        )
    )
    target = tmp_path / "_sync_client.py"
    target.write_text(unasync.TARGET.read_text())
    monkeypatch.setattr(unasync, "SOURCE", source)
    monkeypatch.setattr(unasync, "TARGET", target)
    monkeypatch.setattr(unasync, "ROOT", tmp_path)
    assert unasync.main(["--check"]) == 1
    assert unasync.main([]) == 0
    assert '_CLOSED = "the checkpointd client is closed"' in target.read_text()
    assert unasync.main(["--check"]) == 0


def test_unasync_refuses_a_source_whose_mode_phrases_changed():
    """A docstring phrase the script rewrites must stay in the source: otherwise the blocking
    client would describe itself as the asyncio one."""
    unasync = _unasync()
    source = unasync.SOURCE.read_text().replace("over one ``grpc.aio`` channel.", "over grpc.aio.")
    with pytest.raises(ValueError, match="no longer says"):
        unasync.unasync(source)


def test_unasync_output_has_no_async_left():
    """The generated client awaits nothing: no async, await, asyncio or grpc.aio remain in its
    code, and the check that says so finds them when they are there."""
    unasync = _unasync()
    assert unasync.async_names(unasync.unasync(unasync.SOURCE.read_text())) == []
    leftovers = "async def f():\n    # await in a comment\n    await aio.sleep('asyncio')\n"
    assert unasync.async_names(leftovers) == ["aio", "async", "await"]
