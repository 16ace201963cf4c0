"""A steady load for profiling: ``put`` (2 KB state) or ``get_last`` through
``SidecarCheckpointer`` from N threads for S seconds, against a running server.

Usage: python bench/load.py TARGET THREADS SECONDS [put|get_last]

Profile the server meanwhile with ``py-spy record -r 200 -f raw --threads -p <pid>`` (see
bench/README.md, "Where the time goes").
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastaiagent.chain.checkpoint import Checkpoint as FastCheckpoint

from bench.run import STATE
from checkpointd_client.fastaiagent import SidecarCheckpointer


def main(argv: list[str]) -> int:
    target, threads, seconds = argv[0], int(argv[1]), float(argv[2])
    operation = argv[3] if len(argv) > 3 else "put"
    if operation not in ("put", "get_last"):
        raise SystemExit(f"operation must be put or get_last, not {operation!r}")
    done = [0] * threads
    with SidecarCheckpointer(target) as adapter:
        read_run = uuid.uuid4().hex
        for i in range(10):
            adapter.put(
                FastCheckpoint(
                    execution_id=read_run, node_id=f"n{i}", node_index=i, state_snapshot=STATE
                )
            )
        stop = time.monotonic() + seconds

        def work(worker: int) -> None:
            run = f"{uuid.uuid4().hex}-{worker}"
            while time.monotonic() < stop:
                if operation == "put":
                    i = done[worker]
                    adapter.put(
                        FastCheckpoint(
                            execution_id=run, node_id=f"n{i}", node_index=i, state_snapshot=STATE
                        )
                    )
                else:
                    adapter.get_last(read_run)
                done[worker] += 1

        workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    print(f"{operation}: {threads} threads, {sum(done)} calls, {sum(done) / seconds:.0f} calls/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
