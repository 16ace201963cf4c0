"""Contract C11: the executions of a namespace, newest activity first, with their status, and
one execution's detail (pending interrupt, newest decision, idempotency keys). Every backend."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from checkpointd_client import (
    CheckpointdClient,
    InvalidArgumentError,
    NotFoundError,
)
from checkpointd_client.v1 import checkpoint_service_pb2 as svc
from checkpointd_client.v1 import checkpoint_service_pb2_grpc
from tests.contract.helpers import checkpoint, interrupted
from tests.support.grpc_errors import error_details


def _populate(client: CheckpointdClient) -> dict[str, str]:
    """One run of each status, and a fork, written oldest first: running, ended, failed,
    paused, forked (running). Returns their ids by name."""
    ids = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("run", "end", "fail", "pause")}
    client.put_checkpoint(checkpoint(ids["run"], chain_name="refunds", node_id="a"))
    client.put_checkpoint(checkpoint(ids["run"], chain_name="refunds", node_id="b"))
    client.put_checkpoint(checkpoint(ids["end"], node_id="a"))
    client.put_checkpoint(checkpoint(ids["end"], node_id="run_end", step_type="run_end"))
    client.put_checkpoint(checkpoint(ids["fail"], node_id="a"))
    client.put_checkpoint(checkpoint(ids["fail"], node_id="b", status="failed"))
    client.put_checkpoint(checkpoint(ids["pause"], chain_name="refunds", node_id="a"))
    client.record_interrupt(*interrupted(ids["pause"], chain_name="refunds", node_id="review"))
    # A fork of the ended run: a new execution whose first row names its parent.
    parent = client.get_fork_point(ids["end"])
    ids["fork"] = f"fork-{uuid.uuid4().hex[:8]}"
    client.put_checkpoint(
        checkpoint(ids["fork"], node_id="a", parent_checkpoint_id=parent.checkpoint_id)
    )
    return ids


def test_c11_list_executions_newest_activity_first_with_status_and_counts(
    client: CheckpointdClient,
):
    """Each run once, ordered by its newest write, with the status its rows say, its count,
    its newest checkpoint's chain, node and time."""
    ids = _populate(client)
    page = client.list_executions()
    assert page.next_page_token == ""
    got = [(e.execution_id, e.status, e.checkpoint_count) for e in page.executions]
    assert got == [
        (ids["fork"], "running", 1),
        (ids["pause"], "paused", 2),
        (ids["fail"], "failed", 2),
        (ids["end"], "ended", 2),
        (ids["run"], "running", 2),
    ]
    paused = page.executions[1]
    assert (paused.chain_name, paused.last_node_id) == ("refunds", "review")
    latest = client.get_latest_checkpoint(ids["pause"])
    assert paused.last_checkpoint_id == latest.checkpoint_id
    assert paused.last_sequence == latest.sequence
    assert paused.last_activity_at == latest.created_at


def test_c11_a_resumed_run_is_running_again_and_a_new_write_moves_it_first(
    client: CheckpointdClient,
):
    """Claiming the pause makes the run running; its next write makes it the newest."""
    ids = _populate(client)
    client.claim_interrupt(ids["pause"])
    client.put_checkpoint(checkpoint(ids["run"], chain_name="refunds", node_id="c"))
    page = client.list_executions()
    statuses = {e.execution_id: e.status for e in page.executions}
    assert statuses[ids["pause"]] == "running"
    assert page.executions[0].execution_id == ids["run"]
    assert page.executions[0].checkpoint_count == 3


def test_c11_list_executions_filters_by_chain_status_and_activity(client: CheckpointdClient):
    """Chain name (of the newest row), status and last activity filter, together too."""
    ids = _populate(client)

    def listed(**filters: object) -> list[str]:
        return [e.execution_id for e in client.list_executions(**filters).executions]  # type: ignore[arg-type]

    assert listed(chain_name="refunds") == [ids["pause"], ids["run"]]
    assert listed(status="paused") == [ids["pause"]]
    assert listed(status="running") == [ids["fork"], ids["run"]]
    assert listed(status="running", chain_name="refunds") == [ids["run"]]
    assert listed(status="ended") == [ids["end"]]
    assert listed(status="failed") == [ids["fail"]]
    old = f"old-{uuid.uuid4().hex[:8]}"
    client.put_checkpoint(checkpoint(old, created_at=datetime.now(UTC) - timedelta(days=3)))
    assert old in listed()
    since = listed(active_since=datetime.now(UTC) - timedelta(days=1))
    assert old not in since
    assert len(since) == 5
    assert listed(chain_name="nobody") == []


def test_c11_list_executions_pages_follow_aip_rules(client: CheckpointdClient):
    """Pages of the asked size, every run once, the last token empty; a token is bound to
    its filters; a negative page size and a mangled token are INVALID_ARGUMENT."""
    ids = _populate(client)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = client.list_executions(page_size=2, page_token=token)
        assert len(page.executions) <= 2
        seen += [e.execution_id for e in page.executions]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(ids.values())
    assert len(seen) == len(set(seen))

    first = client.list_executions(page_size=1)
    with pytest.raises(InvalidArgumentError) as other:
        client.list_executions(page_size=1, page_token=first.next_page_token, status="paused")
    assert other.value.reason == "INVALID_PAGE_TOKEN"
    with pytest.raises(InvalidArgumentError) as mangled:
        client.list_executions(page_token="not-a-token")
    assert mangled.value.reason == "INVALID_PAGE_TOKEN"


def test_c11_list_executions_refuses_a_negative_page_size_and_an_unknown_status(sidecar):
    """Raw requests the client would not send: INVALID_ARGUMENT (INVALID_FIELD) naming the
    field; a page size above the cap is served at the cap."""
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        for field, request in (
            ("page_size", svc.ListExecutionsRequest(namespace=sidecar.namespace, page_size=-1)),
            ("status", svc.ListExecutionsRequest(namespace=sidecar.namespace, status=99)),  # type: ignore[arg-type]
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ListExecutions(request, timeout=10)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            details = error_details(refused.value)
            assert details.reason == "INVALID_FIELD"
            assert details.metadata["field"] == field
        capped = stub.ListExecutions(
            svc.ListExecutionsRequest(namespace=sidecar.namespace, page_size=5000), timeout=10
        )
        assert capped.next_page_token == ""


def test_c11_get_execution_shows_pause_decision_and_idempotency_keys(client: CheckpointdClient):
    """The pending interrupt with its decision; once resumed, the decision stays visible as
    last_decided with how it was carried out; the idempotency keys in key order."""
    ids = _populate(client)
    run = ids["pause"]
    client.put_idempotent(run, "charge:2", {"ok": True})
    client.put_idempotent(run, "charge:1", {"ok": True})
    detail = client.get_execution(run)
    assert detail.execution.status == "paused"
    assert detail.pending is not None
    assert detail.pending.decision is None
    assert detail.last_decided is None
    assert detail.idempotency_keys == ["charge:1", "charge:2"]
    assert detail.idempotency_key_count == 2

    client.submit_decision(run, approved=True, decided_by="alice", reason="fine")
    detail = client.get_execution(run)
    assert detail.pending is not None
    assert detail.pending.decision is not None
    assert detail.pending.decision.decided_by == "alice"

    pause = detail.pending.checkpoint_id
    client.lease_decision(run, pause, lease_token="worker-1", lease_seconds=30)
    client.claim_interrupt(run)
    client.report_resume(run, pause, lease_token="worker-1")
    detail = client.get_execution(run)
    assert detail.execution.status == "running"
    assert detail.pending is None
    assert detail.last_decided is not None
    assert detail.last_decided.decision is not None
    assert detail.last_decided.decision.status == "resumed"
    assert detail.last_decided.checkpoint_id == pause


def test_c11_get_execution_of_nothing_is_not_found(client: CheckpointdClient):
    """An execution without checkpoints is NOT_FOUND (NO_CHECKPOINTS), even with idempotency
    results; a bad status filter is refused before any call."""
    client.put_idempotent("only-keys", "k", 1)
    with pytest.raises(NotFoundError) as missing:
        client.get_execution("only-keys")
    assert missing.value.reason == "NO_CHECKPOINTS"
    with pytest.raises(ValueError, match="status must be one of"):
        client.list_executions(status="stuck")
