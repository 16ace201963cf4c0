'use strict';
// The client's token. The first tests need no server. The rest need a server started with
// CHECKPOINTD_AUTH_TOKEN=<token> and --watch-max-lifetime 0.5, reached at $CHECKPOINTD_TARGET
// with the same token in $CHECKPOINTD_TEST_AUTH_TOKEN; without that variable they are not
// registered at all (a plain `npm test` runs against a server without tokens).
// tests/polyglot/test_node_client.py starts such a server and runs this file.

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const util = require('node:util');
const { describe, test, before, after } = require('node:test');
const { CheckpointdClient, CheckpointdError, TOKEN_ENV_VAR, json, newId } = require('../src');

const TARGET = process.env.CHECKPOINTD_TARGET;
const TOKEN = process.env.CHECKPOINTD_TEST_AUTH_TOKEN;
const NAMESPACE = `node-auth-${newId().slice(0, 8)}`;
const WAIT_MS = 15_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client of the test namespace; `env` is $CHECKPOINTD_TOKEN while it is built. */
function clientWith(options, env) {
  const saved = process.env[TOKEN_ENV_VAR];
  if (env === undefined) delete process.env[TOKEN_ENV_VAR];
  else process.env[TOKEN_ENV_VAR] = env;
  try {
    return new CheckpointdClient({ target: TARGET, namespace: NAMESPACE, ...options });
  } finally {
    if (saved === undefined) delete process.env[TOKEN_ENV_VAR];
    else process.env[TOKEN_ENV_VAR] = saved;
  }
}

/** Assert that `promise` rejects with this status and reason, and nowhere shows `secret`. */
async function rejectsWith(promise, codeName, reason, secret) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof CheckpointdError, `not a CheckpointdError: ${err}`);
    assert.equal(err.codeName, codeName, err.message);
    assert.equal(err.reason, reason, err.message);
    if (secret) {
      const shown = `${err.stack}\n${util.inspect(err, { depth: Infinity, showHidden: true })}`;
      assert.ok(!shown.includes(secret), 'the error shows the token');
    }
    return true;
  });
}

/** The next message of an iterator, or a failure after WAIT_MS. */
async function next(iterator) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no watch message in time')), WAIT_MS);
  });
  try {
    const { value, done } = await Promise.race([iterator.next(), timeout]);
    assert.ok(!done, 'the watch stream ended');
    return value;
  } finally {
    clearTimeout(timer);
  }
}

function pause(executionId) {
  const checkpoint = { execution_id: executionId, chain_name: 'auth-chain', node_id: 'approve', interrupt_reason: 'review' };
  const pending = { chain_name: 'auth-chain', node_id: 'approve', reason: 'review', context_json: json.stringify({}) };
  return [checkpoint, pending];
}

describe('token option (no server)', () => {
  test('a token that cannot travel in a header is refused, without repeating it', () => {
    for (const bad of ['', '   ', 'has a space-in-it-1234', 'tab\there-0123456789', 'ünïcode-0123456789']) {
      assert.throws(
        () => new CheckpointdClient({ target: '127.0.0.1:1', token: bad }),
        (err) => err instanceof TypeError && /printable ASCII/.test(err.message) && (!bad.trim() || !err.message.includes(bad)),
      );
    }
    assert.throws(() => new CheckpointdClient({ target: '127.0.0.1:1', token: 42 }), TypeError);
  });

  test('the token is private: inspecting the client does not show it', () => {
    const secret = `s3cret-${crypto.randomBytes(12).toString('hex')}`;
    const client = new CheckpointdClient({ target: '127.0.0.1:1', token: secret });
    try {
      const shown = util.inspect(client, { depth: 4, showHidden: true }) + JSON.stringify(Object.keys(client));
      assert.ok(!shown.includes(secret));
    } finally {
      client.close();
    }
  });
});

if (TOKEN) {
  describe('against a server that requires a token', () => {
    const wrong = `wrong-${crypto.randomBytes(16).toString('hex')}`;
    let client;
    before(() => {
      assert.ok(TARGET, 'CHECKPOINTD_TARGET is not set');
      client = clientWith({ token: TOKEN });
    });
    after(() => client?.close());

    test('E2 no token: unary calls and watches are UNAUTHENTICATED (MISSING_TOKEN), not retried', async () => {
      const anonymous = clientWith({});
      try {
        await rejectsWith(anonymous.getLatestCheckpoint('run-x'), 'UNAUTHENTICATED', 'MISSING_TOKEN');
        await rejectsWith(anonymous.putCheckpoint({ execution_id: 'run-x', node_id: 'a' }), 'UNAUTHENTICATED', 'MISSING_TOKEN');
        const stream = anonymous.watchInterrupts();
        await rejectsWith(stream[Symbol.asyncIterator]().next(), 'UNAUTHENTICATED', 'MISSING_TOKEN');
        await rejectsWith(anonymous.watch()[Symbol.asyncIterator]().next(), 'UNAUTHENTICATED', 'MISSING_TOKEN');
      } finally {
        anonymous.close();
      }
    });

    test('E2 a wrong token (option or environment) is UNAUTHENTICATED (INVALID_TOKEN), never shown', async () => {
      for (const impostor of [clientWith({ token: wrong }), clientWith({}, wrong)]) {
        try {
          await rejectsWith(impostor.getLatestCheckpoint('run-x'), 'UNAUTHENTICATED', 'INVALID_TOKEN', wrong);
          await rejectsWith(
            impostor.putIdempotencyResult('run-x', 'k', '1'),
            'UNAUTHENTICATED',
            'INVALID_TOKEN',
            wrong,
          );
          const stream = impostor.watchInterrupts();
          await rejectsWith(stream[Symbol.asyncIterator]().next(), 'UNAUTHENTICATED', 'INVALID_TOKEN', wrong);
          assert.ok(!util.inspect(impostor, { depth: 4, showHidden: true }).includes(wrong));
        } finally {
          impostor.close();
        }
      }
    });

    test('the right token (option over a wrong $CHECKPOINTD_TOKEN, or from it) puts and gets', async () => {
      const fromEnv = clientWith({}, TOKEN);
      const overridden = clientWith({ token: TOKEN }, wrong);
      try {
        const stored = await overridden.putCheckpoint({
          execution_id: 'run-put',
          node_id: 'start',
          status: 'CHECKPOINT_STATUS_COMPLETED',
          state_snapshot_json: json.stringify({ n: 12345678901234567890n }),
        });
        const latest = await fromEnv.getLatestCheckpoint('run-put');
        assert.equal(latest.checkpoint_id, stored.checkpoint_id);
        assert.deepEqual(json.parse(latest.state_snapshot_json), { n: 12345678901234567890n });
        await fromEnv.putIdempotencyResult('run-put', 'k', '"done"');
        assert.deepEqual(await overridden.getIdempotencyResult('run-put', 'k'), { found: true, result_json: '"done"' });
        const pending = await fromEnv.recordInterrupt(...pause('run-claim'));
        assert.equal(pending.pending_created, true);
        assert.equal((await overridden.claimInterrupt('run-claim')).execution_id, 'run-claim');
      } finally {
        fromEnv.close();
        overridden.close();
      }
    });

    test('I5 the token rides on watch streams and on every reconnect of watch()', { timeout: 60_000 }, async () => {
      // The server ends each stream after 0.5 s (WATCH_EXPIRED): a reconnect is unavoidable.
      const raw = client.watchInterrupts();
      const it = raw[Symbol.asyncIterator]();
      assert.equal((await next(it)).item, 'snapshot_complete');
      await assert.rejects(
        (async () => {
          for (;;) await next(it);
        })(),
        (err) => err.codeName === 'UNAVAILABLE' && err.reason === 'WATCH_EXPIRED',
      );

      const abort = new AbortController();
      const seen = [];
      for await (const message of client.watch({ signal: abort.signal })) {
        if (message.item === 'snapshot_complete') {
          await client.recordInterrupt(...pause('run-w1'));
        } else if (message.item === 'event') {
          seen.push(message.event.pending.execution_id);
          if (seen.length === 1) {
            await sleep(700); // the stream that carried run-w1 has expired by now
            await client.recordInterrupt(...pause('run-w2'));
          } else {
            abort.abort();
          }
        }
      }
      assert.deepEqual(seen, ['run-w1', 'run-w2']);
    });
  });
}
