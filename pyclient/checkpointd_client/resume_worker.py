"""Resume workers: carry out the decisions bots submit, each exactly once (contract K2).

A bot in any language decides a pause with ``SubmitDecision``; a :class:`ResumeWorker`, in
the Python process that has the fastaiagent ``Chain`` / ``Agent`` / ``Swarm`` /
``Supervisor``, resumes the run::

    from checkpointd_client.fastaiagent import ResumeWorker, SidecarCheckpointer

    store = SidecarCheckpointer(namespace="orders")
    worker = ResumeWorker({"orders": build_chain(store)}, namespace="orders")
    worker.run()                      # or: await worker.arun(); worker.stop() ends it

Runners are keyed by ``chain_name`` (the name the run paused under), like fastaiagent's own
registry; ``resolver(pending)`` may build one on demand. A decision whose runner is unknown
is left waiting for a worker that has it, and logged once per chain name.

How a decision is carried out once, across any number of worker processes:

1. The worker watches the namespace: a pending interrupt with a decision in the snapshot, or
   a ``decided`` event, is work; so is every open decision ``ListDecisions`` returns, read
   at start and every ``lease_seconds`` (a decision whose worker died after fastaiagent's
   claim has no pending interrupt left to show it).
2. It takes the decision's **lease** (``LeaseDecision``): one holder at a time. It renews the
   lease while the run goes on; the others keep the decision and try again when the lease
   would run out (a ``resumed`` / ``resume_failed`` event ends their interest).
3. It resumes with ``runner.aresume(execution_id, resume_value=Resume(approved=...,
   metadata=...))``, with the runner's :class:`SidecarCheckpointer` claiming the pause under
   a token derived from the pause: a worker that takes over after the holder died wins that
   claim again and re-drives the run from its newest checkpoint, while ``@idempotent``
   results in the store keep side effects single.
4. It reports ``resumed`` (also when the run turns out to have finished already, its holder
   having died before reporting) or ``resume_failed`` with the error.

The runners must use a :class:`~checkpointd_client.fastaiagent.SidecarCheckpointer` on the
same server and namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from checkpointd_client._resume_context import CLAIM_TOKEN, claim_token_for
from checkpointd_client.client import AsyncCheckpointdClient
from checkpointd_client.config import RetryPolicy
from checkpointd_client.credentials import TlsConfig
from checkpointd_client.errors import (
    CheckpointdError,
    ErrorReason,
    FailedPreconditionError,
    NotFoundError,
)
from checkpointd_client.fencing import LeaseFence, write_fenced, writes_under
from checkpointd_client.models import (
    Decision,
    InterruptEvent,
    PendingInterrupt,
    SnapshotItem,
)

__all__ = ["ResumeWorker", "Runner", "RunnerResolver"]

logger = logging.getLogger("checkpointd_client.resume_worker")

#: A fastaiagent Chain, Agent, Swarm or Supervisor: anything with
#: ``async aresume(execution_id, *, resume_value=Resume(...))``.
Runner = Any
#: Builds (or finds) the runner of a pause on demand; None when this worker has none.
RunnerResolver = Callable[[PendingInterrupt], Runner | None]

#: A pause: execution id, checkpoint id, interrupt id (empty for fastaiagent's).
_Key = tuple[str, str, str]

#: Seconds before trying again after the server could not be reached.
_RETRY_SECONDS = 2.0


@dataclass
class _Work:
    """A decision this worker may carry out, and when to try next."""

    pending: PendingInterrupt
    due: float  # time.monotonic()


class ResumeWorker:
    """Watches a namespace for decided pauses and resumes each run exactly once (K2).

    ``runners`` maps chain names to runners; ``resolver`` is asked for chain names that are
    not there. ``lease_seconds`` is how long a lease lasts unless renewed (renewed every
    third of it): a worker that dies mid-resume delays its run's re-drive by at most that
    long. ``concurrency`` bounds the resumes this worker runs at once. The connection
    arguments are those of :class:`~checkpointd_client.AsyncCheckpointdClient`.
    """

    def __init__(
        self,
        runners: Mapping[str, Runner] | None = None,
        *,
        resolver: RunnerResolver | None = None,
        target: str | None = None,
        namespace: str = "default",
        name: str | None = None,
        lease_seconds: int = 30,
        concurrency: int = 4,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
    ) -> None:
        if not runners and resolver is None:
            raise ValueError("a ResumeWorker needs runners, a resolver, or both")
        if not 1 <= lease_seconds <= 3600:
            raise ValueError("lease_seconds must be 1 to 3600")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._runners = dict(runners or {})
        self._resolver = resolver
        self._client_args: dict[str, Any] = {
            "target": target,
            "namespace": namespace,
            "timeout": timeout,
            "retry": retry,
            "token": token,
            "tls": tls,
        }
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_seconds = lease_seconds
        self._concurrency = concurrency
        self._work: dict[_Key, _Work] = {}
        self._running: dict[_Key, asyncio.Task[None]] = {}
        self._unknown_chains: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._watch_close: Callable[[], None] | None = None

    # --- entry points ----------------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop` (from another thread or a signal handler)."""
        asyncio.run(self.arun())

    def stop(self) -> None:
        """Stop watching; resumes in progress finish and report first. Thread-safe."""
        self._stopping.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop just ended
                loop.call_soon_threadsafe(self._wake_up_for_stop)

    async def arun(self) -> None:
        """Run in the current event loop until :meth:`stop`."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        async with AsyncCheckpointdClient(**self._client_args) as client:
            watch = client.watch_interrupts()
            self._watch_close = watch.close
            if self._stopping.is_set():
                watch.close()
            scheduler = asyncio.create_task(self._schedule(client))
            sweeper = asyncio.create_task(self._sweep(client))
            try:
                async for item in watch:
                    match item:
                        case SnapshotItem(pending=pending):
                            self._offer(pending)
                        case InterruptEvent(type="decided", pending=pending):
                            self._offer(pending)
                        case InterruptEvent(type="resumed" | "resume_failed" | "removed"):
                            self._forget(item.pending)
                        case _:
                            pass
            finally:
                self._stopping.set()
                self._wake.set()
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
                await scheduler
        logger.info("resume worker %s stopped", self.name)

    # --- bookkeeping -----------------------------------------------------------------------

    def _wake_up_for_stop(self) -> None:
        if self._watch_close is not None:
            self._watch_close()
        if self._wake is not None:
            self._wake.set()

    @staticmethod
    def _key(pending: PendingInterrupt) -> _Key:
        return (pending.execution_id, pending.checkpoint_id, pending.interrupt_id)

    def _accepts(self, pending: PendingInterrupt) -> bool:
        """Whether this worker carries out decisions on this kind of pause: fastaiagent's
        (no interrupt id). A graph's are for
        :class:`~checkpointd_client.langgraph.GraphResumeWorker`."""
        return not pending.interrupt_id

    def _offer(self, pending: PendingInterrupt) -> None:
        """Take note of a decision that may need carrying out."""
        decision = pending.decision
        if decision is None or decision.status not in ("decided", "resuming"):
            return
        if not self._accepts(pending):
            return
        key = self._key(pending)
        if key not in self._work:
            self._work[key] = _Work(pending, time.monotonic())
            assert self._wake is not None
            self._wake.set()

    def _forget(self, pending: PendingInterrupt) -> None:
        if pending.execution_id and pending.checkpoint_id:
            self._work.pop(self._key(pending), None)
        else:  # a removed event names the execution only by its pending row
            for key in [k for k in self._work if k[0] == pending.execution_id]:
                del self._work[key]

    def _runner_for(self, pending: PendingInterrupt) -> Runner | None:
        runner = self._runners.get(pending.chain_name)
        if runner is None and self._resolver is not None:
            runner = self._resolver(pending)
        if runner is None and pending.chain_name not in self._unknown_chains:
            self._unknown_chains.add(pending.chain_name)
            logger.warning(
                "resume worker %s has no runner for chain %r: its decisions wait for a "
                "worker that has one (first: execution %s)",
                self.name,
                pending.chain_name,
                pending.execution_id,
            )
        return runner

    async def _schedule(self, client: AsyncCheckpointdClient) -> None:
        """Start the attempts that are due, at most ``concurrency`` at once."""
        assert self._wake is not None
        while not self._stopping.is_set():
            now = time.monotonic()
            next_due = now + 60.0
            for key, work in list(self._work.items()):
                if key in self._running:
                    continue
                if work.due <= now and len(self._running) < self._concurrency:
                    task = asyncio.create_task(self._attempt(client, key, work.pending))
                    self._running[key] = task
                    task.add_done_callback(functools.partial(self._done, key))
                elif work.due > now:
                    next_due = min(next_due, work.due)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(next_due - now, 0.01))
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _sweep(self, client: AsyncCheckpointdClient) -> None:
        """Offer every open decision, now and every ``lease_seconds``: the watch shows a
        decision only while its pending interrupt exists."""
        while not self._stopping.is_set():
            token = ""
            try:
                while True:
                    page = await client.list_decisions(open_only=True, page_token=token)
                    for pending in page.pending_interrupts:
                        self._offer(pending)
                    token = page.next_page_token
                    if not token:
                        break
            except CheckpointdError as exc:
                logger.warning("resume worker %s: listing decisions failed: %s", self.name, exc)
            await asyncio.sleep(self.lease_seconds)

    def _done(self, key: _Key, _task: asyncio.Task[None]) -> None:
        self._running.pop(key, None)
        if self._wake is not None:
            self._wake.set()

    def _retry_at(self, key: _Key, due: float) -> None:
        work = self._work.get(key)
        if work is not None:
            work.due = due

    # --- one decision ----------------------------------------------------------------------

    async def _attempt(
        self, client: AsyncCheckpointdClient, key: _Key, pending: PendingInterrupt
    ) -> None:
        runner = self._runner_for(pending)
        if runner is None:
            self._work.pop(key, None)  # left waiting for a worker that has a runner
            return
        execution_id, checkpoint_id, interrupt_id = key
        lease_token = f"{self.name}:{uuid.uuid4().hex}"
        try:
            leased = await client.lease_decision(
                execution_id,
                checkpoint_id,
                lease_token=lease_token,
                lease_seconds=self.lease_seconds,
                interrupt_id=interrupt_id,
            )
        except FailedPreconditionError as exc:
            if exc.reason == ErrorReason.LEASE_HELD:
                due = _monotonic_at(exc.metadata.get("lease_expires_at"))
                logger.debug(
                    "resume worker %s: %s is leased by another worker; again in %.1f s",
                    self.name,
                    execution_id,
                    due - time.monotonic(),
                )
                self._retry_at(key, due)
            else:  # DECISION_CLOSED: someone reported it
                self._work.pop(key, None)
            return
        except NotFoundError:  # the run was deleted
            self._work.pop(key, None)
            return
        except CheckpointdError as exc:
            logger.warning("resume worker %s: lease on %s failed: %s", self.name, key, exc)
            self._retry_at(key, time.monotonic() + _RETRY_SECONDS)
            return
        decision = leased.decision
        assert decision is not None
        if decision.attempts > 1:
            logger.info(
                "resume worker %s re-drives %s (attempt %d; an earlier worker's lease ran out)",
                self.name,
                execution_id,
                decision.attempts,
            )
        fence = LeaseFence.of(leased, lease_token)
        error = await self._resume_under_lease(client, runner, key, fence, decision)
        if error is _LOST:
            return  # another worker holds it now and will report
        try:
            await client.report_resume(
                execution_id,
                checkpoint_id,
                lease_token=lease_token,
                error=error if isinstance(error, str) else None,
                interrupt_id=interrupt_id,
            )
        except FailedPreconditionError as exc:
            logger.warning(
                "resume worker %s: report on %s refused (%s)", self.name, execution_id, exc.reason
            )
        except CheckpointdError as exc:
            # The lease runs out and another worker re-drives: the run has finished, so it
            # reports without resuming again.
            logger.warning("resume worker %s: report on %s failed: %s", self.name, key, exc)
            self._retry_at(key, time.monotonic() + self.lease_seconds)
            return
        self._work.pop(key, None)

    async def _resume(
        self,
        client: AsyncCheckpointdClient,
        runner: Runner,
        key: _Key,
        fence: LeaseFence,
        decision: Decision,
    ) -> str | None:
        """Carry the decision out with the runner: None when resumed (or found resumed
        already), else the error text. Raises what the run raised."""
        from fastaiagent import Resume
        from fastaiagent.chain.interrupt import AlreadyResumed

        execution_id, checkpoint_id, _ = key
        # Set in this task only: the runner's checkpointer claims under it.
        CLAIM_TOKEN.set(claim_token_for(checkpoint_id))
        try:
            with writes_under(fence):  # K4: none of its writes lands once the lease is lost
                await runner.aresume(
                    execution_id,
                    resume_value=Resume(approved=decision.approved, metadata=decision.metadata),
                )
        except AlreadyResumed as exc:
            # Either the holder before us finished the run and died before reporting, or the
            # pause was claimed outside the decision channel.
            if await _finished(client, execution_id):
                return None
            return f"AlreadyResumed: {exc}"
        return None

    async def _resume_under_lease(
        self,
        client: AsyncCheckpointdClient,
        runner: Runner,
        key: _Key,
        fence: LeaseFence,
        decision: Decision,
    ) -> str | object | None:
        """Resume while renewing the lease. Returns None (resumed), the error text, or
        ``_LOST`` when the lease went to another worker."""
        lost = asyncio.Event()
        resume = asyncio.create_task(self._resume(client, runner, key, fence, decision))
        renewer = asyncio.create_task(self._renew(client, key, fence.lease_token, resume, lost))
        try:
            return await resume
        except asyncio.CancelledError:
            if lost.is_set():
                return _LOST
            raise
        except Exception as exc:
            if write_fenced(exc):
                logger.warning(
                    "resume worker %s: a write of %s was refused, another worker took its "
                    "lease over; leaving the run to it",
                    self.name,
                    key[0],
                )
                return _LOST
            logger.warning("resume of %s failed", key[0], exc_info=True)
            return f"{type(exc).__name__}: {exc}"
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew(
        self,
        client: AsyncCheckpointdClient,
        key: _Key,
        lease_token: str,
        resume: asyncio.Task[Any],
        lost: asyncio.Event,
    ) -> None:
        """Renew the lease every third of its length; cancel the resume if it is lost."""
        execution_id, checkpoint_id, interrupt_id = key
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await client.lease_decision(
                    execution_id,
                    checkpoint_id,
                    lease_token=lease_token,
                    lease_seconds=self.lease_seconds,
                    interrupt_id=interrupt_id,
                )
            except (FailedPreconditionError, NotFoundError):
                logger.warning(
                    "resume worker %s lost the lease on %s; stopping its resume",
                    self.name,
                    execution_id,
                )
                lost.set()
                resume.cancel()
                return
            except CheckpointdError:
                continue  # the server is away: keep trying while the lease lasts


#: Returned by a resume whose lease went to another worker.
_LOST = object()


async def _finished(client: AsyncCheckpointdClient, execution_id: str) -> bool:
    """Whether the run's newest row is a completed run-end marker."""
    try:
        latest = await client.get_latest_checkpoint(execution_id)
    except NotFoundError:
        return False
    return latest.step_type == "run_end" and latest.status == "completed"


def _monotonic_at(when: str | None) -> float:
    """The monotonic time of an ISO timestamp from the server, plus a little jitter so the
    waiting workers do not all ask at once."""
    jitter = random.uniform(0.05, 0.3)
    if not when:
        return time.monotonic() + _RETRY_SECONDS
    try:
        at = datetime.fromisoformat(when)
    except ValueError:
        return time.monotonic() + _RETRY_SECONDS
    delay = (at - datetime.now(UTC)).total_seconds()
    return time.monotonic() + max(delay, 0.0) + jitter
