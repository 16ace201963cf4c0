"""LangGraph through the sidecar against LangGraph's own in-process savers, in the same run.

A chat-like thread: a real ``StateGraph`` whose one node appends an assistant message to a
``messages`` channel (``Annotated[list, operator.add]``, so the list grows by the user's
message and the reply every turn), invoked turn after turn on a thread with the blocking
``graph.invoke``. The same turns go through ``checkpointd_client.langgraph.CheckpointdSaver``
(a real ``checkpointd serve`` subprocess, Unix socket) and through ``SqliteSaver`` (a file,
``langgraph-checkpoint-sqlite``) or ``PostgresSaver`` (a schema of its own,
``langgraph-checkpoint-postgres``) in this process, alternately turn by turn, so both see
the same machine at the same moment; several threads (``threads``) take turns the same way,
so each turn number has several samples. Then ``graph.get_state``, alternately too. The
asyncio rows (``aio``) do the same with ``graph.ainvoke`` and ``aget_state`` on
``AsyncCheckpointdSaver`` against ``AsyncSqliteSaver`` / ``AsyncPostgresSaver``, every call of
both run to its end in one event loop of this process.

The DeltaChannel row (:func:`delta_benchmark`) runs the same chat with ``messages`` a
LangGraph ``DeltaChannel`` (a value stored every ``snapshot_frequency`` updates, rebuilt from
the writes in between through ``get_delta_channel_history``) on ``CheckpointdSaver`` and on
``SqliteSaver``, and adds the bytes each stored: the values, bodies, metadata and writes of
the thread, summed from the tables once the turns are done.

Per saver: the median wall time of the first turns and of the last ones (turns 1-10 and
191-200 of 200), the last turn alone, the median ``get_state``, and the CPU per turn and per
``get_state`` (bench/cpu.py): this process's, read around each call (the two savers'
calls alternate), and the server's over the whole series (only the sidecar's calls reach
it).
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import aiosqlite
import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row

from bench import cpu
from checkpointd_client.langgraph import AsyncCheckpointdSaver, CheckpointdSaver
from tests.support.sidecar import Sidecar, StoreSpec

__all__ = ["BASELINES", "GraphSeries", "benchmark", "delta_benchmark", "print_delta_rows"]

BASELINES = {"sqlite": "langgraph SqliteSaver", "postgres": "langgraph PostgresSaver"}
ASYNC_BASELINES = {
    "sqlite": "langgraph AsyncSqliteSaver",
    "postgres": "langgraph AsyncPostgresSaver",
}
SAVER = "CheckpointdSaver"
PIPELINED_SAVER = "CheckpointdSaver pipeline"
ASYNC_SAVER = "AsyncCheckpointdSaver"
ASYNC_PIPELINED_SAVER = "AsyncCheckpointdSaver pipeline"


def saver_label(*, pipeline: bool, aio: bool) -> str:
    """The row's name of the sidecar's saver."""
    if aio:
        return ASYNC_PIPELINED_SAVER if pipeline else ASYNC_SAVER
    return PIPELINED_SAVER if pipeline else SAVER


#: Turns in each of the windows compared (turns 1-10 against the last 10).
WINDOW = 10
#: Turns (and get_state calls) on a thread of their own before the measured one.
WARM_UP = 3
#: About 100 characters a message, as a short chat turn.
TEXT = "x" * 90


class Chat(TypedDict):
    messages: Annotated[list[dict[str, str]], operator.add]


def _extend(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    """The DeltaChannel reducer of ``messages``: every write's messages appended, in order."""
    out = list(state)
    for write in writes:
        out.extend(write)
    return out


class DeltaChat(TypedDict):
    messages: Annotated[list[dict[str, str]], DeltaChannel(_extend)]


def reply(state: Chat) -> dict[str, list[dict[str, str]]]:
    """The one node: the assistant's reply, appended."""
    return {"messages": [{"role": "assistant", "content": f"{len(state['messages'])} {TEXT}"}]}


def delta_reply(state: DeltaChat) -> dict[str, list[dict[str, str]]]:
    """The one node of the DeltaChannel chat (its own schema): the reply, appended."""
    return {"messages": [{"role": "assistant", "content": f"{len(state['messages'])} {TEXT}"}]}


def build(checkpointer: BaseCheckpointSaver[Any], *, delta: bool = False) -> Any:
    """START -> reply -> END, checkpointed by ``checkpointer`` (``messages`` a DeltaChannel
    with ``delta``)."""
    graph = StateGraph(DeltaChat if delta else Chat)
    graph.add_node("reply", delta_reply if delta else reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=checkpointer)


@dataclass
class _Side:
    """One saver's graph, thread and what was measured of it; ``loop`` runs an asyncio
    saver's calls (None: the blocking ones)."""

    graph: Any
    config: dict[str, Any]
    turns_ms: list[float]
    reads_ms: list[float]
    loop: asyncio.AbstractEventLoop | None = None
    turn_cpu_s: float = 0.0
    read_cpu_s: float = 0.0

    def invoke(self, state: dict[str, Any]) -> Any:
        """One turn: ``invoke``, or ``ainvoke`` run to its end in the loop. A pipelining
        saver's writes are waited for in the turn (G22): else their answers, handled by its
        threads or tasks, would be counted in the other saver's turn that follows."""
        saver, thread_id = self.graph.checkpointer, self.config["configurable"]["thread_id"]
        if self.loop is None:
            result = self.graph.invoke(state, self.config)
            if isinstance(saver, CheckpointdSaver):
                saver.flush(thread_id)
            return result

        async def turn() -> Any:
            result = await self.graph.ainvoke(state, self.config)
            if isinstance(saver, AsyncCheckpointdSaver):
                await saver.aflush(thread_id)
            return result

        return self.loop.run_until_complete(turn())

    def get_state(self) -> Any:
        if self.loop is None:
            return self.graph.get_state(self.config)
        return self.loop.run_until_complete(self.graph.aget_state(self.config))


@dataclass(frozen=True)
class GraphSeries:
    """One saver's figures: wall time in ms, CPU in microseconds per call."""

    turns_ms: list[list[float]]
    """Per thread, the wall time of each turn."""
    get_state_ms: float
    turn_client_cpu_us: float
    get_state_client_cpu_us: float
    turn_server_cpu_us: float | None = None
    get_state_server_cpu_us: float | None = None

    def first_ms(self, window: int) -> float:
        """The median of the first ``window`` turns of every thread."""
        return statistics.median(ms for thread in self.turns_ms for ms in thread[:window])

    def last_ms(self, window: int) -> float:
        """The median of the last ``window`` turns of every thread."""
        return statistics.median(ms for thread in self.turns_ms for ms in thread[-window:])

    def final_ms(self) -> float:
        """The median of every thread's last turn."""
        return statistics.median(thread[-1] for thread in self.turns_ms)


def _turn(side: _Side, i: int) -> None:
    message = {"role": "user", "content": f"turn {i} {TEXT}"}
    client = cpu.self_cpu_s()
    started = time.perf_counter_ns()
    result = side.invoke({"messages": [message]})
    side.turns_ms.append((time.perf_counter_ns() - started) / 1e6)
    side.turn_cpu_s += cpu.self_cpu_s() - client
    assert len(result["messages"]) == 2 * (i + 1), "a turn lost or doubled a message"


def _read(side: _Side, turns: int) -> None:
    client = cpu.self_cpu_s()
    started = time.perf_counter_ns()
    state = side.get_state()
    side.reads_ms.append((time.perf_counter_ns() - started) / 1e6)
    side.read_cpu_s += cpu.self_cpu_s() - client
    assert len(state.values["messages"]) == 2 * turns


def _new_side(
    saver: BaseCheckpointSaver[Any],
    delta: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
) -> _Side:
    thread = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:12]}"}}
    return _Side(build(saver, delta=delta), thread, [], [], loop)


def _warm_up(
    saver: BaseCheckpointSaver[Any],
    delta: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
) -> None:
    """Connections open, statements prepared, caches filled: not measured."""
    side = _new_side(saver, delta, loop)
    for i in range(WARM_UP):
        _turn(side, i)
        _read(side, i + 1)


def compare(
    sidecar: BaseCheckpointSaver[Any],
    baseline: BaseCheckpointSaver[Any],
    server_pid: int,
    turns: int,
    reads: int,
    threads: int = 1,
    *,
    delta: bool = False,
    loop: asyncio.AbstractEventLoop | None = None,
) -> tuple[GraphSeries, GraphSeries]:
    """``turns`` turns of ``threads`` threads on each saver, then ``reads`` get_state calls
    spread over the threads, the two savers alternating call by call (several threads give
    each turn number several samples); (sidecar, baseline). With ``loop``, both are asyncio
    savers, called in it."""
    _warm_up(baseline, delta, loop)
    _warm_up(sidecar, delta, loop)
    ours = [_new_side(sidecar, delta, loop) for _ in range(threads)]
    theirs = [_new_side(baseline, delta, loop) for _ in range(threads)]
    before = cpu.process_cpu_s(server_pid)
    for i in range(turns):
        for mine, other in zip(ours, theirs, strict=True):
            _turn(other, i)
            _turn(mine, i)
    middle = cpu.process_cpu_s(server_pid)
    for k in range(reads):
        _read(theirs[k % threads], turns)
        _read(ours[k % threads], turns)
    after = cpu.process_cpu_s(server_pid)

    def series(sides: list[_Side], server: tuple[float, float] | None) -> GraphSeries:
        calls = turns * threads
        return GraphSeries(
            turns_ms=[side.turns_ms for side in sides],
            get_state_ms=statistics.median(ms for side in sides for ms in side.reads_ms),
            turn_client_cpu_us=sum(side.turn_cpu_s for side in sides) / calls * 1e6,
            get_state_client_cpu_us=sum(side.read_cpu_s for side in sides) / reads * 1e6,
            turn_server_cpu_us=None if server is None else server[0] / calls * 1e6,
            get_state_server_cpu_us=None if server is None else server[1] / reads * 1e6,
        )

    return series(ours, (middle - before, after - middle)), series(theirs, None)


@contextmanager
def baseline_saver(
    backend: str, workdir: Path, pg_dsn: str, pg_schema: str
) -> Iterator[BaseCheckpointSaver[Any]]:
    """LangGraph's in-process saver of the backend on a fresh store: ``SqliteSaver`` on a
    file (WAL, SQLite's default synchronous=FULL), ``PostgresSaver`` on an autocommit
    connection (as its ``from_conn_string``) whose search_path is ``pg_schema``, created here
    (the caller drops it)."""
    if backend == "sqlite":
        conn = sqlite3.connect(str(workdir / "langgraph-sqlitesaver.db"), check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        finally:
            conn.close()
        return
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{pg_schema}"')
    with psycopg.connect(
        pg_dsn,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={pg_schema}",
    ) as pg_conn:
        pg_saver = PostgresSaver(pg_conn)
        pg_saver.setup()
        yield pg_saver


@asynccontextmanager
async def async_baseline_saver(
    backend: str, workdir: Path, pg_dsn: str, pg_schema: str
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """:func:`baseline_saver`'s asyncio twin: ``AsyncSqliteSaver`` on an aiosqlite file
    connection, ``AsyncPostgresSaver`` on an autocommit async connection."""
    if backend == "sqlite":
        async with aiosqlite.connect(str(workdir / "langgraph-asyncsqlitesaver.db")) as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            yield saver
        return
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        await admin.execute(f'CREATE SCHEMA "{pg_schema}"')
    async with await psycopg.AsyncConnection.connect(
        pg_dsn,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={pg_schema}",
    ) as pg_conn:
        pg_saver = AsyncPostgresSaver(pg_conn)
        await pg_saver.setup()
        yield pg_saver


def _compare_async(
    spec_target: str,
    backend: str,
    workdir: Path,
    pg_dsn: str,
    pg_schema: str,
    server_pid: int,
    turns: int,
    reads: int,
    threads: int,
    pipeline: bool,
) -> tuple[GraphSeries, GraphSeries]:
    """:func:`compare` on the asyncio savers, opened and closed in a loop of their own."""
    loop = asyncio.new_event_loop()
    try:

        async def opened() -> Any:
            baseline = async_baseline_saver(backend, workdir, pg_dsn, pg_schema)
            saver = AsyncCheckpointdSaver(spec_target, pipeline=pipeline)
            await saver.setup()
            return baseline, await baseline.__aenter__(), saver

        baseline_cm, baseline, saver = loop.run_until_complete(opened())
        try:
            return compare(saver, baseline, server_pid, turns, reads, threads, loop=loop)
        finally:
            loop.run_until_complete(saver.aclose())
            loop.run_until_complete(baseline_cm.__aexit__(None, None, None))
    finally:
        loop.close()


def benchmark(
    backend: str,
    spec: StoreSpec,
    workdir: Path,
    pg_dsn: str,
    pg_schema: str,
    turns: int,
    reads: int,
    threads: int = 1,
    log: Callable[[str], None] = print,
    *,
    pipeline: bool = False,
    aio: bool = False,
) -> dict[str, Any]:
    """The graph row of one backend: a sidecar on ``spec`` against the in-process saver; with
    ``pipeline``, the saver sends a run's writes ahead of their answers (contract G22); with
    ``aio``, the asyncio savers on both sides."""
    window = min(WINDOW, max(1, turns // 2))
    server = Sidecar(spec).start()
    try:
        assert server.process is not None
        pid = server.process.pid
        if aio:
            ours, theirs = _compare_async(
                server.target,
                backend,
                workdir,
                pg_dsn,
                pg_schema,
                pid,
                turns,
                reads,
                threads,
                pipeline,
            )
        else:
            with (
                baseline_saver(backend, workdir, pg_dsn, pg_schema) as baseline,
                CheckpointdSaver(server.target, pipeline=pipeline) as saver,
            ):
                saver.setup()
                ours, theirs = compare(saver, baseline, pid, turns, reads, threads)
    finally:
        server.close()
    kind = ", ".join(part for part, on in (("asyncio", aio), ("pipelined", pipeline)) if on)
    row = {
        "case": f"graph: chat thread, {turns} turns{', ' + kind if kind else ''}",
        "backend": backend,
        "saver": saver_label(pipeline=pipeline, aio=aio),
        "pipeline": pipeline,
        "aio": aio,
        "baseline": (ASYNC_BASELINES if aio else BASELINES)[backend],
        "turns": turns,
        "threads": threads,
        "window": window,
        "get_state_calls": reads,
        "sidecar_first_ms": round(ours.first_ms(window), 3),
        "sidecar_last_ms": round(ours.last_ms(window), 3),
        "sidecar_final_turn_ms": round(ours.final_ms(), 3),
        "sidecar_flat": round(ours.last_ms(window) / ours.first_ms(window), 3),
        "sidecar_get_state_ms": round(ours.get_state_ms, 3),
        "baseline_first_ms": round(theirs.first_ms(window), 3),
        "baseline_last_ms": round(theirs.last_ms(window), 3),
        "baseline_final_turn_ms": round(theirs.final_ms(), 3),
        "baseline_flat": round(theirs.last_ms(window) / theirs.first_ms(window), 3),
        "baseline_get_state_ms": round(theirs.get_state_ms, 3),
        "ratio_last": round(ours.last_ms(window) / theirs.last_ms(window), 3),
        "ratio_get_state": round(ours.get_state_ms / theirs.get_state_ms, 3),
        **cpu.row_fields(
            ours.turn_client_cpu_us, ours.turn_server_cpu_us, theirs.turn_client_cpu_us
        ),
        **cpu.row_fields(
            ours.get_state_client_cpu_us,
            ours.get_state_server_cpu_us,
            theirs.get_state_client_cpu_us,
            prefix="get_state_",
        ),
    }
    label = f"{kind} " if kind else ""
    log(
        f"  graph {backend:<8} {label}turns 1-{window} {row['sidecar_first_ms']:.2f} ms, "
        f"last {window} {row['sidecar_last_ms']:.2f} ms, get_state "
        f"{row['sidecar_get_state_ms']:.2f} ms; {row['baseline']} "
        f"{row['baseline_first_ms']:.2f} / {row['baseline_last_ms']:.2f} / "
        f"{row['baseline_get_state_ms']:.2f} ms"
    )
    return row


#: The bytes a thread's rows hold: (SQL, its source), summed over each table.
_SIDECAR_BYTES = (
    "SELECT (SELECT coalesce(sum(length(body_data) + length(metadata_json) "
    "+ length(channel_versions)), 0) FROM graph_checkpoints) "
    "+ (SELECT coalesce(sum(length(value_data)), 0) FROM graph_blobs) "
    "+ (SELECT coalesce(sum(length(value_data)), 0) FROM graph_writes)"
)
_SQLITESAVER_BYTES = (
    "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints) "
    "+ (SELECT coalesce(sum(length(value)), 0) FROM writes)"
)


def _stored_bytes(path: Path, query: str) -> int:
    with sqlite3.connect(str(path)) as conn:
        return int(conn.execute(query).fetchone()[0])


#: How far back from the newest checkpoint the mid-interval get_state reads: 25 turns (3
#: checkpoints each), half the 50 turns between two snapshots of the chat's ``messages``.
MID_BACK = 75


def _mid_config(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """The config of the checkpoint ``MID_BACK`` before the newest of the newest thread."""
    newest = next(iter(saver.list(None, limit=1)))
    thread: RunnableConfig = {
        "configurable": {"thread_id": newest.config["configurable"]["thread_id"]}
    }
    return dict(list(saver.list(thread, limit=MID_BACK + 1))[-1].config)


def _mid_reads(
    sidecar: BaseCheckpointSaver[Any],
    baseline: BaseCheckpointSaver[Any],
    server_pid: int,
    reads: int,
) -> tuple[float, float, float]:
    """``get_state`` of a checkpoint between two snapshots (its ``messages`` rebuilt from the
    writes back to the last one), the savers alternating: CPU microseconds per call of the
    sidecar's client and server, and of the in-process saver."""
    sides = [(build(saver, delta=True), _mid_config(saver)) for saver in (sidecar, baseline)]
    used = [0.0, 0.0, 0.0]
    for _ in range(reads):
        for index, (graph, config) in enumerate(sides):
            client, server = cpu.self_cpu_s(), cpu.process_cpu_s(server_pid)
            graph.get_state(config)
            used[2 * index] += cpu.self_cpu_s() - client
            if index == 0:
                used[1] += cpu.process_cpu_s(server_pid) - server
    return used[0] / reads * 1e6, used[1] / reads * 1e6, used[2] / reads * 1e6


def delta_benchmark(
    workdir: Path, turns: int, reads: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The DeltaChannel row on SQLite: one chat thread of ``turns`` turns whose ``messages``
    is a DeltaChannel, on a fresh sidecar and on ``SqliteSaver``, alternating turn by turn,
    then ``reads`` get_state calls each; the bytes each stored, and CPU per turn and per
    get_state (client and server, as :func:`benchmark`)."""
    spec = StoreSpec("sqlite", f"sqlite://{workdir / 'graph-delta.db'}")
    baseline_path = workdir / "langgraph-sqlitesaver-delta.db"
    conn = sqlite3.connect(str(baseline_path), check_same_thread=False)
    try:
        baseline = SqliteSaver(conn)
        baseline.setup()
        server = Sidecar(spec).start()
        try:
            assert server.process is not None
            with CheckpointdSaver(server.target) as saver:
                saver.setup()
                ours, theirs = compare(
                    saver, baseline, server.process.pid, turns, reads, 1, delta=True
                )
                mid = _mid_reads(saver, baseline, server.process.pid, reads)
        finally:
            server.close()
    finally:
        conn.close()
    window = min(WINDOW, max(1, turns // 2))
    row = {
        "case": f"graph: DeltaChannel chat thread, {turns} turns",
        "backend": "sqlite",
        "saver": SAVER,
        "baseline": BASELINES["sqlite"],
        "turns": turns,
        "get_state_calls": reads,
        # Both include their warm-up thread (3 turns).
        "sidecar_stored_bytes": _stored_bytes(
            Path(spec.url.removeprefix("sqlite://")), _SIDECAR_BYTES
        ),
        "baseline_stored_bytes": _stored_bytes(baseline_path, _SQLITESAVER_BYTES),
        "sidecar_first_ms": round(ours.first_ms(window), 3),
        "sidecar_last_ms": round(ours.last_ms(window), 3),
        "sidecar_get_state_ms": round(ours.get_state_ms, 3),
        "baseline_first_ms": round(theirs.first_ms(window), 3),
        "baseline_last_ms": round(theirs.last_ms(window), 3),
        "baseline_get_state_ms": round(theirs.get_state_ms, 3),
        "mid_back": MID_BACK,
        **cpu.row_fields(
            ours.turn_client_cpu_us, ours.turn_server_cpu_us, theirs.turn_client_cpu_us
        ),
        **cpu.row_fields(*mid, prefix="get_state_mid_"),
        **cpu.row_fields(
            ours.get_state_client_cpu_us,
            ours.get_state_server_cpu_us,
            theirs.get_state_client_cpu_us,
            prefix="get_state_",
        ),
    }
    log(
        f"  graph delta sqlite {turns} turns: stored {row['sidecar_stored_bytes']:,} B "
        f"(SqliteSaver {row['baseline_stored_bytes']:,} B), turn cpu "
        f"{row['sidecar_cpu_us']:.0f} us ({row['baseline_cpu_us']:.0f}), get_state cpu "
        f"{row['get_state_sidecar_cpu_us']:.0f} us ({row['get_state_baseline_cpu_us']:.0f})"
    )
    return row


def print_delta_rows(rows: list[dict[str, Any]]) -> None:
    """The DeltaChannel table: bytes stored, CPU per turn and per get_state (client, server,
    total beside the in-process saver's) of the newest checkpoint and of one between two
    snapshots (``mid cpu``, ``MID_BACK`` checkpoints back), and the wall times."""
    if not rows:
        return
    header = (
        f"{'graph DeltaChannel':<22} {'saver':<24} {'stored B':>11} {'cli cpu':>8} "
        f"{'srv cpu':>8} {'cpu us':>7} {'gs cli':>7} {'gs srv':>7} {'gs cpu':>7} "
        f"{'mid cpu':>7} {'last ms':>8} {'get_state':>9}"
    )
    print("\n" + header)
    print("-" * len(header))
    for r in rows:
        name = f"chat ({r['turns']})"
        print(
            f"{name:<22} {r['saver']:<24} {r['sidecar_stored_bytes']:>11,} "
            f"{r['sidecar_client_cpu_us']:>8.0f} {_us(r['sidecar_server_cpu_us'], 8)} "
            f"{r['sidecar_cpu_us']:>7.0f} {r['get_state_sidecar_client_cpu_us']:>7.0f} "
            f"{_us(r['get_state_sidecar_server_cpu_us'], 7)} "
            f"{r['get_state_sidecar_cpu_us']:>7.0f} {r['get_state_mid_sidecar_cpu_us']:>7.0f} "
            f"{r['sidecar_last_ms']:>8.2f} {r['sidecar_get_state_ms']:>9.2f}"
        )
        print(
            f"{name:<22} {r['baseline']:<24} {r['baseline_stored_bytes']:>11,} "
            f"{r['baseline_cpu_us']:>8.0f} {'-':>8} {r['baseline_cpu_us']:>7.0f} "
            f"{r['get_state_baseline_cpu_us']:>7.0f} {'-':>7} "
            f"{r['get_state_baseline_cpu_us']:>7.0f} {r['get_state_mid_baseline_cpu_us']:>7.0f} "
            f"{r['baseline_last_ms']:>8.2f} {r['baseline_get_state_ms']:>9.2f}"
        )
        print(
            f"{'':<22} {'sidecar / in-process':<24} "
            f"{r['sidecar_stored_bytes'] / r['baseline_stored_bytes']:>11.2f} {'':>8} {'':>8} "
            f"{_us(r['ratio_cpu'], 7, 2)} {'':>7} {'':>7} {_us(r['get_state_ratio_cpu'], 7, 2)} "
            f"{_us(r['get_state_mid_ratio_cpu'], 7, 2)}"
        )


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The graph table: sidecar and in-process, ms per turn (first and last window, the final
    turn), the flatness (last / first), get_state, and CPU microseconds per turn and per
    get_state (client, server, total; in-process; ratio)."""
    if not rows:
        return
    header = (
        f"{'graph (turns)':<22} {'backend':<8} {'saver':<30} {'first ms':>8} {'last ms':>8} "
        f"{'final ms':>8} {'flat':>5} {'get_state':>9} "
        f"{'cli cpu':>8} {'srv cpu':>8} {'cpu us':>7} {'gs cpu':>7}"
    )
    print("\n" + header)
    print("-" * len(header))
    for r in rows:
        name = f"chat x{r['threads']} ({r['turns']})"
        for who, label in (("sidecar", r["saver"]), ("baseline", r["baseline"])):
            line = (
                f"{name:<22} {r['backend']:<8} {label:<30} {r[f'{who}_first_ms']:>8.2f} "
                f"{r[f'{who}_last_ms']:>8.2f} {r[f'{who}_final_turn_ms']:>8.2f} "
                f"{r[f'{who}_flat']:>5.2f} {r[f'{who}_get_state_ms']:>9.2f} "
            )
            if who == "sidecar":
                line += (
                    f"{r['sidecar_client_cpu_us']:>8.0f} {_us(r['sidecar_server_cpu_us'], 8)} "
                    f"{r['sidecar_cpu_us']:>7.0f} {r['get_state_sidecar_cpu_us']:>7.0f}"
                )
            else:
                line += (
                    f"{r['baseline_cpu_us']:>8.0f} {'-':>8} {r['baseline_cpu_us']:>7.0f} "
                    f"{r['get_state_baseline_cpu_us']:>7.0f}"
                )
            print(line)
        print(
            f"{'':<22} {r['backend']:<8} {'sidecar / in-process':<30} "
            f"{'':>8} {r['ratio_last']:>8.2f} {'':>8} {'':>5} {r['ratio_get_state']:>9.2f} "
            f"{'':>8} {'':>8} {_us(r['ratio_cpu'], 7, 2)} {_us(r['get_state_ratio_cpu'], 7, 2)}"
        )


def _us(value: float | None, width: int, places: int = 0) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{places}f}"
