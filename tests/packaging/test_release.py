"""What a user installs is what a release claims: one version, a license, metadata, and
extras that bring what they import.

Both distributions are built as a release builds them (``python -m build``: the sdist, then the
wheel from the sdist, so the sdist is whole) and checked as PyPI checks them (``twine check
--strict``). The client's wheel is installed into empty virtualenvs, alone and with its
``langgraph`` extra, and imported there with warnings as errors. (The npm package's tarball,
LICENSE included, is tests/polyglot/test_node_package.py's.)
"""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest

from tests.support.shared import built_once

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
try:
    import release
finally:
    sys.path.pop(0)

BUILD_TIMEOUT_S = 300
#: The dev lock's versions: an empty virtualenv resolves the client's extra among them, so the
#: test is about what the extra declares, not about what PyPI serves today.
DEV_LOCK = ROOT / "requirements" / "dev.txt"
UV = Path(sys.executable).parent / "uv"
# A link in a long description that PyPI could not resolve: neither absolute nor an anchor.
_RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)[^)]*\)|src=\"(?!https?://)")


def test_every_copy_of_the_version_is_the_sources():
    """The server package, its pin of the client, the npm package and its lock, the image's
    label, the manifests and the docs all say the version the client's _version.py says, and
    CHANGELOG.md has a section for it."""
    assert release.differences(release.version()) == []


def test_the_release_check_names_a_copy_that_differs(tmp_path):
    """The check can fail: a copy left at another version is named, and ``set`` then writes
    the version everywhere, after which nothing differs."""
    for path in [release.SOURCE.relative_to(ROOT), Path("CHANGELOG.md")] + [
        Path(copy.path) for copy in release.COPIES
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, tmp_path / path)
    chart = tmp_path / "deploy" / "kubernetes" / "sqlite" / "deployment.yaml"
    chart.write_text(
        chart.read_text().replace(f"checkpointd:{release.version()}", "checkpointd:9.9.9")
    )
    assert release.differences(release.version(), tmp_path) == [
        f"deploy/kubernetes/sqlite/deployment.yaml: says 9.9.9, not {release.version()}"
    ]
    release.set_version("0.9.0", tmp_path)
    assert release.version(tmp_path) == "0.9.0"
    assert release.differences("0.9.0", tmp_path) == ["CHANGELOG.md: no '## [0.9.0]' section"]
    with pytest.raises(SystemExit, match="not a release version"):
        release.set_version("0.9", tmp_path)


def _build(project: Path, out: Path) -> None:
    """``python -m build`` without isolation: the build backend is the locked one in this
    environment (requirements/build.txt), not whatever PyPI serves at build time."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdists and wheels of both distributions, built once per test run from copies of
    the tree (a build writes egg-info and build/ next to the sources)."""

    def build(out: Path) -> None:
        source = out / "source"
        shutil.copytree(
            ROOT,
            source,
            ignore=shutil.ignore_patterns(
                ".git", ".venv*", "node_modules", "*.egg-info", "build", "__pycache__", "tests"
            ),
        )
        _build(source / "pyclient", out / "dist")
        _build(source, out / "dist")
        shutil.rmtree(source)

    return built_once(tmp_path_factory, "release-dists", build) / "dist"


def _one(dist: Path, pattern: str) -> Path:
    [found] = sorted(dist.glob(pattern))
    return found


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_both_distributions_pass_twine_check(dists: Path):
    """Two sdists and two wheels of the source's version, which PyPI would take."""
    version = release.version()
    names = sorted(p.name for p in dists.iterdir())
    assert names == sorted(
        [
            f"checkpointd-{version}.tar.gz",
            f"checkpointd-{version}-py3-none-any.whl",
            f"checkpointd_client-{version}.tar.gz",
            f"checkpointd_client-{version}-py3-none-any.whl",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(map(str, dists.iterdir()))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["checkpointd", "checkpointd_client"])
def test_each_wheel_carries_the_license_and_full_metadata(dists: Path, name: str):
    """The Apache-2.0 text in the wheel; a summary, a Markdown long description whose links
    all resolve on PyPI (absolute), the project's URLs, classifiers and Python floor."""
    wheel = _one(dists, f"{name}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if "/licenses/" in n]
        assert [n.rsplit("/", 1)[1] for n in licenses] == ["LICENSE"]
        assert archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    assert len(meta["Summary"]) > 40
    assert meta["Description-Content-Type"] == "text/markdown"
    description = meta.get_payload()
    assert isinstance(description, str)
    assert len(description) > 500
    assert _RELATIVE_LINK.findall(description) == []
    urls = dict(url.split(", ", 1) for url in meta.get_all("Project-URL", []))
    assert {"Homepage", "Repository", "Changelog", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    classifiers = meta.get_all("Classifier", [])
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers


def test_the_license_copies_are_the_license():
    """The client's and the npm package's LICENSE are the repository's, byte for byte."""
    text = (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in text
    assert b"Version 2.0, January 2004" in text
    assert (ROOT / "pyclient" / "LICENSE").read_bytes() == text
    assert (ROOT / "clients" / "node" / "LICENSE").read_bytes() == text


def test_the_long_descriptions_link_nothing_relative():
    """The check above can fail: the repository's README, full of relative links, would."""
    assert _RELATIVE_LINK.findall((ROOT / "README.md").read_text())


def _fresh_venv(path: Path, *requirements: str) -> Path:
    """An empty virtualenv with ``requirements`` installed by uv, pinned to the dev lock's
    versions (``--constraint``: only what is asked for is installed)."""
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(path)], check=True)
    python = path / "bin" / "python"
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            "--constraint",
            str(DEV_LOCK),
            *requirements,
        ],
        check=True,
        timeout=BUILD_TIMEOUT_S,
        env={k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")},
    )
    return python


def _installed(python: Path) -> set[str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listing.returncode != 0:  # uv's virtualenvs have no pip: ask importlib instead
        listing = subprocess.run(
            [
                str(python),
                "-c",
                "import importlib.metadata as m, json;"
                "print(json.dumps([{'name': d.metadata['Name']} for d in m.distributions()]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    return {entry["name"].lower().replace("_", "-") for entry in json.loads(listing.stdout)}


def test_the_bare_client_wheel_needs_only_grpcio_and_protobuf(dists: Path, tmp_path):
    """``pip install checkpointd-client`` in an empty virtualenv: grpcio and protobuf come
    with it, nothing else, and the client and its protocol package import with warnings as
    errors (no googleapis-common-protos: its ``google.rpc.status`` is the vendored copy)."""
    python = _fresh_venv(tmp_path / "bare", str(_one(dists, "checkpointd_client-*.whl")))
    assert _installed(python) == {"checkpointd-client", "grpcio", "protobuf", "typing-extensions"}
    script = (
        "import checkpointd_client, checkpointd_client.v1.write_service_pb2_grpc;"
        "from checkpointd_client import CheckpointdClient;"
        "print(checkpointd_client.__version__)"
    )
    result = subprocess.run(
        [str(python), "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == release.version()


def test_the_langgraph_extra_brings_what_the_savers_import(dists: Path, tmp_path):
    """``pip install 'checkpointd-client[langgraph]'`` in an empty virtualenv imports the
    savers and the resume worker: the extra brings langgraph itself, not only its
    checkpoint package."""
    wheel = _one(dists, "checkpointd_client-*.whl")
    python = _fresh_venv(
        tmp_path / "langgraph", f"checkpointd-client[langgraph] @ {wheel.as_uri()}"
    )
    assert {"langgraph", "langgraph-checkpoint"} <= _installed(python)
    assert "fastaiagent" not in _installed(python)
    script = (
        "from checkpointd_client.langgraph import "
        "AsyncCheckpointdSaver, CheckpointdSaver, GraphResumeWorker"
    )
    subprocess.run([str(python), "-W", "error", "-c", script], check=True, timeout=60)
