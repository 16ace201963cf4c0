"""Contract P8 for the Node.js client: a connection that goes silent (the server's bytes lost
on their way back, the client's still delivered) is left for a new one within a bounded time,
so the client's calls are answered again; through a TCP proxy that silences the connection,
on every backend."""

from __future__ import annotations

import json
import os
import subprocess

from tests.support.shared_server import SharedSidecar
from tests.support.tcp_proxy import TcpProxy

from .conftest import NODE_CLIENT

#: Twice the promised 15 s, for a loaded machine; the keepalive the client had before (a ping
#: every 30 s, 10 s to answer) took 40 s.
GIVE_UP_MS = 30_000

# Puts through the proxy: one warm-up, then, once told to go, puts of a 1.5 s deadline until
# one is answered and three more; one JSON line each step.
WRITER = """
const readline = require('node:readline');
const { CheckpointdClient } = require('./src');
const client = new CheckpointdClient({
  target: process.env.PROXY_TARGET,
  namespace: process.env.NAMESPACE,
  retry: { maxAttempts: 6 },
});
const put = (id) => client.putCheckpoint(
  { execution_id: id, node_id: 'n', status: 'CHECKPOINT_STATUS_COMPLETED' }, { timeoutMs: 1500 });
(async () => {
  await put('warm');
  console.log(JSON.stringify({ ready: true }));
  const go = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => go.once('line', resolve));
  go.close();
  const started = Date.now();
  let failed = 0;
  while (Date.now() - started < Number(process.env.GIVE_UP_MS)) {
    try {
      await put(`after-silence-${failed}`);
      for (let i = 0; i < 3; i++) await put(`answered-${i}`);
      console.log(JSON.stringify({ failed }));
      client.close();
      return;
    } catch (err) {
      failed += 1;
    }
  }
  console.log(JSON.stringify({ gave_up: failed }));
  client.close();
})().catch((err) => { console.error(err); process.exit(1); });
"""


def test_p8_node_client_leaves_a_silent_connection(node: str, sidecar: SharedSidecar) -> None:
    """After its connection is silenced the Node.js client's puts are answered again, on a
    new connection."""
    host, port = sidecar.tcp_target.rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    env = {
        **os.environ,
        "PROXY_TARGET": f"127.0.0.1:{proxy.port}",
        "NAMESPACE": sidecar.namespace,
        "GIVE_UP_MS": str(GIVE_UP_MS),
    }
    try:
        with subprocess.Popen(
            [node, "-e", WRITER],
            cwd=NODE_CLIENT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            try:
                assert process.stdout is not None
                assert process.stdin is not None
                ready = process.stdout.readline()
                assert json.loads(ready or "null") == {"ready": True}, process.stderr
                before = proxy.connections
                assert proxy.silence() == before
                process.stdin.write("go\n")
                process.stdin.flush()
                result = json.loads(process.stdout.readline() or "null")
                assert process.wait(timeout=30) == 0, result
            finally:
                process.kill()
        assert result is not None
        assert "failed" in result, result
        assert proxy.connections > before
    finally:
        proxy.close()
