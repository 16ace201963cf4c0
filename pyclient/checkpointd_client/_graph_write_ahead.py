"""A graph write sent on the blocking client's Write stream ahead of its answer, for the
pipelining LangGraph saver (contract G22). The answer is waited for later, with the
client's deadline counted from the send and its retries: a write the stream lost is sent
again with the same request id (S1), as :meth:`CheckpointdClient.call_graph` sends it.

Kept apart from the client, which is generated from the asyncio one (tools/unasync.py):
only the blocking saver sends ahead.
"""

from __future__ import annotations

from typing import Any

from checkpointd_client._sync_client import _STREAMED_GRAPH_METHODS, CheckpointdClient
from checkpointd_client._write_stream import KindNotTaken, StreamUnsupported
from checkpointd_client._write_stream_sync import InFlight
from checkpointd_client.errors import CheckpointdError, UnavailableError

__all__ = ["GraphWrite", "begin_graph_write"]


def begin_graph_write(client: CheckpointdClient, method: str, request: Any) -> GraphWrite:
    """Send a ``PutGraphCheckpoint`` or ``PutGraphWrites`` request on ``client``'s Write
    stream and return without waiting for its answer (:meth:`GraphWrite.result` waits). A
    write that cannot go on the stream (S4) is sent unary at once, answered on return."""
    if method not in _STREAMED_GRAPH_METHODS:
        raise ValueError(f"only {sorted(_STREAMED_GRAPH_METHODS)} are sent ahead of an answer")
    core = client._core
    deadline = core.deadline(None)
    in_flight = None if client._closed else client._writes.begin(request, core.call_metadata(()))
    if in_flight is None:  # unary (or a closed client, which call_graph refuses)
        return GraphWrite(
            client, method, request, deadline, answer=client.call_graph(method, request)
        )
    return GraphWrite(client, method, request, deadline, in_flight=in_flight)


class GraphWrite:
    """A graph write sent ahead of its answer."""

    __slots__ = ("_answer", "_client", "_deadline", "_error", "_in_flight", "_method", "_request")

    def __init__(
        self,
        client: CheckpointdClient,
        method: str,
        request: Any,
        deadline: float,
        *,
        in_flight: InFlight | None = None,
        answer: Any = None,
    ) -> None:
        self._client = client
        self._method = method
        self._request = request
        self._deadline = deadline
        self._in_flight = in_flight
        self._answer = answer
        self._error: CheckpointdError | None = None

    def done(self) -> bool:
        """Whether its answer (or error) is in: :meth:`result` would not wait."""
        return self._in_flight is None or self._in_flight.done()

    def result(self) -> Any:
        """The response, once the write is durable; its error raised. A write the stream lost
        (it broke, or does not take the kind) is sent again with the same request id, as a
        :meth:`CheckpointdClient.call_graph` call within what is left of the deadline. Called
        again, it answers (or raises) the same without waiting."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            try:
                self._answer = self._wait(in_flight)
            except CheckpointdError as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._answer

    def _wait(self, in_flight: InFlight) -> Any:
        core = self._client._core
        try:
            return in_flight.result(core.remaining(self._deadline))
        except (UnavailableError, KindNotTaken, StreamUnsupported):
            # Sent again: the request id makes it a retry (S1, S4). A deadline that has passed
            # still gets one attempt's minimum, so the error is the server's or the deadline's.
            timeout = max(core.remaining(self._deadline), 0.001)
            return self._client.call_graph(self._method, self._request, timeout=timeout)
