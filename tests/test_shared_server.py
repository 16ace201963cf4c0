"""The shared server's guard: a test that writes outside its namespace is named, one that
stays inside is not (tests/support/shared_server.py, on a real server and store)."""

from __future__ import annotations

from checkpointd_client import CheckpointdClient, RetryPolicy
from tests.contract.helpers import checkpoint, interrupted
from tests.support.shared_server import SharedServer
from tests.support.sidecar import Sidecar, StoreSpec


def test_the_guard_names_namespaces_a_test_wrote_outside_its_own(store_spec: StoreSpec) -> None:
    """On each backend (the guard reads the store's own tables)."""
    shared = SharedServer(Sidecar(store_spec))
    try:
        first = shared.view()
        with CheckpointdClient(first.target, namespace=first.namespace) as own:
            own.put_checkpoint(checkpoint("run"))
        with CheckpointdClient(first.target, namespace=f"{first.namespace}-b") as derived:
            derived.record_interrupt(*interrupted("run"))
        assert shared.check_namespaces(first) == []

        second = shared.view()
        assert second.namespace != first.namespace
        retry = RetryPolicy(max_attempts=1)
        with CheckpointdClient(second.target, retry=retry) as stray:  # the default namespace
            stray.put_idempotent("run", "k", 1)
        with CheckpointdClient(second.target, namespace=first.namespace, retry=retry) as other:
            other.put_checkpoint(checkpoint("late"))  # a namespace already seen: not new
        assert shared.check_namespaces(second) == ["default"]

        third = shared.view()
        assert shared.check_namespaces(third) == []  # judged only on what it adds
    finally:
        shared.close()
