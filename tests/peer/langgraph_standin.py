"""checkpointd's savers as LangGraph's own test suite's checkpointers.

LangGraph's sdist ships the tests of its runtime with two fixtures, ``sync_checkpointer`` and
``async_checkpointer``, parametrized over its own savers. tests/peer/test_langgraph_suite.py
appends ``from tests.peer.langgraph_standin import *`` to a copy of the sdist's conftest.py:
these fixtures, defined later in the same module, replace them with ``checkpointd``: a
:class:`CheckpointdSaver` / :class:`AsyncCheckpointdSaver` on the server at
``$CHECKPOINTD_TARGET`` (and ``checkpointd_pipeline``: the same saver with ``pipeline``),
each test in a namespace of its own (the suite reuses thread ids such as "1" from test to
test).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver

__all__ = ["async_checkpointer", "sync_checkpointer"]


def _namespace() -> str:
    # Not uuid.uuid4(): some of the suite's tests count its calls (deterministic_uuids).
    return f"lg-{os.urandom(8).hex()}"


@pytest.fixture(params=["checkpointd", "checkpointd_pipeline"])
def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[CheckpointdSaver]:
    """The blocking saver, and the same sending a run's writes ahead of their answers
    (``pipeline``, contract G22)."""
    pipeline = request.param == "checkpointd_pipeline"
    with CheckpointdSaver(
        os.environ["CHECKPOINTD_TARGET"], namespace=_namespace(), pipeline=pipeline
    ) as saver:
        yield saver


@pytest.fixture(params=["checkpointd", "checkpointd_pipeline"])
async def async_checkpointer(
    request: pytest.FixtureRequest,
) -> AsyncIterator[AsyncCheckpointdSaver]:
    """The asyncio saver, and the same with ``pipeline`` (G22)."""
    pipeline = request.param == "checkpointd_pipeline"
    async with AsyncCheckpointdSaver(
        os.environ["CHECKPOINTD_TARGET"], namespace=_namespace(), pipeline=pipeline
    ) as saver:
        yield saver
