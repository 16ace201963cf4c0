"""S1: how a Write stream's reader takes its messages, and how the server's close stops it:
a read under way ends as at the client's half-close, a stopped reading reads nothing more,
and a cancel of the stream itself still goes through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from checkpointd.servicers.write import _Reading
from checkpointd_client.v1 import write_service_pb2 as svc


class _Messages:
    """Messages handed out one at a time, when the test releases them."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[svc.WriteRequest | None] = asyncio.Queue()
        self.reads = 0

    def __aiter__(self) -> AsyncIterator[svc.WriteRequest]:
        return self

    async def __anext__(self) -> svc.WriteRequest:
        self.reads += 1
        message = await self.queue.get()
        if message is None:
            raise StopAsyncIteration
        return message


async def test_s1_reading_hands_out_messages_then_none_at_the_half_close():
    messages = _Messages()
    reading = _Reading(messages)
    messages.queue.put_nowait(svc.WriteRequest(correlation_id=1))
    messages.queue.put_nowait(None)
    first = await reading.next()
    assert first is not None
    assert first.correlation_id == 1
    assert await reading.next() is None


async def test_s1_stop_ends_a_read_under_way_and_no_further_message_is_read():
    messages = _Messages()
    reading = _Reading(messages)
    pending = asyncio.ensure_future(reading.next())
    await asyncio.sleep(0)  # the read is under way
    assert messages.reads == 1
    reading.stop()
    assert await pending is None
    messages.queue.put_nowait(svc.WriteRequest(correlation_id=2))
    assert await reading.next() is None  # stopped: the message stays unread
    assert messages.reads == 1
    assert not pending.cancelled()


async def test_s1_stop_before_a_read_reads_nothing():
    messages = _Messages()
    reading = _Reading(messages)
    reading.stop()
    reading.stop()  # twice is once
    assert await reading.next() is None
    assert messages.reads == 0


async def test_s1_a_cancel_of_the_stream_itself_is_not_taken_for_a_stop():
    messages = _Messages()
    reading = _Reading(messages)
    task = asyncio.ensure_future(reading.next())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_s1_a_cancel_that_comes_with_a_stop_still_cancels():
    """The stream's call ended (its task cancelled) while the server closes: both cancels
    land on the read, and the one that is not the stop's goes on up."""
    messages = _Messages()
    reading = _Reading(messages)
    task = asyncio.ensure_future(reading.next())
    await asyncio.sleep(0)
    reading.stop()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
