"""Opaque page tokens for keyset paging by sequence.

A token carries the sequence the next page starts after and a digest of the request that
produced it, so a token replayed against another execution, order or filter set is refused
with INVALID_PAGE_TOKEN instead of silently returning the wrong rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from checkpointd.errors import InvalidPageToken

__all__ = ["decode_token", "encode_token"]

_VERSION = 1


def _digest(scope: tuple[object, ...]) -> str:
    return hashlib.sha256(json.dumps(scope).encode()).hexdigest()[:16]


def encode_token(sequence: int, scope: tuple[object, ...]) -> str:
    """A token that resumes after ``sequence`` for the request identified by ``scope``."""
    raw = json.dumps([_VERSION, sequence, _digest(scope)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str, scope: tuple[object, ...]) -> int | None:
    """The sequence a token resumes after; None for the empty (first-page) token."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        version, sequence, digest = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidPageToken() from None
    if (
        version != _VERSION
        or not isinstance(sequence, int)
        or isinstance(sequence, bool)
        or digest != _digest(scope)
    ):
        raise InvalidPageToken()
    return sequence
