"""gRPC servicers: proto in, validated records to the store, proto out. No SQL, no policy."""

from checkpointd.servicers.checkpoints import CheckpointServicer
from checkpointd.servicers.common import ServiceDeps
from checkpointd.servicers.graph import GraphServicer
from checkpointd.servicers.idempotency import IdempotencyServicer
from checkpointd.servicers.interrupts import InterruptServicer
from checkpointd.servicers.replication import ReplicationServicer
from checkpointd.servicers.write import WriteServicer

__all__ = [
    "CheckpointServicer",
    "GraphServicer",
    "IdempotencyServicer",
    "InterruptServicer",
    "ReplicationServicer",
    "ServiceDeps",
    "WriteServicer",
]
