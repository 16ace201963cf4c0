"""bench/cpu.py reads real CPU clocks: a real child process burning CPU under a name that
defeats naive parsing of /proc/<pid>/stat, and threads of this process burning CPU. The
assertions relate CPU figures to each other (what the burner measured of itself), never to
wall time."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from bench import cpu

#: CPU seconds each burner spends: a few dozen clock ticks, so one tick is a few per cent.
BURN_S = 0.3
#: /proc/<pid>/stat counts whole clock ticks; two of them cover rounding at both ends.
TICK_S = 2 / cpu.CLOCK_TICKS

#: Renames itself (spaces and parentheses in the command field), says ready, burns BURN_S of
#: its own CPU, prints how much it measured, and waits for stdin to close.
CHILD = f"""
import sys, time
with open("/proc/self/comm", "w") as comm:
    comm.write("a) b (c")
print("ready", flush=True)
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < {BURN_S}:
    pass
print(time.process_time() - start, flush=True)
sys.stdin.read()
"""


def _burn(seconds: float) -> float:
    """Spend about ``seconds`` of this thread's CPU; return what the thread's clock says."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass
    return time.thread_time() - start


def test_a_server_process_cpu_is_what_it_spent_itself() -> None:
    """process_cpu_s reads the child's utime + stime, whatever its command name holds; over
    the burn it matches the child's own clock to the tick, while this process, which only
    waited, spent less."""
    with subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        start = cpu.sample(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        burnt = float(child.stdout.readline())
        used = cpu.since(start, child.pid)
        child.stdin.close()
        child.wait(timeout=30)
    assert burnt >= BURN_S
    assert used.server_s is not None
    assert burnt - TICK_S <= used.server_s <= burnt + TICK_S + 0.05  # its exit path, a print
    assert 0 <= used.client_s < used.server_s


def test_the_client_clock_counts_every_thread_of_the_process() -> None:
    """RUSAGE_SELF: CPU burnt on other threads (as gRPC's own threads and the caller threads
    spend it) is in the client figure, not only the reading thread's."""
    burnt: list[float] = []
    start = cpu.sample()
    threads = [threading.Thread(target=lambda: burnt.append(_burn(BURN_S / 2))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = cpu.since(start)
    assert used.server_s is None
    assert len(burnt) == 2
    assert used.client_s >= sum(burnt) * 0.99  # getrusage and thread_time round differently


def test_per_operation_figures_and_row_fields() -> None:
    """Microseconds per operation, totals and the ratio to the in-process baseline."""
    used = cpu.CpuUsage(client_s=0.002, server_s=0.006)
    assert used.per_op_us(4) == (500.0, 1500.0)
    assert cpu.CpuUsage(client_s=0.001, server_s=None).per_op_us(2) == (500.0, None)
    fields = cpu.row_fields(500.0, 1500.0, 1000.0, prefix="x_")
    assert fields == {
        "x_sidecar_client_cpu_us": 500.0,
        "x_sidecar_server_cpu_us": 1500.0,
        "x_sidecar_cpu_us": 2000.0,
        "x_baseline_cpu_us": 1000.0,
        "x_ratio_cpu": 2.0,
    }
    assert cpu.row_fields(300.0, None, None)["sidecar_cpu_us"] == 300.0
    assert cpu.row_fields(300.0, None, None)["ratio_cpu"] is None
