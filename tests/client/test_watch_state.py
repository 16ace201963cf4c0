"""The reconnect decisions of the interrupt watch (P4), without a server: which endings
resume from the cursor, how long the backoff is, and when a new snapshot is flagged."""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest

from checkpointd_client import (
    InterruptEvent,
    InvalidArgumentError,
    OutOfRangeError,
    ResourceExhaustedError,
    RetryPolicy,
    SnapshotComplete,
    SnapshotItem,
    UnavailableError,
    WatchProgress,
)
from checkpointd_client._base import ClientCore
from checkpointd_client.errors import CheckpointdError
from checkpointd_client.v1 import checkpoint_pb2
from checkpointd_client.v1 import interrupt_service_pb2 as pb
from checkpointd_client.watch import WatchState

POLICY = RetryPolicy(max_attempts=2, initial_backoff=0.1, max_backoff=0.4, jitter=0.0)


def state(**overrides) -> WatchState:
    core = ClientCore(
        "127.0.0.1:1",
        namespace="ns",
        timeout=5,
        retry=POLICY,
        metadata=(),
        channel_options=(),
    )
    options: dict[str, Any] = {
        "after_cursor": 0,
        "chain_name": None,
        "reason": None,
        "agent_path_prefix": None,
        "reconnect": True,
        "timeout": None,
    }
    options.update(overrides)
    return WatchState(core, **options)


def snapshot(execution_id: str) -> pb.WatchInterruptsResponse:
    return pb.WatchInterruptsResponse(
        snapshot=checkpoint_pb2.PendingInterrupt(execution_id=execution_id)
    )


def complete(cursor: int) -> pb.WatchInterruptsResponse:
    return pb.WatchInterruptsResponse(snapshot_complete=pb.SnapshotComplete(cursor=cursor))


def event(
    cursor: int, kind: pb.InterruptEventType.ValueType = pb.INTERRUPT_EVENT_TYPE_ADDED
) -> pb.WatchInterruptsResponse:
    return pb.WatchInterruptsResponse(
        event=pb.InterruptEvent(
            cursor=cursor, type=kind, pending=checkpoint_pb2.PendingInterrupt(execution_id="e")
        )
    )


def error(cls: type[CheckpointdError], code: grpc.StatusCode, reason: str = "") -> CheckpointdError:
    return cls("boom", code=code, reason=reason)


def test_p4_request_resumes_after_the_last_cursor_delivered():
    """Each connection asks for events after the cursor of the last item delivered."""
    watch = state(chain_name="c", agent_path_prefix="swarm:")
    first = watch.request()
    assert (first.namespace, first.after_cursor, first.chain_name) == ("ns", 0, "c")
    assert first.HasField("agent_path_prefix")
    assert not first.HasField("reason")
    assert isinstance(watch.accept(snapshot("a")), SnapshotItem)
    assert watch.request().after_cursor == 0  # the marker was not delivered: snapshot again
    watch.accept(complete(7))
    watch.accept(event(9))
    assert watch.accept(pb.WatchInterruptsResponse(progress=pb.WatchProgress(cursor=15))) == (
        WatchProgress(cursor=15)
    )
    assert watch.request().after_cursor == 15


def test_p4_expired_cursor_takes_a_new_snapshot_flagged_resnapshot():
    """CURSOR_EXPIRED reconnects at once without a cursor; that snapshot and its marker say
    resnapshot, and the flag is cleared after the marker."""
    watch = state(after_cursor=40)
    delay = watch.after_stream_end(
        error(OutOfRangeError, grpc.StatusCode.OUT_OF_RANGE, "CURSOR_EXPIRED")
    )
    assert delay == 0.0
    assert watch.request().after_cursor == 0
    item = watch.accept(snapshot("a"))
    assert isinstance(item, SnapshotItem)
    assert item.resnapshot
    assert watch.accept(complete(50)) == SnapshotComplete(cursor=50, resnapshot=True)
    later = watch.accept(event(51))
    assert isinstance(later, InterruptEvent)
    assert later.type == "added"
    watch.after_stream_end(None)
    assert watch.request().after_cursor == 51


def test_p4_a_snapshot_broken_midway_is_taken_again_and_flagged():
    """A connection lost during the snapshot re-snapshots; the repeat is flagged."""
    watch = state()
    first = watch.accept(snapshot("a"))
    assert isinstance(first, SnapshotItem)
    assert not first.resnapshot
    watch.after_stream_end(error(UnavailableError, grpc.StatusCode.UNAVAILABLE))
    assert watch.request().after_cursor == 0
    again = watch.accept(snapshot("a"))
    assert isinstance(again, SnapshotItem)
    assert again.resnapshot


def test_p4_backoff_grows_to_the_cap_never_gives_up_and_resets_after_an_item():
    """Transient endings are retried past max_attempts, waits capped at max_backoff, and the
    wait starts over once an item arrives."""
    watch = state()
    unavailable = error(UnavailableError, grpc.StatusCode.UNAVAILABLE)
    delays = [watch.after_stream_end(unavailable) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.4, 0.4, 0.4]
    watch.accept(complete(3))
    assert watch.after_stream_end(None) == 0.1
    slow = error(ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED, "WATCHER_TOO_SLOW")
    assert watch.after_stream_end(slow) == 0.2


@pytest.mark.parametrize(
    "failure",
    [
        error(InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
        error(ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED, "MESSAGE_TOO_LARGE"),
        error(OutOfRangeError, grpc.StatusCode.OUT_OF_RANGE, "SOMETHING_ELSE"),
    ],
)
def test_p4_other_errors_are_raised(failure: CheckpointdError):
    """Errors that a reconnect cannot fix are raised to the caller."""
    with pytest.raises(type(failure)):
        state().after_stream_end(failure)


def test_p4_without_reconnect_the_first_error_is_raised_and_a_clean_end_ends():
    """reconnect=False raises the first error; a stream that ends cleanly ends the watch."""
    watch = state(reconnect=False)
    with pytest.raises(UnavailableError):
        watch.after_stream_end(error(UnavailableError, grpc.StatusCode.UNAVAILABLE))
    assert watch.after_stream_end(None) is None


def test_p4_a_wait_past_the_watch_timeout_raises_instead():
    """When the backoff would pass the watch's timeout, the last error is raised."""
    watch = state(timeout=0.05)
    with pytest.raises(UnavailableError):
        watch.after_stream_end(error(UnavailableError, grpc.StatusCode.UNAVAILABLE))


def test_p4_unknown_event_types_are_passed_over_as_progress():
    """An event type from a newer server moves the cursor without being misread."""
    watch = state(after_cursor=5)
    unknown = cast("pb.InterruptEventType.ValueType", 99)
    assert watch.accept(event(6, kind=unknown)) == WatchProgress(cursor=6)
    assert watch.accept(pb.WatchInterruptsResponse()) is None
    assert watch.cursor == 6


@pytest.mark.parametrize(("value", "exc"), [(-1, ValueError), (True, TypeError), ("3", TypeError)])
def test_p4_bad_after_cursor_is_refused(value: object, exc: type[Exception]):
    """A negative or non-integer cursor is refused before anything is sent."""
    with pytest.raises(exc, match="after_cursor"):
        state(after_cursor=value)
