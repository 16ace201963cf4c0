"""The fault proxy's Write stream: forwards ``WriteService.Write`` both ways as raw bytes, and
misbehaves per stream or per item as a test scripted (see :class:`GrpcFaultProxy`).

The caller's metadata goes upstream, the server's headers (``checkpointd-write-stream:
open`` included), items, status and trailers come back unchanged. Each item, alone in its
message or one of a batch (``items``, contract S3), is parsed only to learn its correlation id
and kind, so a rule written for a unary method (``PutCheckpoint``) applies to the items of that
kind, and each item is recorded as a :class:`ProxiedCall` of its unary method with the number
of the stream that carried it. A batch goes upstream without the items a rule keeps back, and
a batched answer comes back without the results a rule keeps back. Per item:

* fail: answered with the rule's error Status, not forwarded (as a unary call refused);
* lose reply: forwarded; its reply is dropped and the stream ends ``UNAVAILABLE``, as a
  connection lost with the reply on it;
* stall: not forwarded and never answered;
* drop reply: forwarded; its reply is dropped, the stream goes on answering the others;
* withhold replies: forwarded; its reply and every later reply of the stream are held until
  the caller gives the stream up, as a stream that wedged.

A proxy made with ``write_batches=False`` strips the header entry by which the server says
it takes batches, so clients see a server that predates them; one made with
``write_kinds=False`` strips the entry that lists the kinds of item it takes (contract S4), so
clients see a server that predates the graph items.

Per stream: a black hole forwards every item but no reply (and, unless told, not the headers
either); :meth:`ProxiedStream.end` ends a stream ``UNAVAILABLE`` at once (recycling).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2

from checkpointd_client.v1 import write_service_pb2
from tests.support.grpc_fault_rules import Kind, ProxiedCall, Rule, clean

__all__ = ["ITEM_METHODS", "WRITE_METHOD", "ProxiedStream", "StreamFault", "Upstream"]

WRITE_METHOD: Final = "/checkpointd.v1.WriteService/Write"
#: The header entry by which a server says it takes batches (stripped when told to).
BATCH_HEADER: Final = "checkpointd-write-batch"
#: The header entry that lists the kinds of item a server takes (stripped when told to).
KINDS_HEADER: Final = "checkpointd-write-kinds"
#: The unary method each kind of item stands for: the rules and records name it.
ITEM_METHODS: Final = {
    "put_checkpoint": "/checkpointd.v1.CheckpointService/PutCheckpoint",
    "put_idempotency_result": "/checkpointd.v1.IdempotencyService/PutIdempotencyResult",
    "record_interrupt": "/checkpointd.v1.InterruptService/RecordInterrupt",
    "claim_interrupt": "/checkpointd.v1.InterruptService/ClaimInterrupt",
    "put_graph_checkpoint": "/checkpointd.v1.GraphService/PutGraphCheckpoint",
    "put_graph_writes": "/checkpointd.v1.GraphService/PutGraphWrites",
}


class Upstream(Protocol):
    """What a stream needs of its proxy: the channel, the rules, the record, whether it is
    closing."""

    @property
    def channel(self) -> grpc.Channel: ...

    @property
    def closing(self) -> threading.Event: ...

    @property
    def write_batches(self) -> bool: ...

    @property
    def write_kinds(self) -> bool: ...

    def take_rule(self, method: str, *, item: bool = False) -> Rule | None: ...

    def record(self, call: ProxiedCall) -> None: ...


@dataclass(frozen=True)
class StreamFault:
    """A black hole for one stream: items forwarded, no reply, headers only if ``headers``."""

    headers: bool


@dataclass(frozen=True)
class _Headers:
    metadata: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class _End:
    code: grpc.StatusCode
    details: str
    trailing: tuple[tuple[str, Any], ...] = ()


_Event = bytes | _Headers | _End
_POLL_SECONDS: Final = 0.05
_NO_DEADLINE: Final = 10 * 365 * 24 * 3600.0
_serials = itertools.count(1)
_messages = itertools.count(1)


class ProxiedStream:
    """One Write stream through the proxy: the caller's side, the upstream call between."""

    def __init__(self, proxy: Upstream, fault: StreamFault | None) -> None:
        self.serial = next(_serials)
        self._proxy = proxy
        self._fault = fault
        self._out: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._lose: set[int] = set()
        self._drop: set[int] = set()
        self._withhold: set[int] = set()
        self._wedged = False
        self._stream_fault = "black-holed stream" if fault is not None else None
        self.held: list[bytes] = []
        """Replies withheld (never delivered)."""

    def end(self, details: str = "fault proxy: stream recycled") -> None:
        """End the stream ``UNAVAILABLE`` now, whatever is in flight (a recycled connection)."""
        self._out.put(_End(grpc.StatusCode.UNAVAILABLE, details))

    # --- the caller's side --------------------------------------------------------------

    def serve(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        """The handler's response iterator: forward, then yield what is to reach the caller."""
        metadata = tuple((key, value) for key, value in context.invocation_metadata())
        upstream: grpc.StreamStreamMultiCallable[bytes, bytes] = self._proxy.channel.stream_stream(
            WRITE_METHOD, request_serializer=None, response_deserializer=None
        )
        call: Any = upstream(
            self._items(requests, metadata, context),
            timeout=_deadline(context),
            metadata=clean(metadata),
        )
        context.add_callback(call.cancel)  # the caller gave up: end the upstream call too
        threading.Thread(target=self._read_upstream, args=(call,), daemon=True).start()
        while context.is_active() and not self._proxy.closing.is_set():
            try:
                event = self._out.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            if isinstance(event, _Headers):
                # None from upstream (a trailers-only refusal): none to the caller either.
                if event.metadata and (self._fault is None or self._fault.headers):
                    stripped = {
                        key
                        for key, kept in (
                            (BATCH_HEADER, self._proxy.write_batches),
                            (KINDS_HEADER, self._proxy.write_kinds),
                        )
                        if not kept
                    }
                    context.send_initial_metadata(
                        tuple((key, value) for key, value in event.metadata if key not in stripped)
                    )
            elif isinstance(event, _End):
                call.cancel()
                context.set_trailing_metadata(event.trailing)
                if event.code is grpc.StatusCode.OK:
                    return
                context.abort(event.code, event.details)
            else:
                yield event
        call.cancel()

    def _items(
        self,
        requests: Iterator[bytes],
        metadata: tuple[tuple[str, Any], ...],
        context: grpc.ServicerContext,
    ) -> Iterator[bytes]:
        """The caller's items that go upstream, each recorded and its rule applied."""
        try:
            for raw in requests:
                message = write_service_pb2.WriteRequest.FromString(raw)
                batched = len(message.items) > 0
                items: list[Any] = list(message.items) if batched else [message]
                serial = next(_messages)
                kept = [
                    item for item in items if self._item(item, batched, serial, metadata, context)
                ]
                if len(kept) == len(items):
                    yield raw
                elif kept:
                    yield write_service_pb2.WriteRequest(items=kept).SerializeToString()
        except grpc.RpcError:
            return  # the caller cancelled: the upstream call is cancelled with it

    def _item(
        self,
        item: Any,
        batched: bool,
        message: int,
        metadata: tuple[tuple[str, Any], ...],
        context: grpc.ServicerContext,
    ) -> bool:
        """Record one item (a WriteRequest or a WriteItem of a batch) and apply its rule;
        whether it goes upstream."""
        kind = item.WhichOneof("request") or ""
        method = ITEM_METHODS.get(kind, WRITE_METHOD)
        inner = getattr(item, kind).SerializeToString() if kind else b""
        rule = self._proxy.take_rule(method, item=True)
        forwarded = rule is None or rule.kind not in (Kind.FAIL, Kind.STALL)
        self._proxy.record(
            ProxiedCall(
                method,
                inner,
                metadata,
                _deadline(context),
                rule.kind.value if rule is not None else self._stream_fault,
                forwarded,
                stream=self.serial,
                message=message,
            )
        )
        if rule is not None and rule.kind is Kind.FAIL:
            self._out.put(
                _failed(item.correlation_id, rule.code, rule.details, rule.reason, batched)
            )
            return False
        with self._lock:
            marks = {
                Kind.LOSE_REPLY: self._lose,
                Kind.DROP_REPLY: self._drop,
                Kind.WITHHOLD: self._withhold,
            }
            if rule is not None and rule.kind in marks:
                marks[rule.kind].add(item.correlation_id)
        return forwarded

    # --- the upstream side --------------------------------------------------------------

    def _read_upstream(self, call: Any) -> None:
        try:
            self._out.put(_Headers(clean(call.initial_metadata())))
            for raw in call:
                self._reply(raw)
        except grpc.RpcError:
            pass
        code = call.code()
        if code is not None:
            self._out.put(_End(code, call.details() or "", clean(call.trailing_metadata())))

    def _reply(self, raw: bytes) -> None:
        """Pass one upstream answer to the caller, or not, as the rules say; of a batched
        answer, the results the rules let through."""
        response = write_service_pb2.WriteResponse.FromString(raw)
        batched = len(response.results) > 0
        answers: list[Any] = list(response.results) if batched else [response]
        kept: list[Any] = []
        lost = False
        with self._lock:
            if self._fault is not None:
                return  # a black hole
            for answer in answers:
                if answer.correlation_id in self._withhold:
                    self._wedged = True
                if self._wedged:
                    self.held.append(answer.SerializeToString())
                elif answer.correlation_id in self._lose:
                    lost = True
                elif answer.correlation_id not in self._drop:
                    kept.append(answer)
        if lost:  # the whole message is lost with the connection
            self.end("fault proxy: reply lost")
        elif len(kept) == len(answers):
            self._out.put(raw)
        elif kept:
            self._out.put(write_service_pb2.WriteResponse(results=kept).SerializeToString())


def _deadline(context: grpc.ServicerContext) -> float | None:
    """The caller's deadline, to send upstream; None when it has none (gRPC reports an
    unbounded deadline as a huge number of seconds, which would overflow upstream)."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > _NO_DEADLINE else remaining


def _failed(
    correlation_id: int, code: grpc.StatusCode, details: str, reason: str, batched: bool
) -> bytes:
    """The answer of an item refused by a fail rule, as the server words an error (a result
    of a batched answer for an item of a batch)."""
    answer: Any = (
        write_service_pb2.WriteResult(correlation_id=correlation_id)
        if batched
        else write_service_pb2.WriteResponse(correlation_id=correlation_id)
    )
    answer.error.code = code.value[0]
    answer.error.message = details
    if reason:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="checkpointd.v1"))
        answer.error.details.append(detail)
    if batched:
        return write_service_pb2.WriteResponse(results=[answer]).SerializeToString()
    encoded: bytes = answer.SerializeToString()
    return encoded
