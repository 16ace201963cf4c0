"""Iterators over the ``WatchInterrupts`` stream that reconnect by themselves (contract P4).

:meth:`CheckpointdClient.watch_interrupts <checkpointd_client.CheckpointdClient.watch_interrupts>`
returns an :class:`InterruptWatch` (a blocking iterator) and the asyncio client's returns an
:class:`AsyncInterruptWatch` (an async iterator). Both yield
:data:`~checkpointd_client.WatchItem`\\ s: without ``after_cursor``, a
:class:`~checkpointd_client.SnapshotItem` per pending interrupt, then one
:class:`~checkpointd_client.SnapshotComplete`, then :class:`~checkpointd_client.InterruptEvent`\\ s
(and a :class:`~checkpointd_client.WatchProgress` now and then while nothing matches).

When the stream breaks (UNAVAILABLE, WATCHER_TOO_SLOW, a dropped connection), the watch waits
for the client's :class:`~checkpointd_client.RetryPolicy` backoff and reconnects after the
last cursor it delivered, so every event arrives exactly once, in order. It never gives up
(``max_attempts`` does not apply; the wait grows up to ``max_backoff`` and starts again after
each item received). When the cursor is older than the server's event retention
(OUT_OF_RANGE, CURSOR_EXPIRED) it takes a new snapshot and flags its items ``resnapshot``.
Other errors are raised. Closing the watch ends the iteration.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import grpc

from checkpointd_client._base import Metadata, WatchState
from checkpointd_client.errors import CheckpointdError, map_rpc_errors
from checkpointd_client.models import WatchItem

__all__ = ["AsyncInterruptWatch", "InterruptWatch"]

#: Opens one WatchInterrupts stream: ``(request, timeout=..., metadata=...) -> call``.
OpenStream = Callable[..., Any]


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
        self._call: Any = None
        self._done = False

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
            try:
                with map_rpc_errors():
                    response = next(call)
            except StopIteration:
                pass
            except CheckpointdError as exc:
                error = exc
            else:
                item = self._state.accept(response)
                if item is not None:
                    return item
                continue
            with self._lock:
                self._call = None
            if self._is_closed():
                raise StopIteration
            try:
                delay = self._state.after_stream_end(error)
            except BaseException:
                self._done = True
                raise
            if delay is None or self._stopped.wait(delay):
                self._done = True
                raise StopIteration

    def _connect(self) -> Any:
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
        open_stream: Callable[[], OpenStream],
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
        self._call: Any = None
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
                    response = await call.read()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._is_closed() and (task is None or task.cancelling() == 0):
                    raise StopAsyncIteration from None
                raise
            except CheckpointdError as exc:
                error = exc
            else:
                if response is not grpc.aio.EOF:
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
