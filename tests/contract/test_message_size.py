"""Contract J3 on every unary RPC, on both backends: a request over ``--max-message-bytes`` is
refused RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE) naming the limit and the flag, and writes nothing.

Every unary method of the three services is called through the raw generated stubs (the
clients would refuse nothing themselves), with one string field grown past the limit; the
whole store is dumped before and after and must not have changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from checkpointd_client import CheckpointdClient
from checkpointd_client._proto.checkpointd.v1 import checkpoint_service_pb2 as checkpoints_pb
from checkpointd_client._proto.checkpointd.v1 import idempotency_service_pb2 as idempotency_pb
from checkpointd_client._proto.checkpointd.v1 import interrupt_service_pb2 as interrupts_pb
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.reliability.store_dump import StoreReader
from tests.support.sidecar import Sidecar, StoreSpec

LIMIT = 64 * 1024
SERVICE_MODULES = (checkpoints_pb, interrupts_pb, idempotency_pb)
METHODS = [
    (module, service, method)
    for module in SERVICE_MODULES
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
    if not method.server_streaming and not method.client_streaming
]


def _method_id(entry: tuple[Any, pb_descriptor.ServiceDescriptor, Any]) -> str:
    return entry[2].name


def _grow_a_string_field(message: Message) -> str:
    """Set the first string field found (depth first) past the limit; return its path."""
    for field in message.DESCRIPTOR.fields:
        if field.is_repeated:
            continue
        if field.type == field.TYPE_STRING:
            setattr(message, field.name, "x" * (LIMIT + 1024))
            return field.name
        if field.type == field.TYPE_MESSAGE and not field.message_type.full_name.startswith(
            "google.protobuf."
        ):
            inner = getattr(message, field.name)
            path = _grow_a_string_field(inner)
            if path:
                return f"{field.name}.{path}"
    return ""


def _reason(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


@pytest.fixture
def server(sidecar_factory: Callable[..., Sidecar]) -> Sidecar:
    return sidecar_factory("--max-message-bytes", str(LIMIT))


@pytest.fixture
def reader(store_spec: StoreSpec, server: Sidecar) -> Iterator[StoreReader]:
    store = StoreReader(store_spec)
    yield store
    store.close()


@pytest.mark.parametrize("entry", METHODS, ids=_method_id)
def test_j3_every_unary_rpc_refuses_an_oversize_request_and_writes_nothing(
    server: Sidecar, reader: StoreReader, entry: tuple[Any, Any, Any]
) -> None:
    """Each unary RPC answers an oversize request RESOURCE_EXHAUSTED
    (MESSAGE_TOO_LARGE) naming the limit and --max-message-bytes; the store is unchanged."""
    module, service, method = entry
    with CheckpointdClient(server.target, retry=NO_RETRY) as client:  # something to change
        client.put_checkpoint(checkpoint("exec-j3"))
        client.record_interrupt(*interrupted("exec-j3-paused"))
        client.put_idempotent("exec-j3", "fn", {"r": 1})
    before = reader.dump()

    request = getattr(module, method.input_type.name)()
    grown = _grow_a_string_field(request)
    assert grown, f"{method.name}: no string field to grow"
    assert request.ByteSize() > LIMIT
    path = f"/{service.full_name}/{method.name}"
    with grpc.insecure_channel(server.target) as channel:
        call = channel.unary_unary(path, request_serializer=type(request).SerializeToString)
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=30)
    error = err.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (grown, error.details())
    assert _reason(error) == "MESSAGE_TOO_LARGE", (grown, error.details())
    assert str(LIMIT) in (error.details() or "")
    assert "--max-message-bytes" in (error.details() or "")
    assert reader.dump() == before
