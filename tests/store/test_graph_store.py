"""The graph store at the store level, on both backends: it shares the store's connections,
satisfies the GraphStore protocol, forgets request ids past the retention (G6), and orders
a checkpoint's writes bytewise whatever the database's collation (G3)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from checkpointd.app import build_graph_store
from checkpointd.graph.metrics import timed_graph_store
from checkpointd.graph.records import (
    ChannelValue,
    GraphCheckpoint,
    GraphListQuery,
    GraphPosition,
    GraphWrite,
    TypedValue,
)
from checkpointd.graph.store import GraphStore
from checkpointd.store.base import RequestIdReused
from checkpointd.store.postgres import PostgresStore
from checkpointd.store.sqlite import SQLiteStore
from tests.support.protocols import signature_mismatches
from tests.support.records import NS, T0
from tests.support.sidecar import StoreSpec
from tests.support.stores import open_store


def _checkpoint(checkpoint_id: str) -> GraphCheckpoint:
    return GraphCheckpoint("t", "", checkpoint_id, "", TypedValue("json", b"{}"), "{}", {})


async def test_g6_request_ids_are_forgotten_after_the_retention(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A retry within the retention writes nothing; once purged, the same id is a new call."""
    graph = build_graph_store(store)
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0)
    assert await graph.delete_thread(NS, "d1", "t", T0) == 1
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0)  # a retry: nothing
    assert await graph.get_tuple(NS, "t", "", "") is None
    assert await graph.purge_requests(T0) == 0  # nothing recorded before T0
    assert await graph.purge_requests(T0 + timedelta(seconds=1)) == 2
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0)  # a new call now
    found = await graph.get_tuple(NS, "t", "", "")
    assert found is not None
    assert found.checkpoint.checkpoint_id == "c1"


async def test_c10_a_graph_request_id_with_another_fingerprint_is_refused_and_writes_nothing(
    store: SQLiteStore | PostgresStore,
) -> None:
    """The same fingerprint is a retry; another one (another method or other content) is
    RequestIdReused naming the first method, raised before anything is written."""
    graph = build_graph_store(store)
    first = "PutGraphCheckpoint:aa"
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0, fingerprint=first)
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0, fingerprint=first)
    with pytest.raises(RequestIdReused) as reused:
        await graph.put_checkpoint(
            NS, "r1", _checkpoint("c2"), [], T0, fingerprint="PutGraphCheckpoint:bb"
        )
    assert (reused.value.request_id, reused.value.method) == ("r1", "PutGraphCheckpoint")
    with pytest.raises(RequestIdReused):
        await graph.delete_thread(NS, "r1", "t", T0, fingerprint="DeleteGraphThread:cc")
    found = await graph.get_tuple(NS, "t", "", "")
    assert found is not None
    assert found.checkpoint.checkpoint_id == "c1"
    assert await graph.delete_thread(NS, "d1", "t", T0, fingerprint="DeleteGraphThread:dd") == 1
    assert await graph.delete_thread(NS, "d1", "t", T0, fingerprint="DeleteGraphThread:dd") == 1


async def test_both_graph_wings_satisfy_the_protocol_and_are_timed_by_one_wrapper(
    store: SQLiteStore | PostgresStore,
) -> None:
    """Each backend's graph store has the protocol's methods with its signatures; the timing
    wrapper passes every call through."""
    graph = build_graph_store(store)
    assert signature_mismatches(type(graph), GraphStore) == []

    class Histogram:
        def __init__(self) -> None:
            self.observed: list[tuple[str, str]] = []

        def labels(self, operation: str, outcome: str) -> Histogram:
            self.observed.append((operation, outcome))
            return self

        def observe(self, seconds: float) -> None:
            pass

    histogram = Histogram()
    timed = timed_graph_store(graph, histogram)  # type: ignore[arg-type]
    assert await timed.get_tuple(NS, "t", "", "") is None
    assert histogram.observed == [("graph_get_tuple", "ok")]


async def test_b1_a_graph_page_stops_at_its_byte_budget_and_the_next_goes_on(
    store: SQLiteStore | PostgresStore,
) -> None:
    """A listing completes rows only while the page is within ``max_bytes`` (at least one),
    says more are left, and the next page starts where it stopped."""
    graph = build_graph_store(store)
    for i in range(5):
        checkpoint = GraphCheckpoint(
            "t", "", f"c{i}", "", TypedValue("json", b"{}"), "{}", {"big": str(i)}
        )
        value = ChannelValue("big", str(i), TypedValue("bytes", bytes(1000)))
        await graph.put_checkpoint(NS, "", checkpoint, [value], T0)
    query = GraphListQuery("t", None, "", "", "")
    first = await graph.list_tuples(NS, query, after=None, limit=100, max_bytes=2500)
    assert [t.checkpoint.checkpoint_id for t in first.tuples] == ["c4", "c3", "c2"]
    assert first.more
    last = first.tuples[-1].checkpoint
    position = GraphPosition(last.checkpoint_id, last.thread_id, last.checkpoint_ns)
    rest = await graph.list_tuples(NS, query, after=position, limit=100, max_bytes=2500)
    assert [t.checkpoint.checkpoint_id for t in rest.tuples] == ["c1", "c0"]
    assert not rest.more
    one = await graph.list_tuples(NS, query, after=None, limit=100, max_bytes=1)
    assert len(one.tuples) == 1


#: Task paths and ids whose code point order differs from a language collation's ('B' < 'a'
#: < 'é' bytewise; '_', case and accents are weighed otherwise by en-US).
_TASKS = [("~__pregel_pull, b", "B"), ("~__pregel_pull, b", "a"), ("~__pregel_pull, b", "_z"),
          ("~__pregel_pull, B", "é"), ("~__pregel_pull, B", "Z"), ("_pull", "b")]  # fmt: skip


@pytest.fixture
async def collated_store(
    backend: str, store_spec: StoreSpec, pg_dsn_or_none: str | None
) -> AsyncIterator[SQLiteStore | PostgresStore]:
    """A store whose text columns sort by a language's rules where the backend has them: on
    Postgres a database of its own created with the ICU collation en-US (dropped after the
    test); on SQLite the usual file (its columns have no other collation than BINARY)."""
    if backend == "sqlite":
        opened: SQLiteStore | PostgresStore = open_store(store_spec)
        await opened.open()
        try:
            yield opened
        finally:
            await opened.close()
        return
    assert pg_dsn_or_none is not None
    database = f"cpt_collated_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_dsn_or_none, timeout=10)
    try:
        await admin.execute(
            f'CREATE DATABASE "{database}" TEMPLATE template0 ENCODING UTF8 '
            "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
        dsn = urlunsplit(urlsplit(pg_dsn_or_none)._replace(path=f"/{database}"))
        opened = PostgresStore(dsn, schema="cpt_collated")
        await opened.open()
        try:
            yield opened
        finally:
            await opened.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
def pg_dsn_or_none(backend: str, request: pytest.FixtureRequest) -> str | None:
    return None if backend == "sqlite" else str(request.getfixturevalue("pg_dsn"))


async def test_g3_pending_writes_come_in_code_point_order_whatever_the_collation(
    collated_store: SQLiteStore | PostgresStore,
) -> None:
    """A checkpoint's writes are read back by (task_path, task_id, idx), the texts compared
    bytewise as LangGraph's writes sort key does, on a Postgres database whose collation
    orders them otherwise."""
    graph = build_graph_store(collated_store)
    await graph.put_checkpoint(NS, "r1", _checkpoint("c1"), [], T0)
    value = TypedValue("json", b"1")
    for n, (path, task) in enumerate(_TASKS):
        writes = [GraphWrite(task, path, idx, "ch", value) for idx in (1, 0)]
        await graph.put_writes(NS, f"w{n}", "t", "", "c1", writes, T0, task_id=task)
    found = await graph.get_tuple(NS, "t", "", "c1")
    assert found is not None
    read = [(w.task_path, w.task_id, w.idx) for w in found.pending_writes]
    assert read == sorted((path, task, idx) for path, task in _TASKS for idx in (0, 1))
