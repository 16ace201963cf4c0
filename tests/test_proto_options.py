"""Every .proto file says where generated code lives in Go, Java and C#.

Without ``go_package``, ``protoc-gen-go`` refuses to generate at all unless the caller maps
every file on the command line. These options are pinned here rather than by ``buf
breaking`` (whose v1 image predates them; see buf.yaml), so changing one, which would move
generated code for every user of that language, fails this test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest
from google.protobuf import descriptor_pb2

from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    error_reason_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
    write_service_pb2,
)

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
THIRD_PARTY_ROOT = ROOT / "third_party" / "proto"

GO_IMPORT_PATH = "github.com/checkpointd/checkpointd/gen/go/checkpointd/v1"
GO_PACKAGE = f"{GO_IMPORT_PATH};checkpointdv1"
JAVA_PACKAGE = "io.github.checkpointd.v1"
CSHARP_NAMESPACE = "Checkpointd.V1"
JAVA_OUTER_CLASSNAMES = {
    "checkpointd/v1/checkpoint.proto": "CheckpointProto",
    "checkpointd/v1/checkpoint_service.proto": "CheckpointServiceProto",
    "checkpointd/v1/error_reason.proto": "ErrorReasonProto",
    "checkpointd/v1/graph_service.proto": "GraphServiceProto",
    "checkpointd/v1/idempotency_service.proto": "IdempotencyServiceProto",
    "checkpointd/v1/interrupt_service.proto": "InterruptServiceProto",
    "checkpointd/v1/replication_service.proto": "ReplicationServiceProto",
    "checkpointd/v1/write_service.proto": "WriteServiceProto",
}
MODULES = (
    checkpoint_pb2,
    checkpoint_service_pb2,
    error_reason_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
    write_service_pb2,
)


def _file_descriptors() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The descriptors protoc compiled into the committed code (kept fresh by
    tests/test_generated_code.py), by file name."""
    found: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for module in MODULES:
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        found[proto.name] = proto
    return found


def test_every_proto_file_is_checked():
    """The generated modules cover every .proto file of the protocol (so none escapes)."""
    on_disk = {str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto")}
    assert on_disk == set(_file_descriptors()) == set(JAVA_OUTER_CLASSNAMES)


@pytest.mark.parametrize("name", sorted(JAVA_OUTER_CLASSNAMES))
def test_every_proto_file_declares_its_generated_code_location(name):
    """go_package, java_package (with java_multiple_files and an outer class name) and
    csharp_namespace are declared in every file, with the same values across the package."""
    options = _file_descriptors()[name].options
    assert options.HasField("go_package")
    assert options.go_package == GO_PACKAGE
    assert options.java_package == JAVA_PACKAGE
    assert options.HasField("java_multiple_files")
    assert options.java_multiple_files is True
    assert options.java_outer_classname == JAVA_OUTER_CLASSNAMES[name]
    assert options.csharp_namespace == CSHARP_NAMESPACE


def test_java_outer_class_names_do_not_collide_with_types():
    """protoc-gen-java renames an outer class that collides with a message, enum or service
    ("...OuterClass"); the declared names never do."""
    names: set[str] = set()
    for proto in _file_descriptors().values():
        names |= {m.name for m in proto.message_type}
        names |= {e.name for e in proto.enum_type}
        names |= {s.name for s in proto.service}
    assert not names & set(JAVA_OUTER_CLASSNAMES.values())


def _protoc_include() -> str:
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def _run_protoc(protoc: str, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    return subprocess.run(
        [
            protoc,
            f"-I{PROTO_ROOT}",
            f"-I{THIRD_PARTY_ROOT}",
            f"-I{_protoc_include()}",
            *flags,
            *protos,
        ],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _tool_missing(reason: str) -> NoReturn:
    """Skip where the code generators are not installed, except under
    CHECKPOINTD_REQUIRE_PROTOC=1 (CI installs them), where that is a failure."""
    if os.environ.get("CHECKPOINTD_REQUIRE_PROTOC") == "1":
        pytest.fail(f"protoc is required (CHECKPOINTD_REQUIRE_PROTOC=1) but {reason}")
    pytest.skip(reason)


def test_protoc_gen_go_generates_without_import_mappings(tmp_path):
    """protoc-gen-go (Debian: protoc-gen-go) generates one Go package from the files alone,
    at the declared import path. Skipped where protoc or the plugin is not installed; the
    descriptor tests above hold everywhere."""
    protoc, plugin = shutil.which("protoc"), shutil.which("protoc-gen-go")
    if protoc is None or plugin is None:
        _tool_missing("protoc and protoc-gen-go are not installed here")
    result = _run_protoc(protoc, tmp_path, f"--plugin=protoc-gen-go={plugin}", "--go_out=.")
    assert result.returncode == 0, result.stderr
    generated = sorted((tmp_path / GO_IMPORT_PATH).glob("*.pb.go"))
    assert [p.name for p in generated] == [
        "checkpoint.pb.go",
        "checkpoint_service.pb.go",
        "error_reason.pb.go",
        "graph_service.pb.go",
        "idempotency_service.pb.go",
        "interrupt_service.pb.go",
        "replication_service.pb.go",
        "write_service.pb.go",
    ]
    for path in generated:
        assert "\npackage checkpointdv1\n" in path.read_text()


def test_protoc_generates_java_and_csharp_where_declared(tmp_path):
    """protoc's built-in Java and C# generators put the code where the options say."""
    protoc = shutil.which("protoc")
    if protoc is None:
        _tool_missing("protoc is not installed here")
    (tmp_path / "java").mkdir()
    (tmp_path / "cs").mkdir()
    result = _run_protoc(protoc, tmp_path, "--java_out=java", "--csharp_out=cs")
    assert result.returncode == 0, result.stderr
    java = tmp_path / "java" / JAVA_PACKAGE.replace(".", "/")
    # One file per message (java_multiple_files), and the declared outer classes.
    assert (java / "Checkpoint.java").is_file()
    assert (java / "WatchInterruptsRequest.java").is_file()
    for outer in JAVA_OUTER_CLASSNAMES.values():
        assert (java / f"{outer}.java").is_file()
    assert not list(java.glob("*OuterClass.java"))
    for path in (tmp_path / "cs").glob("*.cs"):
        assert f"\nnamespace {CSHARP_NAMESPACE} {{" in path.read_text()
    assert len(list((tmp_path / "cs").glob("*.cs"))) == len(JAVA_OUTER_CLASSNAMES)
