"""Page tokens of ListExecutions: where a listing stands in each framework's runs (the
fastaiagent runs by sequence, the LangGraph threads by last activity and id; contract C12),
and of ListNamespaces: the last name listed (N2), each bound to the request that produced
them.

As :mod:`checkpointd.paging`'s tokens, they are not signed (a forged token names a position
in a listing the caller may read in full anyway) and are parsed strictly: a bounded length,
then one exact shape of bounded values, so anything else is INVALID_PAGE_TOKEN, never
INTERNAL.
"""

from __future__ import annotations

from typing import Final

from checkpointd import validation
from checkpointd.errors import InvalidPageToken
from checkpointd.paging import MAX_SEQUENCE, decode_json_token, digest, encode_json_token
from checkpointd.store import times
from checkpointd.store.executions import ExecutionPosition, ThreadPosition

__all__ = [
    "decode_execution_token",
    "decode_namespace_token",
    "encode_execution_token",
    "encode_namespace_token",
]


_EXECUTION_VERSION: Final = 2
#: An execution token holds a thread id (at most 256 characters, each escaped in at most 12
#: in JSON) beside two integers, in base64: a token above this is not one the server wrote.
MAX_EXECUTION_TOKEN_LENGTH: Final = 4400
_NAMESPACE_VERSION: Final = 1
#: A namespace token holds a name of at most 63 ASCII characters and a digest, in base64.
MAX_NAMESPACE_TOKEN_LENGTH: Final = 200


def encode_execution_token(position: ExecutionPosition, scope: tuple[object, ...]) -> str:
    """A ListExecutions token that resumes after ``position`` (where the listing stands in
    the fastaiagent runs and in the LangGraph threads) for the request ``scope``."""
    thread = position.thread
    payload = [
        _EXECUTION_VERSION,
        position.run_sequence,
        None if thread is None else times.to_us(thread.last_activity_at),
        None if thread is None else thread.thread_id,
        digest(scope),
    ]
    return encode_json_token(payload)


def _bounded_int(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def decode_execution_token(token: str, scope: tuple[object, ...]) -> ExecutionPosition:
    """The position a ListExecutions token resumes after; the start for the empty token.
    Anything but a token this server would write for ``scope`` is INVALID_PAGE_TOKEN."""
    if not token:
        return ExecutionPosition()
    payload = decode_json_token(token, MAX_EXECUTION_TOKEN_LENGTH)
    if not isinstance(payload, list) or len(payload) != 5:
        raise InvalidPageToken()
    version, sequence, when, thread_id, bound_to = payload
    if (
        version != _EXECUTION_VERSION
        or bound_to != digest(scope)
        or not (sequence is None or _bounded_int(sequence, 0, MAX_SEQUENCE))
        or (when is None) != (thread_id is None)
        or not (when is None or _bounded_int(when, -(2**62), 2**62))
        or not (thread_id is None or isinstance(thread_id, str))
    ):
        raise InvalidPageToken()
    try:
        thread = None if when is None else ThreadPosition(times.from_us(when), str(thread_id))
    except OverflowError:
        raise InvalidPageToken() from None
    return ExecutionPosition(run_sequence=sequence, thread=thread)


def encode_namespace_token(last: str, scope: tuple[object, ...]) -> str:
    """A ListNamespaces token that resumes after the namespace ``last``."""
    return encode_json_token([_NAMESPACE_VERSION, last, digest(scope)])


def decode_namespace_token(token: str, scope: tuple[object, ...]) -> str:
    """The name a ListNamespaces token resumes after; empty (before every name) for the
    empty token. Anything but a token this server would write for ``scope`` is
    INVALID_PAGE_TOKEN."""
    if not token:
        return ""
    payload = decode_json_token(token, MAX_NAMESPACE_TOKEN_LENGTH)
    if not isinstance(payload, list) or len(payload) != 3:
        raise InvalidPageToken()
    version, last, bound_to = payload
    if (
        version != _NAMESPACE_VERSION
        or bound_to != digest(scope)
        or not isinstance(last, str)
        or not validation.is_namespace_name(last)
    ):
        raise InvalidPageToken()
    return last
