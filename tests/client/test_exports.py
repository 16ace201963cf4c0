"""The public surface of checkpointd_client, its dependencies, and the fastaiagent adapter (P2)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

import checkpointd_client
from checkpointd_client import models
from checkpointd_client.fastaiagent import SidecarCheckpointer
from tests.support.protocols import protocol_methods, signature_mismatches

ROOT = Path(__file__).resolve().parents[2]

PUBLIC_NAMES = [
    "DEFAULT_TARGET",
    "ActionDecision",
    "AlreadyExistsError",
    "AsyncCheckpointdClient",
    "AsyncInterruptWatch",
    "Checkpoint",
    "CheckpointPage",
    "CheckpointdClient",
    "CheckpointdError",
    "DeadlineExceededError",
    "Decision",
    "DecisionResponse",
    "DeleteExecutionResult",
    "ErrorReason",
    "Execution",
    "ExecutionDetail",
    "ExecutionPage",
    "FailedPreconditionError",
    "GraphRetentionResult",
    "IdempotencyResult",
    "IntegrityError",
    "InternalError",
    "InterruptEvent",
    "InterruptWatch",
    "InvalidArgumentError",
    "NamespacePage",
    "NotFoundError",
    "OutOfRangeError",
    "PendingInterrupt",
    "PendingInterruptPage",
    "PermissionDeniedError",
    "PruneResult",
    "RecordInterruptResult",
    "ResourceExhaustedError",
    "RetryPolicy",
    "SnapshotComplete",
    "SnapshotItem",
    "TlsConfig",
    "UnauthenticatedError",
    "UnavailableError",
    "WatchItem",
    "WatchProgress",
]


def test_public_exports_are_pinned() -> None:
    """__all__ is exactly the documented surface, and every name resolves."""
    assert sorted(checkpointd_client.__all__) == sorted(PUBLIC_NAMES)
    for name in PUBLIC_NAMES:
        assert getattr(checkpointd_client, name) is not None


def test_sync_and_async_clients_have_the_same_methods() -> None:
    """Both clients expose the same public method names."""

    def public(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("_")} - {"close", "aclose"}

    sync, aio = checkpointd_client.CheckpointdClient, checkpointd_client.AsyncCheckpointdClient
    assert public(sync) == public(aio)
    assert hasattr(sync, "close")
    assert hasattr(aio, "aclose")


def test_models_are_frozen_keyword_only_and_slotted() -> None:
    """Every model is a frozen, kw_only, slotted dataclass."""
    for name in models.__all__:
        cls = getattr(models, name)
        if not isinstance(cls, type):
            continue
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen, name
        assert "__slots__" in vars(cls), name
        assert all(f.kw_only for f in dataclasses.fields(cls)), name
    cp = checkpointd_client.Checkpoint(execution_id="e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cp.execution_id = "x"  # type: ignore[misc]
    assert cp.status == "completed"
    assert cp.state_snapshot == {}
    assert cp.created_at is None


def test_distribution_depends_only_on_grpcio_and_protobuf() -> None:
    """The client's runtime dependencies are grpcio and protobuf; fastaiagent and LangGraph
    are extras (LangGraph's with langgraph itself, which the savers' modules import)."""
    project = tomllib.loads((ROOT / "pyclient" / "pyproject.toml").read_text())["project"]
    names = sorted(
        d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]
    )
    assert names == ["grpcio", "protobuf"]
    assert project["optional-dependencies"] == {
        "fastaiagent": ["fastaiagent>=1.94.0"],
        "langgraph": ["langgraph>=1.0.6,<2", "langgraph-checkpoint>=4.3,<5"],
    }


def test_importing_the_client_pulls_in_neither_fastaiagent_nor_googleapis() -> None:
    """Only the adapter modules import fastaiagent and LangGraph; nothing imports
    google.rpc."""
    script = (
        "import sys, checkpointd_client, checkpointd_client.client, checkpointd_client.errors\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastaiagent', 'langgraph')"
        " or m.startswith('google.rpc'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", script], check=True, timeout=60)


# --- the fastaiagent adapter (P2) ----------------------------------------------------------


def test_p2_adapter_satisfies_the_checkpointer_protocol() -> None:
    """isinstance(SidecarCheckpointer(...), fastaiagent.checkpointers.Checkpointer) holds, and
    every method has the signature of fastaiagent's protocol (isinstance only checks names):
    the same parameters, kinds and defaults, the same types, and no coroutine where fastaiagent
    calls synchronously."""
    from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
    from fastaiagent.checkpointers import Checkpointer
    from fastaiagent.checkpointers import PendingInterrupt as FastPendingInterrupt

    typing_only = {"FastCheckpoint": FastCheckpoint, "FastPendingInterrupt": FastPendingInterrupt}
    assert signature_mismatches(SidecarCheckpointer, Checkpointer, localns=typing_only) == []
    assert len(protocol_methods(Checkpointer)) == 13  # fastaiagent 1.94.0's protocol, in full
    with SidecarCheckpointer("127.0.0.1:1") as checkpointer:
        assert isinstance(checkpointer, Checkpointer)
        checkpointer.setup()
        checkpointer.setup()
        checkpointer.put_writes("e", "c", [])


def test_p2_adapter_refuses_a_negative_limit_and_answers_zero_without_calling() -> None:
    """list(limit=0) is [] with no server; a negative limit is a ValueError."""
    with SidecarCheckpointer("127.0.0.1:1", timeout=0.2) as checkpointer:
        assert checkpointer.list("e", limit=0) == []
        assert checkpointer.list_pending_interrupts(limit=0) == []
        with pytest.raises(ValueError, match="limit"):
            checkpointer.list("e", limit=-1)
        with pytest.raises(ValueError, match="limit"):
            checkpointer.list_pending_interrupts(limit=-5)


def test_p2_adapter_converts_fastaiagent_models_both_ways() -> None:
    """fastaiagent's Checkpoint / PendingInterrupt convert losslessly, created_at as ISO text."""
    from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint
    from fastaiagent.checkpointers import PendingInterrupt as FastPending

    from checkpointd_client.fastaiagent import _models as adapter

    fast = FastCheckpoint(
        checkpoint_id="cp",
        parent_checkpoint_id="p",
        chain_name="c",
        execution_id="e",
        node_id="n",
        node_index=3,
        step_type="run_end",
        status="failed",
        state_snapshot={"big": 2**70},
        node_input={"i": 1},
        node_output={"o": "ü"},
        iteration=2,
        iteration_counters={"loop": 4},
        interrupt_reason=None,
        interrupt_context={},
        agent_path="swarm:s",
        created_at="2024-05-06T07:08:09.123456+00:00",
    )
    ours = adapter.to_checkpoint(fast)
    assert ours.created_at == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert adapter.from_checkpoint(ours) == fast

    pending = FastPending(
        execution_id="e", chain_name="c", node_id="n", reason="r", context={"a": [1]}
    )
    assert adapter.to_pending(pending).created_at is None
    back = adapter.from_pending(adapter.to_pending(pending))
    assert back == pending


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("2024-01-02T03:04:05", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T05:04:05.000007+02:00", datetime(2024, 1, 2, 3, 4, 5, 7, tzinfo=UTC)),
    ],
)
def test_p2_adapter_parses_iso_times_naive_as_utc(text: str, expected: datetime | None) -> None:
    """created_at strings parse as aware datetimes; naive ones are UTC; "" is unset."""
    from checkpointd_client.fastaiagent import _models as adapter

    assert adapter.parse_time(text) == expected


def test_p2_adapter_formats_times_like_the_reference() -> None:
    """Times come back as datetime.isoformat() of an aware UTC datetime."""
    from checkpointd_client.fastaiagent import _models as adapter

    when = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert adapter.format_time(when) == "2024-01-02T03:04:05.000006+00:00"
    assert adapter.format_time(None) == ""
