"""Fixtures of the contract suite: a client per test on a running server of each backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from checkpointd_client import CheckpointdClient, RetryPolicy
from tests.conftest import BACKENDS, PGBOUNCER_BACKEND
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

# Retries would hide the status a test is looking for; the suite asserts statuses directly.
NO_RETRY = RetryPolicy(max_attempts=1)


#: Both ways a client sends its writes, for the suites that prove their rules on each (S1).
WRITE_PATHS = [pytest.param("stream", id="stream"), pytest.param("unary", id="unary")]


#: Whether this is the full-size run (``CHECKPOINTD_RELIABILITY=full``, ``make test-reliability``).
FULL = os.environ.get("CHECKPOINTD_RELIABILITY", "reduced").strip().lower() == "full"

#: Suites that fill the server with tens of megabytes to read its memory from /proc: behind
#: PgBouncer they run at full size only (``make test-reliability`` runs them), as the pooler
#: sees the same store calls as on Postgres directly, where ``make test`` runs them.
POOLER_AT_FULL_SIZE = ("tests/contract/test_bounds.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The unary write path runs on SQLite and Postgres; behind PgBouncer only the client's
    default, the stream, runs (the pooler sees the same store calls either way), which keeps
    the second path from adding a third of its time to the suite. The memory suites run
    behind PgBouncer at full size only (POOLER_AT_FULL_SIZE)."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        behind_pooler = params.get("backend") == "pgbouncer"
        unary_behind_pooler = behind_pooler and params.get("write_path") == "unary"
        heavy_behind_pooler = (
            behind_pooler and not FULL and item.nodeid.startswith(POOLER_AT_FULL_SIZE)
        )
        (dropped if unary_behind_pooler or heavy_behind_pooler else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def write_path() -> str:
    """How the client sends put_checkpoint, put_idempotent, record_interrupt and
    claim_interrupt: over the Write stream, the client's default. The suites of those calls
    override this fixture with :data:`WRITE_PATHS`, so every rule there holds on both."""
    return "stream"


@pytest.fixture
def client(sidecar: Sidecar | SharedSidecar, write_path: str) -> Iterator[CheckpointdClient]:
    """A sync client on the server's Unix socket, in the test's namespace."""
    with CheckpointdClient(
        sidecar.target,
        namespace=sidecar.namespace,
        retry=NO_RETRY,
        write_stream=write_path == "stream",
    ) as c:
        yield c


@pytest.fixture
def execution_id() -> str:
    """A fresh execution id."""
    return f"exec-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=[*BACKENDS, PGBOUNCER_BACKEND])
def backend(request: pytest.FixtureRequest) -> str:
    """The contract holds on every backend, and on Postgres behind a transaction-pooling
    PgBouncer too (the way many pods share one database)."""
    return str(request.param)
