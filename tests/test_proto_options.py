"""Every .proto file says where generated code lives in Go, Java and C#, and the guide's
command lines generate it.

Without ``go_package``, ``protoc-gen-go`` refuses to generate at all unless the caller maps
every file on the command line. These options are pinned here rather than by ``buf
breaking`` (whose v1 image predates them; see buf.yaml), so changing one, which would move
generated code for every user of that language, fails this test.

docs/protocol.md's "Command lines" are run here as written (protoc for Go, Java and C#,
grpc_tools.protoc, buf generate, @grpc/proto-loader), so a reader who copies them gets code
for every file: they once left out ``-I third_party/proto`` and failed on
``google/rpc/status.proto``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
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


# The guide's command lines (docs/protocol.md, "Command lines"): each is a fenced block after
# a "<!-- codegen: NAME -->" marker, run here as written in a copy of the files it reads.
GUIDE = ROOT / "docs" / "protocol.md"
_GUIDE_BLOCK = re.compile(r"<!-- codegen: (\w+) -->\n```(\w+)\n(.*?)\n```\n", re.DOTALL)
GUIDE_TOOLCHAINS = {
    "go": "sh",
    "java": "sh",
    "csharp": "sh",
    "python": "sh",
    "buf": "sh",
    "node": "js",
}
PROTO_STEMS = sorted(Path(name).stem for name in JAVA_OUTER_CLASSNAMES)
SERVICE_STEMS = [stem for stem in PROTO_STEMS if stem.endswith("_service")]
NODE_CLIENT = ROOT / "clients" / "node"


def _guide_blocks() -> dict[str, tuple[str, str]]:
    """The marked blocks of the guide, by toolchain: (language of the fence, text)."""
    found: dict[str, tuple[str, str]] = {}
    for name, language, text in _GUIDE_BLOCK.findall(GUIDE.read_text()):
        assert name not in found, f"two blocks marked codegen: {name}"
        found[name] = (language, text)
    return found


def test_the_guide_has_a_command_line_for_every_toolchain():
    """docs/protocol.md marks one runnable block per toolchain it documents."""
    blocks = _guide_blocks()
    assert {name: language for name, (language, _) in blocks.items()} == GUIDE_TOOLCHAINS


def _checkout(tmp_path: Path) -> Path:
    """What the guide's command lines read from the root of a checkout, copied, so that they
    run as written without writing into this one."""
    root = tmp_path / "checkout"
    root.mkdir()
    for folder in ("proto", "third_party"):
        shutil.copytree(ROOT / folder, root / folder)
    shutil.copy(ROOT / "buf.yaml", root / "buf.yaml")
    return root


def _run_guide_block(name: str, tmp_path: Path) -> Path:
    """Run the guide's shell block for ``name`` with bash in a fresh checkout (the venv's
    ``python`` and ``buf`` first on the PATH); return the checkout."""
    root = _checkout(tmp_path)
    language, text = _guide_blocks()[name]
    assert language == "sh"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"the guide's {name} lines failed:\n{text}\n{result.stderr}"
    return root


def _need(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None and not (Path(sys.executable).parent / tool).exists():
            _tool_missing(f"{tool} is not installed here")


def _names(folder: Path, pattern: str) -> list[str]:
    return sorted(p.name for p in folder.glob(pattern))


def _assert_go(root: Path) -> None:
    go = root / GO_IMPORT_PATH.removeprefix("github.com/checkpointd/checkpointd/")
    assert _names(go, "*.pb.go") == sorted(
        [f"{stem}.pb.go" for stem in PROTO_STEMS] + [f"{s}_grpc.pb.go" for s in SERVICE_STEMS]
    )
    for path in go.glob("*.go"):
        assert "\npackage checkpointdv1\n" in path.read_text()
    # google.rpc.Status is imported from genproto, never generated alongside.
    write = (go / "write_service.pb.go").read_text()
    assert '"google.golang.org/genproto/googleapis/rpc/status"' in write
    assert not list(root.rglob("status.pb.go"))


def _assert_java(root: Path) -> None:
    java = root / "gen" / "java"
    package = java / JAVA_PACKAGE.replace(".", "/")
    for outer in JAVA_OUTER_CLASSNAMES.values():
        assert (package / f"{outer}.java").is_file()
    assert "com.google.rpc.Status" in (package / "WriteResponse.java").read_text()
    assert [p.name for p in java.iterdir()] == ["io"]  # com/google/rpc is not generated


def _assert_csharp(root: Path) -> None:
    cs = root / "gen" / "csharp"
    expected = ["".join(part.title() for part in stem.split("_")) + ".cs" for stem in PROTO_STEMS]
    assert _names(cs, "*.cs") == sorted(expected)
    for path in cs.glob("*.cs"):
        assert f"\nnamespace {CSHARP_NAMESPACE} {{" in path.read_text()
    assert "global::Google.Rpc.Status" in (cs / "WriteService.cs").read_text()


def test_the_guides_go_command_line_generates_every_file(tmp_path):
    """The guide's protoc line for Go (protoc-gen-go and protoc-gen-go-grpc; Debian packages
    both) writes one package with every file and the stubs of the five services, and takes
    google.rpc.Status from genproto."""
    _need("protoc", "protoc-gen-go", "protoc-gen-go-grpc")
    _assert_go(_run_guide_block("go", tmp_path))


def test_the_guides_java_command_line_generates_every_file(tmp_path):
    """The guide's protoc line for Java writes every declared outer class, and refers to
    com.google.rpc.Status without generating it."""
    _need("protoc")
    _assert_java(_run_guide_block("java", tmp_path))


def test_the_guides_csharp_command_line_generates_every_file(tmp_path):
    """The guide's protoc line for C# writes one file per proto file in Checkpointd.V1, and
    refers to Google.Rpc.Status without generating it."""
    _need("protoc")
    _assert_csharp(_run_guide_block("csharp", tmp_path))


def test_the_guides_python_command_line_generates_every_file(tmp_path):
    """The guide's grpc_tools.protoc line writes modules, stubs and gRPC code for every file,
    importing google.rpc.status_pb2 (googleapis-common-protos) rather than generating it."""
    root = _run_guide_block("python", tmp_path)
    python = root / "gen" / "python"
    package = python / "checkpointd" / "v1"
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        assert _names(package, f"*{suffix}") == [f"{stem}{suffix}" for stem in PROTO_STEMS]
    assert "from google.rpc import status_pb2" in (package / "write_service_pb2.py").read_text()
    assert [p.name for p in python.iterdir()] == ["checkpointd"]


def test_the_guides_buf_template_generates_every_file(tmp_path):
    """The guide's buf.gen.yaml and buf generate line (buf.yaml's two modules) write the same
    Go, Java and C# code as the protoc lines, without generating google/rpc/status.proto."""
    _need("protoc", "protoc-gen-go", "protoc-gen-go-grpc", "buf")
    root = _run_guide_block("buf", tmp_path)
    _assert_go(root)
    _assert_java(root)
    _assert_csharp(root)


def test_the_guides_node_loader_loads_every_service(tmp_path):
    """The guide's @grpc/proto-loader snippet loads all six services (WriteService through
    third_party/proto's google/rpc/status.proto) and the ErrorReason enum."""
    node = shutil.which("node")
    if node is None or not (NODE_CLIENT / "node_modules" / "@grpc" / "proto-loader").is_dir():
        if os.environ.get("CHECKPOINTD_REQUIRE_NODE") == "1":
            pytest.fail("Node.js and the Node client's packages (npm ci) are required")
        pytest.skip("node or the Node client's packages are not installed here")
    root = _checkout(tmp_path)
    _, text = _guide_blocks()["node"]
    script = root / "load.js"
    script.write_text(
        text + "\nconsole.log(JSON.stringify(Object.keys(v1).filter((k) => /Service$|^ErrorReason$/"
        ".test(k)).sort()));\nwrites.close();\n"
    )
    env = {**os.environ, "NODE_PATH": str(NODE_CLIENT / "node_modules")}
    result = subprocess.run(
        [node, str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "CheckpointService",
        "ErrorReason",
        "GraphService",
        "IdempotencyService",
        "InterruptService",
        "ReplicationService",
        "WriteService",
    ]
