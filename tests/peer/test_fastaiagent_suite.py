"""fastaiagent's own tests, with checkpointd standing in for its checkpointers (P2, P5).

fastaiagent 1.94.0's sdist ships the tests of its checkpointers and of its platform
replication: the outbox and its poison-row quarantine, the checkpoint export flag, the
run-end marker and its replication, restore from the plane, forks, resumes, idempotency.
Here they run unmodified, in a pytest process of their own, with ``fastaiagent_standin``
replacing ``SQLiteCheckpointer`` by ``SidecarCheckpointer`` on a real server of each backend
(see that module for how a test's SQL inspection of a store is answered).

The sdist is not vendored: it comes from ``$CHECKPOINTD_FASTAIAGENT_SDIST`` (a path to
``fastaiagent-1.94.0.tar.gz``) or is fetched once per session with ``pip download`` (which
installs nothing). Without network and without that variable the tests skip, unless
``CHECKPOINTD_REQUIRE_PEER=1`` makes that a failure. fastaiagent is Apache-2.0 licensed.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.shared import built_once
from tests.support.sidecar import Sidecar, StoreSpec

pytestmark = pytest.mark.own_server

FASTAIAGENT_VERSION = "1.94.0"
HERE = Path(__file__).resolve().parent
#: Whether this is the full-size run, as for the fault suites.
FULL = os.environ.get("CHECKPOINTD_RELIABILITY", "reduced").strip().lower() == "full"
ROOT = HERE.parent.parent

#: fastaiagent's tests of the replication outbox (and its poison-row quarantine), the export
#: flag, the run-end replication round trip, restore from the plane and the wire mapping.
REPLICATION_FILES: tuple[str, ...] = (
    "tests/test_checkpoint_quarantine.py",
    "tests/test_checkpoint_export_flag.py",
    "tests/test_run_end_checkpoint.py",
    "tests/test_restore_if_missing.py",
    "tests/test_wire_topology.py",
    "tests/test_wire_agent_identity.py",
)
#: How many test cases those files hold (parametrized cases counted); all must pass.
REPLICATION_CASES = 71
#: Test files of fastaiagent's about its SQLite file itself, left out, with why.
EXCLUDED_FILES: dict[str, str] = {
    "tests/test_checkpoint_migration.py": "migrates the schema of an old local.db file",
}
#: Tests of fastaiagent's that need something only its own SQLite file gives, with why.
DESELECTED: dict[str, str] = {
    "tests/test_env_path_expansion.py::"
    "test_a_tilde_path_resolves_to_the_same_store_from_two_directories": (
        "asserts that the database file exists at the expanded path"
    ),
    "tests/test_chain_multimodal_state.py::test_checkpoint_persists_pdf_bytes_to_sqlite_and_back": (
        "needs fastaiagent's optional PDF engine; fails the same with its own checkpointer"
    ),
    "tests/test_checkpointer_protocol.py::TestProtocolConformance::"
    "test_list_pending_interrupts_reads_inserts": "seeds rows with SQL INSERTs into the file",
    "tests/test_checkpointer_protocol.py::TestProtocolConformance::"
    "test_prune_drops_old_checkpoints_and_idempotency_rows": "backdates rows with SQL UPDATE",
    "tests/integration/test_postgres_checkpointer.py::TestProtocolConformance::"
    "test_prune_drops_completed_and_idempotency_rows": "backdates rows with SQL UPDATE",
    "tests/test_fork_run_end.py::test_chain_fork_that_dies_writes_exactly_one_failed_marker": (
        "reads the store with sqlite3.connect(store.db_path)"
    ),
    "tests/test_fork_run_end.py::test_agent_fork_that_dies_writes_exactly_one_failed_marker": (
        "reads the store with sqlite3.connect(store.db_path)"
    ),
    "tests/test_fork_run_end.py::test_agent_fork_marks_the_branch_without_an_agent_checkpointer": (
        "reads the store with sqlite3.connect(store.db_path)"
    ),
    "tests/test_resume_crash_then_pause.py::"
    "test_a_pause_during_crash_recovery_is_recorded_and_resumable": (
        "a child process writes with fastaiagent's own SQLiteCheckpointer (no stand-in there)"
    ),
    "tests/test_resume_crash_then_pause.py::test_a_second_crash_resume_does_not_re_pause": (
        "a child process writes with fastaiagent's own SQLiteCheckpointer (no stand-in there)"
    ),
    # A real difference: fastaiagent's trace export reads the run's checkpoints from the
    # same local.db as its traces, so a trace of a run checkpointed elsewhere is not marked
    # durable and carries no checkpoints.
    "tests/test_resume_run_span_sweep.py::"
    "test_an_execution_id_alone_does_not_make_an_export_durable": (
        "trace export joins checkpoints from local.db"
    ),
}
#: At least this many of its other tests that build a SQLiteCheckpointer (its durability
#: tests: checkpointer protocol, chains, agents, swarms, supervisors, forks, resumes,
#: idempotency, the CLI) must pass in each shard (see DURABILITY_SHARDS); the rest skip for
#: want of API keys or a platform.
DURABILITY_MIN_PASSED: tuple[int, ...] = (168, 115, 232, 135)  # 169, 116, 233, 136 pass


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CHECKPOINTD_REQUIRE_PEER"):
        pytest.fail(reason)
    pytest.skip(reason)


def _unpack_sdist(dest: Path) -> None:
    """Put fastaiagent 1.94.0's ``tests/`` (only that: its source tree must not shadow the
    installed package) in ``dest``, downloading the sdist unless one is named."""
    sdist = os.environ.get("CHECKPOINTD_FASTAIAGENT_SDIST")
    if not sdist:
        download = dest / "sdist"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"fastaiagent=={FASTAIAGENT_VERSION}",
                "-d",
                str(download),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = sorted(download.glob("fastaiagent-*.tar.gz"))
        if result.returncode != 0 or not found:
            _skip_or_fail(f"cannot download fastaiagent's sdist: {result.stderr[-500:]}")
        sdist = str(found[0])
    prefix = f"fastaiagent-{FASTAIAGENT_VERSION}/"
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            if member.name.startswith(prefix + "tests/") and (member.isfile() or member.isdir()):
                member.name = member.name.removeprefix(prefix)
                members.append(member)
        archive.extractall(dest, members=members, filter="data")


@pytest.fixture(scope="session")
def fastaiagent_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding fastaiagent 1.94.0's ``tests/``, downloaded and unpacked once per run
    (shared by the pytest-xdist workers)."""
    installed = importlib.metadata.version("fastaiagent")
    if installed != FASTAIAGENT_VERSION:
        _skip_or_fail(f"these tests are fastaiagent {FASTAIAGENT_VERSION}'s; {installed} found")
    return built_once(tmp_path_factory, "fastaiagent-tests", _unpack_sdist)


def durability_files(root: Path) -> list[str]:
    """Every test file of fastaiagent's that builds a SQLiteCheckpointer, but the
    replication ones (run on their own)."""
    return sorted(
        str(path.relative_to(root))
        for path in (root / "tests").rglob("test_*.py")
        if "SQLiteCheckpointer" in path.read_text(encoding="utf-8")
        and str(path.relative_to(root)) not in REPLICATION_FILES
        and str(path.relative_to(root)) not in EXCLUDED_FILES
    )


def run_suite(root: Path, sidecar: Sidecar, files: list[str]) -> tuple[int, dict[str, int], str]:
    """Run fastaiagent's ``files`` with the stand-in on ``sidecar``; the exit code, the
    counts of the summary line, and the output."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "server"), str(ROOT / "pyclient")]),
        "CHECKPOINTD_PEER_TARGET": sidecar.target,
        "CHECKPOINTD_PEER_BACKEND": sidecar.backend,
        "CHECKPOINTD_PEER_STORE_URL": sidecar.store.url,
        "CHECKPOINTD_PEER_PG_SCHEMA": sidecar.store.pg_schema,
    }
    result = subprocess.run(
        [
            sys.executable,
            "-P",  # the installed fastaiagent, not a source tree on the working directory
            "-m",
            "pytest",
            "-p",
            "fastaiagent_standin",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "-q",
            "-rfEs",
            f"--rootdir={root}",
            *(f"--deselect={node}" for node in DESELECTED),
            *files,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    output = result.stdout + result.stderr
    counts = {
        word: int(number)
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", output)
    }
    return result.returncode, counts, output


@pytest.fixture
def sqlite_unless_full_size(store_spec: StoreSpec) -> None:
    """Off full size fastaiagent's suites run on SQLite only: skip the other backends before
    their server starts (this fixture is named before ``sidecar``, so it is set up first)."""
    if store_spec.backend != "sqlite" and not FULL:
        pytest.skip("fastaiagent's own suites run on this backend at full size only")


@pytest.mark.timeout(600)
def test_p5_fastaiagent_replication_tests_pass_with_the_sidecar_as_its_checkpointer(
    sqlite_unless_full_size, sidecar, fastaiagent_tests
):
    """fastaiagent's outbox, quarantine, export-flag, run-end, restore and wire-mapping tests
    pass unmodified against its real drain and a loopback ingest stand-in, the sidecar holding
    every checkpoint. `make test-system` runs them on SQLite; the full size on every backend (the
    replication outbox's own contract suite, tests/contract/test_replication.py, runs on
    every backend in both)."""
    code, counts, output = run_suite(fastaiagent_tests, sidecar, list(REPLICATION_FILES))
    assert code == 0, output[-6000:]
    assert counts.get("failed", 0) == 0, output[-6000:]
    assert counts.get("passed", 0) == REPLICATION_CASES, output[-6000:]


#: The durability files run in this many pytest processes, each a test of its own, so that
#: pytest-xdist spreads them over its workers instead of one worker running them all.
DURABILITY_SHARDS = 4
#: The shard ``make test-system`` runs (on SQLite), to keep CI within minutes on two CPUs; the
#: full size (``make test-reliability``) runs every shard on every backend.
REDUCED_SHARD = 1


def shard_files(files: list[str], shard: int) -> list[str]:
    """The files of shard ``shard``: every DURABILITY_SHARDS-th of ``files`` (sorted, as
    durability_files gives them, so a shard is the same set on every run)."""
    return files[shard::DURABILITY_SHARDS]


@pytest.fixture
def shard(request: pytest.FixtureRequest) -> int:
    """The durability shard of the test; off full size, the other shards skip before their
    server starts (this fixture is named before ``sidecar``)."""
    number = int(request.param)
    if number != REDUCED_SHARD and not FULL:
        pytest.skip("this shard of fastaiagent's durability suite runs at full size only")
    return number


@pytest.mark.timeout(1200)  # about 170 tests of fastaiagent's, in a process of their own
@pytest.mark.parametrize("shard", range(DURABILITY_SHARDS), indirect=True)
def test_p2_fastaiagent_durability_tests_pass_with_the_sidecar_as_its_checkpointer(
    sqlite_unless_full_size, shard, sidecar, fastaiagent_tests
):
    """Every other test of fastaiagent's that builds a SQLiteCheckpointer passes unmodified
    with the sidecar in its place, but those that inspect or write its SQLite file directly
    (EXCLUDED_FILES, DESELECTED). About 650 tests, in DURABILITY_SHARDS shards: `make test-system`
    runs one of them (REDUCED_SHARD) on the embedded default (SQLite) to stay within minutes;
    the full size (``make test-reliability``, or ``CHECKPOINTD_RELIABILITY=full``) runs every
    shard on every backend."""
    files = shard_files(durability_files(fastaiagent_tests), shard)
    code, counts, output = run_suite(fastaiagent_tests, sidecar, files)
    assert code == 0, output[-6000:]
    assert counts.get("failed", 0) == 0, output[-6000:]
    assert counts.get("passed", 0) >= DURABILITY_MIN_PASSED[shard], output[-6000:]


def test_p2_the_shards_cover_every_durability_file_once(fastaiagent_tests):
    """The shards split the durability files: none left out, none run twice, and their
    minimums add up to the suite's."""
    files = durability_files(fastaiagent_tests)
    shards = [shard_files(files, shard) for shard in range(DURABILITY_SHARDS)]
    assert sorted(f for shard in shards for f in shard) == sorted(files)
    assert all(shards)
    assert sum(DURABILITY_MIN_PASSED) >= 650
