"""The checkpointd clients: :class:`CheckpointdClient` (blocking) and
:class:`AsyncCheckpointdClient` (asyncio), with the same method names.

Each client owns one gRPC channel. Every call has a deadline (its ``timeout`` or the
client's), is retried on ``UNAVAILABLE`` by the client's :class:`~checkpointd_client.RetryPolicy`
within that deadline, and raises a :class:`~checkpointd_client.CheckpointdError` subclass on
failure. Mutating calls carry a request id (and a checkpoint id / claim token where
relevant) generated once before the first attempt and reused on every retry, so a retry
after a lost reply is answered like the first call (contract C1, C2, I3).

The blocking client is thread-safe and needs no event loop. The asyncio client may be built
anywhere; its channel opens on the first call and belongs to that call's event loop.

The asyncio client (:mod:`checkpointd_client._async_client`) is the one written by hand; the
blocking one (:mod:`checkpointd_client._sync_client`) is generated from it by
``tools/unasync.py``.
"""

from __future__ import annotations

from checkpointd_client._async_client import AsyncCheckpointdClient
from checkpointd_client._sync_client import CheckpointdClient

__all__ = ["AsyncCheckpointdClient", "CheckpointdClient"]
