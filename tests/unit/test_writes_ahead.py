"""What a pipelining saver keeps of the writes it sent ahead (G22): bounded per thread, a
put only after the previous put of its thread is durable, and each error raised once."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest

from checkpointd_client.errors import InvalidArgumentError, UnavailableError
from checkpointd_client.langgraph._ahead import MAX_AHEAD, WritesAhead


class Write:
    """A write whose answer comes when the test says (``answer``), or an error."""

    def __init__(self, error: Exception | None = None) -> None:
        self.answered = threading.Event()
        self.error = error
        self.results = 0

    def answer(self) -> Write:
        self.answered.set()
        return self

    def done(self) -> bool:
        return self.answered.is_set()

    def result(self) -> Any:
        assert self.answered.wait(5), "waited for a write the test never answers"
        self.results += 1
        if self.error is not None:
            raise self.error
        return "ok"


def _refused() -> InvalidArgumentError:
    return InvalidArgumentError("refused", code=grpc.StatusCode.INVALID_ARGUMENT)


def test_g22_answered_writes_are_let_go_and_the_oldest_waited_for_beyond_the_bound() -> None:
    ahead = WritesAhead()
    answered = [Write().answer() for _ in range(3)]
    for write in answered:
        ahead.add("t", lambda write=write: write, checkpoint=False)  # type: ignore[misc]
    assert [w.results for w in answered] == [1, 1, 1]  # read as the next was added
    waiting = [Write() for _ in range(MAX_AHEAD)]
    for write in waiting:
        ahead.add("t", lambda write=write: write, checkpoint=False)  # type: ignore[misc]
    assert not any(w.results for w in waiting)  # 64 unanswered: none waited for yet
    beyond = Write()
    adding = threading.Thread(
        target=ahead.add, args=("t", lambda: beyond), kwargs={"checkpoint": False}
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
    assert all(w.results == 1 for w in [*waiting, beyond])


def test_g22_a_put_waits_for_the_previous_put_of_its_thread_and_raises_its_error() -> None:
    ahead = WritesAhead()
    first = Write(error=_refused())
    ahead.add("t", lambda: first, checkpoint=True)
    ahead.add("other", lambda: Write().answer(), checkpoint=True)  # another thread: no wait
    ahead.add("t", lambda: Write().answer(), checkpoint=False)  # put_writes: no wait
    first.answer()
    sent: list[Write] = []

    def send() -> Write:
        sent.append(Write())
        return sent[-1]

    with pytest.raises(InvalidArgumentError):
        ahead.add("t", send, checkpoint=True)
    assert sent == [], "a put went out although its parent was not stored"


def test_g22_each_error_is_raised_once_by_the_wait_of_its_thread() -> None:
    ahead = WritesAhead()
    lost = UnavailableError("gone", code=grpc.StatusCode.UNAVAILABLE)
    ahead.add("t", lambda: Write(error=lost).answer(), checkpoint=False)
    ahead.add("t", lambda: Write().answer(), checkpoint=False)  # lets the failed one go
    ahead.add("u", lambda: Write().answer(), checkpoint=False)
    ahead.wait(["u"])  # another thread's wait does not raise it
    with pytest.raises(UnavailableError):
        ahead.wait(["t"])
    ahead.wait(["t"])
    ahead.wait()
