"""CPU time over a measured window: the benchmark process's own and a server subprocess's.

Wall time on a machine shared with other work moves with the load; the CPU a call costs
does not (much). Every window of the benchmark reads both clocks at its start and its end:

* **The client** (this process): ``getrusage(RUSAGE_SELF)``, user plus system time of every
  thread of the process. Not ``RUSAGE_THREAD``: a call's client-side cost is spread over the
  caller threads and gRPC's own threads (its C core polls and writes on threads of its own),
  and the thread that reads the clock only waits for the callers. Nothing else runs in the
  process during a window, so all of it is the callers'.
* **A server** (a subprocess, by pid): ``utime + stime`` of ``/proc/<pid>/stat``, the whole
  thread group (the event loop, SQLite's thread, gRPC's), in clock ticks
  (``SC_CLK_TCK``, 100 a second on Linux: 10 ms granularity, so a window needs a second or
  so of work for the figure to be within a few per cent).

Worker processes (``bench/multiproc.py``) read ``RUSAGE_SELF`` over their own window and
report it: ``RUSAGE_CHILDREN`` would count only children that were waited for, and their
whole life (imports, setup) rather than the window.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLOCK_TICKS",
    "CpuSample",
    "CpuUsage",
    "process_cpu_s",
    "row_fields",
    "sample",
    "self_cpu_s",
    "since",
]

#: Clock ticks a second, the unit of /proc/<pid>/stat's utime and stime.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """User plus system CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` (all its threads) so far, from
    ``/proc/<pid>/stat``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The second field is the command in parentheses and may hold spaces or parentheses:
    # the fields after it start after the last ")". utime and stime are fields 14 and 15.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS


@dataclass(frozen=True)
class CpuSample:
    """Both clocks at one moment; ``server_s`` is None without a server."""

    client_s: float
    server_s: float | None


@dataclass(frozen=True)
class CpuUsage:
    """CPU seconds spent over a window by this process and by the server."""

    client_s: float
    server_s: float | None

    def per_op_us(self, ops: int) -> tuple[float, float | None]:
        """Client and server microseconds per operation."""
        client = self.client_s / ops * 1e6
        return client, None if self.server_s is None else self.server_s / ops * 1e6


def sample(server_pid: int | None = None) -> CpuSample:
    """Read this process's clock and, when given, the server's."""
    return CpuSample(
        client_s=self_cpu_s(),
        server_s=None if server_pid is None else process_cpu_s(server_pid),
    )


def since(start: CpuSample, server_pid: int | None = None) -> CpuUsage:
    """What both clocks advanced since ``start`` (read with the same ``server_pid``)."""
    end = sample(server_pid)
    server = None
    if start.server_s is not None and end.server_s is not None:
        server = end.server_s - start.server_s
    return CpuUsage(client_s=end.client_s - start.client_s, server_s=server)


def row_fields(
    client_us: float, server_us: float | None, baseline_us: float | None, prefix: str = ""
) -> dict[str, float | None]:
    """The CPU columns of a result row, microseconds per operation: the sidecar side's client
    (this process), server and both; the in-process baseline's (all in this process); and
    the ratio of the totals (None without a baseline)."""
    total = client_us + (server_us or 0.0)

    def us(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        f"{prefix}sidecar_client_cpu_us": us(client_us),
        f"{prefix}sidecar_server_cpu_us": us(server_us),
        f"{prefix}sidecar_cpu_us": us(total),
        f"{prefix}baseline_cpu_us": us(baseline_us),
        f"{prefix}ratio_cpu": round(total / baseline_us, 3) if baseline_us else None,
    }
