"""S2: the schedule of Write streams after streams that stopped answering: a fresh one at
once, then doubling pauses up to a cap, then unary for a while; any answer ends the run."""

from __future__ import annotations

import pytest

from checkpointd_client._stream_health import UNARY_AFTER, UNARY_HOLD_SECONDS, StreamHealth


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_s2_stream_pauses_double_up_to_the_cap_then_hold_unary():
    """The first silent stream is replaced at once; the pauses after the next ones double
    from the initial pause, never above the cap; from the unary_after-th on, the hold."""
    health = StreamHealth(pause_initial=0.5, pause_cap=1.5, unary_after=5, unary_hold=60)
    assert [health.pause(n) for n in range(1, 8)] == [0.0, 0.5, 1.0, 1.5, 60, 60, 60]
    assert StreamHealth().pause(UNARY_AFTER) == UNARY_HOLD_SECONDS


def test_s2_no_stream_opens_within_a_pause_and_an_answer_ends_the_run():
    """may_open is false until the pause after a failure has passed; an answer on any
    stream resets the count, so the next silent stream is again replaced at once."""
    clock = _Clock()
    health = StreamHealth(pause_initial=2.0, unary_after=3, unary_hold=30, clock=clock)
    assert health.may_open()
    health.stopped_answering()
    assert health.may_open()  # the first: a fresh stream at once
    health.stopped_answering()
    assert not health.may_open()
    clock.now += 2.0
    assert health.may_open()
    health.stopped_answering()  # the third in a row: unary for the hold
    clock.now += 29.9
    assert not health.may_open()
    clock.now += 0.1
    assert health.may_open()
    health.answered()
    assert health.failures == 0
    health.stopped_answering()
    assert health.may_open()


def test_s2_unary_after_must_leave_room_for_a_fresh_stream():
    """unary_after below 2 would never replace a stream at once: refused."""
    with pytest.raises(ValueError, match="unary_after"):
        StreamHealth(unary_after=1)
