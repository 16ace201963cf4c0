"""The black-holed Write stream of issue 22 (contract S2), measured: sequential puts from one
client through a fault proxy that forwards every item of the first Write stream to the
server and none of its replies, with the stream (the default) and with ``write_stream=False``,
for the asyncio and the blocking client.

Usage: python bench/stream_blackhole.py [--puts 40] [--timeout 1.5] [--attempts 6]
                                        [--no-headers] [--backend sqlite|postgres]

Prints, per client and path, the calls answered, the worst call's seconds and the total.
``--no-headers`` black-holes the stream's headers too (the client then never writes to it).
For the unary path the proxy withholds the reply to the first PutCheckpoint instead (the
first HTTP/2 stream there). The client code is whatever ``checkpointd_client`` imports:
put an older checkout first on PYTHONPATH to measure it.
"""

# ruff: noqa: E402  (the imports below need the repository root on sys.path first)

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH, so an older client checkout can come first

from checkpointd_client import AsyncCheckpointdClient, Checkpoint, CheckpointdClient, RetryPolicy
from tests.support.grpc_fault_proxy import GrpcFaultProxy
from tests.support.sidecar import Sidecar, StoreSpec

_PG_DSN = os.environ.get("CHECKPOINTD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _store(backend: str, directory: str) -> StoreSpec:
    if backend == "sqlite":
        return StoreSpec("sqlite", f"sqlite:///{directory}/bench.db")
    return StoreSpec("postgres", _PG_DSN, pg_schema=f"bench_{uuid.uuid4().hex[:8]}")


def _run_sync(
    target: str, puts: int, call_timeout: float, retry: RetryPolicy, stream: bool
) -> list[tuple[bool, float]]:
    times: list[tuple[bool, float]] = []
    run = uuid.uuid4().hex[:8]
    with CheckpointdClient(
        target, timeout=call_timeout, retry=retry, write_stream=stream
    ) as client:
        for n in range(puts):
            started = time.monotonic()
            try:
                client.put_checkpoint(Checkpoint(execution_id=f"{run}-{n}", node_id="a"))
            except Exception:
                times.append((False, time.monotonic() - started))
                continue
            times.append((True, time.monotonic() - started))
    return times


async def _run_async(
    target: str, puts: int, call_timeout: float, retry: RetryPolicy, stream: bool
) -> list[tuple[bool, float]]:
    times: list[tuple[bool, float]] = []
    run = uuid.uuid4().hex[:8]
    async with AsyncCheckpointdClient(
        target, timeout=call_timeout, retry=retry, write_stream=stream
    ) as client:
        for n in range(puts):
            started = time.monotonic()
            try:
                await client.put_checkpoint(Checkpoint(execution_id=f"{run}-{n}", node_id="a"))
            except Exception:
                times.append((False, time.monotonic() - started))
                continue
            times.append((True, time.monotonic() - started))
    return times


async def _measure(args: argparse.Namespace, target: str) -> None:
    """Every client and path in one event loop (a grpc.aio client binds to the loop)."""
    retry = RetryPolicy(max_attempts=args.attempts)
    print(f"{args.puts} puts, timeout={args.timeout}, max_attempts={args.attempts}")
    for name in ("async", "sync"):
        for stream in (True, False):
            with GrpcFaultProxy(target, write_stream=True) as proxy:
                if stream:
                    proxy.black_hole_next_stream(headers=not args.no_headers)
                else:
                    proxy.withhold_replies_next("PutCheckpoint")
                started = time.monotonic()
                if name == "async":
                    result = await _run_async(proxy.target, args.puts, args.timeout, retry, stream)
                else:
                    result = _run_sync(proxy.target, args.puts, args.timeout, retry, stream)
                total = time.monotonic() - started
            answered = sum(ok for ok, _ in result)
            worst = max(seconds for _, seconds in result)
            path = "stream" if stream else "unary "
            print(
                f"{name:5} {path}: {answered}/{args.puts} answered, "
                f"worst call {worst:.2f} s, all {total:.1f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=1.5)
    parser.add_argument("--attempts", type=int, default=6)
    parser.add_argument("--no-headers", action="store_true")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = Sidecar(_store(args.backend, directory)).start()
        try:
            asyncio.run(_measure(args, server.target))
        finally:
            server.kill()


if __name__ == "__main__":
    main()
