"""Wakes the SQLite outbox reader when the database file may hold new events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = ["SQLiteEventNotifier"]

#: How often the notifier looks at ``PRAGMA data_version`` for other processes' commits.
_DATA_VERSION_POLL_SECONDS: Final = 0.05


class SQLiteEventNotifier:
    """Wakes the outbox reader when the file changed: ``data_version`` (``PRAGMA
    data_version`` of the events connection, which changes when any other connection, in
    any process, commits) every 50 ms, and at once when this process commits an event (the
    store sets every event of ``wakeups`` then)."""

    def __init__(
        self, data_version: Callable[[], Awaitable[int]], wakeups: set[asyncio.Event]
    ) -> None:
        self._data_version = data_version
        self._wakeups = wakeups
        self._local = asyncio.Event()
        self._local.set()  # the first wait returns at once
        self._version: int | None = None
        wakeups.add(self._local)

    async def wait(self, max_wait: float) -> None:
        """Return when the file may hold new events, or after ``max_wait`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        if self._version is None:
            # The baseline is taken before the first return, so the caller's first read
            # covers every commit that the next wait would not notice.
            self._version = await self._data_version()
        while not self._local.is_set():
            version = await self._data_version()
            if version != self._version:
                self._version = version
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(_DATA_VERSION_POLL_SECONDS, remaining)):
                    await self._local.wait()
        self._local.clear()

    async def close(self) -> None:
        """Stop listening to this process's writes."""
        self._wakeups.discard(self._local)
