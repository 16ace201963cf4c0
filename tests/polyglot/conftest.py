"""Fixtures for the tests that drive the Node.js client (clients/node) against a real server.

They need ``node`` on PATH and the client's packages installed (``make install`` runs
``npm ci`` in clients/node when npm exists). Without them the tests are skipped, except under
``CHECKPOINTD_REQUIRE_NODE=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "clients" / "node"
REQUIRE_NODE_ENV = "CHECKPOINTD_REQUIRE_NODE"


def _node_unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_NODE_ENV) == "1":
        pytest.fail(f"Node.js is required ({REQUIRE_NODE_ENV}=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, with the Node.js client's dependencies installed."""
    executable = shutil.which("node")
    if executable is None:
        _node_unavailable("`node` is not on PATH")
    if not (NODE_CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir():
        _node_unavailable(
            f"the Node.js client's packages are missing: run `npm ci` in {NODE_CLIENT}"
        )
    return executable


@pytest.fixture(scope="session")
def vitest(node: str) -> str:
    """The vitest entry point of the Node.js client's dev dependencies, which the LangGraph.js
    saver's suites (clients/node/spec) run under, with LangGraph's packages beside it."""
    entry = NODE_CLIENT / "node_modules" / "vitest" / "vitest.mjs"
    needed = ("@langchain/langgraph", "@langchain/langgraph-checkpoint-validation")
    if not entry.is_file() or not all((NODE_CLIENT / "node_modules" / p).is_dir() for p in needed):
        _node_unavailable(
            f"the Node.js client's dev dependencies are missing: run `npm ci` in {NODE_CLIENT}"
        )
    return str(entry)
