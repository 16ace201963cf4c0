"""Fixtures of the fault suites: the size of the run, and the figures printed at its end.

``CHECKPOINTD_RELIABILITY=full`` runs every suite at its full size (``make test-reliability``);
unset (or ``reduced``) it runs a reduced size that still exercises every fault, as part of
``make test-system``. Each suite records what it saw (cycles, writes acknowledged and lost, double
claims, events delivered, fuzz cases, INTERNAL answers) in :data:`FIGURES`; the figures are
printed in pytest's terminal summary, and also written to the file named by
``$CHECKPOINTD_RELIABILITY_FIGURES`` when it is set. The hooks that do that live in
tests/conftest.py, which the pytest-xdist controller loads (it collects no test, so never
this file), where each worker's figures are added up.
"""
