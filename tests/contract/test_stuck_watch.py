"""Contract B2: a watch stream stuck writing to a client that stopped reading really ends by
its lifetime plus the grace, and counts against --max-watch-streams until it has ended; seen
from the server's side (its metrics and its memory), on every backend.

Each stalled client has a connection of its own, never reads past its first message and never
cancels: only the server can end its stream. ``CHECKPOINTD_RELIABILITY=full`` runs several
rounds of them and checks that the server's memory does not grow round after round.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import grpc

from checkpointd_client import CheckpointdClient
from checkpointd_client.v1 import interrupt_service_pb2 as svc
from checkpointd_client.v1 import interrupt_service_pb2_grpc as svc_grpc
from tests.contract.helpers import interrupted
from tests.ops.helpers import sample, scrape
from tests.reliability.figures import FULL, record
from tests.support.sidecar import Sidecar

LIFETIME = 2.0
#: The grace a blocked write gets after the lifetime (checkpointd.watch.STUCK_WRITE_GRACE).
GRACE = 2.0
#: What a busy machine may add to lifetime + grace before the server notices.
SLACK = 8.0
LIMIT = 4
ROUNDS = 4 if FULL else 1
#: A client that reads nothing keeps only the initial HTTP/2 window of data in flight; its
#: own connection, so that the server's limits see one stream per connection.
STALLED_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.use_local_subchannel_pool", 1)]
WATCH_METHOD = {"grpc_service": "checkpointd.v1.InterruptService", "grpc_method": "WatchInterrupts"}
_METRICS_RE = re.compile(r"metrics on (?P<url>http://\S+/metrics)")


def _rss_mib(server: Sidecar) -> float:
    assert server.process is not None
    assert server.process.poll() is None
    with open(f"/proc/{server.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _open_streams(url: str) -> tuple[float, float]:
    """The server's own count of open watch streams: its watch gauge and its in-flight gauge."""
    text = scrape(url)
    streams = sample(text, "checkpointd_watch_streams") or 0.0
    in_flight = sample(text, "checkpointd_rpcs_in_flight", **WATCH_METHOD) or 0.0
    return streams, in_flight


@contextlib.contextmanager
def _stalled(target: str) -> Iterator[Any]:
    """A WatchInterrupts call that has read its first message and reads nothing more."""
    with grpc.insecure_channel(target, options=STALLED_OPTIONS) as channel:
        stub = svc_grpc.InterruptServiceStub(channel)
        call = stub.WatchInterrupts(svc.WatchInterruptsRequest(), timeout=600)
        assert next(call).HasField("snapshot")
        try:
            yield call
        finally:
            call.cancel()


def _try_watch(target: str, url: str) -> grpc.RpcError | None:
    """Open one more stream: None when the server admits it (and then, while it is open, the
    server's gauges must show no more than the limit), else its refusal."""
    with grpc.insecure_channel(target, options=STALLED_OPTIONS) as channel:
        stub = svc_grpc.InterruptServiceStub(channel)
        call = stub.WatchInterrupts(svc.WatchInterruptsRequest(), timeout=30)
        try:
            next(call)
        except grpc.RpcError as exc:
            return exc
        try:
            # Admitted only once a stuck stream has really ended: never past the limit.
            streams, in_flight = _open_streams(url)
            assert streams <= LIMIT, streams
            assert in_flight <= LIMIT, in_flight
        finally:
            call.cancel()
    return None


def test_b2_streams_stuck_on_a_write_end_by_lifetime_and_grace_and_count_until_then(
    sidecar_factory: Any,
) -> None:
    """Four clients that stop reading in a 6.5 MiB snapshot hold the server's four watch
    slots: a fifth stream is refused for as long as any of them is open by the server's own
    gauges; the server ends them for real within lifetime + grace (both gauges back to 0,
    without a client cancelling), logs each as a client not reading rather than an internal
    error, and its memory does not grow from round to round."""
    server = sidecar_factory(
        "--watch-max-lifetime",
        str(LIFETIME),
        "--max-watch-streams",
        str(LIMIT),
        "--metrics-listen",
        "127.0.0.1:0",
    )
    match = _METRICS_RE.search(server.log_path.read_text())
    assert match, server.log_path.read_text()
    url = match.group("url")
    # The default retries: a connection older than the lifetime is closed by design (B2), and
    # a write on it is then sent again on a new one, as any client's would be.
    with CheckpointdClient(server.target) as client:
        for i in range(100):  # 6.5 MiB: more than the transport buffers of four streams
            cp, pending = interrupted(f"stuck-{i:03d}", interrupt_context={"blob": "x" * 65536})
            client.record_interrupt(cp, pending)
    rss: list[float] = []
    for _ in range(ROUNDS):
        with contextlib.ExitStack() as stack:
            opened = time.monotonic()
            for _ in range(LIMIT):
                stack.enter_context(_stalled(server.target))
            ended_by = opened + LIFETIME + GRACE + SLACK
            refusals = 0
            while True:
                streams, in_flight = _open_streams(url)
                assert streams <= LIMIT, streams
                assert in_flight <= LIMIT, in_flight
                if streams == 0 and in_flight == 0:
                    break
                assert time.monotonic() < ended_by, (
                    f"{in_flight:g} stuck streams still open {time.monotonic() - opened:.1f} s "
                    f"after they opened (lifetime {LIFETIME:g} s + grace {GRACE:g} s)"
                )
                refused = _try_watch(server.target, url)
                if refused is not None:
                    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
                    refusals += 1
                time.sleep(0.2)
            ended_after = time.monotonic() - opened
            # Still never read nor cancelled by their clients: the server ended them.
        rss.append(_rss_mib(server))
        record(
            f"stuck watch streams ({server.backend})",
            rounds=1,
            stuck_streams=LIMIT,
            refused_while_stuck=refusals,
            last_round_ended_after=f"{ended_after:.1f} s",
            rss_after_each_round=" ".join(f"{r:.0f}" for r in rss) + " MiB",
        )
    log = server.log_path.read_text()
    assert log.count("watch stream ended: client not reading") >= LIMIT * ROUNDS, log
    assert "incident" not in log, log
    assert "Abort already called" not in log, log
    if FULL:
        # Rounds after the first reuse what the first one allocated (the issue saw +25 MiB a
        # round).
        assert rss[-1] - rss[1] < 20, f"server memory grew over the rounds: {rss}"
