"""What a pipelining saver keeps of the writes it sent ahead (G22): bounded per thread, a
checkpoint behind the previous one only where the stream orders them (S5) and otherwise
once that one is durable, never sent again after one that failed, each error raised once.
The blocking saver's books (WritesAhead) and the asyncio saver's (AsyncWritesAhead) both."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import pytest

from checkpointd_client.errors import InvalidArgumentError, UnavailableError
from checkpointd_client.langgraph._ahead import (
    MAX_AHEAD,
    AsyncPendingWrite,
    AsyncWritesAhead,
    PendingWrite,
    WritesAhead,
)


class Write:
    """A write whose answer comes when the test says (``answer``), or an error."""

    def __init__(self, error: Exception | None = None) -> None:
        self.answered = threading.Event()
        self.error = error
        self.results: list[bool] = []  # the resend flag of each result() call

    def answer(self) -> Write:
        self.answered.set()
        return self

    def done(self) -> bool:
        return self.answered.is_set()

    def result(self, *, resend: bool = True) -> Any:
        assert self.answered.wait(5), "waited for a write the test never answers"
        self.results.append(resend)
        if self.error is not None:
            raise self.error
        return "ok"


def _alone(write: Write) -> Any:
    """A send that cannot go behind a previous checkpoint (no ordering stream)."""
    return lambda previous: None if previous is not None else write


def _refused() -> InvalidArgumentError:
    return InvalidArgumentError("refused", code=grpc.StatusCode.INVALID_ARGUMENT)


def test_g22_answered_writes_are_let_go_and_the_oldest_waited_for_beyond_the_bound() -> None:
    ahead = WritesAhead()
    answered = [Write().answer() for _ in range(3)]
    for write in answered:
        ahead.add("t", _alone(write), checkpoint=False)
    assert [w.results for w in answered] == [[True]] * 3  # read as the next was added
    waiting = [Write() for _ in range(MAX_AHEAD)]
    for write in waiting:
        ahead.add("t", _alone(write), checkpoint=False)
    assert not any(w.results for w in waiting)  # 64 unanswered: none waited for yet
    beyond = Write()
    adding = threading.Thread(
        target=ahead.add, args=("t", _alone(beyond)), kwargs={"checkpoint": False}
    )
    adding.start()
    adding.join(0.2)
    assert adding.is_alive(), "the 65th unanswered write did not wait for the oldest"
    waiting[0].answer()
    adding.join(5)
    assert not adding.is_alive()
    for write in [*waiting[1:], beyond]:
        write.answer()
    ahead.wait(["t"])
    assert all(w.results == [True] for w in [*waiting, beyond])


def test_g22_without_ordering_a_checkpoint_waits_for_the_previous_and_raises_its_error() -> None:
    ahead = WritesAhead()
    first = Write(error=_refused())
    ahead.add("t", _alone(first), checkpoint=True)
    ahead.add("other", _alone(Write().answer()), checkpoint=True)  # another thread: no wait
    ahead.add("t", _alone(Write().answer()), checkpoint=False)  # put_writes: no wait
    first.answer()
    sent: list[Write] = []

    def send(previous: PendingWrite | None) -> Write | None:
        if previous is not None:
            return None
        sent.append(Write())
        return sent[-1]

    with pytest.raises(InvalidArgumentError):
        ahead.add("t", send, checkpoint=True)
    assert sent == [], "a checkpoint went out although its parent was not stored"


def test_s5_g22_a_checkpoint_goes_behind_an_unanswered_one_where_the_stream_orders_them() -> None:
    """Sent behind it at once; when the first fails, the one behind it is not sent again
    (its answer lost is raised, not retried), and the wait raises the first error."""
    ahead = WritesAhead()
    first = Write(error=_refused())
    ahead.add("t", _alone(first), checkpoint=True)
    behind = Write(error=UnavailableError("lost", code=grpc.StatusCode.UNAVAILABLE))
    seen: list[PendingWrite | None] = []

    def send(previous: PendingWrite | None) -> Write:
        seen.append(previous)
        return behind

    ahead.add("t", send, checkpoint=True)
    assert seen == [first]  # behind the first, not waiting for it
    assert first.results == []
    first.answer()
    behind.answer()
    with pytest.raises(InvalidArgumentError):
        ahead.wait(["t"])
    assert behind.results == [False], "a checkpoint after a failed one was sent again"


def test_g22_each_error_is_raised_once_by_the_wait_of_its_thread() -> None:
    ahead = WritesAhead()
    lost = UnavailableError("gone", code=grpc.StatusCode.UNAVAILABLE)
    ahead.add("t", _alone(Write(error=lost).answer()), checkpoint=False)
    ahead.add("t", _alone(Write().answer()), checkpoint=False)  # lets the failed one go
    ahead.add("u", _alone(Write().answer()), checkpoint=False)
    ahead.wait(["u"])  # another thread's wait does not raise it
    with pytest.raises(UnavailableError):
        ahead.wait(["t"])
    ahead.wait(["t"])
    ahead.wait()


def test_g22_a_checkpoint_sent_while_its_thread_is_waited_for_goes_behind_the_last() -> None:
    """A wait keeps the thread's last checkpoint until what it waits for is settled: one sent
    meanwhile (another caller reading the thread mid-run) still goes behind it (S5), not
    out on its own ahead of a write that may yet be sent again."""
    ahead = WritesAhead()
    first = Write()
    ahead.add("t", _alone(first), checkpoint=True)
    waiting = threading.Thread(target=ahead.wait, args=(["t"],))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # waiting for the first's answer
    seen: list[PendingWrite | None] = []
    second = Write()

    def send(previous: PendingWrite | None) -> Write:
        seen.append(previous)
        return second

    ahead.add("t", send, checkpoint=True)
    assert seen == [first]
    first.answer()
    waiting.join(5)
    assert not waiting.is_alive()
    second.answer()
    ahead.wait(["t"])
    assert second.results == [True]


class AsyncWrite:
    """:class:`Write` for the asyncio saver's books."""

    def __init__(self, error: Exception | None = None) -> None:
        self.answered = asyncio.Event()
        self.error = error
        self.results: list[bool] = []

    def answer(self) -> AsyncWrite:
        self.answered.set()
        return self

    def done(self) -> bool:
        return self.answered.is_set()

    async def result(self, *, resend: bool = True) -> Any:
        await asyncio.wait_for(self.answered.wait(), 5)
        self.results.append(resend)
        if self.error is not None:
            raise self.error
        return "ok"


def _async_alone(write: AsyncWrite) -> Any:
    async def send(previous: AsyncPendingWrite | None) -> AsyncWrite | None:
        return None if previous is not None else write

    return send


async def test_g22_asyncio_without_ordering_a_checkpoint_waits_for_the_previous() -> None:
    """The asyncio books: a checkpoint that cannot go behind an unanswered one waits for
    it, and is not sent when it failed; that error is raised there, not again later."""
    ahead = AsyncWritesAhead()
    first = AsyncWrite(error=_refused())
    await ahead.add("t", _async_alone(first), checkpoint=True)
    await ahead.add("t", _async_alone(AsyncWrite().answer()), checkpoint=False)
    sent: list[AsyncWrite] = []

    async def send(previous: AsyncPendingWrite | None) -> AsyncWrite | None:
        if previous is not None:
            return None
        sent.append(AsyncWrite())
        return sent[-1]

    adding = asyncio.ensure_future(ahead.add("t", send, checkpoint=True))
    await asyncio.sleep(0.05)
    assert not adding.done(), "the checkpoint did not wait for its unanswered parent"
    first.answer()
    with pytest.raises(InvalidArgumentError):
        await adding
    assert sent == [], "a checkpoint went out although its parent was not stored"
    await ahead.wait(["t"])


async def test_s5_g22_asyncio_a_checkpoint_behind_a_failed_one_is_not_sent_again() -> None:
    """Behind an unanswered checkpoint at once; the first's error is raised by the thread's
    wait, once, and the one behind it, lost, is not sent again; other threads unaffected."""
    ahead = AsyncWritesAhead()
    first = AsyncWrite(error=_refused())
    await ahead.add("t", _async_alone(first), checkpoint=True)
    behind = AsyncWrite(error=UnavailableError("lost", code=grpc.StatusCode.UNAVAILABLE))
    seen: list[AsyncPendingWrite | None] = []

    async def send(previous: AsyncPendingWrite | None) -> AsyncWrite:
        seen.append(previous)
        return behind

    await ahead.add("t", send, checkpoint=True)
    await ahead.add("u", _async_alone(AsyncWrite().answer()), checkpoint=False)
    assert seen == [first]
    first.answer()
    behind.answer()
    await ahead.wait(["u"])
    with pytest.raises(InvalidArgumentError):
        await ahead.wait(["t"])
    assert behind.results == [False], "a checkpoint after a failed one was sent again"
    await ahead.wait()
