"""Generate the Python protobuf/gRPC code (with mypy stubs) from proto/.

The generated modules live in ``pyclient/checkpointd_client/_proto`` so that the client
distribution carries them and the server imports them from there. protoc writes absolute
imports (``from checkpointd.v1 import ...``), which would collide with the server package
``checkpointd``; they are rewritten to point inside ``checkpointd_client._proto``.

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
OUTPUT = ROOT / "pyclient" / "checkpointd_client" / "_proto"
IMPORT_PREFIX = "checkpointd_client._proto."
GENERATED_SUFFIXES = (".py", ".pyi")


def _protoc_include() -> str:
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def _plugin(name: str) -> Path:
    """mypy-protobuf's plugins sit beside the interpreter that runs this script."""
    return Path(sys.executable).parent / name


def generate(out_dir: Path) -> None:
    """Run protoc into ``out_dir`` and rewrite the imports of the generated modules."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{_protoc_include()}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out_dir.rglob("*"):
        if path.suffix in GENERATED_SUFFIXES:
            text = path.read_text()
            text = text.replace(
                "from checkpointd.v1 import", f"from {IMPORT_PREFIX}checkpointd.v1 import"
            )
            text = text.replace("import checkpointd.v1.", f"import {IMPORT_PREFIX}checkpointd.v1.")
            text = text.replace(" checkpointd.v1.", f" {IMPORT_PREFIX}checkpointd.v1.")
            path.write_text(text)
    for package in [
        out_dir,
        *[p for p in out_dir.rglob("*") if p.is_dir() and p.name != "__pycache__"],
    ]:
        (package / "__init__.py").touch()


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
        fresh = Path(tmp) / "_proto"
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
