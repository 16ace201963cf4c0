"""LangGraph checkpoint savers backed by checkpointd's GraphService.

::

    from checkpointd_client.langgraph import CheckpointdSaver

    with CheckpointdSaver("unix:///run/checkpointd.sock") as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)

:class:`CheckpointdSaver` blocks (as ``PostgresSaver``); :class:`AsyncCheckpointdSaver` is
for asyncio (as ``AsyncPostgresSaver``). Both implement the whole ``BaseCheckpointSaver``
surface of ``langgraph-checkpoint`` 4.3: get_tuple, list (with or without a thread, a
metadata ``filter``, ``before``, ``limit``), put, put_writes (with ``task_path``),
get_delta_channel_history (a ``DeltaChannel``'s ancestor writes and seed, walked by the
server a page at a time), delete_thread, delete_for_runs, copy_thread, prune and
get_next_version. The asyncio saver
also answers the blocking methods (through a blocking client of its own, from any thread);
the blocking saver's ``a*`` methods are the base class's (not implemented), as
``PostgresSaver``'s.

Each call is one GraphService RPC with the client's deadline and its UNAVAILABLE retries;
every mutation carries a fresh request id, so a retry never applies twice. ``put`` and
``put_writes`` travel on the client's Write stream where the server's stream takes them
(contract S4: a stream round trip costs less CPU than a unary call), each answered as its
unary call; ``write_stream=False`` sends them unary. With ``pipeline=True`` a saver returns
from them before their answers unless the run's durability is ``"sync"``, and waits for them
at its next call on the thread, ``flush``/``aflush`` or ``close``/``aclose`` (G22). The server
keeps the tables (checkpoints, channel values by version, pending writes) and runs filters,
deletes, copies and prunes itself, each in one transaction. ``setup()`` checks that the
server serves GraphService; the server migrates its own schema, so it is safe to call every
time.

langgraph-checkpoint is imported with this module; install it with the ``langgraph`` extra
(``pip install 'checkpointd-client[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import grpc
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from checkpointd_client._async_client import AsyncCheckpointdClient
from checkpointd_client._base import Metadata
from checkpointd_client._graph_write_ahead import (
    AsyncGraphWrite,
    GraphWrite,
    abegin_graph_write,
    begin_graph_write,
    begin_graph_write_after,
)
from checkpointd_client._sync_client import CheckpointdClient
from checkpointd_client.config import RetryPolicy
from checkpointd_client.credentials import TlsConfig
from checkpointd_client.errors import CheckpointdError
from checkpointd_client.langgraph import _shape
from checkpointd_client.langgraph._ahead import (
    AsyncPendingWrite,
    AsyncWritesAhead,
    PendingWrite,
    WritesAhead,
)

__all__ = [
    "AgentServerGraph",
    "AsyncCheckpointdSaver",
    "CheckpointdSaver",
    "GraphResolver",
    "GraphResumeWorker",
    "ResumeRefused",
    "resume_for",
    "resume_value",
]

#: Where LangGraph's config names a run's durability mode when it is not the default.
_DURABILITY_KEY = "__pregel_durability"

#: The thread a setup() probe reads (it never exists: ids a graph uses are not empty-ish).
_PROBE_THREAD = "__checkpointd_setup__"


def _sends_ahead(pipeline: bool, config: RunnableConfig) -> bool:
    """Whether a saver with ``pipeline`` sends a write of the run of ``config`` ahead of its
    answer: unless the run's durability is ``"sync"`` (G22)."""
    return pipeline and config["configurable"].get(_DURABILITY_KEY) != "sync"


def _thread_of(config: RunnableConfig | None) -> tuple[str, ...] | None:
    """The thread whose writes ahead a call on ``config`` waits for (every thread: None)."""
    thread_id = (config or {}).get("configurable", {}).get("thread_id")
    return None if thread_id is None else (str(thread_id),)


def _check_pipeline(pipeline: bool, write_stream: bool) -> None:
    if pipeline and not write_stream:
        raise ValueError("pipeline=True sends writes on the Write stream: keep write_stream")


class _Settings:
    """How to reach the server: the clients' own arguments, kept to open a client later."""

    def __init__(self, target: str | None, namespace: str, **options: Any) -> None:
        self.target = target
        self.namespace = namespace
        self.options = options

    def blocking(self) -> CheckpointdClient:
        return CheckpointdClient(self.target, namespace=self.namespace, **self.options)

    def asyncio(self) -> AsyncCheckpointdClient:
        return AsyncCheckpointdClient(self.target, namespace=self.namespace, **self.options)


class CheckpointdSaver(BaseCheckpointSaver[str]):
    """A blocking LangGraph checkpoint saver on checkpointd (the shape of ``PostgresSaver``).

    ``target`` (default ``$CHECKPOINTD_TARGET``), ``namespace``, ``timeout``, ``retry``,
    ``metadata``, ``channel_options``, ``token`` (default ``$CHECKPOINTD_TOKEN``), ``tls``
    and ``write_stream`` (``put`` and ``put_writes`` on the Write stream) are those of
    :class:`~checkpointd_client.CheckpointdClient`. ``serde`` is LangGraph's serializer (its
    default when None). ``graph_name`` names the graph in the
    pending-interrupt inbox (the chain name of its pauses, what a
    :class:`GraphResumeWorker` finds the graph by); a run's ``configurable["graph_name"]``
    overrides it; without either, a run's ``configurable["graph_id"]`` (what LangGraph's
    Agent Server sets: the graph's id in ``langgraph.json``) names it, and without any of
    them the thread id stands in. ``pipeline`` sends a run's ``put`` and ``put_writes``
    without waiting for their answers unless its durability is ``"sync"``: they are durable
    once this saver's next call on the thread, :meth:`flush` or :meth:`close` returns, which
    raises the first that failed (contract G22); it needs ``write_stream``. Thread-safe; use
    it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        metadata: Metadata = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
        serde: SerializerProtocol | None = None,
        graph_name: str | None = None,
        write_stream: bool = True,
        pipeline: bool = False,
    ) -> None:
        _check_pipeline(pipeline, write_stream)
        super().__init__(serde=serde)
        self.graph_name = graph_name
        self._pipeline = pipeline
        self._ahead = WritesAhead()
        self._settings = _Settings(
            target,
            namespace,
            timeout=timeout,
            retry=retry,
            metadata=metadata,
            channel_options=channel_options,
            token=token,
            tls=tls,
            write_stream=write_stream,
        )
        self._client = self._settings.blocking()
        self._namespace = self._client.namespace
        # False once the server answered GetGraphDeltaHistory UNIMPLEMENTED (an older one).
        self._delta_rpc = True

    @property
    def namespace(self) -> str:
        """The namespace every checkpoint is stored in."""
        return self._namespace

    def flush(self, thread_id: str | None = None) -> None:
        """Wait until the writes this saver sent ahead (``pipeline``) for ``thread_id``, or
        for every thread, are durable; raise the first of them that failed (G22)."""
        self._ahead.wait(None if thread_id is None else (thread_id,))

    def close(self) -> None:
        """Wait for the writes sent ahead (raising the first that failed), then close the
        channel."""
        try:
            self.flush()
        finally:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, request: Any) -> Any:
        return self._client.call_graph(method, request)

    def _write(self, config: RunnableConfig, method: str, request: Any) -> None:
        """Send a put or put_writes: ahead of its answer when this saver pipelines and the
        run's durability is not ``"sync"`` (G22), otherwise waiting until it is durable."""
        if _sends_ahead(self._pipeline, config):
            client = self._client

            def send(previous: PendingWrite | None) -> PendingWrite | None:
                if previous is None:
                    return begin_graph_write(client, method, request)
                assert isinstance(previous, GraphWrite)
                return begin_graph_write_after(previous, request)

            checkpoint = method == "PutGraphCheckpoint"
            thread_id = str(config["configurable"]["thread_id"])
            self._ahead.add(thread_id, send, checkpoint=checkpoint)
        else:
            self._call(method, request)

    def _settled(self, config: RunnableConfig | None) -> None:
        """Wait for the writes sent ahead to the thread of ``config`` (every thread's when it
        names none) before reading or changing it (G22)."""
        if self._pipeline:
            self._ahead.wait(_thread_of(config))

    def setup(self) -> None:
        """Check that the server serves GraphService (its schema migrates itself)."""
        config: RunnableConfig = {"configurable": {"thread_id": _PROBE_THREAD}}
        self._call("GetGraphCheckpoint", _shape.get_request(self._namespace, config))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (the thread's newest without a checkpoint_id), with
        its channel values and pending writes: one call."""
        self._settled(config)
        response = self._call("GetGraphCheckpoint", _shape.get_request(self._namespace, config))
        if not response.HasField("checkpoint_tuple"):
            return None
        return _shape.to_tuple(self.serde, response.checkpoint_tuple)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, filtered by the server, read a page at a time."""
        self._settled(config)
        request = _shape.list_request(self._namespace, config, filter, before)
        returned = 0
        while limit is None or returned < limit:
            request.page_size = _shape.page_size(limit, returned)
            response = self._call("ListGraphCheckpoints", request)
            for found in _shape.tuples(self.serde, response.checkpoint_tuples):
                yield found
                returned += 1
                if limit is not None and returned >= limit:
                    return
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """What each DeltaChannel in ``channels`` needs to rebuild its value at the checkpoint
        of ``config``: the writes of its ancestors back to the nearest stored value (the
        seed), as ``BaseCheckpointSaver``'s walk returns them, read by the server in one call
        per page of up to 1000 ancestors (G19) rather than one per ancestor. A server that
        does not have the call yet is walked as the base class does, one ancestor a call."""
        self._settled(config)
        if not self._delta_rpc:
            return super().get_delta_channel_history(config=config, channels=channels)
        history = _shape.DeltaHistory(self.serde, channels)
        try:
            for request in _shape.delta_requests(self._namespace, config, channels):
                while True:
                    response = self._call("GetGraphDeltaHistory", request)
                    history.add(response)
                    if not response.next_page_token:
                        break
                    request.page_token = response.next_page_token
        except CheckpointdError as exc:
            if exc.code is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._delta_rpc = False  # a server from before the call: the base class's walk
            return super().get_delta_channel_history(config=config, channels=channels)
        return history.result()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in ``new_versions``."""
        request, next_config = _shape.put_request(
            self.serde, self._namespace, config, checkpoint, metadata, new_versions
        )
        self._write(config, "PutGraphCheckpoint", request)
        return next_config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against the checkpoint of ``config``."""
        request = _shape.put_writes_request(
            self.serde, self._namespace, config, writes, task_id, task_path, self.graph_name
        )
        self._write(config, "PutGraphWrites", request)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints, channel values and writes."""
        self._settled({"configurable": {"thread_id": thread_id}})
        self._call("DeleteGraphThread", _shape.delete_thread_request(self._namespace, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata run_id is one of these."""
        self._settled(None)
        self._call("DeleteGraphRuns", _shape.delete_runs_request(self._namespace, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, channel values and writes to another thread id."""
        self._settled(None)
        request = _shape.copy_thread_request(self._namespace, source_thread_id, target_thread_id)
        self._call("CopyGraphThread", request)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep the newest checkpoint of each checkpoint_ns (``"keep_latest"``), or delete
        the threads (``"delete"``)."""
        self._settled(None)
        request = _shape.prune_request(self._namespace, thread_ids, strategy)
        self._call("PruneGraphThreads", request)

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """The next channel version: an increasing counter with a random tail."""
        return _shape.next_version(current)


class AsyncCheckpointdSaver(BaseCheckpointSaver[str]):
    """An asyncio LangGraph checkpoint saver on checkpointd (the shape of
    ``AsyncPostgresSaver``), with the arguments of :class:`CheckpointdSaver`.

    Its channel opens in the event loop of its first call; use it from that loop. With
    ``pipeline``, ``aput`` and ``aput_writes`` return before their answers unless the run's
    durability is ``"sync"``: they are durable once this saver's next ``a*`` call on the
    thread, :meth:`aflush` or :meth:`aclose` returns, which raises the first that failed
    (G22). The blocking methods work too, from another thread than the saver's event loop,
    on a blocking saver opened on first use, without ``pipeline``: they first wait, in that
    loop, for what the ``a*`` methods sent ahead to their thread. Use it as an async context
    manager or call :meth:`aclose`.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        namespace: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        metadata: Metadata = (),
        channel_options: Sequence[tuple[str, Any]] = (),
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
        serde: SerializerProtocol | None = None,
        graph_name: str | None = None,
        write_stream: bool = True,
        pipeline: bool = False,
    ) -> None:
        _check_pipeline(pipeline, write_stream)
        super().__init__(serde=serde)
        self.graph_name = graph_name
        self._pipeline = pipeline
        self._ahead = AsyncWritesAhead()
        # The event loop of the writes sent ahead (None: none sent yet).
        self._loop: asyncio.AbstractEventLoop | None = None
        settings = _Settings(
            target,
            namespace,
            timeout=timeout,
            retry=retry,
            metadata=metadata,
            channel_options=channel_options,
            token=token,
            tls=tls,
            write_stream=write_stream,
        )
        self._client = settings.asyncio()
        self._namespace = self._client.namespace
        # False once the server answered GetGraphDeltaHistory UNIMPLEMENTED (an older one).
        self._delta_rpc = True
        # The blocking methods' saver, opened on first use.
        self._settings = settings
        self._blocking: CheckpointdSaver | None = None
        self._blocking_lock = threading.Lock()

    @property
    def namespace(self) -> str:
        """The namespace every checkpoint is stored in."""
        return self._namespace

    def _sync(self) -> CheckpointdSaver:
        with self._blocking_lock:  # one blocking saver, whichever thread calls first
            if self._blocking is None:
                options = self._settings.options
                self._blocking = CheckpointdSaver(
                    self._settings.target,
                    namespace=self._namespace,
                    serde=self.serde,
                    graph_name=self.graph_name,
                    **options,
                )
            return self._blocking

    def _settled_blocking(self, config: RunnableConfig | None) -> CheckpointdSaver:
        """The blocking saver, once what the ``a*`` methods sent ahead to the thread of
        ``config`` (every thread's when it names none) is durable (G22): waited for in this
        saver's event loop from the calling thread. Called in that loop itself, where it
        would wait on itself, it raises RuntimeError if that thread has writes ahead."""
        loop = self._loop
        if loop is not None:
            thread_ids = _thread_of(config)
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                if self._ahead.holds(thread_ids):
                    raise RuntimeError(
                        "a blocking method of AsyncCheckpointdSaver was called in its own event "
                        "loop while writes it sent ahead (pipeline) are unanswered: await "
                        "aflush() first, or call the a* method"
                    )
            elif loop.is_running():
                waited = asyncio.run_coroutine_threadsafe(self._ahead.wait(thread_ids), loop)
                waited.result()
        return self._sync()

    async def aflush(self, thread_id: str | None = None) -> None:
        """Wait until the writes this saver sent ahead (``pipeline``) for ``thread_id``, or
        for every thread, are durable; raise the first of them that failed (G22)."""
        await self._ahead.wait(None if thread_id is None else (thread_id,))

    async def aclose(self) -> None:
        """Wait for the writes sent ahead (raising the first that failed), then close the
        channels."""
        try:
            await self.aflush()
        finally:
            await self._client.aclose()
            if self._blocking is not None:
                self._blocking.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _call(self, method: str, request: Any) -> Any:
        return await self._client.call_graph(method, request)

    async def _write(self, config: RunnableConfig, method: str, request: Any) -> None:
        """:meth:`CheckpointdSaver._write`, awaited."""
        if _sends_ahead(self._pipeline, config):
            client = self._client
            self._loop = asyncio.get_running_loop()  # where the blocking methods wait for them

            async def send(previous: AsyncPendingWrite | None) -> AsyncPendingWrite | None:
                if previous is None:
                    return await abegin_graph_write(client, method, request)
                assert isinstance(previous, AsyncGraphWrite)
                return begin_graph_write_after(previous, request)

            checkpoint = method == "PutGraphCheckpoint"
            thread_id = str(config["configurable"]["thread_id"])
            await self._ahead.add(thread_id, send, checkpoint=checkpoint)
        else:
            await self._call(method, request)

    async def _settled(self, config: RunnableConfig | None) -> None:
        """:meth:`CheckpointdSaver._settled`, awaited."""
        if self._pipeline:
            await self._ahead.wait(_thread_of(config))

    async def setup(self) -> None:
        """Check that the server serves GraphService (its schema migrates itself)."""
        config: RunnableConfig = {"configurable": {"thread_id": _PROBE_THREAD}}
        await self._call("GetGraphCheckpoint", _shape.get_request(self._namespace, config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (the thread's newest without a checkpoint_id), with
        its channel values and pending writes: one call."""
        await self._settled(config)
        request = _shape.get_request(self._namespace, config)
        response = await self._call("GetGraphCheckpoint", request)
        if not response.HasField("checkpoint_tuple"):
            return None
        return _shape.to_tuple(self.serde, response.checkpoint_tuple)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first, filtered by the server, read a page at a time."""
        await self._settled(config)
        request = _shape.list_request(self._namespace, config, filter, before)
        returned = 0
        while limit is None or returned < limit:
            request.page_size = _shape.page_size(limit, returned)
            response = await self._call("ListGraphCheckpoints", request)
            for found in _shape.tuples(self.serde, response.checkpoint_tuples):
                yield found
                returned += 1
                if limit is not None and returned >= limit:
                    return
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """What each DeltaChannel in ``channels`` needs to rebuild its value at the checkpoint
        of ``config`` (see :meth:`CheckpointdSaver.get_delta_channel_history`): one call per
        page of up to 1000 ancestors (G19)."""
        await self._settled(config)
        if not self._delta_rpc:
            return await super().aget_delta_channel_history(config=config, channels=channels)
        history = _shape.DeltaHistory(self.serde, channels)
        try:
            for request in _shape.delta_requests(self._namespace, config, channels):
                while True:
                    response = await self._call("GetGraphDeltaHistory", request)
                    history.add(response)
                    if not response.next_page_token:
                        break
                    request.page_token = response.next_page_token
        except CheckpointdError as exc:
            if exc.code is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._delta_rpc = False  # a server from before the call: the base class's walk
            return await super().aget_delta_channel_history(config=config, channels=channels)
        return history.result()

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in ``new_versions``."""
        request, next_config = _shape.put_request(
            self.serde, self._namespace, config, checkpoint, metadata, new_versions
        )
        await self._write(config, "PutGraphCheckpoint", request)
        return next_config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against the checkpoint of ``config``."""
        request = _shape.put_writes_request(
            self.serde, self._namespace, config, writes, task_id, task_path, self.graph_name
        )
        await self._write(config, "PutGraphWrites", request)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints, channel values and writes."""
        await self._settled({"configurable": {"thread_id": thread_id}})
        request = _shape.delete_thread_request(self._namespace, thread_id)
        await self._call("DeleteGraphThread", request)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata run_id is one of these."""
        await self._settled(None)
        await self._call("DeleteGraphRuns", _shape.delete_runs_request(self._namespace, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, channel values and writes to another thread id."""
        await self._settled(None)
        request = _shape.copy_thread_request(self._namespace, source_thread_id, target_thread_id)
        await self._call("CopyGraphThread", request)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep the newest checkpoint of each checkpoint_ns (``"keep_latest"``), or delete
        the threads (``"delete"``)."""
        await self._settled(None)
        request = _shape.prune_request(self._namespace, thread_ids, strategy)
        await self._call("PruneGraphThreads", request)

    # The blocking surface, for code that calls it outside the event loop.

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._settled_blocking(config).get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._settled_blocking(config).list(
            config, filter=filter, before=before, limit=limit
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        blocking = self._settled_blocking(config)
        return blocking.get_delta_channel_history(config=config, channels=channels)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._settled_blocking(config).put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._settled_blocking(config).put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._settled_blocking({"configurable": {"thread_id": thread_id}}).delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._settled_blocking(None).delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._settled_blocking(None).copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._settled_blocking(None).prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """The next channel version: an increasing counter with a random tail."""
        return _shape.next_version(current)


# The resume worker builds on the savers above; AgentServerGraph is its runner of an Agent
# Server's graphs (langgraph-sdk is imported on its first request).
from checkpointd_client.langgraph.agent_server import AgentServerGraph  # noqa: E402
from checkpointd_client.langgraph.resume_worker import (  # noqa: E402
    GraphResolver,
    GraphResumeWorker,
    ResumeRefused,
    resume_for,
    resume_value,
)
