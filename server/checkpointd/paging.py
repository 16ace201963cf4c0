"""Opaque page tokens for keyset paging by sequence.

A token carries the sequence the next page starts after and a digest of the request that
produced it, so a token replayed against another execution, order or filter set is refused
with INVALID_PAGE_TOKEN instead of silently returning the wrong rows.

Tokens are not signed. The digest is computable by anyone who knows the request, so a caller
can forge a token, but a forged token only names a position inside a listing the caller may
read in full anyway (the same namespace, with the same token checks, from an empty
page_token), and the sequence is a row counter, not a secret. What a forged token must never
do is reach the store with a value it cannot hold, or make the parser work without bound, so
a token is parsed strictly: a bounded length checked before decoding, the one exact shape the
server writes (no general JSON parser, so no recursion on hostile input), and a sequence in
the store's range. Anything else is INVALID_PAGE_TOKEN, never INTERNAL.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Final

from checkpointd.errors import InvalidPageToken

__all__ = [
    "MAX_SEQUENCE",
    "MAX_TOKEN_LENGTH",
    "decode_json_token",
    "decode_token",
    "digest",
    "encode_json_token",
    "encode_token",
]

_VERSION: Final = 1
#: The largest sequence a store holds (a signed 64-bit integer in both backends).
MAX_SEQUENCE: Final = 2**63 - 1
#: Tokens are at most 60 characters; anything much longer is refused before decoding.
MAX_TOKEN_LENGTH: Final = 128

TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_-]+={0,2}")
# The one shape encode_token writes: version, a non-negative integer of at most 19 digits
# without leading zeros, and a 16-hex-digit digest.
_PAYLOAD_RE: Final = re.compile(rb'\[1,(0|[1-9][0-9]{0,18}),"([0-9a-f]{16})"\]')


def digest(scope: tuple[object, ...]) -> str:
    """What binds a token to the request that produced it."""
    return hashlib.sha256(json.dumps(scope).encode()).hexdigest()[:16]


def encode_json_token(payload: Sequence[object]) -> str:
    """A token carrying ``payload`` (a JSON list): the keyset tokens of the listings whose
    positions are more than a sequence (graph checkpoints, runs beside threads)."""
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_json_token(token: str, max_length: int) -> object:
    """The JSON a token of :func:`encode_json_token` carries; INVALID_PAGE_TOKEN for one
    longer than ``max_length`` or not base64 of JSON (its shape is the caller's to check)."""
    if len(token) > max_length or not TOKEN_RE.fullmatch(token):
        raise InvalidPageToken()
    try:
        return json.loads(_unbase64(token))
    except (ValueError, binascii.Error, RecursionError):
        raise InvalidPageToken() from None


def _unbase64(token: str) -> bytes:
    bare = token.rstrip("=")
    return base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))


def encode_token(sequence: int, scope: tuple[object, ...]) -> str:
    """A token that resumes after ``sequence`` for the request identified by ``scope``."""
    raw = json.dumps([_VERSION, sequence, digest(scope)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str, scope: tuple[object, ...]) -> int | None:
    """The sequence a token resumes after; None for the empty (first-page) token.

    Raises :class:`InvalidPageToken` for anything but a token this server would write for
    ``scope``.
    """
    if not token:
        return None
    if len(token) > MAX_TOKEN_LENGTH or not TOKEN_RE.fullmatch(token):
        raise InvalidPageToken()
    try:
        raw = _unbase64(token)
    except (ValueError, binascii.Error):
        raise InvalidPageToken() from None
    match = _PAYLOAD_RE.fullmatch(raw)
    if match is None:
        raise InvalidPageToken()
    sequence = int(match.group(1))
    if sequence > MAX_SEQUENCE or match.group(2).decode() != digest(scope):
        raise InvalidPageToken()
    return sequence
