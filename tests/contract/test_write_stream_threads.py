"""Contracts S1 and S2 on the blocking client, whose threads share one Write stream: each
waiting thread gets the answer to its own write, however many wait at once, and a thread
whose answer never comes ends at its deadline while the stream goes on answering the others
(the stream is kept: it answered since that write left).
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from checkpointd_client import Checkpoint, CheckpointdClient, DeadlineExceededError
from tests.contract.conftest import NO_RETRY
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.shared_server import SharedSidecar

THREADS = 32
ROUNDS = 5
#: What a call may take beyond its timeout on a busy machine: bounded, not a speed claim.
SLACK = 1.5


def test_s1_each_of_32_threads_gets_the_answer_to_its_own_write(sidecar: SharedSidecar):
    """32 threads of one client put at once, round after round, on one stream: every call
    returns the row it wrote (its execution, checkpoint id and node index), never another
    thread's."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    start = threading.Barrier(THREADS)

    def writer(n: int) -> list[tuple[Checkpoint, Checkpoint]]:
        pairs = []
        start.wait()
        for i in range(ROUNDS):
            sent = Checkpoint(
                execution_id=f"{run}-{n}", checkpoint_id=uuid.uuid4().hex, node_index=i
            )
            pairs.append((sent, client.put_checkpoint(sent, view="basic")))
        return pairs

    with (
        GrpcFaultProxy(sidecar.target, write_stream=True, max_workers=8) as proxy,
        CheckpointdClient(proxy.target, namespace=sidecar.namespace, retry=NO_RETRY) as client,
        ThreadPoolExecutor(THREADS) as pool,
    ):
        results = [pair for pairs in pool.map(writer, range(THREADS)) for pair in pairs]
        assert proxy.streams_opened() == 1
        assert len(proxy.calls("PutCheckpoint")) == THREADS * ROUNDS
    assert len(results) == THREADS * ROUNDS
    for sent, stored in results:
        assert (stored.execution_id, stored.checkpoint_id, stored.node_index) == (
            sent.execution_id,
            sent.checkpoint_id,
            sent.node_index,
        )


def test_s2_a_write_whose_answer_never_comes_ends_at_its_deadline_as_others_are_answered(
    sidecar: SharedSidecar,
):
    """The proxy drops the answer to one thread's put and passes the others: that call ends
    ``DEADLINE_EXCEEDED`` within its deadline although the thread that reads the stream is
    busy handing out other threads' answers, every other put succeeds, and the stream, which
    answered after the lost write left, is not replaced."""
    timeout = 1.0
    run = f"run-{uuid.uuid4().hex[:8]}"
    with (
        GrpcFaultProxy(sidecar.target, write_stream=True, max_workers=8) as proxy,
        CheckpointdClient(
            proxy.target, namespace=sidecar.namespace, retry=NO_RETRY, timeout=timeout
        ) as client,
    ):
        client.put_checkpoint(Checkpoint(execution_id=f"{run}-warm"))  # the stream is open
        proxy.drop_reply_next("PutCheckpoint")
        outcome: dict[str, object] = {}

        def unanswered() -> None:
            started = time.monotonic()
            try:
                client.put_checkpoint(Checkpoint(execution_id=f"{run}-lost"))
            except DeadlineExceededError as exc:
                outcome["error"] = exc
            outcome["seconds"] = time.monotonic() - started

        lost = threading.Thread(target=unanswered)
        lost.start()
        deadline = time.monotonic() + 10
        while proxy.received("PutCheckpoint") < 2:  # the lost write has left
            assert time.monotonic() < deadline
            time.sleep(0.005)
        answered = 0
        while lost.is_alive():  # other threads' writes are answered meanwhile
            with ThreadPoolExecutor(4) as pool:
                answered += len(
                    list(
                        pool.map(
                            client.put_checkpoint,
                            [Checkpoint(execution_id=f"{run}-{n}") for n in range(4)],
                        )
                    )
                )
        lost.join()
        assert isinstance(outcome.get("error"), DeadlineExceededError)
        assert timeout * 0.9 <= float(outcome["seconds"]) <= timeout + SLACK  # type: ignore[arg-type]
        assert answered >= 4
        assert proxy.streams_opened() == 1
