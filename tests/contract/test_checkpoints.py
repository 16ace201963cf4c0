"""Contract C1-C8: checkpoints through a real server and the real client, on both backends."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from checkpointd_client import (
    AlreadyExistsError,
    AsyncCheckpointdClient,
    Checkpoint,
    CheckpointdClient,
    FailedPreconditionError,
    IntegrityError,
    InvalidArgumentError,
    NotFoundError,
)
from checkpointd_client.v1 import (
    checkpoint_pb2,
    checkpoint_service_pb2,
    checkpoint_service_pb2_grpc,
    interrupt_service_pb2,
    interrupt_service_pb2_grpc,
)
from tests.contract.conftest import NO_RETRY, WRITE_PATHS
from tests.contract.helpers import checkpoint, interrupted


@pytest.fixture(params=WRITE_PATHS)
def write_path(request: pytest.FixtureRequest) -> str:
    """Every rule here holds on both write paths: the Write stream and unary calls (S1)."""
    return str(request.param)


def test_c1_put_fills_checkpoint_id_created_at_and_sequence(client, execution_id):
    """A put without id or created_at is stored with both filled and a sequence assigned."""
    before = datetime.now(tz=UTC)
    stored = client.put_checkpoint(checkpoint(execution_id, checkpoint_id=""))
    assert stored.checkpoint_id
    assert stored.created_at is not None
    assert before - timedelta(seconds=5) <= stored.created_at <= datetime.now(tz=UTC)
    assert stored.sequence > 0
    assert client.get_checkpoint(execution_id, stored.checkpoint_id) == stored


def _assert_canonical_uuid(value: str) -> None:
    """``value`` is a UUID in its canonical text form (what the server generates)."""
    assert str(uuid.UUID(value)) == value, value


def test_c1_server_fills_an_empty_checkpoint_id_sent_on_the_wire(sidecar, execution_id):
    """PutCheckpoint and RecordInterrupt sent with an empty checkpoint_id (by a caller that is
    not our client library, which always fills one) are stored under a UUID the server chose,
    returned in the reply and found by GetCheckpoint."""
    with grpc.insecure_channel(sidecar.target) as channel:
        checkpoints = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        interrupts = interrupt_service_pb2_grpc.InterruptServiceStub(channel)
        put = checkpoints.PutCheckpoint(
            checkpoint_service_pb2.PutCheckpointRequest(
                namespace=sidecar.namespace,
                request_id=f"req-{uuid.uuid4().hex}",
                checkpoint=checkpoint_pb2.Checkpoint(
                    execution_id=execution_id,
                    checkpoint_id="",
                    node_id="step",
                    status=checkpoint_pb2.CHECKPOINT_STATUS_COMPLETED,
                ),
            ),
            timeout=10,
        )
        recorded = interrupts.RecordInterrupt(
            interrupt_service_pb2.RecordInterruptRequest(
                namespace=sidecar.namespace,
                request_id=f"req-{uuid.uuid4().hex}",
                checkpoint=checkpoint_pb2.Checkpoint(
                    execution_id=execution_id,
                    checkpoint_id="",
                    node_id="approve",
                    status=checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED,
                    interrupt_reason="approval",
                ),
                pending=checkpoint_pb2.PendingInterrupt(
                    execution_id=execution_id, node_id="approve", reason="approval"
                ),
            ),
            timeout=10,
        )
        ids = [put.checkpoint.checkpoint_id, recorded.checkpoint.checkpoint_id]
        for checkpoint_id in ids:
            _assert_canonical_uuid(checkpoint_id)
        assert ids[0] != ids[1]
        assert recorded.pending_created
        assert recorded.pending.checkpoint_id == ids[1]
        for sent in (put.checkpoint, recorded.checkpoint):
            found = checkpoints.GetCheckpoint(
                checkpoint_service_pb2.GetCheckpointRequest(
                    namespace=sidecar.namespace,
                    execution_id=execution_id,
                    checkpoint_id=sent.checkpoint_id,
                ),
                timeout=10,
            )
            assert found.checkpoint == sent


def test_c2_second_write_with_existing_id_is_already_exists_and_changes_nothing(
    client, execution_id
):
    """A different request reusing a checkpoint id fails with ALREADY_EXISTS; the row stays."""
    first = client.put_checkpoint(checkpoint(execution_id, checkpoint_id="cp-1", node_id="a"))
    with pytest.raises(AlreadyExistsError) as err:
        client.put_checkpoint(checkpoint(execution_id, checkpoint_id="cp-1", node_id="b"))
    assert err.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert err.value.reason == "CHECKPOINT_EXISTS"
    assert isinstance(err.value, IntegrityError)
    assert client.get_checkpoint(execution_id, "cp-1") == first
    assert [c.node_id for c in client.list_checkpoints(execution_id).checkpoints] == ["a"]


def test_c2_retry_with_same_request_id_returns_stored_row(client, execution_id):
    """Resending a put with the same request id (a lost reply) returns the stored row."""
    cp = checkpoint(execution_id, checkpoint_id="cp-retry")
    first = client.put_checkpoint(cp, request_id="req-1")
    again = client.put_checkpoint(cp, request_id="req-1")
    assert again == first
    assert len(client.list_checkpoints(execution_id).checkpoints) == 1


def test_c3_latest_is_by_sequence_not_created_at(client, execution_id):
    """The latest checkpoint is the one written last, even when its created_at is older."""
    now = datetime.now(tz=UTC)
    client.put_checkpoint(checkpoint(execution_id, node_id="first", created_at=now))
    client.put_checkpoint(
        checkpoint(execution_id, node_id="second", created_at=now - timedelta(days=3))
    )
    assert client.get_latest_checkpoint(execution_id).node_id == "second"


def test_c3_latest_of_unknown_execution_is_not_found(client, execution_id):
    """An execution with no checkpoints has no latest: NOT_FOUND."""
    with pytest.raises(NotFoundError) as err:
        client.get_latest_checkpoint(execution_id)
    assert err.value.reason == "NO_CHECKPOINTS"


def test_c4_list_reads_a_long_history_completely_in_write_order_both_ways(client, execution_id):
    """250 rows read 100 at a time come back complete, in write order, in either direction."""
    written = [
        client.put_checkpoint(checkpoint(execution_id, node_id=f"n{i}", node_index=250 - i))
        for i in range(250)
    ]
    ids = [c.checkpoint_id for c in written]
    assert [c.checkpoint_id for c in client.iter_checkpoints(execution_id, page_size=100)] == ids
    newest_first = client.iter_checkpoints(execution_id, page_size=100, descending=True)
    assert [c.checkpoint_id for c in newest_first] == ids[::-1]
    first = client.list_checkpoints(execution_id, page_size=100)
    assert len(first.checkpoints) == 100
    assert first.next_page_token
    last = client.list_checkpoints(execution_id, page_size=100, page_token=first.next_page_token)
    last = client.list_checkpoints(execution_id, page_size=100, page_token=last.next_page_token)
    assert len(last.checkpoints) == 50
    assert last.next_page_token == ""


def test_c4_page_token_of_another_request_is_invalid_argument(client, execution_id):
    """A page token replayed against another execution or order is refused."""
    for i in range(3):
        client.put_checkpoint(checkpoint(execution_id, node_id=f"n{i}"))
    page = client.list_checkpoints(execution_id, page_size=1)
    with pytest.raises(InvalidArgumentError) as err:
        client.list_checkpoints("other", page_size=1, page_token=page.next_page_token)
    assert err.value.reason == "INVALID_PAGE_TOKEN"
    with pytest.raises(InvalidArgumentError):
        client.list_checkpoints(
            execution_id, page_size=1, page_token=page.next_page_token, descending=True
        )


def test_c4_list_of_unknown_execution_is_an_empty_page(client, execution_id):
    """Listing an execution with no checkpoints is an empty last page, not an error."""
    page = client.list_checkpoints(execution_id)
    assert page.checkpoints == []
    assert page.next_page_token == ""


def test_c4_pages_stop_at_the_message_size_limit(sidecar_factory, execution_id):
    """Rows whose total exceeds the server's message limit are split across pages."""
    server = sidecar_factory("--max-message-bytes", str(256 * 1024))
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        blob = "x" * (100 * 1024)
        for i in range(5):
            client.put_checkpoint(
                checkpoint(execution_id, node_id=f"n{i}", state_snapshot={"b": blob})
            )
        first = client.list_checkpoints(execution_id, page_size=100)
        assert 1 <= len(first.checkpoints) < 5
        assert first.next_page_token
        everything = list(client.iter_checkpoints(execution_id))
        assert [c.node_id for c in everything] == [f"n{i}" for i in range(5)]


def test_c5_get_by_id(client, execution_id):
    """A checkpoint is found by execution and id; a missing one, or another execution's, is
    NOT_FOUND."""
    stored = client.put_checkpoint(checkpoint(execution_id, checkpoint_id="cp-x"))
    assert client.get_checkpoint(execution_id, "cp-x") == stored
    for exec_id, cp_id in [(execution_id, "missing"), ("other-exec", "cp-x")]:
        with pytest.raises(NotFoundError) as err:
            client.get_checkpoint(exec_id, cp_id)
        assert err.value.reason == "CHECKPOINT_NOT_FOUND"


def test_c6_delete_execution_removes_checkpoints_pending_and_idempotency(client, execution_id):
    """Deleting an execution removes all of it, and only it, and reports the counts."""
    client.put_checkpoint(checkpoint(execution_id))
    cp, pending = interrupted(execution_id)
    client.record_interrupt(cp, pending)
    client.put_idempotent(execution_id, "charge", {"ok": True})
    client.put_checkpoint(checkpoint("bystander"))
    client.put_idempotent("bystander", "charge", 1)

    result = client.delete_execution(execution_id)

    assert (result.checkpoints_deleted, result.pending_interrupt_deleted) == (2, True)
    assert result.idempotency_results_deleted == 1
    assert client.list_checkpoints(execution_id).checkpoints == []
    assert client.list_pending_interrupts().pending_interrupts == []
    assert not client.get_idempotent(execution_id, "charge").found
    assert client.get_latest_checkpoint("bystander")
    assert client.get_idempotent("bystander", "charge").found
    again = client.delete_execution(execution_id)
    assert (again.checkpoints_deleted, again.pending_interrupt_deleted) == (0, False)


def test_c7_prune_deletes_old_finished_rows_only(client):
    """Prune removes old completed/failed checkpoints and idempotency rows; it keeps
    interrupted checkpoints, pending interrupts, recent rows, and the idempotency rows of a
    paused execution."""
    old = datetime.now(tz=UTC) - timedelta(days=30)
    client.put_checkpoint(checkpoint("done", status="completed", created_at=old))
    client.put_checkpoint(checkpoint("done", status="failed", created_at=old))
    client.put_checkpoint(checkpoint("done", node_id="recent"))
    cp, pending = interrupted("paused", created_at=old)
    client.put_checkpoint(checkpoint("paused", status="completed", created_at=old))
    client.record_interrupt(cp, pending)
    client.put_idempotent("done", "k", 1)
    client.put_idempotent("paused", "charge", {"charged": True})

    client.put_idempotent("done", "k", 1)  # replaced now: a fresh row, kept
    client.put_checkpoint(checkpoint("done", status="completed", created_at=old, node_id="k2"))

    result = client.prune(timedelta(days=1))

    assert result.checkpoints_deleted == 4  # three old "done" rows and the paused run's step
    assert result.idempotency_results_deleted == 0
    assert [c.node_id for c in client.list_checkpoints("done").checkpoints] == ["recent"]
    assert client.get_latest_checkpoint("paused").status == "interrupted"
    assert len(client.list_pending_interrupts().pending_interrupts) == 1
    assert client.get_idempotent("paused", "charge").value == {"charged": True}
    assert client.get_idempotent("done", "k").found
    everything = client.prune(timedelta(seconds=0))
    assert everything.idempotency_results_deleted == 1  # "done"/k; the paused run's stays
    assert client.get_idempotent("paused", "charge").found


def test_c7_prune_keeps_rows_newer_than_the_cutoff(client, execution_id):
    """Rows younger than older_than stay."""
    client.put_checkpoint(checkpoint(execution_id))
    client.put_idempotent(execution_id, "k", 1)
    result = client.prune(timedelta(days=1))
    assert (result.checkpoints_deleted, result.idempotency_results_deleted) == (0, 0)
    assert client.get_latest_checkpoint(execution_id)


def test_c7_prune_works_through_more_rows_than_one_batch(sidecar_factory, write_path, execution_id):
    """Pruning more rows than a batch holds deletes them all (the batches loop): 21 rows on
    a server that prunes 10 rows per transaction. A row newer than the cutoff stays."""
    server = sidecar_factory("--prune-batch-size", "10")
    old = datetime.now(tz=UTC) - timedelta(days=2)
    with CheckpointdClient(
        server.target, retry=NO_RETRY, write_stream=write_path == "stream"
    ) as client:
        for i in range(21):  # above the batch of 10, twice
            client.put_checkpoint(checkpoint(execution_id, node_id=f"n{i}", created_at=old))
        kept = client.put_checkpoint(checkpoint(execution_id, node_id="new"))
        pruned = client.prune(timedelta(days=1))
        assert pruned.checkpoints_deleted == 21
        assert client.list_checkpoints(execution_id).checkpoints == [kept]


def test_c8_resume_point_steps_over_a_failed_run_end_and_refuses_a_completed_one(
    client, execution_id
):
    """Resume re-enters at the newest step; a failed run_end is stepped over; a completed
    run_end is FAILED_PRECONDITION."""
    client.put_checkpoint(checkpoint(execution_id, node_id="a"))
    step = client.put_checkpoint(checkpoint(execution_id, node_id="b"))
    assert client.get_resume_point(execution_id) == step
    client.put_checkpoint(
        checkpoint(execution_id, node_id="run_end", step_type="run_end", status="failed")
    )
    assert client.get_resume_point(execution_id) == step
    client.put_checkpoint(
        checkpoint(execution_id, node_id="run_end", step_type="run_end", status="completed")
    )
    with pytest.raises(FailedPreconditionError) as err:
        client.get_resume_point(execution_id)
    assert err.value.reason == "RUN_ALREADY_FINISHED"
    with pytest.raises(NotFoundError):
        client.get_resume_point("never-ran")


def test_c8_fork_point_steps_over_run_end_and_refuses_naming_it(client, execution_id):
    """Fork branches from the newest step whatever the run_end status; naming run_end is
    INVALID_ARGUMENT; naming a step returns it."""
    first = client.put_checkpoint(checkpoint(execution_id, node_id="a"))
    step = client.put_checkpoint(checkpoint(execution_id, node_id="b"))
    end = client.put_checkpoint(
        checkpoint(execution_id, node_id="run_end", step_type="run_end", status="completed")
    )
    assert client.get_fork_point(execution_id) == step
    assert client.get_fork_point(execution_id, checkpoint_id=first.checkpoint_id) == first
    with pytest.raises(InvalidArgumentError) as err:
        client.get_fork_point(execution_id, checkpoint_id=end.checkpoint_id)
    assert err.value.reason == "RUN_END_NOT_FORKABLE"
    with pytest.raises(NotFoundError):
        client.get_fork_point(execution_id, checkpoint_id="missing")


def test_c8_run_end_only_history_has_no_resume_or_fork_point(client, execution_id):
    """A run that holds nothing but a failed marker has nothing to re-enter or branch from."""
    client.put_checkpoint(
        checkpoint(execution_id, node_id="run_end", step_type="run_end", status="failed")
    )
    with pytest.raises(NotFoundError):
        client.get_resume_point(execution_id)
    with pytest.raises(NotFoundError):
        client.get_fork_point(execution_id)


_PAYLOAD_FIELDS = (
    "state_snapshot_json",
    "node_input_json",
    "node_output_json",
    "iteration_counters_json",
    "interrupt_context_json",
)


def _full_put_request(
    namespace: str, execution_id: str, view: int
) -> checkpoint_service_pb2.PutCheckpointRequest:
    return checkpoint_service_pb2.PutCheckpointRequest(
        namespace=namespace,
        request_id=f"req-{uuid.uuid4().hex}",
        view=view,  # type: ignore[arg-type]
        checkpoint=checkpoint_pb2.Checkpoint(
            execution_id=execution_id,
            checkpoint_id=uuid.uuid4().hex,
            node_id="step",
            status=checkpoint_pb2.CHECKPOINT_STATUS_INTERRUPTED,
            state_snapshot_json='{"messages":["x"]}',
            node_input_json='{"in":1}',
            node_output_json='{"out":2}',
            iteration_counters_json='{"loop":3}',
            interrupt_reason="approval",
            interrupt_context_json='{"amount":500}',
        ),
    )


def test_c1_put_basic_view_answers_the_row_without_its_json_payloads(sidecar, execution_id):
    """PutCheckpoint with view BASIC stores the whole row and answers it without the JSON
    payloads (ids, status, created_at and sequence are there); unspecified and FULL answer
    the whole row, as before the field existed."""
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        basic_request = _full_put_request(
            sidecar.namespace, execution_id, checkpoint_service_pb2.CHECKPOINT_VIEW_BASIC
        )
        basic = stub.PutCheckpoint(basic_request, timeout=10).checkpoint
        stored = stub.GetCheckpoint(
            checkpoint_service_pb2.GetCheckpointRequest(
                namespace=sidecar.namespace,
                execution_id=execution_id,
                checkpoint_id=basic.checkpoint_id,
            ),
            timeout=10,
        ).checkpoint
        for view in (
            checkpoint_service_pb2.CHECKPOINT_VIEW_UNSPECIFIED,
            checkpoint_service_pb2.CHECKPOINT_VIEW_FULL,
        ):
            request = _full_put_request(sidecar.namespace, execution_id, view)
            full = stub.PutCheckpoint(request, timeout=10).checkpoint
            for name in _PAYLOAD_FIELDS:
                assert getattr(full, name) == getattr(request.checkpoint, name), (view, name)
    assert all(getattr(basic, name) == "" for name in _PAYLOAD_FIELDS)
    for name in _PAYLOAD_FIELDS:
        assert getattr(stored, name) == getattr(basic_request.checkpoint, name)
    without_payloads = checkpoint_pb2.Checkpoint()
    without_payloads.CopyFrom(stored)
    for name in _PAYLOAD_FIELDS:
        without_payloads.ClearField(name)  # type: ignore[arg-type]
    assert basic == without_payloads
    assert basic.sequence > 0
    assert basic.HasField("created_at")


def test_c1_put_with_an_unknown_view_is_invalid_argument_and_writes_nothing(sidecar, execution_id):
    """A view this server does not know is INVALID_FIELD naming `view`; nothing is stored."""
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.PutCheckpoint(_full_put_request(sidecar.namespace, execution_id, 7), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "view" in (refused.value.details() or "")
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetLatestCheckpoint(
                checkpoint_service_pb2.GetLatestCheckpointRequest(
                    namespace=sidecar.namespace, execution_id=execution_id
                ),
                timeout=10,
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_c1_client_put_basic_view_returns_the_stored_row_without_payloads(
    sidecar, client, execution_id
):
    """Both clients' put_checkpoint(view="basic") return the stored row's id, created_at and
    sequence with empty JSON payloads; the row itself holds everything that was sent."""
    sent = checkpoint(
        execution_id,
        state_snapshot={"messages": ["hello"]},
        node_input={"q": 1},
        iteration_counters={"loop": 2},
    )
    basic = client.put_checkpoint(sent, view="basic")
    stored = client.get_checkpoint(execution_id, sent.checkpoint_id)
    assert stored.state_snapshot == {"messages": ["hello"]}
    assert basic == replace(
        stored, state_snapshot={}, node_input={}, iteration_counters={}, interrupt_context={}
    )

    async def put_async() -> Checkpoint:
        async with AsyncCheckpointdClient(
            sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
        ) as aclient:
            return await aclient.put_checkpoint(
                checkpoint(execution_id, state_snapshot={"a": 1}), view="basic"
            )

    async_basic = asyncio.run(put_async())
    assert async_basic.state_snapshot == {}
    assert client.get_latest_checkpoint(execution_id) == replace(
        async_basic, state_snapshot={"a": 1}
    )
