"""Opaque page tokens of ListGraphCheckpoints: keyset positions by (checkpoint_id,
thread_id, checkpoint_ns), bound to the request that produced them.

As :mod:`checkpointd.paging`'s tokens, they are not signed: a forged token names a position
in a listing the caller may read in full anyway. They are parsed strictly (a bounded
length, then one exact shape), so anything else is INVALID_PAGE_TOKEN, never INTERNAL.
"""

from __future__ import annotations

from typing import Final

from checkpointd.errors import InvalidPageToken
from checkpointd.graph.records import GraphPosition
from checkpointd.paging import decode_json_token, digest, encode_json_token

__all__ = ["MAX_TOKEN_LENGTH", "decode_position", "encode_position"]

_VERSION: Final = 1
#: Ids are bounded by validation (128 + 256 + 1024 characters, escaped at most 6x in JSON):
#: a token above this is not one the server wrote.
MAX_TOKEN_LENGTH: Final = 12_000


def encode_position(position: GraphPosition, scope: tuple[object, ...]) -> str:
    """A token that resumes after ``position`` for the request identified by ``scope``."""
    payload = [
        _VERSION,
        position.checkpoint_id,
        position.thread_id,
        position.checkpoint_ns,
        digest(scope),
    ]
    return encode_json_token(payload)


def decode_position(token: str, scope: tuple[object, ...]) -> GraphPosition | None:
    """The position a token resumes after; None for the empty (first-page) token."""
    if not token:
        return None
    payload = decode_json_token(token, MAX_TOKEN_LENGTH)
    if (
        not isinstance(payload, list)
        or len(payload) != 5
        or payload[0] != _VERSION
        or not all(isinstance(part, str) for part in payload[1:])
        or payload[4] != digest(scope)
    ):
        raise InvalidPageToken()
    return GraphPosition(payload[1], payload[2], payload[3])
