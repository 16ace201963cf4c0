"""Logs: one structured line per notable event; JSON on request; never a password."""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import pytest

from tests.ops.helpers import SERVING, EarlySidecar, HealthProbe, Outage, next_status
from tests.support.sidecar import StoreSpec

PASSWORD = "s3cret-pw-do-not-print"


def _with_password(spec: StoreSpec) -> StoreSpec:
    """The Postgres URL with a password (the test server trusts loopback and ignores it)."""
    if spec.backend != "postgres":
        return spec
    parts = urlsplit(spec.url)
    user, _, host = parts.netloc.rpartition("@")
    netloc = f"{user.split(':')[0] or 'postgres'}:{PASSWORD}@{host}"
    return StoreSpec(spec.backend, parts._replace(netloc=netloc).geturl(), spec.pg_schema)


def test_json_log_has_one_event_per_line_and_no_password(store_spec):
    """With --log-format json every line is a JSON object; start (with the configuration),
    store connected, shutdown and stop are events with fields; the password never appears."""
    server = EarlySidecar(_with_password(store_spec), extra_args=["--log-format", "json"])
    try:
        server.start()
        server.wait_for_log('"event": "store_connected"')
        assert server.stop() == 0
        text = server.log_text()
        lines = [json.loads(line) for line in text.splitlines()]
        events = [line.get("event") for line in lines]
        for name in ("config", "listening", "store_connected", "shutdown_started", "stopped"):
            assert events.count(name) == 1, name
        assert events.index("config") < events.index("store_connected") < events.index("stopped")
        config = lines[events.index("config")]
        assert config["level"] == "info"
        assert config["shutdown_grace_s"] == 2.0
        assert config["store_wait_s"] == "forever"
        assert config["unix_socket_mode"] == "0600"
        if store_spec.backend == "postgres":
            assert config["store"].startswith("postgresql://postgres:***@")
        assert PASSWORD not in text
        assert any("serving on" in line["message"] for line in lines)
    finally:
        server.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_e3_a_postgres_outage_is_logged_in_a_few_lines_without_tracebacks(store_spec):
    """Postgres only (the pool that retries belongs to asyncpg): while the database is away,
    the log says so in a few single lines (store lost, the driver's retry warning once, no
    traceback) instead of a traceback a second, then says when it is back."""
    with Outage.around(store_spec) as outage:
        server = EarlySidecar(outage.spec, extra_args=["--health-interval", "0.2"])
        try:
            server.start()
            server.wait_for_log("serving on")
            probe = HealthProbe(server.target)
            before = len(server.log_text().splitlines())
            outage.begin()
            server.wait_for_log("store lost")
            time.sleep(6)  # a traceback a second would show several times over
            during = server.log_text().splitlines()[before:]
            assert not any("Traceback" in line for line in during), "\n".join(during)
            assert len(during) <= 6, "\n".join(during)
            outage.end()
            server.wait_for_log("store recovered")
            watch = probe.watch()
            next_status(watch, SERVING)
            watch.cancel()
            probe.close()
            assert server.stop() == 0
            assert "Traceback" not in server.log_text()
        finally:
            server.close()
