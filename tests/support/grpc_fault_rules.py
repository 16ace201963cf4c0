"""What the fault proxy's unary and stream sides share: the scripted faults, the record of a
call, and which metadata belongs to one hop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc

__all__ = ["Kind", "ProxiedCall", "Rule", "clean", "is_hop_metadata", "matches"]

# Metadata that belongs to the transport of one hop, not to the call: never forwarded.
_HOP_METADATA = frozenset({"user-agent", "te", "content-type", "grpc-accept-encoding"})


class Kind(Enum):
    """A scripted fault. All but DROP_REPLY apply to unary calls and to stream items alike
    (a unary call has no stream that could go on without its reply)."""

    FAIL = "fail before forwarding"
    LOSE_REPLY = "forward, then lose the reply"
    STALL = "hold until the caller gives up"
    DROP_REPLY = "forward, then drop the reply; the stream goes on"
    WITHHOLD = "forward, then hold the reply (on a stream, every later one too)"


@dataclass
class Rule:
    """A fault for the next ``times`` calls (or items) of the methods ending in ``suffix``."""

    suffix: str
    kind: Kind
    times: int
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    details: str = ""
    reason: str = ""


@dataclass(frozen=True)
class ProxiedCall:
    """One call as the proxy received it; a Write stream item counts as a call of its unary
    method."""

    method: str
    """The full method name, ``/checkpointd.v1.CheckpointService/PutCheckpoint``."""
    request: bytes
    """The serialized request; parse it with the request message's ``FromString``."""
    metadata: tuple[tuple[str, str | bytes], ...]
    """The call's metadata as received (hop-by-hop keys included); a stream's, for an item."""
    time_remaining: float | None
    """Seconds left before the call's deadline when it arrived; ``None`` without one."""
    fault: str | None
    """The scripted fault applied to the call, if any."""
    forwarded: bool
    """Whether the call reached the upstream server."""
    stream: int | None = None
    """The number of the Write stream that carried it; None for a unary call."""
    message: int | None = None
    """The number of the Write stream message that carried it (the items of one batch share
    it, contract S3); None for a unary call."""


def matches(method: str, suffix: str) -> bool:
    """Whether ``method`` is, or ends in the name, ``suffix``."""
    return method == suffix or method.endswith("/" + suffix)


def is_hop_metadata(key: str) -> bool:
    """Whether the key belongs to one hop's transport (pseudo-headers included)."""
    return key.startswith(":") or key in _HOP_METADATA


def clean(metadata: Sequence[tuple[str, str | bytes]] | None) -> tuple[tuple[str, Any], ...]:
    """The metadata without its hop-by-hop entries."""
    return tuple((k, v) for k, v in metadata or () if not is_hop_metadata(k))
