"""Reading a raw ``grpc.RpcError`` the way the client does."""

from __future__ import annotations

import grpc

from checkpointd_client._status import StatusDetails, details_from_metadata


def error_details(error: grpc.RpcError) -> StatusDetails:
    """The ``google.rpc`` details in the error's trailing metadata (grpc hands each entry
    over as a ``(key, value)`` named tuple)."""
    return details_from_metadata(tuple((m.key, m.value) for m in error.trailing_metadata()))
