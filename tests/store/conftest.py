"""The store every backend-parametrized store test gets (a module may define its own)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.sidecar import StoreSpec
from tests.support.stores import open_store


@pytest.fixture
async def store(store_spec: StoreSpec) -> AsyncIterator[SQLiteStore | PostgresStore]:
    """An open store of each backend, on a fresh database."""
    opened = open_store(store_spec)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
