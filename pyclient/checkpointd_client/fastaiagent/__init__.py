"""A fastaiagent ``Checkpointer`` backed by checkpointd: a drop-in for ``SQLiteCheckpointer``.

::

    from checkpointd_client.fastaiagent import SidecarCheckpointer

    checkpointer = SidecarCheckpointer("unix:///run/checkpointd.sock")
    chain = Chain("pipeline", checkpointer=checkpointer)

It satisfies ``isinstance(x, fastaiagent.checkpointers.Checkpointer)``, and fastaiagent's optional
``ReplicatedCheckpointer`` and ``QuarantinableCheckpointer``, so ``fastaiagent.connect()``
replicates its checkpoints to the platform as it does the reference's. It returns fastaiagent's
own ``Checkpoint`` and ``PendingInterrupt`` models with ``created_at`` as ISO-8601 strings.
Its methods block on the synchronous gRPC client: they are thread-safe and need no event
loop, so fastaiagent may call them from inside ``async def`` code, as it does.

Where it deliberately differs from the reference ``SQLiteCheckpointer``:

* ``list(execution_id, limit=N)`` returns the **newest** N checkpoints, oldest first, in
  write order. The reference sorts by ``node_index`` and cuts the *first* N rows, which
  silently drops the newest rows of a long run and misorders a resumed Swarm (contract C4).
* ``get_last`` is the row written last (by the store's sequence), not the one with the
  greatest ``created_at`` (C3).
* A second ``put`` of an existing ``checkpoint_id`` raises
  :class:`~checkpointd_client.AlreadyExistsError`, whose MRO contains a class named
  ``IntegrityError``, as DB-API callers expect (C2).
* ``record_interrupt`` for an execution that already has a pending interrupt keeps that row
  and still stores the checkpoint (the reference Postgres behaviour, I2).
* ``prune`` keeps the idempotency rows of a run that still has a pending interrupt (C7).
* JSON with ``NaN`` or ``Infinity`` is refused with ``ValueError`` before anything is sent.
* The replication outbox (``fetch_unsynced``, ``mark_synced``, ``mark_quarantined``, served
  by the server's ``ReplicationService``) is per namespace: ``project_id`` is ignored, as the
  reference ``PostgresCheckpointer`` ignores it. Several processes may drain one namespace;
  each row is settled once (R4).

fastaiagent is imported lazily, when a :class:`SidecarCheckpointer` is created; install it
with the ``fastaiagent`` extra (``pip install 'checkpointd-client[fastaiagent]'``).
"""

from checkpointd_client.fastaiagent.checkpointer import SidecarCheckpointer
from checkpointd_client.resume_worker import ResumeWorker

__all__ = ["ResumeWorker", "SidecarCheckpointer"]
