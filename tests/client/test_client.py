"""The sync and asyncio clients, and the fastaiagent adapter, against a real server through a
real gRPC proxy that injects faults (``tests/support/grpc_fault_proxy.py``), on both backends.

The proxy fails calls before they reach the server (``UNAVAILABLE``, or any other status),
loses replies after the server did the work, or holds calls until their deadline; it records
every attempt as raw bytes. That is enough to check what the client sends on each attempt,
how it retries (P3), and that a retry after a lost reply is never a second write (C2, I3, D1).
The server's own behaviour is the contract suite's business (``tests/contract``).

Most tests run once per client: ``sync`` calls the blocking client directly (from inside the
test's event loop, which it does not need), ``async`` awaits the asyncio one.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import gc
import inspect
import itertools
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest

import checkpointd_client as cc
from checkpointd_client.fastaiagent import SidecarCheckpointer
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
)
from tests.contract.helpers import checkpoint, interrupted
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

FAST_RETRY = cc.RetryPolicy(initial_backoff=0.01, max_backoff=0.02)
NO_RETRY = cc.RetryPolicy(max_attempts=1)

PutRequest = checkpoint_service_pb2.PutCheckpointRequest
RecordRequest = interrupt_service_pb2.RecordInterruptRequest
ClaimRequest = interrupt_service_pb2.ClaimInterruptRequest
PutResultRequest = idempotency_service_pb2.PutIdempotencyResultRequest

#: The request message of each method, to parse what the proxy recorded.
REQUEST_TYPES: dict[str, Any] = {
    "PutCheckpoint": PutRequest,
    "GetLatestCheckpoint": checkpoint_service_pb2.GetLatestCheckpointRequest,
    "ListCheckpoints": checkpoint_service_pb2.ListCheckpointsRequest,
    "RecordInterrupt": RecordRequest,
    "ClaimInterrupt": ClaimRequest,
    "ListPendingInterrupts": interrupt_service_pb2.ListPendingInterruptsRequest,
    "PutIdempotencyResult": PutResultRequest,
    "GetIdempotencyResult": idempotency_service_pb2.GetIdempotencyResultRequest,
}

#: A value that a sloppy JSON path would change (J1), for the idempotency cache.
VALUE = {"n": 2**70, "f": 0.1, "s": "ü", "l": [None, True]}


class AnyClient:
    """A sync or asyncio client whose every method is awaited the same way."""

    def __init__(self, client: cc.CheckpointdClient | cc.AsyncCheckpointdClient) -> None:
        self.raw = client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.raw, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call

    async def close(self) -> None:
        if isinstance(self.raw, cc.AsyncCheckpointdClient):
            await self.raw.aclose()
        else:
            self.raw.close()


@pytest.fixture
def proxy(sidecar: Sidecar | SharedSidecar) -> Iterator[GrpcFaultProxy]:
    """A fault proxy on a Unix socket, in front of the server's Unix socket."""
    with GrpcFaultProxy(sidecar.target) as p:
        yield p


@pytest.fixture
def direct(sidecar: Sidecar | SharedSidecar) -> Iterator[cc.CheckpointdClient]:
    """A client straight to the server, without retries: to set up and inspect the store."""
    with cc.CheckpointdClient(
        sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY
    ) as client:
        yield client


@pytest.fixture(params=["sync", "async"])
async def make_client(
    request: pytest.FixtureRequest, proxy: GrpcFaultProxy, sidecar: Sidecar | SharedSidecar
) -> AsyncIterator[Callable[..., AnyClient]]:
    """Build clients of one kind on the proxy (fast retries and the test's namespace unless
    told); closed afterwards."""
    made: list[AnyClient] = []

    def make(**options: Any) -> AnyClient:
        options.setdefault("retry", FAST_RETRY)
        options.setdefault("namespace", sidecar.namespace)
        options.setdefault("timeout", 10.0)
        target = options.pop("target", proxy.target)
        kind = cc.CheckpointdClient if request.param == "sync" else cc.AsyncCheckpointdClient
        client = AnyClient(kind(target, **options))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
def execution_id() -> str:
    """A fresh execution id."""
    return f"exec-{uuid.uuid4().hex[:12]}"


def _requests(proxy: GrpcFaultProxy, method: str) -> list[Any]:
    return proxy.requests(method, REQUEST_TYPES[method].FromString)


def _state(direct: cc.CheckpointdClient, execution_id: str) -> tuple[Any, ...]:
    """What the store holds for one execution, with the per-write ids and times blanked out,
    so that two executions built by the same calls compare equal."""
    checkpoints = [
        dataclasses.replace(c, execution_id="", checkpoint_id="", created_at=None, sequence=0)
        for c in direct.list_checkpoints(execution_id, page_size=1000).checkpoints
    ]
    pending = [
        dataclasses.replace(p, execution_id="", checkpoint_id="", created_at=None)
        for p in direct.list_pending_interrupts(page_size=1000).pending_interrupts
        if p.execution_id == execution_id
    ]
    return checkpoints, pending, direct.get_idempotent(execution_id, "k")


# --- retries (P3) ---------------------------------------------------------------------------


async def test_p3_c2_unavailable_is_retried_with_the_same_checkpoint_id_and_request_id(
    proxy, direct, make_client, execution_id
):
    """Two UNAVAILABLE answers, then success: the three attempts carry one request_id and the
    one checkpoint_id the client generated, and one row is stored."""
    client = make_client()
    proxy.fail_next("PutCheckpoint", times=2)
    stored = await client.put_checkpoint(checkpoint(execution_id, checkpoint_id=""))

    sent = _requests(proxy, "PutCheckpoint")
    assert len(sent) == 3
    assert proxy.forwarded("PutCheckpoint") == 1
    assert len({r.request_id for r in sent}) == 1
    assert sent[0].request_id
    assert {r.checkpoint.checkpoint_id for r in sent} == {stored.checkpoint_id}
    assert direct.list_checkpoints(execution_id).checkpoints == [stored]


async def test_p3_retries_stop_after_max_attempts_with_the_last_error(
    proxy, direct, make_client, execution_id
):
    """After max_attempts UNAVAILABLE answers the last one is raised, reason included; the
    client is still usable afterwards."""
    policy = cc.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.01)
    client = make_client(retry=policy)
    proxy.fail_next("GetLatestCheckpoint", times=10, reason="STORE_UNAVAILABLE")
    with pytest.raises(cc.UnavailableError) as err:
        await client.get_latest_checkpoint(execution_id)
    assert err.value.reason == "STORE_UNAVAILABLE"
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert isinstance(err.value.__cause__, grpc.RpcError)
    assert proxy.received("GetLatestCheckpoint") == 3
    assert proxy.forwarded("GetLatestCheckpoint") == 0

    proxy.clear_faults()
    stored = direct.put_checkpoint(checkpoint(execution_id))
    assert await client.get_latest_checkpoint(execution_id) == stored


async def test_p3_only_unavailable_is_retried(proxy, make_client):
    """Every other status injected in front of the server is raised after one attempt, as
    its own error class."""
    client = make_client()
    expected = {
        grpc.StatusCode.INTERNAL: cc.InternalError,
        grpc.StatusCode.UNKNOWN: cc.InternalError,
        grpc.StatusCode.DEADLINE_EXCEEDED: cc.DeadlineExceededError,
        grpc.StatusCode.RESOURCE_EXHAUSTED: cc.ResourceExhaustedError,
        grpc.StatusCode.INVALID_ARGUMENT: cc.InvalidArgumentError,
        grpc.StatusCode.PERMISSION_DENIED: cc.PermissionDeniedError,
        grpc.StatusCode.ABORTED: cc.CheckpointdError,
    }
    for code, error in expected.items():
        proxy.reset_counts()
        proxy.fail_next("PruneCheckpoints", code, times=2, reason="SOME_REASON")
        with pytest.raises(error) as err:
            await client.prune(timedelta(days=1))
        assert type(err.value) is error, code
        assert (err.value.code, err.value.reason) == (code, "SOME_REASON")
        assert proxy.received("PruneCheckpoints") == 1, code
        proxy.clear_faults()


async def test_c2_p3_server_refusals_are_not_retried_and_keep_their_error_info(
    proxy, direct, make_client, execution_id
):
    """NOT_FOUND, ALREADY_EXISTS (an IntegrityError) and INVALID_ARGUMENT from the server
    reach the client once, through the proxy, with their ErrorInfo reason and metadata."""
    client = make_client()
    with pytest.raises(cc.NotFoundError) as missing:
        await client.get_latest_checkpoint(execution_id)
    assert missing.value.reason == "NO_CHECKPOINTS"

    first = direct.put_checkpoint(checkpoint(execution_id, checkpoint_id="dup", node_id="a"))
    with pytest.raises(cc.IntegrityError) as dup:
        await client.put_checkpoint(checkpoint(execution_id, checkpoint_id="dup", node_id="b"))
    assert type(dup.value) is cc.AlreadyExistsError
    assert dup.value.reason == "CHECKPOINT_EXISTS"
    assert direct.list_checkpoints(execution_id).checkpoints == [first]

    with pytest.raises(cc.InvalidArgumentError) as bad:
        await client.put_checkpoint(checkpoint(""))
    assert bad.value.reason == "INVALID_FIELD"
    assert bad.value.metadata["field"] == "checkpoint.execution_id"

    assert proxy.received("GetLatestCheckpoint") == 1
    assert proxy.received("PutCheckpoint") == 2


async def test_p3_retries_never_outlive_the_deadline(proxy, make_client, execution_id):
    """With attempts to spare, retrying stops by the call's one deadline, and each attempt
    is sent with what is left of it, not a fresh timeout."""
    policy = cc.RetryPolicy(max_attempts=10_000, initial_backoff=0.02, max_backoff=0.05)
    client = make_client(retry=policy)
    proxy.fail_next("GetIdempotencyResult", times=100_000)
    # Were the deadline renewed per attempt, the 10,000 attempts would outlast the test's
    # timeout; instead the call gives up, and every attempt carried what was left of 0.5 s.
    # It ends with the last refusal, or, when the deadline passes while an attempt is on
    # its way (a busy machine), with DEADLINE_EXCEEDED; never by starting a fresh one.
    with pytest.raises((cc.UnavailableError, cc.DeadlineExceededError)):
        await client.get_idempotent(execution_id, "k", timeout=0.5)

    deadlines = [c.time_remaining for c in proxy.calls("GetIdempotencyResult")]
    # A backoff of at least 0.02 s between attempts leaves room for at most 27 in ~0.51 s.
    assert 2 < len(deadlines) <= 27
    assert all(d is not None for d in deadlines)
    # gRPC rounds the timeout header up, so the first attempt may arrive with a hair over 0.5 s.
    assert deadlines[0] <= 0.51
    assert all(later < earlier for earlier, later in itertools.pairwise(deadlines))
    # Each retry waited at least initial_backoff, and the deadline shrank by at least that.
    assert deadlines[0] - deadlines[-1] >= 0.02 * (len(deadlines) - 1) - 0.005


async def test_p3_a_stalled_call_ends_deadline_exceeded_and_is_not_retried(
    proxy, direct, make_client, execution_id
):
    """A call the server never answers fails with DeadlineExceededError at its deadline,
    once; the next call on the same client works."""
    client = make_client()
    stored = direct.put_checkpoint(checkpoint(execution_id))
    proxy.stall_next("GetLatestCheckpoint")
    with pytest.raises(cc.DeadlineExceededError):
        await client.get_latest_checkpoint(execution_id, timeout=0.3)
    assert proxy.received("GetLatestCheckpoint") == 1
    [stalled] = proxy.calls("GetLatestCheckpoint")
    assert stalled.time_remaining is not None
    assert stalled.time_remaining <= 0.31  # the call's own deadline went with it
    assert proxy.forwarded("GetLatestCheckpoint") == 0
    assert await client.get_latest_checkpoint(execution_id) == stored


# --- lost replies: a retry is never a second write (C2, I3, D1) -------------------------------


async def test_c2_lost_put_reply_ends_in_the_state_of_one_put(
    proxy, direct, make_client, execution_id
):
    """The server stores the checkpoint, the reply is lost, the retry (same request_id and
    checkpoint_id) is answered with the stored row: one row, as after one clean put."""
    client = make_client()
    control = f"{execution_id}-control"
    await client.put_checkpoint(checkpoint(control, checkpoint_id="", state_snapshot=VALUE))
    proxy.reset_counts()

    proxy.lose_reply_next("PutCheckpoint")
    stored = await client.put_checkpoint(
        checkpoint(execution_id, checkpoint_id="", state_snapshot=VALUE)
    )

    sent = _requests(proxy, "PutCheckpoint")
    assert proxy.forwarded("PutCheckpoint") == 2
    assert sent[0] == sent[1]
    assert sent[0].checkpoint.checkpoint_id == stored.checkpoint_id
    assert direct.get_checkpoint(execution_id, stored.checkpoint_id) == stored
    assert _state(direct, execution_id) == _state(direct, control)


async def test_c2_lost_record_interrupt_reply_ends_in_the_state_of_one_record(
    proxy, direct, make_client, execution_id
):
    """A record whose reply was lost is retried and answered like the first call (pending
    row created): one interrupted checkpoint and one pending row."""
    client = make_client()
    control = f"{execution_id}-control"
    cp, pending = interrupted(control, checkpoint_id="")
    await client.record_interrupt(cp, pending)
    proxy.reset_counts()

    proxy.lose_reply_next("RecordInterrupt")
    cp, pending = interrupted(execution_id, checkpoint_id="")
    result = await client.record_interrupt(cp, pending)

    sent = _requests(proxy, "RecordInterrupt")
    assert proxy.forwarded("RecordInterrupt") == 2
    assert sent[0] == sent[1]
    assert result.pending_created
    assert result.checkpoint == direct.get_latest_checkpoint(execution_id)
    assert result.pending.checkpoint_id == result.checkpoint.checkpoint_id
    assert _state(direct, execution_id) == _state(direct, control)
    assert len(_state(direct, execution_id)[1]) == 1


async def test_i3_lost_claim_reply_retry_gets_the_same_row(
    proxy, direct, make_client, execution_id
):
    """The claim succeeds on the server, the reply is lost; the retry carries the same claim
    token and gets the row again instead of NOT_FOUND, so the run is not stranded. Nobody
    else can claim it afterwards."""
    client = make_client()
    control = f"{execution_id}-control"
    direct.record_interrupt(*interrupted(control))
    await client.claim_interrupt(control)
    recorded = direct.record_interrupt(*interrupted(execution_id))
    proxy.reset_counts()

    proxy.lose_reply_next("ClaimInterrupt")
    claimed = await client.claim_interrupt(execution_id)

    sent = _requests(proxy, "ClaimInterrupt")
    assert proxy.forwarded("ClaimInterrupt") == 2
    assert sent[0] == sent[1]
    assert sent[0].claim_token
    assert claimed == recorded.pending
    with pytest.raises(cc.NotFoundError):
        await client.claim_interrupt(execution_id)
    with pytest.raises(cc.NotFoundError):
        direct.claim_interrupt(execution_id)
    assert _state(direct, execution_id) == _state(direct, control)


async def test_d1_lost_put_idempotent_reply_ends_in_the_state_of_one_put(
    proxy, direct, make_client, execution_id
):
    """A cached result whose reply was lost is retried with its request_id; the cache holds
    the one value, exactly."""
    client = make_client()
    control = f"{execution_id}-control"
    await client.put_idempotent(control, "k", VALUE)
    proxy.reset_counts()

    proxy.lose_reply_next("PutIdempotencyResult")
    assert await client.put_idempotent(execution_id, "k", VALUE) is None

    sent = _requests(proxy, "PutIdempotencyResult")
    assert proxy.forwarded("PutIdempotencyResult") == 2
    assert sent[0] == sent[1]
    assert direct.get_idempotent(execution_id, "k") == cc.IdempotencyResult(found=True, value=VALUE)
    assert _state(direct, execution_id) == _state(direct, control)


# --- what every request carries -------------------------------------------------------------


async def test_n1_namespace_and_metadata_go_with_every_request(
    sidecar, proxy, direct, make_client, execution_id
):
    """The client's namespace is in every request; its metadata goes with every call, a
    call's own metadata only with that call. The server keeps the namespace apart."""
    team = f"{sidecar.namespace}-a"
    client = make_client(namespace=team, metadata=[("x-client", "1")])
    await client.put_checkpoint(checkpoint(execution_id), metadata=[("x-call", "2")])
    await client.get_idempotent(execution_id, "k")
    await client.list_pending_interrupts()

    calls = proxy.calls()
    assert [c.method.rsplit("/", 1)[1] for c in calls] == [
        "PutCheckpoint",
        "GetIdempotencyResult",
        "ListPendingInterrupts",
    ]
    for call in calls:
        request = REQUEST_TYPES[call.method.rsplit("/", 1)[1]].FromString(call.request)
        assert request.namespace == team
        assert ("x-client", "1") in call.metadata
    assert ("x-call", "2") in calls[0].metadata
    assert all(("x-call", "2") not in c.metadata for c in calls[1:])
    with pytest.raises(cc.NotFoundError):
        direct.get_latest_checkpoint(execution_id)  # the test's namespace has no such run


async def test_p1_clients_reach_the_server_through_a_tcp_proxy(
    sidecar, direct, make_client, execution_id
):
    """A host:port target works like a Unix socket (here, a loopback proxy to the TCP port)."""
    with GrpcFaultProxy(sidecar.tcp_target, listen="tcp") as tcp_proxy:
        assert tcp_proxy.target.startswith("127.0.0.1:")
        client = make_client(target=tcp_proxy.target)
        stored = await client.put_checkpoint(checkpoint(execution_id))
        assert direct.get_latest_checkpoint(execution_id) == stored
        await client.close()
        assert tcp_proxy.forwarded("PutCheckpoint") == 1


def test_p1_async_client_built_outside_the_event_loop(sidecar, execution_id):
    """The asyncio client may be built before a loop runs; its channel opens in the loop."""
    client = cc.AsyncCheckpointdClient(sidecar.target, namespace=sidecar.namespace, retry=NO_RETRY)

    async def use() -> cc.Checkpoint:
        async with client:
            return await client.put_checkpoint(checkpoint(execution_id))

    assert asyncio.run(use()).execution_id == execution_id


# --- the fastaiagent adapter through the proxy ------------------------------------------------


@pytest.fixture
def adapter(
    proxy: GrpcFaultProxy, sidecar: Sidecar | SharedSidecar
) -> Iterator[SidecarCheckpointer]:
    """The fastaiagent adapter on the proxy, with fast retries."""
    with SidecarCheckpointer(
        proxy.target, namespace=sidecar.namespace, retry=FAST_RETRY
    ) as checkpointer:
        yield checkpointer


def test_c4_adapter_list_pages_past_1000_newest_first(proxy, direct, adapter, execution_id):
    """list(limit=N) asks for pages of at most 1000 rows, newest first, only as many as it
    needs, and returns the newest N oldest first."""
    ids = [
        direct.put_checkpoint(checkpoint(execution_id, node_index=1100 - i)).checkpoint_id
        for i in range(1100)
    ]

    def listed(limit: int) -> tuple[list[str], list[int]]:
        proxy.reset_counts()
        rows = adapter.list(execution_id, limit=limit)
        sent = _requests(proxy, "ListCheckpoints")
        assert all(r.descending for r in sent)
        return [c.checkpoint_id for c in rows], [r.page_size for r in sent]

    assert listed(1050) == (ids[50:], [1000, 50])
    assert listed(5000) == (ids, [1000, 1000])
    assert listed(3) == (ids[-3:], [3])
    assert listed(0) == ([], [])


def test_c2_adapter_put_after_a_lost_reply_stores_one_row(proxy, adapter, execution_id):
    """The adapter's put survives a lost reply: the object keeps the id it was sent with and
    the run holds one row."""
    from fastaiagent.chain.checkpoint import Checkpoint

    cp = Checkpoint(execution_id=execution_id, chain_name="flow", node_id="n")
    proxy.lose_reply_next("PutCheckpoint")
    adapter.put(cp)
    sent = _requests(proxy, "PutCheckpoint")
    assert len(sent) == 2
    assert sent[0] == sent[1]
    assert sent[0].checkpoint.checkpoint_id == cp.checkpoint_id
    assert adapter.list(execution_id) == [cp]


def test_i3_adapter_claim_after_a_lost_reply_returns_the_row_not_none(proxy, adapter, execution_id):
    """delete_pending_interrupt_atomic whose reply was lost still returns the pending row (a
    None would tell fastaiagent the run was already resumed, and nobody would resume it)."""
    from fastaiagent.chain.checkpoint import Checkpoint
    from fastaiagent.checkpointers import PendingInterrupt

    cp = Checkpoint(execution_id=execution_id, chain_name="flow", node_id="n", status="interrupted")
    pending = PendingInterrupt(
        execution_id=execution_id, chain_name="flow", node_id="n", reason="r"
    )
    adapter.record_interrupt(cp, pending)
    proxy.lose_reply_next("ClaimInterrupt")
    assert adapter.delete_pending_interrupt_atomic(execution_id) == pending
    assert proxy.forwarded("ClaimInterrupt") == 2
    assert adapter.delete_pending_interrupt_atomic(execution_id) is None


# --- a client dropped without close() is freed (P7) --------------------------------------------

#: Holds a client the way fastaiagent holds the checkpointer of the run in progress.
_CURRENT: contextvars.ContextVar[object] = contextvars.ContextVar("current_client")


def test_p7_an_adapter_dropped_without_close_is_freed_with_its_stream(
    sidecar: Sidecar | SharedSidecar, execution_id: str
) -> None:
    """An adapter that wrote on its stream from a context holding it, then was dropped, is
    freed: the stream's threads keep none of the caller's contextvars."""

    from fastaiagent.chain.checkpoint import Checkpoint

    def use() -> weakref.ref[SidecarCheckpointer]:
        adapter = SidecarCheckpointer(sidecar.target, namespace=sidecar.namespace)
        _CURRENT.set(adapter)
        adapter.put(Checkpoint(chain_name="flow", execution_id=execution_id, node_id="a"))
        return weakref.ref(adapter)

    ref = contextvars.Context().run(use)
    gc.collect()
    assert ref() is None


async def test_p7_an_async_client_dropped_without_close_is_freed_with_its_stream(
    sidecar: Sidecar | SharedSidecar, execution_id: str
) -> None:
    """The same for an asyncio client, its loop still running: the stream's tasks keep none
    of the caller's contextvars."""

    async def use() -> weakref.ref[cc.AsyncCheckpointdClient]:
        client = cc.AsyncCheckpointdClient(sidecar.target, namespace=sidecar.namespace)
        _CURRENT.set(client)
        await client.put_checkpoint(checkpoint(execution_id))
        return weakref.ref(client)

    ref = await asyncio.get_running_loop().create_task(use(), context=contextvars.Context())
    await asyncio.sleep(0)
    gc.collect()
    assert ref() is None
