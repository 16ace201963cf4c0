"""Fixtures of the graph suite: every backend, and Postgres behind PgBouncer too."""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS, PGBOUNCER_BACKEND


@pytest.fixture(params=[*BACKENDS, PGBOUNCER_BACKEND])
def backend(request: pytest.FixtureRequest) -> str:
    """The graph store holds on every backend, and on Postgres behind a transaction-pooling
    PgBouncer (no session state, no named statements across transactions)."""
    return str(request.param)
