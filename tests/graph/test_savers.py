"""The savers' own surface beyond the conformance suite: the asyncio saver's blocking
methods, limits across pages, versions, and bad arguments refused before anything is sent."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from tests.support.shared_server import SharedSidecar


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_the_asyncio_saver_answers_the_blocking_methods_too(sidecar: SharedSidecar) -> None:
    """Blocking calls on the asyncio saver (from a worker thread) store and read what its
    async calls see; list(limit=) stops at the limit across pages."""
    thread = uuid.uuid4().hex
    async with AsyncCheckpointdSaver(sidecar.target, namespace=sidecar.namespace) as saver:

        def blocking() -> list[str]:
            parent = _config(thread)
            for step in range(3):
                cp = generate_checkpoint(
                    channel_values={"k": step}, channel_versions={"k": step + 1}
                )
                parent = saver.put(parent, cp, generate_metadata(step=step), {"k": step + 1})
            saver.put_writes(parent, [("k", "w")], "task")
            return [t.checkpoint["id"] for t in saver.list(_config(thread), limit=2)]

        listed = await asyncio.to_thread(blocking)
        found = await saver.aget_tuple(_config(thread))
        assert found is not None
        assert len(listed) == 2
        assert listed[0] == found.checkpoint["id"]
        assert found.checkpoint["channel_values"] == {"k": 2}
        assert found.pending_writes == [("task", "k", "w")]
        await asyncio.to_thread(saver.delete_thread, thread)
        assert await saver.aget_tuple(_config(thread)) is None


def test_versions_increase_and_sort_as_text() -> None:
    """get_next_version counts up from None, an int or a version it made, and sorts as text."""
    saver = CheckpointdSaver("unix:///nonexistent/checkpointd.sock")
    versions = [saver.get_next_version(None, None)]
    for _ in range(11):
        versions.append(saver.get_next_version(versions[-1], None))
    assert versions == sorted(versions)
    assert saver.get_next_version(41, None).startswith("0" * 30 + "42.")
    saver.close()


def test_an_unknown_prune_strategy_is_refused_before_sending() -> None:
    """prune(strategy=...) other than keep_latest or delete is a ValueError naming them; no
    server is needed to get it."""
    with (
        CheckpointdSaver("unix:///nonexistent/checkpointd.sock") as saver,
        pytest.raises(ValueError, match="delete, keep_latest"),
    ):
        saver.prune(["t"], strategy="keep_oldest")


def test_aclose_returns_when_the_write_stream_has_ended(sidecar: SharedSidecar) -> None:
    """After aclose() nothing of the saver's runs on: the Write stream's reader, grpc's status
    task and its request consumer have ended, so a loop closed right after does not leave
    grpc's poller a closed loop to call ("Event loop is closed" in a later loop)."""

    async def once() -> list[str]:
        saver = AsyncCheckpointdSaver(sidecar.target, namespace=sidecar.namespace)
        config = _config(uuid.uuid4().hex)
        await saver.aput(config, generate_checkpoint(), generate_metadata(), {})
        await saver.aput_writes(
            {"configurable": {**config["configurable"], "checkpoint_id": "x"}}, [("k", 1)], "t"
        )
        await saver.aclose()
        current = asyncio.current_task()
        return [repr(t) for t in asyncio.all_tasks() if t is not current and not t.done()]

    for _ in range(3):
        assert asyncio.run(once()) == []
