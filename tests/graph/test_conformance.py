"""LangGraph's conformance suite (langgraph-checkpoint-conformance 0.0.2) against both
savers, on SQLite, Postgres and Postgres behind PgBouncer: every capability at the full
level, none skipped, and both savers with ``pipeline`` too (their writes sent ahead of
their answers, G22). The suite calls only async methods, so the blocking saver runs behind
:class:`~tests.graph.threaded.ThreadedSaver` (its methods on a worker thread).

One test per capability, backend and surface; each in a fresh namespace on the backend's
shared server, with a fresh saver for its capability, as the suite's ``validate`` makes one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from tests.graph.threaded import ThreadedSaver
from tests.support.shared_server import SharedSidecar

CAPABILITIES = [capability.value for capability in Capability]


@pytest.mark.parametrize("surface", ["async", "async-pipeline", "sync", "sync-pipeline"])
@pytest.mark.parametrize("capability", CAPABILITIES)
async def test_conformance_capability_passes_with_nothing_skipped(
    sidecar: SharedSidecar, capability: str, surface: str
) -> None:
    """The capability is detected and every one of its conformance tests passes."""

    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        pipeline = surface.endswith("-pipeline")  # writes sent ahead, waited for by reads (G22)
        if surface.startswith("async"):
            async with AsyncCheckpointdSaver(
                sidecar.target, namespace=sidecar.namespace, pipeline=pipeline
            ) as saver:
                await saver.setup()
                yield saver
        else:
            with CheckpointdSaver(
                sidecar.target, namespace=sidecar.namespace, pipeline=pipeline
            ) as blocking:
                blocking.setup()
                yield ThreadedSaver(blocking)

    registered = checkpointer_test(name=f"checkpointd-{surface}-{sidecar.backend}")(factory)
    report = await validate(registered, capabilities={capability})
    report.print_report()
    result = report.results[capability]
    assert result.detected, f"{capability} is not detected on the {surface} saver"
    assert result.failures == [], result.failures
    assert (result.passed, result.tests_failed, result.tests_skipped) == (True, 0, 0)
    assert result.tests_passed > 0
