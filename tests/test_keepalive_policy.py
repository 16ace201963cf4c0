"""The keepalive policy that docs/protocol.md and the WatchInterrupts comment publish is the
one the server sets (checkpointd.app.KEEPALIVE_OPTIONS), figure for figure."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from checkpointd import app

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "protocol.md"
PROTO = ROOT / "proto" / "checkpointd" / "v1" / "interrupt_service.proto"

OPTIONS = dict(app.KEEPALIVE_OPTIONS)


def _seconds(option: str) -> str:
    """An option in milliseconds as the docs write it ("60 s")."""
    return f"{OPTIONS[option] / 1000:g} s"


def _guide_section() -> str:
    text = GUIDE.read_text()
    assert "\n## Keepalive\n" in text
    return text.split("\n## Keepalive\n", 1)[1].split("\n## ", 1)[0]


def _watch_comment() -> str:
    """The comment above `rpc WatchInterrupts`."""
    text = PROTO.read_text()
    before = text.split("  rpc WatchInterrupts(", 1)[0]
    lines = before.rstrip("\n").splitlines()
    comment: list[str] = []
    for line in reversed(lines):
        if not line.strip().startswith("//"):
            break
        comment.append(line.strip().removeprefix("//").strip())
    return " ".join(reversed(comment))


def test_the_server_serves_with_the_published_options():
    """_build_server passes KEEPALIVE_OPTIONS to gRPC (so checking them checks the server)."""
    assert "*KEEPALIVE_OPTIONS" in inspect.getsource(app._build_server)
    assert set(OPTIONS) == {
        "grpc.keepalive_permit_without_calls",
        "grpc.http2.min_recv_ping_interval_without_data_ms",
        "grpc.http2.max_ping_strikes",
        "grpc.keepalive_time_ms",
        "grpc.keepalive_timeout_ms",
    }


def test_the_guide_table_lists_the_server_options_with_their_values():
    """The "server setting | value" table in docs/protocol.md equals the server's options."""
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| `(-?\d+)` \|", _guide_section(), re.MULTILINE)
    assert {name: int(value) for name, value in rows} == OPTIONS


def test_the_guide_and_the_proto_state_the_figures_clients_rely_on():
    """The ping interval the server tolerates, its own ping period and timeout, and whether
    it accepts pings without calls and ever cuts a client off for pinging, in the guide's
    prose and the WatchInterrupts comment."""
    section, comment = _guide_section(), _watch_comment()
    minimum = _seconds("grpc.http2.min_recv_ping_interval_without_data_ms")
    for text in (section, comment):
        assert f"less than {minimum} apart" in text
        assert f"every {minimum} or more" in text
    assert f"every connection every {_seconds('grpc.keepalive_time_ms')}" in section
    assert f"each {_seconds('grpc.keepalive_time_ms')}" in comment
    assert f"within {_seconds('grpc.keepalive_timeout_ms')}" in section
    assert f"within {_seconds('grpc.keepalive_timeout_ms')}" in comment
    # max_ping_strikes 0: gRPC never answers GOAWAY too_many_pings.
    assert OPTIONS["grpc.http2.max_ping_strikes"] == 0
    assert "no GOAWAY `too_many_pings`" in section
    assert 'no "too_many_pings" GOAWAY' in comment
    assert OPTIONS["grpc.keepalive_permit_without_calls"] == 1
    assert "accepted on a connection with no call in progress" in section
    assert "accepts client pings on connections with no call in progress" in comment
