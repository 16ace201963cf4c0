"""Fixtures of the fault suites: the size of the run, and the figures printed at its end.

``CHECKPOINTD_RELIABILITY=full`` runs every suite at its full size (``make test-reliability``);
unset (or ``reduced``) it runs a reduced size that still exercises every fault, as part of
``make test``. Each suite records what it saw (cycles, writes acknowledged and lost, double
claims, events delivered, fuzz cases, INTERNAL answers) in :data:`FIGURES`; the figures are
printed in pytest's terminal summary, and also written to the file named by
``$CHECKPOINTD_RELIABILITY_FIGURES`` when it is set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.figures import FIGURES, render


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
