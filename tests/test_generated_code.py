"""The committed protobuf code is what protoc generates from proto/ today."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


#: The generators' environment (requirements/gen.txt), which ``make install`` builds and the
#: Makefile names; the tests' own has a newer grpcio-tools (tests/test_proto_options.py).
GEN_PYTHON = Path(os.environ.get("CHECKPOINTD_GEN_PYTHON") or ROOT / ".venv-gen" / "bin" / "python")


def test_generated_code_is_fresh():
    """Regenerating from proto/ with the pinned generator reproduces the committed code byte
    for byte."""
    assert GEN_PYTHON.is_file(), f"{GEN_PYTHON} is missing: `make install` builds .venv-gen"
    result = subprocess.run(
        [str(GEN_PYTHON), str(ROOT / "tools" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_another_generator_is_refused():
    """The committed code's gencode sets the client's protobuf and grpcio floors, so a run with
    another grpcio-tools (the tests' own) refuses to write or check, pointing at ``make gen``."""
    from importlib.metadata import version

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    assert version("grpcio-tools") != gen_proto.GENERATOR_VERSION
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    assert "make gen" in result.stderr


def test_the_committed_gencode_is_the_floor_generators():
    """Every generated module names protobuf 6.30.0 (the client's floor) and grpcio 1.72.1."""
    generated = ROOT / "pyclient" / "checkpointd_client" / "v1"
    for module in sorted(generated.glob("*_pb2.py")):
        assert "# Protobuf Python Version: 6.30.0\n" in module.read_text(), module.name
    for module in sorted(generated.glob("*_pb2_grpc.py")):
        assert "GRPC_GENERATED_VERSION = '1.72.1'\n" in module.read_text(), module.name


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


def test_check_mode_detects_a_stale_node_client_file(tmp_path):
    """The Node.js client's copy of proto/ and its error_reason.d.ts are checked as well: an
    edited copy, a missing file and a .proto that proto/ no longer has are each reported."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_proto
    finally:
        sys.path.pop(0)
    fresh = tmp_path / "fresh"
    gen_proto.generate(tmp_path / "python", fresh)
    committed = tmp_path / "committed"
    shutil.copytree(fresh, committed)
    assert gen_proto._node_differences(fresh, committed) == []
    protos = committed / gen_proto.NODE_PROTO_DIR
    (protos / "checkpoint.proto").write_text("// edited by hand\n")
    (protos / "removed.proto").write_text("// gone from proto/\n")
    (committed / gen_proto.NODE_REASONS_TYPES).unlink()
    where = "clients/node/"
    assert gen_proto._node_differences(fresh, committed) == [
        f"{where}{gen_proto.NODE_PROTO_DIR}/checkpoint.proto (differs)",
        f"{where}{gen_proto.NODE_REASONS_TYPES} (missing from the committed code)",
        f"{where}{gen_proto.NODE_PROTO_DIR}/removed.proto (not in proto/)",
    ]


def test_node_error_reason_types_name_every_reason():
    """error_reason.d.ts, written from error_reason.proto, declares each reason the Python
    ErrorReason has, by its wire string."""
    from checkpointd_client import ErrorReason

    text = (ROOT / "clients" / "node" / "src" / "error_reason.d.ts").read_text()
    declared = re.findall(r"^  readonly (\w+): '(\w+)';$", text, re.MULTILINE)
    assert declared == [(reason.value, reason.value) for reason in ErrorReason]


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
