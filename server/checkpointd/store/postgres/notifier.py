"""Wake the Postgres outbox reader: on ``NOTIFY`` over a dedicated ``LISTEN`` connection, or
by polling where no session can LISTEN (behind a transaction pooler without a listen DSN)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncpg

__all__ = ["Listener", "PgEventNotifier", "PollingNotifier"]

log = logging.getLogger("checkpointd.store.postgres")

#: Seconds of silence after which the LISTEN connection is checked with a trivial query.
_LISTEN_CHECK_SECONDS: Final = 30.0
#: Least seconds between two attempts to open the LISTEN connection.
_LISTEN_RETRY_SECONDS: Final = 1.0

#: A callback asyncpg calls on a notification or on the connection's loss.
Listener = Callable[..., None]


class PollingNotifier:
    """Wakes the outbox reader every ``interval`` seconds (at most ``max_wait``): for a store
    reached only through a transaction pooler, where ``LISTEN`` cannot work. The reader reads
    by cursor, so an event waits at most one interval and is never missed."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._first = True

    async def wait(self, max_wait: float) -> None:
        """Return after ``min(interval, max_wait)`` seconds (at once the first time)."""
        if self._first:
            self._first = False
            return
        await asyncio.sleep(min(self._interval, max_wait))

    async def close(self) -> None:
        """Nothing to release."""


class PgEventNotifier:
    """Wakes the outbox reader on ``NOTIFY``: one dedicated ``LISTEN`` connection (opened by
    ``listen`` with the two callbacks: a notification, the connection lost), re-opened
    (at most once a second) when it is lost, and checked after 30 s of silence. While it is
    down, or when a notification is lost, the caller's ``max_wait`` is the fallback poll."""

    def __init__(
        self,
        listen: Callable[[Listener, Listener], Awaitable[asyncpg.Connection[Any]]],
        describe: Callable[[BaseException], str],
        timeout: float,
    ) -> None:
        self._listen = listen
        self._describe = describe
        self._timeout = timeout
        self._conn: asyncpg.Connection[Any] | None = None
        self._heard = asyncio.Event()
        self._heard.set()  # the first wait returns at once
        self._next_attempt = 0.0
        self._checked_at = 0.0
        self._warned = False

    def _on_notify(self, *_: object) -> None:
        self._heard.set()
        self._checked_at = asyncio.get_running_loop().time()

    def _on_lost(self, *_: object) -> None:
        self._heard.set()  # read once more; the next wait opens a new connection

    async def wait(self, max_wait: float) -> None:
        """Return on a notification (or a re-opened LISTEN), or after ``max_wait`` seconds."""
        await self._keep_listening()
        if self._conn is None:
            # Not listening: poll, and try to listen again, once per retry interval.
            max_wait = min(max_wait, _LISTEN_RETRY_SECONDS)
        if not self._heard.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_wait):
                    await self._heard.wait()
        self._heard.clear()

    async def _keep_listening(self) -> None:
        now = asyncio.get_running_loop().time()
        conn = self._conn
        if conn is not None and not conn.is_closed():
            if now - self._checked_at < _LISTEN_CHECK_SECONDS:
                return
            try:
                await conn.fetchval("SELECT 1", timeout=self._timeout)
            except Exception:
                conn.terminate()
            else:
                self._checked_at = now
                return
        self._conn = None
        if now < self._next_attempt:
            return
        self._next_attempt = now + _LISTEN_RETRY_SECONDS
        try:
            conn = await self._listen(self._on_notify, self._on_lost)
        except Exception as exc:
            if not self._warned:
                log.warning(
                    "cannot LISTEN for interrupt events (%s); polling until it can",
                    self._describe(exc),
                )
                self._warned = True
            return
        if self._warned:
            log.info("listening for interrupt events again")
            self._warned = False
        self._conn, self._checked_at = conn, now
        self._heard.set()  # events may have committed while nobody listened

    async def close(self) -> None:
        """Close the LISTEN connection. Safe to call twice."""
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=self._timeout)
        except Exception:
            conn.terminate()
