"""LangGraph's own tests, with checkpointd's savers as their checkpointers (G17, G11).

The langgraph sdist ships the tests of its runtime; the files that take the
``sync_checkpointer`` / ``async_checkpointer`` fixtures (pregel, time travel, subgraph
persistence, interrupts, strict resume, delta channels, ...) run here unmodified, in a pytest
process of their own, with ``langgraph_standin`` replacing those fixtures by
``CheckpointdSaver`` and ``AsyncCheckpointdSaver`` on a real server (each test in a namespace
of its own). Every test that passes on LangGraph's ``InMemorySaver`` must pass here.

The sdist is that of the installed langgraph, from ``$CHECKPOINTD_LANGGRAPH_SDIST`` or fetched
once per session with ``pip download`` (which installs nothing); its ``langgraph/`` sources
are left out, so the installed package runs. Without network and without that variable the
tests skip, unless ``CHECKPOINTD_REQUIRE_PEER=1`` makes that a failure. ``make test-system`` runs a
few of the files on SQLite; ``make test-reliability`` (``CHECKPOINTD_RELIABILITY=full``) runs
all of them on every backend. LangGraph is MIT licensed.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.support.shared import built_once
from tests.support.sidecar import Sidecar

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "langgraph_standin.py"
FULL = os.environ.get("CHECKPOINTD_RELIABILITY", "reduced").strip().lower() == "full"
#: The files ``make test-system`` runs (interrupts, resumes, time travel); the full run takes every
#: file whose tests take a checkpointer.
REDUCED_FILES = (
    "tests/test_interrupt_state.py",
    "tests/test_strict_resume.py",
    "tests/test_time_travel.py",
)
SUITE_TIMEOUT_S = 1800 if FULL else 400
#: Appended to the sdist's tests/conftest.py: later definitions of the two fixtures win.
#: Without $CHECKPOINTD_TARGET the suite keeps LangGraph's own (InMemorySaver is "memory").
_CONFTEST_TAIL = """

# checkpointd: its savers replace LangGraph's own as the suite's checkpointers.
import importlib.util as _checkpointd_util  # noqa: E402
import os as _checkpointd_os  # noqa: E402

if _checkpointd_os.environ.get("CHECKPOINTD_TARGET"):
    _checkpointd_spec = _checkpointd_util.spec_from_file_location(
        "checkpointd_langgraph_standin", {standin!r}
    )
    _checkpointd_standin = _checkpointd_util.module_from_spec(_checkpointd_spec)
    _checkpointd_spec.loader.exec_module(_checkpointd_standin)
    sync_checkpointer = _checkpointd_standin.sync_checkpointer  # noqa: F811
    async_checkpointer = _checkpointd_standin.async_checkpointer  # noqa: F811
"""


def _fetch(directory: Path, version: str) -> Path:
    given = os.environ.get("CHECKPOINTD_LANGGRAPH_SDIST", "")
    if given:
        return Path(given)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"langgraph=={version}",
            "--dest",
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        message = f"cannot fetch the langgraph {version} sdist: {done.stderr.strip()[-500:]}"
        if os.environ.get("CHECKPOINTD_REQUIRE_PEER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    [sdist] = directory.glob("langgraph-*.tar.gz")
    return sdist


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist's project folder: its tests with the stand-in fixtures, without its sources."""
    version = importlib.metadata.version("langgraph")

    def build(tmp: Path) -> None:
        sdist = _fetch(tmp, version)
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp, filter="data")
        project = tmp / f"langgraph-{version}"
        shutil.rmtree(project / "langgraph")  # the installed langgraph runs, not a copy
        conftest = project / "tests" / "conftest.py"
        conftest.write_text(conftest.read_text() + _CONFTEST_TAIL.format(standin=str(STANDIN)))

    return (
        built_once(tmp_path_factory, f"langgraph-{version}-suite", build) / f"langgraph-{version}"
    )


def _files(project: Path) -> list[str]:
    """The test files whose tests take a checkpointer (the suite's own fixtures)."""
    found = sorted(
        str(path.relative_to(project))
        for path in (project / "tests").glob("test_*.py")
        if "sync_checkpointer" in path.read_text() or "async_checkpointer" in path.read_text()
    )
    assert len(found) >= 15, found
    return found


@pytest.fixture(params=BACKENDS if FULL else ["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
def test_g17_langgraphs_own_suite_passes_on_the_savers(
    suite: Path, sidecar_factory: Callable[..., Sidecar], tmp_path: Path
) -> None:
    """LangGraph's tests that take a checkpointer, on checkpointd's savers: every one that
    passes on LangGraph's InMemorySaver passes here (the suite itself skips a few, on every
    saver)."""
    files = _files(suite) if FULL else list(REDUCED_FILES)
    server = sidecar_factory()
    report = tmp_path / "junit.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "3" if FULL else "2",
            "-k",
            "checkpointd",
            f"--junitxml={report}",
            *files,
        ],
        cwd=suite,
        env={**os.environ, "CHECKPOINTD_TARGET": server.target, "NO_DOCKER": "true"},
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        check=False,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {
        key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors")
    }
    failed = [
        f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        for s in suites
        for case in s.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    # The bar is LangGraph's own saver: a test that fails on InMemorySaver too (the suite
    # against this environment's langchain-core, say) says nothing about these savers.
    failing_on_memory = _failing_on_in_memory_saver(suite, failed)
    assert [test for test in failed if test not in failing_on_memory] == [], done.stdout[-3000:]
    assert counts["tests"] >= (600 if FULL else 80), counts


def _failing_on_in_memory_saver(suite: Path, failed: list[str]) -> set[str]:
    """Which of ``failed`` (checkpointd-parametrized ids) also fail with the suite's own
    InMemorySaver, run with LangGraph's fixtures (no $CHECKPOINTD_TARGET)."""
    if not failed:
        return set()
    # Both ids of a test (checkpointd, checkpointd_pipeline, on either saver) are its one
    # memory id.
    as_memory = {test: re.sub(r"\[checkpointd(_pipeline)?", "[memory", test) for test in failed}
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINTD_TARGET"}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE"),
            *sorted(set(as_memory.values())),
        ],
        cwd=suite,
        env={**env, "NO_DOCKER": "true"},
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        check=False,
    )
    assert "no tests ran" not in done.stdout, done.stdout[-3000:]
    return {
        original
        for original, memory in as_memory.items()
        if f"FAILED {memory}" in done.stdout or f"ERROR {memory}" in done.stdout
    }
