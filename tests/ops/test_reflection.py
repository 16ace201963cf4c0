"""Reflection: a grpcurl-style tool lists the services, reads their descriptors, and calls
a method with messages built from those descriptors alone."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

pytestmark = pytest.mark.own_server


@pytest.mark.parametrize("backend", ["sqlite"])
def test_reflection_lists_the_services_and_a_dynamic_call_works(sidecar):
    """The services, health and reflection are listed; a PutCheckpoint then a
    GetLatestCheckpoint built only from reflected descriptors round-trip a row."""
    with grpc.insecure_channel(sidecar.tcp_target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        assert set(database.get_services()) >= {
            "checkpointd.v1.CheckpointService",
            "checkpointd.v1.InterruptService",
            "checkpointd.v1.IdempotencyService",
            "checkpointd.v1.ReplicationService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName("checkpointd.v1.CheckpointService")
        assert {"PutCheckpoint", "GetLatestCheckpoint", "ListCheckpoints"} <= {
            method.name for method in service.methods
        }

        def call(method_name: str, **fields):
            method = service.methods_by_name[method_name]
            # ParseDict, not the class's keyword arguments: a class made at run time from
            # descriptors has no typed __init__ (types-protobuf says Message() takes none).
            request = json_format.ParseDict(
                fields, message_factory.GetMessageClass(method.input_type)()
            )
            response_class = message_factory.GetMessageClass(method.output_type)
            rpc: grpc.UnaryUnaryMultiCallable[Message, Message] = channel.unary_unary(
                f"/{service.full_name}/{method_name}",
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            return rpc(request, timeout=10)

        checkpoint_class = message_factory.GetMessageClass(
            pool.FindMessageTypeByName("checkpointd.v1.Checkpoint")
        )
        row = json_format.MessageToDict(
            json_format.ParseDict(
                {
                    "execution_id": "reflected",
                    "checkpoint_id": "cp-1",
                    "node_id": "n",
                    "status": "CHECKPOINT_STATUS_COMPLETED",
                },
                checkpoint_class(),
            )
        )
        put = call("PutCheckpoint", request_id="req-1", checkpoint=row)
        assert put.checkpoint.checkpoint_id == "cp-1"
        latest = call("GetLatestCheckpoint", execution_id="reflected")
        assert latest.checkpoint.checkpoint_id == "cp-1"
        assert latest.checkpoint.sequence == put.checkpoint.sequence
