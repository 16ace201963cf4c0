"""Generate the Python protobuf/gRPC code (with mypy stubs) from proto/.

The generated modules are the public protocol package ``checkpointd_client.v1`` (as
temporalio ships ``temporalio.api``): the client distribution carries them, the server and any
other Python program import them from there. protoc writes absolute imports
(``from checkpointd.v1 import ...``), which would collide with the server package
``checkpointd``; they are rewritten to ``checkpointd_client.v1``.

``--check`` regenerates into a temporary folder and exits non-zero when the committed code
differs, so stale generated code fails the tests.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
# Imported protos that are not ours (google/rpc/status.proto); Python takes their generated
# code from googleapis-common-protos.
THIRD_PARTY_ROOT = ROOT / "third_party" / "proto"
OUTPUT = ROOT / "pyclient" / "checkpointd_client" / "v1"
# protoc's package path for proto/checkpointd/v1 and the Python package it becomes.
PROTO_PACKAGE = "checkpointd.v1"
PYTHON_PACKAGE = "checkpointd_client.v1"
GENERATED_SUFFIXES = (".py", ".pyi")


def _protoc_include() -> str:
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def _plugin(name: str) -> Path:
    """mypy-protobuf's plugins sit beside the interpreter that runs this script."""
    return Path(sys.executable).parent / name


def generate(out_dir: Path) -> None:
    """Run protoc, then move ``checkpointd/v1`` into ``out_dir`` with its imports rewritten."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{THIRD_PARTY_ROOT}",
            f"-I{_protoc_include()}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={raw}",
            f"--grpc_python_out={raw}",
            f"--mypy_out={raw}",
            f"--mypy_grpc_out={raw}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted((raw / PROTO_PACKAGE.replace(".", "/")).iterdir()):
            if path.suffix in GENERATED_SUFFIXES:
                text = path.read_text()
                text = text.replace(f"from {PROTO_PACKAGE} import", f"from {PYTHON_PACKAGE} import")
                text = text.replace(f"import {PROTO_PACKAGE}.", f"import {PYTHON_PACKAGE}.")
                text = text.replace(f" {PROTO_PACKAGE}.", f" {PYTHON_PACKAGE}.")
                (out_dir / path.name).write_text(text)
    (out_dir / "__init__.py").touch()


def _differences(expected: Path, actual: Path) -> list[str]:
    cmp = filecmp.dircmp(expected, actual, ignore=["__pycache__"])
    found: list[str] = []

    def walk(c: filecmp.dircmp[str], prefix: str) -> None:
        found.extend(f"{prefix}{n} (missing from the committed code)" for n in c.left_only)
        found.extend(f"{prefix}{n} (not produced by protoc)" for n in c.right_only)
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        found.extend(f"{prefix}{n} (differs)" for n in mismatch + errors)
        for name, sub in c.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(cmp, "")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail when the committed code is stale"
    )
    args = parser.parse_args()
    if not args.check:
        shutil.rmtree(OUTPUT, ignore_errors=True)
        generate(OUTPUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "v1"
        generate(fresh)
        stale = _differences(fresh, OUTPUT)
    if stale:
        print(
            "generated protobuf code is stale; run `make gen`:", *stale, sep="\n  ", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
