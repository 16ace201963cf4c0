"""Fixtures of the contract suite: a client per test on a running server of each backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpointd_client import CheckpointdClient, RetryPolicy
from tests.conftest import BACKENDS, PGBOUNCER_BACKEND, make_store_spec
from tests.support.sidecar import Sidecar, StoreSpec

# Retries would hide the status a test is looking for; the suite asserts statuses directly.
NO_RETRY = RetryPolicy(max_attempts=1)


#: Both ways a client sends its writes, for the suites that prove their rules on each (S1).
WRITE_PATHS = [pytest.param("stream", id="stream"), pytest.param("unary", id="unary")]


@pytest.fixture
def write_path() -> str:
    """How the client sends put_checkpoint, put_idempotent, record_interrupt and
    claim_interrupt: over the Write stream, the client's default. The suites of those calls
    override this fixture with :data:`WRITE_PATHS`, so every rule there holds on both."""
    return "stream"


@pytest.fixture
def client(sidecar: Sidecar, write_path: str) -> Iterator[CheckpointdClient]:
    """A sync client on the server's Unix socket, in the default namespace."""
    with CheckpointdClient(
        sidecar.target, retry=NO_RETRY, write_stream=write_path == "stream"
    ) as c:
        yield c


@pytest.fixture
def execution_id() -> str:
    """A fresh execution id."""
    return f"exec-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=[*BACKENDS, PGBOUNCER_BACKEND])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    """The contract holds on every backend, and on Postgres behind a transaction-pooling
    PgBouncer too (the way many pods share one database)."""
    return make_store_spec(request.param, request, tmp_path)
