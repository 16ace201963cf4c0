"""S5 in the store's transaction (checkpointd.graph.put_order): a checkpoint queued behind
the one sent before it is written only if that one committed or was written earlier in the
same transaction; it marks itself written, and committed once its transaction commits. The
statements are a recorder: what is tested is the order's logic, not SQL (the SQLite store's
group commit runs it for real in tests/contract/test_write_stream_order.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from checkpointd.graph.put_order import PUT_ORDER, PutLink, PutOrder, PutOrderBroken


class Transaction:
    """The statements of one transaction: what ran, and the callbacks of its commit."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.callbacks: list[Callable[[], None]] = []

    async def fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        self.ran.append(sql)
        return []

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        self.ran.append(sql)
        return 1

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.ran.append(sql)

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def commit(self) -> None:
        for callback in self.callbacks:
            callback()


def _write(name: str) -> Any:
    async def body(conn: Transaction) -> int:
        return await conn.run(name)

    return body


async def test_s5_a_checkpoint_after_one_written_in_its_transaction_is_written() -> None:
    first, second = PutLink(), PutLink()
    tx = Transaction()
    assert await PutOrder(first, None).wrap(_write("first"))(tx) == 1
    assert await PutOrder(second, first).wrap(_write("second"))(tx) == 1
    assert tx.ran == ["first", "second"]
    assert not first.stored_for(Transaction())  # not committed yet: only tx may follow it
    tx.commit()
    assert first.stored_for(Transaction())
    assert second.stored_for(Transaction())


async def test_s5_a_checkpoint_after_one_committed_earlier_is_written() -> None:
    first, second = PutLink(), PutLink()
    earlier = Transaction()
    await PutOrder(first, None).wrap(_write("first"))(earlier)
    earlier.commit()
    later = Transaction()
    await PutOrder(second, first).wrap(_write("second"))(later)
    assert later.ran == ["second"]


@pytest.mark.parametrize("case", ["never written", "rolled back", "refused in its transaction"])
async def test_s5_a_checkpoint_after_one_not_stored_writes_nothing(case: str) -> None:
    first, second = PutLink(), PutLink()
    tx = Transaction()
    if case == "rolled back":  # written in a transaction that never committed
        await PutOrder(first, None).wrap(_write("first"))(Transaction())
    if case == "refused in its transaction":

        async def refused(conn: Any) -> int:
            raise PutOrderBroken("refused")

        with pytest.raises(PutOrderBroken):
            await PutOrder(first, None).wrap(refused)(tx)
    with pytest.raises(PutOrderBroken):
        await PutOrder(second, first).wrap(_write("second"))(tx)
    assert tx.ran == []
    assert tx.callbacks == []
    assert not second.stored_for(tx)


async def test_s5_the_next_waits_until_the_write_is_placed() -> None:
    link = PutLink()
    waiting = asyncio.ensure_future(link.wait_placed())
    await asyncio.sleep(0)
    assert not waiting.done()
    PutOrder(link, None).queue()
    await asyncio.wait_for(waiting, 5)


async def test_s5_the_order_is_a_tasks_own() -> None:
    """Set in one item's task, it is not seen by another task started before."""
    seen: list[PutOrder | None] = []
    started = asyncio.Event()

    async def other() -> None:
        started.set()
        await asyncio.sleep(0)
        seen.append(PUT_ORDER.get())

    task = asyncio.ensure_future(other())
    await started.wait()
    PUT_ORDER.set(PutOrder(PutLink(), None))
    await task
    assert seen == [None]
