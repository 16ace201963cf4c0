"""Shared and exclusive locks on a pause's decision, within one server process (contract K4).

Writes made under a decision's lease hold its lock shared while they are checked and written;
taking a lease holds it exclusively. So a takeover waits for the old holder's writes in flight,
and every fenced write that starts after it sees the new holder. The SQLite store, which one
server process serves, needs nothing more; Postgres holds the decision's row FOR SHARE
instead, which holds across servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

__all__ = ["PauseLocks"]


@dataclass(slots=True)
class _State:
    users: int = 0  # holders and waiters: the state is dropped when none is left
    readers: int = 0
    writer: bool = False
    writers_waiting: int = 0  # shared holders let a waiting writer go first
    wake: asyncio.Future[None] | None = None  # resolved when a holder lets go

    def let_go(self) -> None:
        """Wake every waiter to look again (synchronous, so a cancelled holder still runs it)."""
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)
        self.wake = None

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self.wake is None:
                self.wake = asyncio.get_running_loop().create_future()
            # Shielded: a waiter cancelled must not cancel the future the others wait on.
            await asyncio.shield(self.wake)


class PauseLocks:
    """A reader-writer lock per key, created on first use and dropped when nobody holds or
    waits for it."""

    def __init__(self) -> None:
        self._states: dict[Hashable, _State] = {}

    @contextmanager
    def _use(self, key: Hashable) -> Iterator[_State]:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _State()
        state.users += 1
        try:
            yield state
        finally:
            state.users -= 1
            if not state.users:
                del self._states[key]

    @asynccontextmanager
    async def shared(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key`` alongside other shared holders, while no exclusive holder has it."""
        with self._use(key) as state:
            await state.wait_until(lambda: not state.writer and not state.writers_waiting)
            state.readers += 1
            try:
                yield
            finally:
                state.readers -= 1
                state.let_go()

    @asynccontextmanager
    async def exclusive(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key`` alone."""
        with self._use(key) as state:
            state.writers_waiting += 1
            try:
                await state.wait_until(lambda: not state.writer and not state.readers)
            finally:
                state.writers_waiting -= 1
                state.let_go()  # shared waiters held back for this writer look again
            state.writer = True
            try:
                yield
            finally:
                state.writer = False
                state.let_go()
