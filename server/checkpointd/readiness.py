"""The store's readiness: wait for it at start, then ping it and drive the health status.

:class:`StoreMonitor` opens the store (retrying with backoff while the database is not there
yet), then pings it every few seconds; a ping not answered within the ping timeout (the
health interval, at least 1 s, at most the store timeout) counts as the store lost. The
health status is ``SERVING`` only while the store answers. Until the store has been opened,
the store gate (:func:`checkpointd.edge.store_gate_layer`, given :attr:`StoreMonitor.opened`)
answers every checkpointd call ``UNAVAILABLE`` (reason ``STORE_UNAVAILABLE``), as for any
store outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from checkpointd.health import HealthService
from checkpointd.logging_setup import event
from checkpointd.store.base import StoreError, StoreUnavailable
from checkpointd.store.interface import Store

__all__ = ["StoreMonitor", "StoreNeverCameUp", "cancel_and_wait"]

log = logging.getLogger("checkpointd")

# Waiting for the store: the first retry comes quickly, later ones at most this far apart.
_FIRST_RETRY_S = 0.25
_MAX_RETRY_S = 5.0
# While waiting, the same failure is logged again at most this often.
_REPEAT_LOG_S = 30.0


class StoreNeverCameUp(Exception):
    """The store could not be opened within ``--store-wait``, or cannot be opened at all."""


class StoreMonitor:
    """Opens the store, waiting for it, then watches it and drives the health status."""

    def __init__(
        self,
        store: Store,
        health: HealthService,
        *,
        description: str,
        interval: float,
        wait: float | None,
        ping_timeout: float | None = None,
        on_first_open: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._health = health
        self._description = description
        self._interval = interval
        self._ping_timeout = interval if ping_timeout is None else ping_timeout
        self._ping: asyncio.Task[None] | None = None
        self._wait = wait
        self._on_first_open = on_first_open
        self.opened = False
        """True once :meth:`Store.open` has succeeded; calls are refused before."""
        self.up = False
        """True while the last open or ping succeeded."""

    async def run(self) -> None:
        """Open the store (waiting as configured), then ping it forever."""
        await self._open()
        try:
            while True:
                await asyncio.sleep(self._interval)
                await self._check()
        finally:
            if self._ping is not None:
                self._ping.cancel()

    async def _check(self) -> None:
        """One ping, answered within the ping timeout or counted as the store lost.

        A database that stops answering without closing its connections (a network
        partition) would hold a ping until the store timeout; the ping runs on by itself
        instead, and the next check waits on it again rather than piling up another."""
        ping = self._ping
        if ping is None:
            ping = self._ping = asyncio.create_task(self._store.ping())
            ping.add_done_callback(_consume_outcome)
        done, _ = await asyncio.wait({ping}, timeout=self._ping_timeout)
        if not done:
            await self._mark_down(
                StoreUnavailable(f"the store did not answer a ping within {self._ping_timeout:g}s")
            )
            return
        self._ping = None
        failure = ping.exception()
        if failure is None:
            await self._mark_up()
        elif isinstance(failure, StoreError):
            await self._mark_down(failure)
        else:
            raise failure

    async def _open(self) -> None:
        started = time.monotonic()
        delay = _FIRST_RETRY_S
        last_logged: tuple[str, float] | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._store.open()
                break
            except StoreUnavailable as exc:
                waited = time.monotonic() - started
                if self._wait is not None and waited + delay > self._wait:
                    raise StoreNeverCameUp(
                        f"cannot open the store {self._description}: {exc}"
                        + (f" (gave up after {waited:.1f}s)" if self._wait else "")
                    ) from None
                message = str(exc)
                now = time.monotonic()
                if (
                    last_logged is None
                    or last_logged[0] != message
                    or now - last_logged[1] >= _REPEAT_LOG_S
                ):
                    event(
                        log,
                        logging.WARNING,
                        "store_waiting",
                        f"waiting for the store {self._description}: {message}; "
                        f"retrying (attempt {attempt}, {waited:.1f}s so far)",
                        store=self._description,
                        error=message,
                        attempt=attempt,
                        waited_s=round(waited, 1),
                    )
                    last_logged = (message, now)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, _MAX_RETRY_S)
            except StoreError as exc:
                raise StoreNeverCameUp(
                    f"cannot open the store {self._description}: {exc}"
                ) from None
        waited = time.monotonic() - started
        event(
            log,
            logging.INFO,
            "store_connected",
            f"store connected: {self._description} (after {attempt} attempt(s), {waited:.2f}s)",
            store=self._description,
            attempts=attempt,
            waited_s=round(waited, 3),
        )
        self.opened = True
        self.up = True
        await self._health.set_serving(True)
        if self._on_first_open is not None:
            await self._on_first_open()

    async def _mark_down(self, exc: StoreError) -> None:
        if self.up:
            event(
                log,
                logging.WARNING,
                "store_lost",
                f"store lost: {exc}; answering NOT_SERVING until it answers again",
                store=self._description,
                error=str(exc),
            )
        self.up = False
        await self._health.set_serving(False)

    async def _mark_up(self) -> None:
        if not self.up:
            event(
                log,
                logging.INFO,
                "store_recovered",
                f"store recovered: {self._description}",
                store=self._description,
            )
        self.up = True
        await self._health.set_serving(True)


def _consume_outcome(task: asyncio.Task[None]) -> None:
    """Mark a ping's failure as seen: a ping abandoned at shutdown must not be reported as
    an exception nobody retrieved."""
    if not task.cancelled():
        task.exception()


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has ended (its own failure is its
    owner's to report)."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
