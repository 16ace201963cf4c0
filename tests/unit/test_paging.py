"""Page tokens (contract J2, E2): a forged or mangled token is INVALID_PAGE_TOKEN, checked
without a server. A token is base64url of ``[1, sequence, digest]``; its digest binds it to
the request, and its sequence must be an integer the store can hold (0 .. 2^63-1)."""

from __future__ import annotations

import base64
import json

import pytest

from checkpointd.errors import InvalidPageToken
from checkpointd.paging import MAX_TOKEN_LENGTH, decode_token, digest, encode_token

SCOPE = ("checkpoints", "default", "e", False)


def _forge(payload: str) -> str:
    """A token built by hand, as any caller could (the digest is computable)."""
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def _with_sequence(sequence: object) -> str:
    return _forge(json.dumps([1, sequence, digest(SCOPE)], separators=(",", ":")))


def test_j2_page_token_round_trips_at_the_ends_of_the_store_range():
    """Every sequence the store can hold survives a token, 0 and 2^63-1 included."""
    for sequence in (0, 1, 42, 2**53 + 1, 2**63 - 1):
        assert decode_token(encode_token(sequence, SCOPE), SCOPE) == sequence


@pytest.mark.parametrize(
    "sequence",
    [
        2**63,
        2**64 + 5,
        10**30,
        -(10**30),
        -(2**63) - 1,
        -1,
        1.5,
        1e300,
        True,
        False,
        None,
        "5",
        [5],
        {"s": 5},
    ],
    ids=repr,
)
def test_j2_page_token_with_a_sequence_outside_the_store_range_is_refused(sequence):
    """A forged sequence that is not an integer in 0 .. 2^63-1 never reaches the store."""
    with pytest.raises(InvalidPageToken):
        decode_token(_with_sequence(sequence), SCOPE)


def test_j2_deeply_nested_page_token_is_refused_without_recursion():
    """5,000 nested '[' are a bad token, not a RecursionError."""
    for token in (_forge("[" * 5000), _forge("[" * 5000 + "]" * 5000)):
        with pytest.raises(InvalidPageToken):
            decode_token(token, SCOPE)


@pytest.mark.parametrize(
    "payload",
    [
        '[1, 5, "{d}"]',  # spaces: not the server's encoding
        '[1,5,"{d}",0]',
        "[1,5]",
        '[2,5,"{d}"]',
        '[1,05,"{d}"]',
        '[1,5e0,"{d}"]',
        '[1,-0,"{d}"]',
        '{{"v":1,"s":5,"d":"{d}"}}',
        '[1,5,"{d}"]\n',
        '[1,5,"{d}"] ',
        '[1,5,"{D}"]',
        "null",
        "\u00e9",
    ],
)
def test_j2_page_token_of_any_other_shape_is_refused(payload):
    """Only the exact shape the server writes is a token."""
    text = payload.format(d=digest(SCOPE), D=digest(SCOPE).upper())
    with pytest.raises(InvalidPageToken):
        decode_token(_forge(text), SCOPE)


@pytest.mark.parametrize(
    "token",
    [
        "x",
        "!!!",
        "e30",
        "W10",
        "====",
        "a" * (MAX_TOKEN_LENGTH + 1),
        "A" * 100_000,
        "WzEsNSwi\x00",
        "WzEs NSwi",
        "\u00e9\u00e9\u00e9\u00e9",
        "WzEsNSwi+/",
    ],
    ids=lambda t: repr(t[:20]) + f"[{len(t)}]",
)
def test_j2_page_token_that_is_not_base64url_or_too_long_is_refused(token):
    """Non-base64url text and oversize tokens are refused before any decoding."""
    with pytest.raises(InvalidPageToken):
        decode_token(token, SCOPE)


def test_j2_token_padding_is_tolerated():
    """A token sent back with base64 padding added (some clients pad) still works."""
    token = encode_token(7, SCOPE)
    padded = token + "=" * (-len(token) % 4)
    assert decode_token(padded, SCOPE) == 7
    assert len(encode_token(2**63 - 1, SCOPE)) <= MAX_TOKEN_LENGTH
