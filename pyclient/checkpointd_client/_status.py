"""Decoding of the rich error status (``grpc-status-details-bin``) without googleapis-common-protos.

The server attaches a ``google.rpc.Status`` carrying a ``google.rpc.ErrorInfo`` to every
failure. The client distribution depends only on grpcio and protobuf, so the two messages
are described here by hand and built in a *private* descriptor pool: registering
``google.rpc.Status`` in the default pool would clash with googleapis-common-protos when
both are imported in one process.

Decoding never raises: a missing, truncated or foreign payload gives an empty
:class:`StatusDetails`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

__all__ = ["DETAILS_METADATA_KEY", "ERROR_DOMAIN", "StatusDetails", "details_from_metadata"]

#: The trailing metadata key that carries a serialized ``google.rpc.Status``.
DETAILS_METADATA_KEY = "grpc-status-details-bin"
#: The ``ErrorInfo.domain`` of errors raised by checkpointd itself.
ERROR_DOMAIN = "checkpointd.v1"

_ERROR_INFO_TYPE = "google.rpc.ErrorInfo"
_FDP = descriptor_pb2.FieldDescriptorProto


@dataclass(frozen=True, kw_only=True, slots=True)
class StatusDetails:
    """What the client reads out of a ``google.rpc.Status`` trailer."""

    message: str = ""
    """``Status.message``, or ``""`` when there was none."""
    reason: str = ""
    """``ErrorInfo.reason`` (``"CHECKPOINT_EXISTS"``), or ``""`` when there was none."""
    domain: str = ""
    """``ErrorInfo.domain`` (``"checkpointd.v1"``), or ``""`` when there was none."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """``ErrorInfo.metadata`` (``{"field": "checkpoint.execution_id"}``)."""


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: descriptor_pb2.FieldDescriptorProto.Type.ValueType,
    *,
    repeated: bool = False,
    type_name: str = "",
) -> None:
    added = message.field.add(
        name=name,
        number=number,
        type=kind,
        label=_FDP.LABEL_REPEATED if repeated else _FDP.LABEL_OPTIONAL,
    )
    if type_name:  # a set type_name, even empty, makes the pool expect a message or enum
        added.type_name = type_name


def _build_classes() -> tuple[type[Message], type[Message]]:
    """Build ``google.rpc.Status`` and ``google.rpc.ErrorInfo`` in a private pool."""
    pool = descriptor_pool.DescriptorPool()

    any_file = descriptor_pb2.FileDescriptorProto()
    any_pb2.DESCRIPTOR.CopyToProto(any_file)
    pool.Add(any_file)

    rpc_file = descriptor_pb2.FileDescriptorProto(
        name="checkpointd_client/_private/google_rpc.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=[any_file.name],
    )

    status = rpc_file.message_type.add(name="Status")
    _field(status, "code", 1, _FDP.TYPE_INT32)
    _field(status, "message", 2, _FDP.TYPE_STRING)
    _field(
        status,
        "details",
        3,
        _FDP.TYPE_MESSAGE,
        repeated=True,
        type_name=".google.protobuf.Any",
    )

    info = rpc_file.message_type.add(name="ErrorInfo")
    _field(info, "reason", 1, _FDP.TYPE_STRING)
    _field(info, "domain", 2, _FDP.TYPE_STRING)
    entry = info.nested_type.add(name="MetadataEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _FDP.TYPE_STRING)
    _field(entry, "value", 2, _FDP.TYPE_STRING)
    _field(
        info,
        "metadata",
        3,
        _FDP.TYPE_MESSAGE,
        repeated=True,
        type_name=".google.rpc.ErrorInfo.MetadataEntry",
    )

    pool.Add(rpc_file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(_ERROR_INFO_TYPE)),
    )


_Status, _ErrorInfo = _build_classes()


def parse_status(data: bytes) -> StatusDetails:
    """Decode a serialized ``google.rpc.Status``; malformed input gives empty details."""
    try:
        status: Any = _Status.FromString(data)
        infos: list[Any] = []
        for detail in status.details:
            if str(detail.type_url).rpartition("/")[2] == _ERROR_INFO_TYPE:
                infos.append(_ErrorInfo.FromString(detail.value))
        # Prefer our own domain: reasons are only meaningful within the domain that set them.
        infos.sort(key=lambda i: i.domain != ERROR_DOMAIN)
        if not infos:
            return StatusDetails(message=str(status.message))
        info = infos[0]
        return StatusDetails(
            message=str(status.message),
            reason=str(info.reason),
            domain=str(info.domain),
            metadata={str(k): str(v) for k, v in info.metadata.items()},
        )
    except Exception:  # a foreign or corrupt trailer must never mask the real error
        return StatusDetails()


def details_from_metadata(
    trailing_metadata: Iterable[tuple[str, str | bytes]] | None,
) -> StatusDetails:
    """Find and decode the status details in a call's trailing metadata (never raises)."""
    try:
        for key, value in trailing_metadata or ():
            if key == DETAILS_METADATA_KEY and isinstance(value, bytes):
                return parse_status(value)
    except Exception:  # trailing metadata of an unexpected shape: no details
        return StatusDetails()
    return StatusDetails()
