"""The interrupt watch hub (contract I5): one outbox reader per server process, fanned out to
every open WatchInterrupts stream.

The hub's reader waits on the store's :class:`~checkpointd.store.base.EventNotifier` (Postgres
``LISTEN/NOTIFY``, SQLite ``PRAGMA data_version``; both with a fallback poll), reads the
events after its cursor in batches (one read per batch, whatever the number of watchers), and
appends each event to the bounded queue of every registered watcher of its namespace whose
filters it matches. Appending never waits: a watcher whose queue is full is failed with
:class:`~checkpointd.errors.WatcherTooSlow`, so writers and other watchers never wait for a
slow one.

A stream starts from a cursor C: the snapshot's cursor, or the client's ``after_cursor``. It
first catches up from the store on its own (events after C, up to the hub's cursor), then
registers with the hub, in the same step of the event loop in which it saw that its position
had reached the hub's cursor. From then on the hub hands it every event above its position.
So every event after C reaches the stream exactly once and in cursor order, with no gap
between the catch-up and the live part.

The snapshot is read in pages (at most ``batch_size`` rows, itself at most the buffer, and at
most ``page_bytes``), each page the pending set as it was at the snapshot cursor (see
:meth:`~checkpointd.store.interface.Store.snapshot_pending`), and the next page is read only once
every row of the previous one has been written to the client. Event reads are bounded the
same way. So a stream holds at most one page whatever the size of the pending set, and a
client that stops reading stops the reading (contract B1).

Limits: the hub refuses a stream beyond ``max_streams`` open streams, or beyond
``max_streams_per_peer`` from one peer (``RESOURCE_EXHAUSTED``, ``TOO_MANY_WATCH_STREAMS``),
and ends a stream older than ``max_lifetime`` seconds with ``UNAVAILABLE``
(``WATCH_EXPIRED``), from which the client resumes at its cursor like after any reconnect.

Ending: a failure (too slow, shutting down, store lost for longer than ``outage_grace``,
cursor purged, lifetime reached) is raised from the stream's iterator and from
:meth:`Watch.guard` before the next write. A write already under way is not abandoned: gRPC's
asyncio server can neither take a message back nor send the status past it, so a stream
blocked on a client that stopped reading can only end with its call (contract B2). What
cancels that call is its connection: :func:`connection_age_options` has the server close
every connection at most ``max_lifetime`` seconds after it opened, and
:data:`STUCK_WRITE_GRACE` seconds later still. Until the call has really ended the stream
keeps its place in the hub, so ``max_streams`` counts it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict, Unpack

from checkpointd.config import DEFAULT_WATCH_PAGE_BYTES
from checkpointd.domain import EventPage, InterruptEventRecord, PendingFilter, PendingRecord
from checkpointd.errors import (
    CursorBeyondStore,
    CursorExpired,
    CursorOfAnotherHistory,
    ShuttingDown,
    TooManyWatchStreams,
    WatcherTooSlow,
    WatchExpired,
)
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.filters import matches
from checkpointd.store.interface import Store

__all__ = [
    "STUCK_WRITE_GRACE",
    "EventItem",
    "Progress",
    "SnapshotDone",
    "SnapshotRow",
    "Watch",
    "WatchHub",
    "WatchItem",
    "WatchOptions",
    "connection_age_options",
    "matches",
]

log = logging.getLogger(__name__)

#: Seconds a write in progress when a stream's lifetime ends may still take before the call
#: is cancelled with its connection (a client that keeps reading finishes a write well
#: within it).
STUCK_WRITE_GRACE = 2.0
#: gRPC moves each connection's maximum age by up to this fraction either way.
_CONNECTION_AGE_JITTER = 0.1


def connection_age_options(max_lifetime: float) -> tuple[tuple[str, int], ...]:
    """The server options that cancel every call still open ``max_lifetime`` +
    :data:`STUCK_WRITE_GRACE` seconds after its connection opened (none for no lifetime).

    gRPC's asyncio server has no way to cancel one call whose write is blocked, but it closes
    a connection older than ``grpc.max_connection_age_ms`` (after a GOAWAY, so clients open
    a new one for new calls) once ``grpc.max_connection_age_grace_ms`` has passed, and that
    cancels the calls still on it. The age is set below the lifetime by gRPC's jitter, so no
    connection, and no stream on it, outlives the lifetime plus the grace.
    """
    if max_lifetime <= 0:
        return ()
    age_ms = max(int(max_lifetime * 1000 / (1 + _CONNECTION_AGE_JITTER)), 1)
    return (
        ("grpc.max_connection_age_ms", age_ms),
        ("grpc.max_connection_age_grace_ms", int(STUCK_WRITE_GRACE * 1000)),
    )


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """A pending interrupt that existed when the snapshot was taken."""

    pending: PendingRecord


@dataclass(frozen=True, slots=True)
class SnapshotDone:
    """The snapshot is complete; live events follow with cursors above ``cursor``, whose
    event has ``event_time`` (None: no event there)."""

    cursor: int
    event_time: datetime | None = None


class EventItem:
    """An outbox event for a stream. One object is shared by every watcher the hub hands the
    event to, so whatever a sender caches in ``rendered`` is built once per event."""

    __slots__ = ("event", "rendered")

    def __init__(self, event: InterruptEventRecord) -> None:
        self.event = event
        self.rendered: object = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Every event up to ``cursor`` has been considered for the stream; none matched since the
    last message. ``event_time`` is the time of the event at ``cursor`` (None: unknown)."""

    cursor: int
    event_time: datetime | None = None


WatchItem = SnapshotRow | SnapshotDone | EventItem | Progress

#: What may end a stream (mapped to a status by the error table).
_Failure = WatcherTooSlow | ShuttingDown | CursorExpired | StoreUnavailable | WatchExpired


async def event_time_at(store: Store, cursor: int) -> tuple[EventPage, datetime | None]:
    """The outbox's bounds and the time of the event at ``cursor`` (None: no event there),
    in one read: the time is what tells this store's event ``cursor`` from one of another
    history that reused the number."""
    page = await store.read_events(
        after_cursor=cursor - 1, up_to_cursor=cursor, limit=1, namespace=None
    )
    found = [event.event_at for event in page.events if event.cursor == cursor]
    return page, (found[0] if found else None)


def _is_network_peer(peer: str) -> bool:
    """Whether ``peer`` names one TCP connection. gRPC names every Unix-socket client the same
    ("unix:" plus the socket path), so a per-peer limit there would cap all local clients
    together; they are bounded by the per-server limit and the socket's file mode instead."""
    return peer.startswith(("ipv4:", "ipv6:"))


class WatchOptions(TypedDict, total=False):
    """How a stream is opened, besides where it starts and what it selects."""

    peer: str
    """The connection, as gRPC names it: its streams count against ``max_streams_per_peer``."""
    interrupt_writes: bool
    """Whether a failure may cancel a write under way (for senders whose writes can be
    cancelled cleanly)."""
    progress_interval: float | None
    """Replaces the hub's for this stream."""
    after_cursor_event_time: datetime | None
    """The time the client was given with its cursor: it must be that of the store's event
    there (I5)."""


class Watch:
    """One open stream: iterate it for the items to send, and send each through :meth:`guard`.

    Use it as an async context manager (``async with hub.watch(...) as watch``) so it leaves
    the hub however the stream ends, including a cancelled call.
    """

    def __init__(
        self,
        hub: WatchHub,
        namespace: str,
        after_cursor: int,
        filters: PendingFilter,
        *,
        peer: str = "",
        interrupt_writes: bool = False,
        progress_interval: float | None = None,
        after_cursor_event_time: datetime | None = None,
    ) -> None:
        self._hub = hub
        #: The longest silence of the stream after its snapshot (contract I6).
        self.progress_interval = (
            hub.progress_interval if progress_interval is None else progress_interval
        )
        # Whether a failure may cancel the write under way: true for a sender whose writes
        # can be cancelled cleanly (the console's HTTP responses), never for a gRPC call.
        self._interrupt_writes = interrupt_writes
        self._task: asyncio.Task[object] | None = None
        self._writing = False
        self._interrupted_write = False
        self.namespace = namespace
        self.peer = peer
        self._expiry: asyncio.TimerHandle | None = None
        self._after_cursor = after_cursor
        self._after_cursor_event_time = after_cursor_event_time
        self.filters = filters
        self._queue: collections.deque[EventItem] = collections.deque()
        self._wakeup = asyncio.Event()
        self._failure: _Failure | None = None
        #: The hub hands this stream the events with a cursor above this (once registered).
        self.live_after = 0
        self._last_cursor = 0
        #: The time of the event at ``_last_cursor`` when known, for progress messages.
        self._last_cursor_time: datetime | None = None
        self._last_sent_at = 0.0
        self._items_gen: AsyncGenerator[WatchItem, None] | None = None

    async def __aenter__(self) -> Watch:
        hub = self._hub
        if not hub._closing:
            hub._check_limits(self.peer)
        self._task = asyncio.current_task()
        hub._streams.add(self)
        hub._per_peer[self.peer] = hub._per_peer.get(self.peer, 0) + 1
        if hub._closing:
            self.fail(ShuttingDown())
        elif hub.max_lifetime:
            self._expiry = asyncio.get_running_loop().call_later(
                hub.max_lifetime, self.fail, WatchExpired(hub.max_lifetime)
            )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        # Only now, when the call has ended, does the stream leave the count (B2).
        self._hub._forget(self)
        if self._items_gen is not None:
            await self._items_gen.aclose()

    # --- called by the hub -----------------------------------------------------------------

    def offer(self, item: EventItem) -> bool:
        """Queue an event without waiting; False (and the stream failed) when the queue is
        full."""
        if len(self._queue) >= self._hub.buffer_events:
            self.fail(WatcherTooSlow(self._hub.buffer_events))
            return False
        self._queue.append(item)
        self._wakeup.set()
        return True

    def fail(self, failure: _Failure) -> None:
        """End the stream with ``failure`` (the first failure wins): raised before the next
        write; a write under way is let finish, or is ended with its call (see the module's
        docstring)."""
        if self._failure is not None:
            return
        self._failure = failure
        self._wakeup.set()
        if self._interrupt_writes and self._writing and self._task is not None:
            self._interrupted_write = True
            self._task.cancel()

    # --- called by the sender --------------------------------------------------------------

    async def guard(self, write: Awaitable[None]) -> None:
        """Await a write to the client unless the stream has failed (then raise the failure
        and start no write: it could block for ever).

        The sender raises :class:`asyncio.CancelledError` from a write whose call has ended.
        One that ends so after the stream had failed is one the client stopped reading
        (its connection was closed under it): logged as that, not as an error.
        """
        if self._failure is not None:
            if inspect.iscoroutine(write):
                write.close()
            raise self._failure
        self._writing = True
        try:
            await write
        except asyncio.CancelledError:
            failure = self.failure()
            if self._interrupted_write and failure is not None:
                # Cancelled by fail() (interrupt_writes): the failure ends the stream.
                self._interrupted_write = False
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                raise failure from None
            if failure is not None:
                log.info(
                    "watch stream ended: client not reading (namespace %s, peer %s, %s)",
                    self.namespace,
                    self.peer or "unknown",
                    type(failure).__name__,
                )
            raise
        finally:
            self._writing = False

    def failure(self) -> _Failure | None:
        """What ended the stream, if anything has."""
        return self._failure

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def __aiter__(self) -> AsyncIterator[WatchItem]:
        if self._items_gen is None:
            self._items_gen = self._items()
        return self._items_gen

    async def _items(self) -> AsyncGenerator[WatchItem, None]:
        hub = self._hub
        store = hub.store
        loop = asyncio.get_running_loop()
        self._raise_if_failed()
        if self._after_cursor == 0:
            # The cursor first, then the pending set as it was at that cursor, page by page
            # (newest first); each page is read only after the previous one was written.
            bounds = await store.read_events(
                after_cursor=0, up_to_cursor=0, limit=0, namespace=None
            )
            position = bounds.latest_cursor
            _, self._last_cursor_time = await event_time_at(store, position)
            before: int | None = None
            while True:
                self._raise_if_failed()
                snapshot = await store.snapshot_pending(
                    self.namespace,
                    self.filters,
                    as_of_cursor=position,
                    before_sequence=before,
                    limit=hub.batch_size,
                    max_bytes=hub.page_bytes,
                )
                if position < snapshot.purged_through:
                    # The events the pages are rebuilt from were purged (a snapshot read for
                    # longer than the event retention): OUT_OF_RANGE, the client snapshots again.
                    raise CursorExpired(position, snapshot.purged_through)
                # Each row is let go of once it has been written.
                rows, more = snapshot.rows[::-1], snapshot.more and bool(snapshot.rows)
                del snapshot
                while rows:
                    self._raise_if_failed()
                    row = rows.pop()
                    before = row.sequence
                    yield SnapshotRow(row)
                if not more:
                    break
            self._raise_if_failed()
            yield SnapshotDone(position, self._last_cursor_time)
        else:
            position = self._after_cursor
            bounds, seen = await event_time_at(store, position)
            if position < bounds.purged_through:
                raise CursorExpired(position, bounds.purged_through)
            if position > bounds.latest_cursor:
                # Not the client's mistake: the store went back in time under it (a failover
                # that lost commits, a restore). Ending the watch for good would strand it; a
                # fresh snapshot is what it needs.
                raise CursorBeyondStore(position, bounds.latest_cursor)
            expected = self._after_cursor_event_time
            if position > bounds.purged_through and (
                seen is None or (expected is not None and seen != expected)
            ):
                # Every cursor a stream hands out names an event; above the purged ones it is
                # still there, unless the store went back and wrote past it again.
                raise CursorOfAnotherHistory(position)
            self._last_cursor_time = seen
        self._last_cursor = position
        self._last_sent_at = loop.time()

        # Catch up from the store until this stream's position reaches the hub's cursor.
        while True:
            self._raise_if_failed()
            hub_cursor = await hub.cursor()
            if position >= hub_cursor:
                # No await between the comparison and the registration: the hub cannot read a
                # batch in between, so it hands over exactly the events above ``position``.
                self.live_after = position
                hub._register(self)
                break
            page = await store.read_events(
                after_cursor=position,
                up_to_cursor=hub_cursor,
                limit=hub.batch_size,
                namespace=self.namespace,
                max_bytes=hub.page_bytes,
            )
            if position < page.purged_through:
                raise CursorExpired(position, page.purged_through)
            for event in page.events:
                if matches(self.filters, event.pending):
                    self._raise_if_failed()
                    self._last_cursor, self._last_cursor_time = event.cursor, event.event_at
                    self._last_sent_at = loop.time()
                    yield EventItem(event)
            position = page.events[-1].cursor if page.more else hub_cursor
            progress = self._progress(position, loop.time())
            if progress is not None:
                yield await self._timed(progress)

        # Live: the hub fills the queue.
        while True:
            self._raise_if_failed()
            if self._queue:
                item = self._queue.popleft()
                self._last_cursor, self._last_cursor_time = item.event.cursor, item.event.event_at
                self._last_sent_at = loop.time()
                yield item
                continue
            self._wakeup.clear()
            wait = self._last_sent_at + self.progress_interval - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._wakeup.wait()
            if not self._queue and self._failure is None:
                # The queue is empty, so every event up to the hub's cursor has been seen.
                progress = self._progress(max(self.live_after, hub.current_cursor), loop.time())
                if progress is not None:
                    yield await self._timed(progress)

    def _progress(self, position: int, now: float) -> Progress | None:
        """A progress message when the interval has passed without a message, whether or not
        the cursor moved (I6: a silent stream is a dead one)."""
        if now - self._last_sent_at < self.progress_interval:
            return None
        self._last_sent_at = now
        # The cursor moves in _timed, with its event's time: moved here, _timed would take
        # the last event sent's time for the new cursor's.
        return Progress(max(self._last_cursor, position))

    async def _timed(self, progress: Progress) -> Progress:
        """``progress`` with the time of its cursor's event, so a client resuming from it can
        be told a rewritten history (I5): known from the last event sent or the hub's read,
        else read (at most once per progress interval)."""
        cursor = progress.cursor
        if self._last_cursor_time is None or self._last_cursor != cursor:
            hub = self._hub
            if hub.current_cursor == cursor and hub.current_cursor_time is not None:
                self._last_cursor_time = hub.current_cursor_time
            else:
                _, self._last_cursor_time = await event_time_at(hub.store, cursor)
        self._last_cursor = cursor
        return Progress(cursor, self._last_cursor_time)


class WatchHub:
    """Reads the outbox once per batch and fans the events out to every open stream.

    ``buffer_events`` bounds each stream's queue; ``poll_interval`` is the fallback read when
    no notification arrives; ``progress_interval`` the longest silence of a live stream (a
    stream may ask for another); ``outage_grace`` how long the store may fail before the open
    streams end with ``UNAVAILABLE`` (the reader itself keeps retrying). ``max_streams`` and
    ``max_streams_per_peer`` bound the open streams (0: no bound); ``max_lifetime`` ends a
    stream after that many seconds (0: never). ``page_bytes`` bounds every read of snapshot
    rows or events, by the rows' stored sizes (a single larger row is still read alone).
    """

    def __init__(
        self,
        store: Store,
        *,
        buffer_events: int,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        progress_interval: float = 10.0,
        outage_grace: float = 5.0,
        ready_timeout: float = 10.0,
        max_streams: int = 0,
        max_streams_per_peer: int = 0,
        max_lifetime: float = 0.0,
        page_bytes: int = DEFAULT_WATCH_PAGE_BYTES,
    ) -> None:
        if buffer_events <= 0 or batch_size <= 0 or page_bytes <= 0:
            raise ValueError("buffer_events, batch_size and page_bytes must be positive")
        self.page_bytes = page_bytes
        if max_streams < 0 or max_streams_per_peer < 0 or max_lifetime < 0:
            raise ValueError("stream limits must not be negative (0 means no limit)")
        self.max_streams = max_streams
        self.max_streams_per_peer = max_streams_per_peer
        self.max_lifetime = max_lifetime
        self._per_peer: dict[str, int] = {}
        self.store = store
        self.buffer_events = buffer_events
        # A batch is handed to every watcher at once, so a batch larger than a watcher's whole
        # buffer would end even a watcher that keeps up; read at most a buffer's worth.
        self.batch_size = min(batch_size, buffer_events)
        self.poll_interval = poll_interval
        self.progress_interval = progress_interval
        self._outage_grace = outage_grace
        self._ready_timeout = ready_timeout
        self._cursor: int | None = None
        #: The time of the event at ``_cursor`` when the reader read it (None: moved on
        #: without reading rows). Checked on each read: a store whose event there changed
        #: went back in time and wrote past the cursor again.
        self._cursor_time: datetime | None = None
        self._ready = asyncio.Event()
        self._streams: set[Watch] = set()
        self._by_namespace: dict[str, set[Watch]] = {}
        self._registered = 0
        self._closing = False
        self._reader: asyncio.Task[None] | None = None

    @property
    def current_cursor(self) -> int:
        """The cursor up to which every event has been handed to the registered streams."""
        return self._cursor or 0

    @property
    def current_cursor_time(self) -> datetime | None:
        """The time of the event at :attr:`current_cursor`, when the reader read it."""
        return self._cursor_time

    @property
    def stream_count(self) -> int:
        """Open streams (snapshot, catch-up or live)."""
        return len(self._streams)

    def registered_count(self) -> int:
        """Streams in their live part, handed events by the reader."""
        return self._registered

    def start(self) -> None:
        """Start the reader (it retries until the store answers)."""
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_forever(), name="watch-hub")

    async def close(self) -> None:
        """End every open stream with ``UNAVAILABLE`` (SHUTTING_DOWN), refuse new ones, and
        stop the reader."""
        self._closing = True
        self._ready.set()  # release streams still waiting in cursor(); they see _closing
        for stream in list(self._streams):
            stream.fail(ShuttingDown())
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def watch(
        self,
        namespace: str,
        after_cursor: int,
        filters: PendingFilter,
        **options: Unpack[WatchOptions],
    ) -> Watch:
        """A new stream of ``namespace`` from ``after_cursor`` (0: snapshot first), opened
        as ``options`` say."""
        return Watch(self, namespace, after_cursor, filters, **options)

    def _check_limits(self, peer: str) -> None:
        """Refuse one more stream past the server's or the peer's limit."""
        if self.max_streams and len(self._streams) >= self.max_streams:
            raise TooManyWatchStreams(self.max_streams, "server")
        if (
            self.max_streams_per_peer
            and _is_network_peer(peer)
            and self._per_peer.get(peer, 0) >= self.max_streams_per_peer
        ):
            raise TooManyWatchStreams(self.max_streams_per_peer, "peer")

    async def cursor(self) -> int:
        """The hub's cursor, once the reader has reached the store."""
        if self._cursor is None:
            try:
                async with asyncio.timeout(self._ready_timeout):
                    await self._ready.wait()
            except TimeoutError:
                raise StoreUnavailable("the watch reader cannot reach the store yet") from None
        if self._closing or self._cursor is None:
            raise ShuttingDown()
        return self._cursor

    # --- registration ------------------------------------------------------------------------

    def _register(self, stream: Watch) -> None:
        self._by_namespace.setdefault(stream.namespace, set()).add(stream)
        self._registered += 1

    def _unregister(self, stream: Watch) -> None:
        streams = self._by_namespace.get(stream.namespace)
        if streams is None or stream not in streams:
            return
        streams.discard(stream)
        self._registered -= 1
        if not streams:
            del self._by_namespace[stream.namespace]

    def _forget(self, stream: Watch) -> None:
        self._unregister(stream)
        if stream in self._streams:
            self._streams.discard(stream)
            left = self._per_peer.get(stream.peer, 1) - 1
            if left > 0:
                self._per_peer[stream.peer] = left
            else:
                self._per_peer.pop(stream.peer, None)

    def _fail_registered(self, failure: _Failure) -> None:
        for streams in list(self._by_namespace.values()):
            for stream in list(streams):
                stream.fail(failure)
                self._unregister(stream)

    # --- the reader --------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        loop = asyncio.get_running_loop()
        notifier = self.store.event_notifier()
        failing_since: float | None = None
        backoff = 0.05
        try:
            while True:
                try:
                    if self._cursor is None:
                        page = await self.store.read_events(
                            after_cursor=0, up_to_cursor=0, limit=0, namespace=None
                        )
                        self._cursor = page.latest_cursor
                        self._ready.set()
                    await notifier.wait(self.poll_interval)
                    await self._read_available()
                except StoreError as exc:
                    now = loop.time()
                    if failing_since is None:
                        failing_since = now
                        log.warning("watch reader cannot read interrupt events: %s", exc)
                    elif now - failing_since >= self._outage_grace and self._registered:
                        self._fail_registered(StoreUnavailable(str(exc)))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                else:
                    if failing_since is not None:
                        log.info("watch reader reads interrupt events again")
                    failing_since = None
                    backoff = 0.05
        finally:
            with contextlib.suppress(Exception):
                await notifier.close()

    async def _read_available(self) -> None:
        """Read and hand out every event after the hub's cursor, one batch per read."""
        check = True  # the first read also checks the event at the cursor, when its time is known
        while True:
            cursor = self.current_cursor
            if not self._registered:
                # Nobody to hand events to: move the cursor on without reading the rows
                # (streams catch up from the store by themselves before they register).
                page = await self.store.read_events(
                    after_cursor=cursor, up_to_cursor=cursor, limit=0, namespace=None
                )
                if self.registered_count() == 0:
                    if page.latest_cursor != cursor:
                        # Onwards, or back (a store that went back in time: its new events
                        # reuse the cursors above its newest).
                        self._cursor, self._cursor_time = page.latest_cursor, None
                    return
                continue  # a stream registered meanwhile: read the rows after all
            known = self._cursor_time if check else None
            check = False
            start = cursor - 1 if known is not None else cursor
            page = await self.store.read_events(
                after_cursor=start,
                up_to_cursor=None,
                limit=self.batch_size + (cursor - start),
                namespace=None,
                max_bytes=self.page_bytes,
            )
            if self._history_changed(cursor, known, page):
                return
            self._fan_out(cursor, page)
            if not page.more:
                return

    def _history_changed(self, cursor: int, known: datetime | None, page: EventPage) -> bool:
        """Whether the store is no longer the history the hub's cursor came from (it went
        back in time: below the cursor, or past it again with other events at it); if so the
        live streams end with CURSOR_EXPIRED (their clients snapshot again, I5) and the hub
        starts over from the store's newest event."""
        if cursor <= page.purged_through:
            return False  # _fan_out's case, or the event at the cursor was purged
        first = page.events[0] if page.events else None
        same = first is not None and (first.cursor, first.event_at) == (cursor, known)
        if page.latest_cursor >= cursor and (known is None or same):
            return False
        log.warning(
            "the store's interrupt events are not the history the watch read up to cursor "
            "%d (its newest is %d): it went back in time; live watches snapshot again",
            cursor,
            page.latest_cursor,
        )
        self._fail_registered(CursorOfAnotherHistory(cursor))
        self._cursor, self._cursor_time = page.latest_cursor, None
        return True

    def _fan_out(self, cursor: int, page: EventPage) -> None:
        """Hand a batch to the registered streams (synchronously: no stream registers in the
        middle of a batch)."""
        if cursor < page.purged_through:
            # The reader fell behind the retention time (a store outage longer than it):
            # those streams' cursors are gone too.
            self._fail_registered(CursorExpired(cursor, page.purged_through))
            self._cursor, self._cursor_time = max(cursor, page.purged_through), None
            return
        for event in page.events:
            if event.cursor <= cursor:
                continue  # the event at the cursor, read again to check it
            streams = self._by_namespace.get(event.namespace)
            if streams:
                item = EventItem(event)
                for stream in list(streams):
                    if (
                        event.cursor > stream.live_after
                        and matches(stream.filters, event.pending)
                        and not stream.offer(item)
                    ):
                        self._unregister(stream)
            self._cursor, self._cursor_time = event.cursor, event.event_at
