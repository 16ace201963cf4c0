"""Contract C7's batching, on both backends: a large prune never holds other callers for long.

What is asserted is order, not latency. The prune runs in bounded batches, each its own
transaction that sees every row committed before it; so when a writer keeps writing
prunable (backdated) rows during a large prune, some of those writes are acknowledged while
the prune is still running and then deleted by one of its later batches. A prune done in one
transaction could do neither: on SQLite the writes would wait for its end, on Postgres its one
statement would not see them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from checkpointd.config import Settings
from checkpointd_client import CheckpointdClient, NotFoundError
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint
from tests.reliability.store_dump import StoreReader
from tests.support.sidecar import Sidecar, StoreSpec

# The server's batch size is a fixed setting (Settings.prune_batch_size, not a flag): seed
# enough rows for many batches of it.
BATCH = Settings.__dataclass_fields__["prune_batch_size"].default
assert isinstance(BATCH, int)
SEEDED = 20 * BATCH
OLD = datetime.now(tz=UTC) - timedelta(days=2)
COLUMNS = (
    "namespace, execution_id, checkpoint_id, request_id, parent_checkpoint_id, chain_name, "
    "node_id, node_index, step_type, status, state_snapshot_json, node_input_json, "
    "node_output_json, iteration, iteration_counters_json, interrupt_reason, "
    "interrupt_context_json, agent_path, created_at"
)


def _seed(spec: StoreSpec, template_id: str, count: int) -> None:
    """Copy one stored row ``count`` times with new ids, in one statement (fast on both)."""
    selected = []
    for column in (c.strip() for c in COLUMNS.split(",")):
        if column == "checkpoint_id":
            selected.append("t.checkpoint_id || '-' || n.i")
        elif column == "request_id":
            # No request id: Postgres keeps it as NULL, SQLite as ''; either way it is outside
            # the unique index of request ids (C9).
            selected.append("''" if spec.backend == "sqlite" else "NULL")
        else:
            selected.append(f"t.{column}")
    reader = StoreReader(spec)
    try:
        table = reader.table("checkpoints")
        reader.query(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) "
            f"INSERT INTO {table} ({COLUMNS}) SELECT {', '.join(selected)} FROM {table} t, n "
            f"WHERE t.checkpoint_id = '{template_id}'"
        )
        [(total,)] = reader.query(f"SELECT count(*) FROM {table}")
        assert total == count + 1
    finally:
        reader.close()


def test_c7_writes_go_on_and_interleave_with_the_batches_of_a_large_prune(
    sidecar_factory: Callable[..., Sidecar], store_spec: StoreSpec
) -> None:
    """While a prune of 20 batches' worth of rows runs, a writer's puts keep succeeding, and
    puts sent after its first batch had committed (seen from outside the server) and
    acknowledged before its reply are deleted by that same prune: later batches ran after
    them. The prune counts them."""
    server = sidecar_factory()
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        template = client.put_checkpoint(checkpoint("seeded", created_at=OLD))
    _seed(store_spec, template.checkpoint_id, SEEDED)

    prune_sent = threading.Event()
    first_batch_seen = threading.Event()
    prune_answered = threading.Event()
    running = threading.Event()
    failures: list[BaseException] = []
    before_prune: list[str] = []  # acknowledged before the prune was sent
    between_batches: list[str] = []  # sent after its first batch, acknowledged before its reply
    after_prune: list[str] = []  # sent after its reply
    everything: list[str] = []

    def watch_first_batch() -> None:
        """Set first_batch_seen once a committed batch shows in the store."""
        reader = StoreReader(store_spec)
        table = reader.table("checkpoints")
        try:
            while not prune_answered.is_set():
                [(left,)] = reader.query(
                    f"SELECT count(*) FROM {table} WHERE execution_id = 'seeded'"
                )
                if left < SEEDED + 1:
                    first_batch_seen.set()
                    return
        except BaseException as exc:
            failures.append(exc)
        finally:
            reader.close()

    def write() -> None:
        try:
            with CheckpointdClient(server.target, retry=NO_RETRY) as writer:
                while True:
                    sent_after_prune = prune_sent.is_set()
                    sent_after_batch = first_batch_seen.is_set()
                    sent_after_reply = prune_answered.is_set()
                    cp = checkpoint("writer", checkpoint_id=uuid.uuid4().hex, created_at=OLD)
                    writer.put_checkpoint(cp)
                    everything.append(cp.checkpoint_id)
                    if not sent_after_prune:
                        before_prune.append(cp.checkpoint_id)
                        if len(before_prune) >= 3:
                            running.set()
                    elif sent_after_reply:
                        after_prune.append(cp.checkpoint_id)
                        if len(after_prune) >= 3:
                            return
                    elif sent_after_batch and not prune_answered.is_set():
                        between_batches.append(cp.checkpoint_id)
        except BaseException as exc:
            failures.append(exc)
        finally:
            running.set()

    threads = [threading.Thread(target=write), threading.Thread(target=watch_first_batch)]
    threads[0].start()
    try:
        assert running.wait(60)
        assert not failures, failures
        threads[1].start()
        with CheckpointdClient(server.target, retry=NO_RETRY, timeout=120) as client:
            prune_sent.set()
            result = client.prune(timedelta(days=1))
            prune_answered.set()
    finally:
        prune_answered.set()
        for thread in threads:
            if thread.ident is not None:  # started
                thread.join(60)
    assert not failures, failures
    assert first_batch_seen.is_set()

    with CheckpointdClient(server.target, retry=NO_RETRY) as client:

        def deleted(ids: list[str]) -> list[str]:
            gone = []
            for checkpoint_id in ids:
                try:
                    client.get_checkpoint("writer", checkpoint_id)
                except NotFoundError:
                    gone.append(checkpoint_id)
            return gone

        interleaved = deleted(between_batches)
        assert deleted(before_prune) == before_prune
        assert deleted(after_prune) == []
        deleted_writes = deleted(everything)
    # Writes kept being acknowledged during the prune, and a later batch of it deleted them.
    assert len(interleaved) >= 3, (len(between_batches), len(interleaved))
    assert result.checkpoints_deleted == SEEDED + 1 + len(deleted_writes)
