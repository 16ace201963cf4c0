"""Fixtures shared by every test: the Postgres the suite runs against, one schema per test.

Postgres tests take the server from ``CHECKPOINTD_TEST_PG_DSN``. When it is unset or
unreachable they are skipped, except under ``CHECKPOINTD_REQUIRE_PG=1`` (CI), where that is
a failure: a skipped Postgres test must never pass for a green run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.figures import FIGURES, record, render
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.shared_server import SharedServer, SharedSidecar
from tests.support.sidecar import Sidecar, StoreSpec

PG_DSN_ENV = "CHECKPOINTD_TEST_PG_DSN"
REQUIRE_PG_ENV = "CHECKPOINTD_REQUIRE_PG"


def _pg_unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_PG_ENV) == "1":
        pytest.fail(f"Postgres is required ({REQUIRE_PG_ENV}=1) but {reason}")
    pytest.skip(reason)


def run_sql(dsn: str, *statements: str) -> None:
    """Run statements in order on one short-lived connection (asyncpg, in its own event
    loop)."""
    import asyncio

    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of the test Postgres, checked reachable once per session."""
    dsn = os.environ.get(PG_DSN_ENV, "")
    if not dsn:
        _pg_unavailable(f"{PG_DSN_ENV} is not set")
    try:
        run_sql(dsn, "SELECT 1")
    except Exception as exc:  # any failure to connect means "not here"
        _pg_unavailable(f"cannot reach Postgres at {PG_DSN_ENV}: {type(exc).__name__}: {exc}")
    return dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name unique to this test, dropped (with everything in it) afterwards."""
    schema = f"cpt_{uuid.uuid4().hex[:16]}"
    yield schema
    run_sql(pg_dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# --- servers ---------------------------------------------------------------------------------

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


#: The Postgres store through a transaction-pooling PgBouncer, as a further backend of the
#: suites that opt in (the contract suite: tests/contract/conftest.py).
PGBOUNCER_BACKEND = pytest.param("pgbouncer", id="pgbouncer", marks=pytest.mark.postgres)


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    """One PgBouncer (``pool_mode = transaction``) in front of the test Postgres, per session.
    Missing pgbouncer skips, or fails under CHECKPOINTD_REQUIRE_PG=1 like a missing Postgres."""
    if find_pgbouncer() is None:
        _pg_unavailable("pgbouncer is not installed (apt-get install -y pgbouncer)")
    with PgBouncer(pg_dsn) as bouncer:
        yield bouncer


def make_store_spec(
    backend: str, request: pytest.FixtureRequest, directory: Path, schema: str = ""
) -> StoreSpec:
    """A fresh, empty store of ``backend``: an SQLite file in ``directory``, or a Postgres
    schema (``schema``, or the test's own, dropped after it), reached directly or through
    PgBouncer."""
    if backend == "sqlite":
        return StoreSpec("sqlite", f"sqlite://{directory / 'store.db'}")
    dsn = request.getfixturevalue("pg_dsn")
    schema = schema or request.getfixturevalue("pg_schema")
    if backend == "pgbouncer":
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        return StoreSpec(
            "pgbouncer",
            dsn,
            pg_schema=schema,
            server_url=bouncer.url(),
            # The recommended setup: watch notifications over one direct connection.
            server_args=("--pg-pooler", "transaction", "--pg-listen-dsn", dsn),
        )
    return StoreSpec("postgres", dsn, pg_schema=schema)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend a test runs on ("sqlite", "postgres"; a suite may add "pgbouncer")."""
    return str(request.param)


@pytest.fixture
def store_spec(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    """A fresh, empty store of each backend: an SQLite file, or a Postgres schema."""
    return make_store_spec(backend, request, tmp_path)


@pytest.fixture
def sidecar_factory(store_spec: StoreSpec) -> Iterator[Callable[..., Sidecar]]:
    """Start any number of servers on the same store (several replicas of one store)."""
    started: list[Sidecar] = []

    def start(*extra_args: str, **extra_env: str) -> Sidecar:
        server = Sidecar(store_spec, extra_args=list(extra_args), extra_env=dict(extra_env))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.close()


#: The Postgres pool of each shared server (a server's default is 10).
SHARED_PG_POOL_MAX = 4


@pytest.fixture(scope="session")
def shared_servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], SharedServer]]:
    """The servers the tests share (all but those marked ``own_server``): one per backend and
    pytest-xdist worker, started on first use, stopped (and their stores dropped) at the end of
    the session."""
    servers: dict[str, SharedServer] = {}

    def get(backend: str) -> SharedServer:
        if backend not in servers:
            directory = tmp_path_factory.mktemp(f"shared-{backend}")
            schema = f"cpt_{uuid.uuid4().hex[:16]}"
            spec = make_store_spec(backend, request, directory, schema)
            # A few connections each: the shared servers live all session, next to the
            # per-test servers of every worker, within Postgres's max_connections.
            pool = [] if backend == "sqlite" else ["--pg-pool-max", str(SHARED_PG_POOL_MAX)]
            servers[backend] = SharedServer(Sidecar(spec, extra_args=pool))
        return servers[backend]

    yield get
    for server in servers.values():
        server.close()
        if server.server.backend != "sqlite":
            run_sql(
                server.server.store.url,
                f'DROP SCHEMA IF EXISTS "{server.server.store.pg_schema}" CASCADE',
            )


@pytest.fixture
def sidecar(request: pytest.FixtureRequest, backend: str) -> Iterator[Sidecar | SharedSidecar]:
    """A running server per backend: by default a fresh namespace on the backend's shared
    server (tests/support/shared_server.py); in a test or module marked ``own_server`` (it
    needs a fresh store, its own settings, or a server to stop or kill) a fresh server on a
    fresh store."""
    if request.node.get_closest_marker("own_server") is not None:
        yield request.getfixturevalue("sidecar_factory")()
        return
    shared: SharedServer = request.getfixturevalue("shared_servers")(backend)
    view = shared.view()
    yield view
    strays = shared.check_namespaces(view)
    if strays:
        pytest.fail(
            f"the test wrote outside its namespace {view.namespace!r} on a shared server: "
            f"{strays} (give every client namespace=sidecar.namespace)"
        )


# --- the order tests are handed to pytest-xdist workers -----------------------------------------

#: Where the tests that take tens of seconds to minutes each live, longest first: fastaiagent's
#: own suites, the fault suites, the end-to-end flows, the benchmark smoke run, the Dockerfile
#: build.
SLOW_FIRST = (
    "tests/peer/test_fastaiagent_suite.py::test_p2_",
    "tests/peer/",
    "tests/reliability/",
    "tests/e2e/",
    "tests/test_bench_smoke.py",
    "tests/packaging/test_dockerfile.py",
)


def _slow_rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next(
        (rank for rank, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST)
    )


#: Tests that stage races against the clock (leases of 2 s, kill -9 under load, keepalive pings,
#: a retry budget across a restart, a browser's timeouts): under pytest-xdist they share one
#: worker, one at a time, so they never starve each other of the CPUs.
TIMING_SENSITIVE = (
    "tests/reliability/test_resume_workers.py",
    "tests/reliability/test_crash.py",
    "tests/console/test_page.py",
    "tests/console/test_page_states.py",
    "tests/contract/test_keepalive.py",
    "tests/contract/test_prune.py",
    "tests/contract/test_durability.py::test_p3_",
)

#: The resume-worker kill and stall runs (2 s leases, SIGKILL and SIGSTOP): a second group of
#: their own, one at a time, so the two groups together never run more than two such tests.
WORKER_FAULTS = (
    "tests/reliability/test_graph_resume_workers.py",
    "tests/reliability/test_stalled_workers.py",
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker, put the long tests first: the controller (``--dist
    loadgroup``) hands tests out in collection order, so each worker starts on a long one and
    none is left to start one as the rest finish. The timing-sensitive tests go in one group,
    the worker fault runs in another.
    A run in one process keeps the file order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    items.sort(key=_slow_rank)
    for item in items:
        if item.nodeid.startswith(TIMING_SENSITIVE):
            item.add_marker(pytest.mark.xdist_group("timing"))
        elif item.nodeid.startswith(WORKER_FAULTS):
            item.add_marker(pytest.mark.xdist_group("worker-faults"))


# --- the fault suites' figures (tests/reliability) ----------------------------------------------

#: Where a pytest-xdist worker hands its figures to the controller.
_FIGURES_KEY = "checkpointd_reliability_figures"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, pass the figures its tests recorded to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_FIGURES_KEY] = {suite: dict(figures) for suite, figures in FIGURES.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the pytest-xdist controller, add up each worker's figures as it finishes."""
    figures: dict[str, dict[str, int | str]] = node.workeroutput.get(_FIGURES_KEY, {})
    for suite, values in figures.items():
        record(suite, **values)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures of the fault suites that ran (and write them to a file if asked)."""
    if not FIGURES:
        return
    text = render()
    terminalreporter.section("reliability figures")
    terminalreporter.write(text)
    out = os.environ.get("CHECKPOINTD_RELIABILITY_FIGURES")
    if out:
        Path(out).write_text(text)
