"""Iterators over the ``WatchInterrupts`` stream that reconnect by themselves (contract P4).

:meth:`CheckpointdClient.watch_interrupts <checkpointd_client.CheckpointdClient.watch_interrupts>`
returns an :class:`InterruptWatch` (a blocking iterator) and the asyncio client's returns an
:class:`AsyncInterruptWatch` (an async iterator). Both yield
:data:`~checkpointd_client.WatchItem`\\ s: without ``after_cursor``, a
:class:`~checkpointd_client.SnapshotItem` per pending interrupt, then one
:class:`~checkpointd_client.SnapshotComplete`, then :class:`~checkpointd_client.InterruptEvent`\\ s
(and a :class:`~checkpointd_client.WatchProgress` now and then while nothing matches).

The watch asks the server for a progress message every ``progress_interval`` seconds of
silence (contract I6, 10 s by default), and a stream that has sent nothing for
:data:`SILENCE_FACTOR` times that is taken for dead (black-holed on its way, although its
connection may still answer pings) and reconnected like a broken one (contract P6).

When the stream breaks (UNAVAILABLE, WATCHER_TOO_SLOW, a dropped connection), the watch waits
for the client's :class:`~checkpointd_client.RetryPolicy` backoff and reconnects after the
last cursor it delivered, so every event arrives exactly once, in order. It never gives up
(``max_attempts`` does not apply; the wait grows up to ``max_backoff`` and starts again after
each item received). It sends the cursor's event time with it, so a store that went back
in time and reused the cursor is told from the one it came from. When the cursor is older
than the server's event retention or not of the store's history (OUT_OF_RANGE,
CURSOR_EXPIRED) it takes a new snapshot and flags its items ``resnapshot``.
Other errors are raised. Closing the watch ends the iteration.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, TypeAlias

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from grpc import aio

from checkpointd_client import _convert
from checkpointd_client._base import ClientCore, Metadata
from checkpointd_client.errors import (
    CheckpointdError,
    DeadlineExceededError,
    ErrorReason,
    OutOfRangeError,
    ResourceExhaustedError,
    UnavailableError,
    map_rpc_errors,
)
from checkpointd_client.models import SnapshotComplete, SnapshotItem, WatchItem, WatchProgress
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1.interrupt_service_pb2 import (
    WatchInterruptsRequest,
    WatchInterruptsResponse,
)

__all__ = ["AsyncInterruptWatch", "InterruptWatch"]

_log = logging.getLogger("checkpointd_client.watch")

# --- the watch's state ----------------------------------------------------------------

#: The reason of the OUT_OF_RANGE that says a watch cursor is older than the event retention.
CURSOR_EXPIRED = ErrorReason.CURSOR_EXPIRED
#: The reason of the RESOURCE_EXHAUSTED that ends the stream of a watcher that fell behind.
WATCHER_TOO_SLOW = ErrorReason.WATCHER_TOO_SLOW
#: The progress interval a watch asks for unless told otherwise (the server's default too).
DEFAULT_PROGRESS_INTERVAL = 10.0
#: The progress intervals the server serves (I6).
PROGRESS_INTERVAL_RANGE = (1.0, 300.0)
#: A stream silent for this many progress intervals is dead (P6).
SILENCE_FACTOR = 3.0


class WatchState:
    """Everything about an interrupt watch that is not transport (contract I5, P4).

    It builds the request of each connection from the last cursor delivered, turns responses
    into :data:`~checkpointd_client.WatchItem`\\ s, and decides what a broken stream means:
    reconnect from the cursor after a backoff (UNAVAILABLE, WATCHER_TOO_SLOW, a dropped or
    ended stream), re-snapshot (CURSOR_EXPIRED), or raise.
    """

    __slots__ = (
        "_core",
        "_delivered",
        "_failures",
        "_resnapshot",
        "agent_path_prefix",
        "chain_name",
        "cursor",
        "cursor_time",
        "deadline",
        "progress_interval",
        "reason",
        "reconnect",
    )

    def __init__(
        self,
        core: ClientCore,
        *,
        after_cursor: int,
        chain_name: str | None,
        reason: str | None,
        agent_path_prefix: str | None,
        reconnect: bool,
        timeout: float | None,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    ) -> None:
        low, high = PROGRESS_INTERVAL_RANGE
        if isinstance(progress_interval, bool) or not isinstance(progress_interval, int | float):
            raise TypeError(
                f"progress_interval must be a number, got {type(progress_interval).__name__}"
            )
        if not low <= progress_interval <= high:
            raise ValueError(
                f"progress_interval must be {low:g} to {high:g} seconds, got {progress_interval}"
            )
        self.progress_interval = float(progress_interval)
        if isinstance(after_cursor, bool) or not isinstance(after_cursor, int):
            raise TypeError(f"after_cursor must be an int, got {type(after_cursor).__name__}")
        if after_cursor < 0:
            raise ValueError(
                f"after_cursor must be >= 0 (0 starts with a snapshot), got {after_cursor}"
            )
        self._core = core
        self.cursor = after_cursor  # the last cursor delivered: where a reconnect resumes
        # The time of the store's event at that cursor, as the server gave it: sent back so a
        # server whose store went back in time and reused the cursor says so (I5).
        self.cursor_time: Timestamp | None = None
        self.chain_name = chain_name
        self.reason = reason
        self.agent_path_prefix = agent_path_prefix
        self.reconnect = reconnect
        self.deadline = None if timeout is None else core.deadline(timeout)
        self._delivered = False  # whether any item has been handed to the caller
        self._resnapshot = False  # whether the snapshot being sent replaces an earlier one
        self._failures = 0  # connection failures since the last item received

    def request(self) -> WatchInterruptsRequest:
        """Build the request of the next connection, resuming after the last cursor."""
        if self.cursor == 0 and self._delivered:
            # A snapshot again: what the caller built from earlier items must be replaced.
            self._resnapshot = True
        return WatchInterruptsRequest(
            namespace=self._core.namespace,
            after_cursor=self.cursor,
            after_cursor_event_time=self.cursor_time if self.cursor else None,
            chain_name=self.chain_name,
            reason=self.reason,
            agent_path_prefix=self.agent_path_prefix,
            progress_interval=Duration(
                seconds=int(self.progress_interval),
                nanos=round((self.progress_interval % 1) * 1e9),
            ),
        )

    @property
    def silence(self) -> float:
        """Seconds without a message after which the stream is taken for dead (P6)."""
        return SILENCE_FACTOR * self.progress_interval

    def silent_error(self) -> UnavailableError:
        """What a stream that went silent ended with: retriable, like a dropped connection."""
        _log.info(
            "watch stream silent for %.3g s (%g progress intervals); reconnecting",
            self.silence,
            SILENCE_FACTOR,
        )
        return UnavailableError(
            f"the watch stream sent nothing for {self.silence:g} s, "
            f"{SILENCE_FACTOR:g} times its progress interval",
            code=grpc.StatusCode.UNAVAILABLE,
        )

    def call_timeout(self) -> float | None:
        """The gRPC deadline of the next connection: what is left of the watch's timeout."""
        if self.deadline is None:
            return None
        return max(ClientCore.remaining(self.deadline), 0.001)

    def accept(self, response: WatchInterruptsResponse) -> WatchItem | None:
        """Turn one response into the item to deliver (``None``: nothing to deliver)."""
        self._failures = 0
        item: WatchItem
        kind = response.WhichOneof("item")
        if kind == "snapshot":
            item = SnapshotItem(
                pending=_convert.pending_from_proto(response.snapshot),
                resnapshot=self._resnapshot,
            )
        elif kind == "snapshot_complete":
            complete = response.snapshot_complete
            item = SnapshotComplete(cursor=complete.cursor, resnapshot=self._resnapshot)
            self._move_to(complete)
            self._resnapshot = False
        elif kind == "event":
            event = _convert.interrupt_event_from_proto(response.event)
            item = event if event is not None else WatchProgress(cursor=response.event.cursor)
            self._move_to(response.event)
        elif kind == "progress":
            item = WatchProgress(cursor=response.progress.cursor)
            if item.cursor > self.cursor or (
                item.cursor == self.cursor and response.progress.HasField("event_time")
            ):
                self._move_to(response.progress)
        else:  # an item kind added by a newer server: nothing this client can deliver
            return None
        self._delivered = True
        return item

    def _move_to(
        self, message: svc.SnapshotComplete | svc.InterruptEvent | svc.WatchProgress
    ) -> None:
        """Resume after ``message``'s cursor from now on, with its event's time when the
        message has it (a server that predates it sends none: the cursor alone is checked)."""
        self.cursor = message.cursor
        self.cursor_time = message.event_time if message.HasField("event_time") else None

    def after_stream_end(self, error: CheckpointdError | None) -> float | None:
        """Decide what to do when a stream ended, with ``error`` or cleanly (``None``).

        Returns the seconds to wait before reconnecting, or ``None`` when the watch is over
        (a clean end with reconnecting off). Raises ``error`` when it cannot be recovered
        from, or when the wait would pass the watch's deadline.
        """
        if not self.reconnect:
            if error is not None:
                raise error
            return None
        if isinstance(error, OutOfRangeError) and error.reason == CURSOR_EXPIRED:
            _log.info("watch cursor %d expired; taking a new snapshot", self.cursor)
            self.cursor, self.cursor_time = 0, None
            self._delivered = True  # the snapshot that follows replaces the caller's view
            return 0.0
        if not self.retriable(error):
            assert error is not None
            raise error
        self._failures += 1
        delay = self._core.retry.backoff(self._failures, rng=self._core._rng)
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            if error is not None:
                raise error
            raise DeadlineExceededError(
                "the watch's timeout passed", code=grpc.StatusCode.DEADLINE_EXCEEDED
            )
        _log.info(
            "watch stream ended (%s); reconnecting after cursor %d in %.2f s",
            "it ended" if error is None else error,
            self.cursor,
            delay,
        )
        return delay

    @staticmethod
    def retriable(error: CheckpointdError | None) -> bool:
        """Whether a watch that ended with ``error`` resumes from its cursor."""
        if error is None or isinstance(error, UnavailableError):
            return True  # a stream that ended, a dropped connection, a server going away
        if isinstance(error, ResourceExhaustedError):
            return error.reason == WATCHER_TOO_SLOW
        # Cancelled by the server or a proxy (not by us: a closed watch never gets here).
        return bool(error.code == grpc.StatusCode.CANCELLED)


# --- the iterators ---

if TYPE_CHECKING:  # the stubs' classes are generic only to the type checker
    #: The WatchInterrupts method of a blocking stub: each call opens one stream.
    OpenStream: TypeAlias = grpc.UnaryStreamMultiCallable[
        WatchInterruptsRequest, WatchInterruptsResponse
    ]
    #: The WatchInterrupts method of an asyncio stub.
    AsyncOpenStream: TypeAlias = aio.UnaryStreamMultiCallable[
        WatchInterruptsRequest, WatchInterruptsResponse
    ]
    AsyncStream: TypeAlias = aio.UnaryStreamCall[WatchInterruptsRequest, WatchInterruptsResponse]


class _Stream(Protocol):
    """One open blocking WatchInterrupts stream."""

    def __next__(self) -> WatchInterruptsResponse: ...

    def cancel(self) -> bool: ...


class _Watchdog:
    """Cancels a blocking stream that waits for a message longer than its silence allows
    (P6): one thread per watch, armed around each read."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: tuple[_Stream, float] | None = None
        self._fired = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def arm(self, call: _Stream, seconds: float) -> None:
        with self._cond:
            self._armed = (call, time.monotonic() + seconds)
            self._fired = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="checkpointd-watch-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> bool:
        """Stop watching the read; whether the watchdog cancelled it."""
        with self._cond:
            self._armed = None
            fired, self._fired = self._fired, False
            return fired

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._armed = None
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._armed is None:
                    self._cond.wait()
                    continue
                call, deadline = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._armed = None
                self._fired = True
                call.cancel()


class InterruptWatch:
    """A blocking iterator over pending-interrupt changes; see :mod:`checkpointd_client.watch`.

    Thread-safe to :meth:`close` from another thread (or a signal handler): the iteration
    then ends with ``StopIteration``. Closing the client closes its watches. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        open_stream: Callable[[], OpenStream],
        state: WatchState,
        metadata: Metadata,
        client_closed: Callable[[], bool],
    ) -> None:
        self._open_stream = open_stream
        self._state = state
        self._metadata = tuple(metadata)
        self._client_closed = client_closed
        self._lock = threading.RLock()  # close() may run in a signal handler
        self._stopped = threading.Event()
        self._call: _Stream | None = None
        self._done = False
        self._watchdog = _Watchdog()

    @property
    def cursor(self) -> int:
        """The cursor of the last item delivered (0 before the snapshot completes): pass it
        as ``after_cursor`` to a later watch to continue where this one stopped."""
        return self._state.cursor

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or the client was closed."""
        return self._is_closed()

    def _is_closed(self) -> bool:
        return self._stopped.is_set() or self._client_closed()

    def close(self) -> None:
        """End the watch: cancel the stream; the iteration stops. Safe to call twice."""
        self._stopped.set()
        self._watchdog.close()
        with self._lock:
            call, self._call = self._call, None
        if call is not None:
            call.cancel()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> WatchItem:
        while True:
            if self._done or self._is_closed():
                raise StopIteration
            call = self._call or self._connect()
            error: CheckpointdError | None = None
            self._watchdog.arm(call, self._state.silence)
            try:
                with map_rpc_errors():
                    response = next(call)
            except StopIteration:
                pass
            except CheckpointdError as exc:
                error = exc
            else:
                self._watchdog.disarm()
                item = self._state.accept(response)
                if item is not None:
                    return item
                continue
            if self._watchdog.disarm():
                error = self._state.silent_error()  # cancelled by the watchdog: silent
            else:
                call.cancel()  # a stream that ended is done with; the watchdog no longer is
            with self._lock:
                self._call = None
            if self._is_closed():
                self._watchdog.close()
                raise StopIteration
            try:
                delay = self._state.after_stream_end(error)
            except BaseException:
                self._finish()
                raise
            if delay is None or self._stopped.wait(delay):
                self._finish()
                raise StopIteration

    def _finish(self) -> None:
        """The watch is over: no more streams, and no watchdog thread left waiting."""
        self._done = True
        self._watchdog.close()

    def _connect(self) -> _Stream:
        request = self._state.request()
        call = self._open_stream()(
            request, timeout=self._state.call_timeout(), metadata=self._metadata
        )
        with self._lock:
            if self._stopped.is_set():
                call.cancel()
            else:
                self._call = call
        return call


class AsyncInterruptWatch:
    """An async iterator over pending-interrupt changes; see :mod:`checkpointd_client.watch`.

    Use it from the event loop of its client. :meth:`aclose` (from any task) ends the
    iteration with ``StopAsyncIteration``; so does closing the client. Use it as an async
    context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        open_stream: Callable[[], AsyncOpenStream],
        state: WatchState,
        metadata: Metadata,
        client_closed: Callable[[], bool],
    ) -> None:
        self._open_stream = open_stream
        self._state = state
        self._metadata = tuple(metadata)
        self._client_closed = client_closed
        self._stopped = False
        self._wakeup: asyncio.Event | None = None
        self._call: AsyncStream | None = None
        self._done = False

    @property
    def cursor(self) -> int:
        """The cursor of the last item delivered (0 before the snapshot completes): pass it
        as ``after_cursor`` to a later watch to continue where this one stopped."""
        return self._state.cursor

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called or the client was closed."""
        return self._is_closed()

    def _is_closed(self) -> bool:
        return self._stopped or self._client_closed()

    def close(self) -> None:
        """End the watch without awaiting (e.g. from a signal handler): cancel the stream."""
        self._stopped = True
        if self._wakeup is not None:
            self._wakeup.set()
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def aclose(self) -> None:
        """End the watch: cancel the stream; the iteration stops. Safe to call twice."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchItem:
        while True:
            if self._done or self._is_closed():
                raise StopAsyncIteration
            if self._call is None:
                request = self._state.request()
                self._call = self._open_stream()(
                    request, timeout=self._state.call_timeout(), metadata=self._metadata
                )
            call = self._call
            error: CheckpointdError | None = None
            try:
                with map_rpc_errors():
                    async with asyncio.timeout(self._state.silence):
                        response = await call.read()
            except TimeoutError:
                call.cancel()  # silent for too long: dead, whatever its connection says (P6)
                error = self._state.silent_error()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._is_closed() and (task is None or task.cancelling() == 0):
                    raise StopAsyncIteration from None
                raise
            except CheckpointdError as exc:
                error = exc
            else:
                # Anything else is the end of the stream (grpc.aio.EOF).
                if isinstance(response, WatchInterruptsResponse):
                    item = self._state.accept(response)
                    if item is not None:
                        return item
                    continue
            if self._call is call:
                self._call = None
            if self._is_closed():
                raise StopAsyncIteration
            try:
                delay = self._state.after_stream_end(error)
            except BaseException:
                self._done = True
                raise
            if delay is None or await self._sleep(delay):
                self._done = True
                raise StopAsyncIteration

    async def _sleep(self, delay: float) -> bool:
        """Wait ``delay`` seconds; ``True`` if the watch was closed meanwhile."""
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._stopped:
            return True
        try:
            await asyncio.wait_for(self._wakeup.wait(), delay)
        except TimeoutError:
            return self._is_closed()
        return True
