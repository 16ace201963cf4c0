"""The protocol stays compatible within v1: ``buf breaking`` against the committed v1 image.

``proto/buf-images/v1.binpb`` is the v1 API as it was settled (``buf build
--exclude-source-info -o proto/buf-images/v1.binpb``). Within v1, fields and RPCs are only
added, never renumbered, retyped or removed; a removed field leaves ``reserved`` number and
name behind (docs/protocol.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V1_IMAGE = ROOT / "proto" / "buf-images" / "v1.binpb"
BUF = Path(sys.executable).parent / "buf"
SERVICE = Path("checkpointd/v1/checkpoint_service.proto")


def buf_breaking(workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``buf breaking`` in ``workdir`` against the committed v1 image."""
    return subprocess.run(
        [str(BUF), "breaking", "--against", str(V1_IMAGE)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def copy_of_protocol(tmp_path: Path) -> Path:
    """A copy of buf.yaml, proto/ and the imported third_party/ protos to edit."""
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    shutil.copytree(ROOT / "third_party", tmp_path / "third_party")
    return tmp_path


def test_proto_tree_is_compatible_with_the_v1_image() -> None:
    """Today's proto/ breaks nothing the v1 image promises."""
    result = buf_breaking(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_added_field_is_compatible(tmp_path: Path) -> None:
    """Adding a field to a request is allowed within v1."""
    work = copy_of_protocol(tmp_path)
    path = work / "proto" / SERVICE
    text = path.read_text()
    old = "  bool descending = 5;\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, old + "  // A field added later.\n  string added = 99;\n"))
    result = buf_breaking(work)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_renumbered_field_is_a_breaking_change(tmp_path: Path) -> None:
    """Renumbering a field fails the check, so the check can fail."""
    work = copy_of_protocol(tmp_path)
    path = work / "proto" / SERVICE
    text = path.read_text()
    old = "  bool descending = 5;\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "  bool descending = 6;\n"))
    result = buf_breaking(work)
    assert result.returncode != 0
    assert "descending" in result.stdout + result.stderr
