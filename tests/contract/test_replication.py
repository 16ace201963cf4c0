"""Contracts R1-R4: the replication outbox (ReplicationService), on both backends.

A replicator lists the unsettled checkpoints of a namespace, copies them elsewhere, and
settles each one as synced or quarantined. These tests drive it the way a replicator does,
including several at once on several servers sharing one store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from checkpointd_client import (
    Checkpoint,
    CheckpointdClient,
    InvalidArgumentError,
    PendingInterrupt,
)
from tests.contract.conftest import NO_RETRY
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar
from tests.support.store_dump import StoreReader


@pytest.fixture
def outbox(sidecar: Sidecar | SharedSidecar) -> Iterator[CheckpointdClient]:
    """A client in a namespace of its own."""
    namespace = f"{sidecar.namespace}-rep"
    with CheckpointdClient(sidecar.target, namespace=namespace, retry=NO_RETRY) as c:
        yield c


def put(client: CheckpointdClient, execution_id: str, node_index: int = 0) -> Checkpoint:
    return client.put_checkpoint(
        Checkpoint(
            execution_id=execution_id,
            chain_name="flow",
            node_id=f"n{node_index}",
            node_index=node_index,
            state_snapshot={"i": node_index},
        )
    )


def unsynced_ids(client: CheckpointdClient, page_size: int = 0) -> list[str]:
    """Every unsettled id, following page tokens."""
    ids: list[str] = []
    token = ""
    while True:
        page = client.list_unsynced_checkpoints(page_size=page_size, page_token=token)
        ids.extend(cp.checkpoint_id for cp in page.checkpoints)
        token = page.next_page_token
        if not token:
            return ids


def sync_errors(sidecar: Sidecar | SharedSidecar) -> dict[str, tuple[bool, str | None]]:
    """checkpoint_id -> (settled, sync_error), read from the store itself."""
    reader = StoreReader(sidecar.store)
    try:
        rows = reader.query(
            "SELECT checkpoint_id, synced_at IS NOT NULL, sync_error "
            f"FROM {reader.table('checkpoints')}"
        )
    finally:
        reader.close()
    return {str(cid): (bool(settled), error) for cid, settled, error in rows}


# --- R1 ------------------------------------------------------------------------------------


def test_r1_every_write_enters_the_outbox_oldest_first_and_listing_changes_nothing(outbox):
    """Puts and recorded interrupts of several runs are listed in write order (by sequence),
    with their full rows; paging returns the same order; listing twice lists the same."""
    written = [put(outbox, "run-a", 0), put(outbox, "run-b", 0), put(outbox, "run-a", 1)]
    recorded = outbox.record_interrupt(
        Checkpoint(execution_id="run-c", chain_name="flow", node_id="ask", status="interrupted"),
        PendingInterrupt(execution_id="run-c", chain_name="flow", node_id="ask", reason="ok?"),
    )
    written.append(recorded.checkpoint)
    expected = [cp.checkpoint_id for cp in written]

    first = outbox.list_unsynced_checkpoints()
    assert [cp.checkpoint_id for cp in first.checkpoints] == expected
    assert first.checkpoints == written  # the stored rows, sequence included
    assert first.next_page_token == ""
    assert unsynced_ids(outbox, page_size=1) == expected
    assert unsynced_ids(outbox, page_size=3) == expected
    assert unsynced_ids(outbox) == expected  # nothing was consumed


def test_r1_outbox_is_per_namespace(sidecar, outbox):
    """Another namespace's outbox neither lists nor settles these rows."""
    mine = put(outbox, "run").checkpoint_id
    with CheckpointdClient(
        sidecar.target, namespace=f"{sidecar.namespace}-elsewhere", retry=NO_RETRY
    ) as other:
        assert unsynced_ids(other) == []
        assert other.mark_checkpoints_synced([mine]) == []
        assert other.quarantine_checkpoints({mine: "no"}) == []
    assert unsynced_ids(outbox) == [mine]


def test_r1_rows_written_between_pages_are_listed_and_deleted_rows_leave(outbox):
    """A row written after the first page is on a later page; DeleteExecution takes a run's
    rows out of the outbox, settled or not."""
    a0, b0 = put(outbox, "a", 0), put(outbox, "b", 0)
    page = outbox.list_unsynced_checkpoints(page_size=1)
    a1 = put(outbox, "a", 1)
    rest = outbox.list_unsynced_checkpoints(page_token=page.next_page_token)
    assert [cp.checkpoint_id for cp in page.checkpoints + rest.checkpoints] == [
        a0.checkpoint_id,
        b0.checkpoint_id,
        a1.checkpoint_id,
    ]
    outbox.delete_execution("a")
    assert unsynced_ids(outbox) == [b0.checkpoint_id]


def test_r1_bad_listing_requests_are_invalid_argument(outbox):
    """A foreign or forged page token and a negative page size are INVALID_ARGUMENT."""
    put(outbox, "run", 0)
    put(outbox, "run", 1)
    token = outbox.list_checkpoints("run", page_size=1).next_page_token
    with pytest.raises(InvalidArgumentError):
        outbox.list_unsynced_checkpoints(page_token=token)  # a ListCheckpoints token
    with pytest.raises(InvalidArgumentError):
        outbox.list_unsynced_checkpoints(page_token="not-a-token")
    with pytest.raises(InvalidArgumentError):
        outbox.list_unsynced_checkpoints(page_size=-1)


# --- R2 ------------------------------------------------------------------------------------


def test_r2_marking_synced_settles_once_and_a_retry_changes_nothing(sidecar, outbox):
    """The first mark settles and names the ids it settled (unknown ids ignored, a repeated id
    counted once); a retry settles nothing; settled rows leave the outbox for good."""
    a, b, c = (put(outbox, "run", i).checkpoint_id for i in range(3))
    assert outbox.mark_checkpoints_synced([b, "unknown", a, b]) == [b, a]
    assert outbox.mark_checkpoints_synced([a, b]) == []
    assert outbox.mark_checkpoints_synced([]) == []
    assert unsynced_ids(outbox) == [c]
    state = sync_errors(sidecar)
    assert state[a] == (True, None)
    assert state[b] == (True, None)
    assert state[c] == (False, None)


def test_r2_bad_mark_requests_are_invalid_argument_and_change_nothing(outbox):
    """An empty id, an id over 128 characters or more than 1000 ids are INVALID_ARGUMENT,
    and the valid ids of the same request stay unsettled."""
    a = put(outbox, "run").checkpoint_id
    for ids in ([a, ""], [a, "x" * 129], [a] + [f"id-{i}" for i in range(1000)]):
        with pytest.raises(InvalidArgumentError):
            outbox.mark_checkpoints_synced(ids)
    assert unsynced_ids(outbox) == [a]


# --- R3 ------------------------------------------------------------------------------------


def test_r3_quarantine_settles_with_its_reason_and_first_settlement_wins(sidecar, outbox):
    """A quarantined row leaves the outbox and keeps its reason; marking it synced later
    changes nothing, quarantining it again replaces the reason (as the reference does) without
    settling it twice; a synced row cannot be quarantined."""
    a, b, c = (put(outbox, "run", i).checkpoint_id for i in range(3))
    assert outbox.mark_checkpoints_synced([a]) == [a]
    assert outbox.quarantine_checkpoints({b: "HTTP 413: state too large", a: "late"}) == [b]
    assert outbox.quarantine_checkpoints({b: "another reason"}) == []
    assert outbox.mark_checkpoints_synced([b]) == []
    assert unsynced_ids(outbox) == [c]
    state = sync_errors(sidecar)
    assert state[a] == (True, None)
    assert state[b] == (True, "another reason")
    assert state[c] == (False, None)


def test_r3_bad_quarantine_requests_are_invalid_argument_and_change_nothing(outbox):
    """An empty or over-long reason, an empty id, and one id named twice with two reasons
    are INVALID_ARGUMENT, and nothing of the request is settled."""
    a, b = (put(outbox, "run", i).checkpoint_id for i in range(2))
    bad: list[Callable[[], object]] = [
        lambda: outbox.quarantine_checkpoints({a: "ok", b: ""}),
        lambda: outbox.quarantine_checkpoints({a: "ok", b: "r" * 1025}),
        lambda: outbox.quarantine_checkpoints({a: "ok", "": "why"}),
        lambda: outbox.quarantine_checkpoints({a: "nul \x00"}),
    ]
    for call in bad:
        with pytest.raises(InvalidArgumentError):
            call()
    from checkpointd_client.v1 import replication_service_pb2 as rsvc

    twice = rsvc.QuarantineCheckpointsRequest(
        namespace=outbox.namespace,
        quarantines=[
            rsvc.CheckpointQuarantine(checkpoint_id=a, reason="one"),
            rsvc.CheckpointQuarantine(checkpoint_id=a, reason="two"),
        ],
    )
    with pytest.raises(InvalidArgumentError, match="different reason"):
        outbox._invoke(outbox._replication.QuarantineCheckpoints, twice, None, ())
    assert unsynced_ids(outbox) == [a, b]


# --- R4 ------------------------------------------------------------------------------------


def test_r4_replicators_on_several_servers_settle_each_row_exactly_once_and_strand_none(
    sidecar_factory,
):
    """Six replicators, on two servers sharing one store, drain 300 checkpoints while a
    seventh lists and dies without settling: every row is settled by exactly one call, the
    dead one's rows are drained by the others, and the outbox ends empty."""
    servers = [sidecar_factory(), sidecar_factory()]
    namespace = "drain"
    with CheckpointdClient(servers[0].target, namespace=namespace) as writer:
        written = {put(writer, f"run-{i % 7}", i).checkpoint_id for i in range(300)}
        dead = writer.list_unsynced_checkpoints(page_size=50)  # listed, never settled
        assert len(dead.checkpoints) == 50

    settled: list[list[str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def replicator(index: int) -> None:
        server = servers[index % len(servers)]
        try:
            with CheckpointdClient(server.target, namespace=namespace) as c:
                while True:
                    page = c.list_unsynced_checkpoints(page_size=40)
                    if not page.checkpoints:
                        return
                    ids = [cp.checkpoint_id for cp in page.checkpoints]
                    # Alternate the two ways of settling, so both race.
                    if index % 3 == 0:
                        got = c.quarantine_checkpoints({cid: "refused" for cid in ids})
                    else:
                        got = c.mark_checkpoints_synced(ids)
                    with lock:
                        settled.append(got)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replicator, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    all_settled = [cid for batch in settled for cid in batch]
    assert len(all_settled) == len(set(all_settled)) == len(written)  # once each, none lost
    assert set(all_settled) == written
    with CheckpointdClient(servers[1].target, namespace=namespace) as reader:
        assert unsynced_ids(reader) == []
    assert all(settled_flag for settled_flag, _ in sync_errors(servers[0]).values())
