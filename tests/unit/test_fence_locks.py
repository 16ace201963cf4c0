"""PauseLocks (contract K4): the per-pause reader-writer lock the SQLite store fences with."""

from __future__ import annotations

import asyncio

from checkpointd.store.fence_locks import PauseLocks


async def _settle() -> None:
    """Let every ready task run until each waits."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_k4_exclusive_waits_for_every_shared_holder() -> None:
    locks = PauseLocks()
    order: list[str] = []

    async def take() -> None:
        async with locks.exclusive("p"):
            order.append("exclusive")

    async with locks.shared("p"), locks.shared("p"):
        task = asyncio.create_task(take())
        await _settle()
        assert not task.done()
        order.append("shared done")
    await task
    assert order == ["shared done", "exclusive"]
    assert not locks._states


async def test_k4_shared_waits_behind_a_waiting_exclusive() -> None:
    """A writer waiting is not starved by readers that keep arriving."""
    locks = PauseLocks()
    order: list[str] = []

    async def hold(kind: str) -> None:
        async with locks.exclusive("p") if kind == "exclusive" else locks.shared("p"):
            order.append(kind)

    async with locks.shared("p"):
        writer = asyncio.create_task(hold("exclusive"))
        await _settle()
        reader = asyncio.create_task(hold("shared"))
        await _settle()
        assert not writer.done()
        assert not reader.done()
    await asyncio.gather(writer, reader)
    assert order == ["exclusive", "shared"]
    assert not locks._states


async def test_k4_other_keys_do_not_wait() -> None:
    locks = PauseLocks()
    async with locks.exclusive("p"), locks.exclusive("q"), locks.shared("r"):
        pass


async def test_k4_a_cancelled_waiter_leaves_the_lock_usable() -> None:
    """A waiter cancelled while queued (its call's deadline) neither holds nor blocks."""
    locks = PauseLocks()

    async def take() -> None:
        async with locks.exclusive("p"):
            pass

    async with locks.shared("p"):
        waiter = asyncio.create_task(take())
        second_writer = asyncio.create_task(take())
        await _settle()
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled()
    await second_writer
    async with locks.shared("p"):
        pass
    assert not locks._states
