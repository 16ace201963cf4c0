"""The fingerprint of a mutating request (contract C10): what a store remembers beside its
request id, so that a retry (the same request sent again) is told from a reuse of the id on
another request, which is refused with REQUEST_ID_REUSED instead of answered with the first
request's result.

A fingerprint is ``"<Method>:<sha256 hex>"``: the RPC's name (named in the refusal's
metadata) and the hash of the deterministic serialization of a copy of the request with the
fields cleared that do not change what the call writes: the request id and the namespace
(together the key the fingerprint is stored under), a PutCheckpoint's ``view`` (the shape of
the reply) and the output-only fields the server ignores on writes (``Checkpoint.sequence``,
``PendingInterrupt.checkpoint_id`` and ``decision``). A deadline or other call metadata is
not part of a message, so a retry may change it freely. A Write stream item is the unary
request it carries, so it fingerprints the same as the unary call and a unary retry of a
stream item (or the reverse) is still a retry.
"""

from __future__ import annotations

import hashlib
from typing import Final

from google.protobuf.message import Message

from checkpointd_client.v1 import checkpoint_pb2

__all__ = ["SEPARATOR", "fingerprint", "method_of"]

SEPARATOR: Final = ":"


def _clear_output_only(message: Message) -> None:
    """Clear the output-only fields of the checkpoints and pending rows inside ``message``."""
    # A singular message field's value is the message; a repeated one's is a container. (Not
    # FieldDescriptor.is_repeated, which protobuf 6.30, the floor, does not have.)
    for _, value in message.ListFields():
        if isinstance(value, checkpoint_pb2.Checkpoint):
            value.ClearField("sequence")
        elif isinstance(value, checkpoint_pb2.PendingInterrupt):
            value.ClearField("checkpoint_id")
            value.ClearField("decision")


def fingerprint(method: str, request: Message) -> str:
    """The fingerprint of ``request``, a request of the RPC named ``method`` (its short name,
    such as ``"PutCheckpoint"``); empty for a request without a request id, which nothing
    remembers (the hash reads the whole request: it is not paid for nothing)."""
    if not getattr(request, "request_id", ""):
        return ""
    copy = type(request)()
    copy.CopyFrom(request)
    for name in ("namespace", "request_id", "view"):
        if name in copy.DESCRIPTOR.fields_by_name:
            copy.ClearField(name)
    _clear_output_only(copy)
    digest = hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()
    return f"{method}{SEPARATOR}{digest}"


def method_of(stored: str) -> str:
    """The RPC a stored fingerprint was taken of."""
    return stored.partition(SEPARATOR)[0]
