"""Contract B1: no single stream or call makes the server hold more than a bounded amount of
memory, on both backends, through real server processes.

Memory is read from outside, in the server process's /proc/<pid>/status: VmRSS for what
stalled streams hold, VmHWM (the peak) for what one call loads and lets go of again.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server

#: Longest wait for something expected; reached only when a test is failing.
PATIENCE = 60.0
MIB = 1024 * 1024
#: A client that reads nothing keeps only the initial HTTP/2 window of data in flight.
STALLED_OPTIONS = [("grpc.http2.bdp_probe", 0)]
KINDS = {
    svc.INTERRUPT_EVENT_TYPE_ADDED: "added",
    svc.INTERRUPT_EVENT_TYPE_CLAIMED: "claimed",
    svc.INTERRUPT_EVENT_TYPE_REMOVED: "removed",
}


def _memory_mib(server: Sidecar, field: str) -> float:
    """VmRSS or VmHWM of the server process, in MiB."""
    assert server.process is not None
    assert server.process.poll() is None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/{server.process.pid}/status")


def _reason(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)
    assert status is not None, f"no status details: {error}"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return str(info.reason)


@contextlib.contextmanager
def _watch(
    target: str, *, stalled: bool = False, **request: Any
) -> Iterator[Iterator[svc.WatchInterruptsResponse]]:
    """A raw WatchInterrupts call (an iterator of responses), cancelled at the end."""
    options = STALLED_OPTIONS if stalled else []
    with grpc.insecure_channel(target, options=options) as channel:
        stub = svc_grpc.InterruptServiceStub(channel)
        call = stub.WatchInterrupts(svc.WatchInterruptsRequest(**request), timeout=PATIENCE * 4)
        try:
            yield call
        finally:
            call.cancel()


def _snapshot(call: Any) -> tuple[list[str], int]:
    """Read a stream's snapshot: the execution ids of its rows, and its cursor."""
    ids: list[str] = []
    for message in call:
        if message.HasField("snapshot_complete"):
            return ids, message.snapshot_complete.cursor
        assert message.HasField("snapshot"), message
        ids.append(message.snapshot.execution_id)
    raise AssertionError("the stream ended inside its snapshot")


def _record(client: CheckpointdClient, execution_id: str, blob_chars: int) -> None:
    cp, pending = interrupted(execution_id, interrupt_context={"blob": "x" * blob_chars})
    client.record_interrupt(cp, pending)


# --- watch snapshots -------------------------------------------------------------------------


def test_b1_watchers_that_stop_reading_in_the_snapshot_hold_bounded_memory(
    sidecar: Sidecar,
) -> None:
    """Eight streams that stop reading at the first row of a 19 MiB snapshot hold a page each,
    not a copy of the snapshot each; once read, each still delivers every row once, newest
    first."""
    rows, stalled = 300, 8
    ids = [f"big-{i:03d}" for i in range(rows)]
    with CheckpointdClient(sidecar.target, retry=NO_RETRY) as client:
        for execution_id in ids:
            _record(client, execution_id, 64 * 1024)
    with _watch(sidecar.target) as warm_up:  # the code paths and pools, once
        assert _snapshot(warm_up)[0] == ids[::-1]
    baseline = _memory_mib(sidecar, "VmRSS")
    with contextlib.ExitStack() as stack:
        calls = [stack.enter_context(_watch(sidecar.target, stalled=True)) for _ in range(stalled)]
        for call in calls:
            assert next(call).snapshot.execution_id == ids[-1]  # the stream is under way
        time.sleep(2.0)  # let the server write until every stream blocks
        grown = _memory_mib(sidecar, "VmRSS") - baseline
        # The old server held one copy of the snapshot per stream: about 150 MiB here.
        assert grown < 40, f"{stalled} stalled streams grew the server by {grown:.0f} MiB"
        for call in calls:
            rest, _ = _snapshot(call)
            assert [ids[-1], *rest] == ids[::-1]


def test_b1_a_paged_snapshot_is_the_pending_set_at_its_cursor(sidecar_factory: Any) -> None:
    """A snapshot read in many small pages while the pending set changes is still the set at
    its cursor: rows claimed or removed meanwhile are in it, rows added meanwhile are not, no
    row is lost or repeated, newest first; the events after its cursor are exactly the
    changes."""
    server = sidecar_factory("--watch-buffer", "8")  # eight rows a page at most
    ids = [f"page-{i:03d}" for i in range(200)]
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        for execution_id in ids:
            _record(client, execution_id, 16 * 1024)
        with _watch(server.target, stalled=True) as stream:
            first = next(stream)
            assert first.snapshot.execution_id == ids[-1]
            # The oldest rows are sent last: change them while the stream is stuck early on.
            changes: list[tuple[str, str]] = []
            for execution_id in ids[:10]:
                assert client.claim_interrupt(execution_id) is not None
                changes.append(("claimed", execution_id))
            for execution_id in ids[10:15]:
                client.delete_execution(execution_id)
                changes.append(("removed", execution_id))
            added = [f"late-{uuid.uuid4().hex[:8]}" for _ in range(5)]
            for execution_id in added:
                _record(client, execution_id, 16 * 1024)
                changes.append(("added", execution_id))
            client.claim_interrupt(added[0])
            changes.append(("claimed", added[0]))

            rest, cursor = _snapshot(stream)
            assert [ids[-1], *rest] == ids[::-1]
            events: list[tuple[str, str]] = []
            cursors: list[int] = []
            for message in stream:
                if message.HasField("progress"):
                    continue
                events.append((KINDS[message.event.type], message.event.pending.execution_id))
                cursors.append(message.event.cursor)
                if len(events) == len(changes):
                    break
        assert events == changes
        assert cursors == sorted(cursors)
        assert cursors[0] > cursor
        with _watch(server.target) as fresh:
            now, _ = _snapshot(fresh)
        assert now == added[:0:-1] + ids[:14:-1]


# --- list pages and event reads --------------------------------------------------------------


def test_b1_list_pages_fill_up_to_the_size_limit_and_lose_no_row(sidecar_factory: Any) -> None:
    """Rows near the size limit are listed a few per page, in order, none lost or repeated,
    in both directions; pending interrupts likewise."""
    server = sidecar_factory("--max-message-bytes", str(MIB))
    execution_id = f"exec-{uuid.uuid4().hex[:8]}"
    sizes = [300_000, 1_000, 300_000, 300_000, 5, 300_000, 300_000, 1_000] * 2
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        written = []
        for i, size in enumerate(sizes):
            cp = checkpoint(execution_id, node_index=i, state_snapshot={"blob": "y" * size})
            written.append(client.put_checkpoint(cp).checkpoint_id)
        for descending in (False, True):
            listed: list[str] = []
            pages = 0
            token = ""
            while True:
                page = client.list_checkpoints(
                    execution_id, page_size=1000, page_token=token, descending=descending
                )
                pages += 1
                listed += [c.checkpoint_id for c in page.checkpoints]
                token = page.next_page_token
                if not token:
                    break
            assert listed == (written[::-1] if descending else written)
            assert pages >= 4  # about 3 large rows fit one MiB

        pending_ids = [f"near-{i:02d}" for i in range(len(sizes))]
        for pending_id, size in zip(pending_ids, sizes, strict=True):
            _record(client, pending_id, size)
        pending: list[str] = []
        token = ""
        while True:
            pending_page = client.list_pending_interrupts(page_size=1000, page_token=token)
            pending += [p.execution_id for p in pending_page.pending_interrupts]
            token = pending_page.next_page_token
            if not token:
                break
        assert pending == pending_ids[::-1]


def test_b1_a_list_call_loads_only_the_rows_that_fit_its_reply(sidecar_factory: Any) -> None:
    """ListCheckpoints(page_size=1000) over 1 MB rows with a 2 MiB limit reads the few rows
    that fit, not all of them."""
    server = sidecar_factory("--max-message-bytes", str(2 * MIB))
    execution_id = f"exec-{uuid.uuid4().hex[:8]}"
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        for i in range(40):
            state = {"blob": f"{i}" + "z" * 1_000_000}
            client.put_checkpoint(checkpoint(execution_id, node_index=i, state_snapshot=state))
        client.list_checkpoints(execution_id, page_size=1)  # warm-up
        peak = _memory_mib(server, "VmHWM")
        page = client.list_checkpoints(execution_id, page_size=1000)
        grown = _memory_mib(server, "VmHWM") - peak
    assert 1 <= len(page.checkpoints) <= 4
    assert page.next_page_token
    # The old server loaded every one of the 40 rows: about 45 MiB more at its peak.
    assert grown < 20, f"one list call raised the server's peak memory by {grown:.0f} MiB"


def test_b1_a_pending_list_loads_only_the_rows_that_fit_its_reply(
    sidecar_factory: Any,
) -> None:
    """ListPendingInterrupts(page_size=1000) over 0.9 MB rows with a 2 MiB limit reads the few
    rows that fit, not all of them."""
    server = sidecar_factory("--max-message-bytes", str(2 * MIB))
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        big = [f"huge-{i:02d}" for i in range(40)]
        for execution_id in big:
            _record(client, execution_id, 900_000)
        client.list_pending_interrupts(page_size=1)  # warm-up
        peak = _memory_mib(server, "VmHWM")
        page = client.list_pending_interrupts(page_size=1000)
        grown = _memory_mib(server, "VmHWM") - peak
        listed = [p.execution_id for p in page.pending_interrupts]
        assert 1 <= len(listed) <= 4
        assert listed == big[::-1][: len(listed)]
        assert page.next_page_token
    # The old server loaded all 40 rows: about 40 MiB more at its peak.
    assert grown < 20, f"one pending list raised the peak memory by {grown:.0f} MiB"


def test_b1_a_watch_catching_up_reads_events_within_its_budget(sidecar_factory: Any) -> None:
    """A watch resuming from a cursor behind 40 events of 1 MB each, whose client stops
    reading, reads them a page at a time, not the whole batch at once; once read, it
    delivers every event in order."""
    server = sidecar_factory("--max-message-bytes", str(4 * MIB))
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:
        _record(client, "small", 10)
        with _watch(server.target) as first:
            _, cursor = _snapshot(first)
        assert cursor > 0
        big = [f"huge-{i:02d}" for i in range(40)]
        for execution_id in big:
            _record(client, execution_id, 1_000_000)
        peak = _memory_mib(server, "VmHWM")
        with _watch(server.target, stalled=True, after_cursor=cursor) as catching_up:
            assert next(catching_up).event.pending.execution_id == big[0]
            time.sleep(2.0)  # let the server write until the stream blocks
            grown = _memory_mib(server, "VmHWM") - peak
            # The old server read a batch of every one of the 40 events at once.
            assert grown < 20, f"a catching-up watch raised the peak memory by {grown:.0f} MiB"
            seen = [big[0]]
            for message in catching_up:
                if message.HasField("event"):
                    seen.append(message.event.pending.execution_id)
                    if len(seen) == len(big):
                        break
        assert seen == big
