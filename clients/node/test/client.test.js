'use strict';
// The Node.js client against a running checkpointd ($CHECKPOINTD_TARGET). Each run works in a
// namespace of its own, so it can share a server with anything else.

const assert = require('node:assert/strict');
const { describe, test, before, after } = require('node:test');
const grpc = require('@grpc/grpc-js');
const { CheckpointdClient, CheckpointdError, json, newId } = require('../src');

const TARGET = process.env.CHECKPOINTD_TARGET;
const NAMESPACE = `node-${newId().slice(0, 12)}`;
const WAIT_MS = 15_000;

/** Assert that `promise` rejects with this status code name and ErrorInfo reason. */
async function rejectsWith(promise, codeName, reason) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof CheckpointdError, `not a CheckpointdError: ${err}`);
    assert.equal(err.codeName, codeName, err.message);
    assert.equal(err.reason, reason, err.message);
    assert.equal(err.domain, 'checkpointd.v1');
    return true;
  });
}

/** The next message of a watch stream, or a failure after WAIT_MS. */
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

function step(executionId, nodeId, extra = {}) {
  return { execution_id: executionId, node_id: nodeId, status: 'CHECKPOINT_STATUS_COMPLETED', ...extra };
}

function pause(executionId, reason, context = {}) {
  const checkpoint = {
    execution_id: executionId,
    chain_name: 'node-chain',
    node_id: 'approve',
    interrupt_reason: reason,
    interrupt_context_json: json.stringify(context),
  };
  const pending = { chain_name: 'node-chain', node_id: 'approve', reason, context_json: json.stringify(context) };
  return [checkpoint, pending];
}

// Values JavaScript's own JSON.parse would damage, and text that must survive byte for byte.
const AWKWARD = {
  beyond_2_53: 9007199254740993n,
  u64_max_plus_one: 18446744073709551616n,
  i64_min_minus_one: -9223372036854775809n,
  huge: 10n ** 40n,
  safe: 42,
  float: 0.1,
  tiny: 5e-324,
  unicode: 'naïve café — 日本語 — 🚀👩‍👩‍👧 — e\u0301 — \u2028',
  escaped: 'tab\there "quoted" back\\slash',
  nested: { empty_object: {}, empty_array: [], list: [1, [2, [3]], { deep: null }] },
  'ключ 🔑': true,
};

describe('checkpointd Node.js client', { skip: !TARGET && 'CHECKPOINTD_TARGET is not set' }, () => {
  let client;

  before(() => {
    client = new CheckpointdClient({ target: TARGET, namespace: NAMESPACE });
  });
  after(() => client?.close());

  test('C2 a retry with the same request id returns the stored row; another id is ALREADY_EXISTS', async () => {
    const row = step('run-c2', 'start', { checkpoint_id: newId(), state_snapshot_json: '{"n":1}' });
    const requestId = newId();
    const first = await client.putCheckpoint(row, { requestId });
    const retry = await client.putCheckpoint(row, { requestId });
    assert.deepEqual(retry, first);
    assert.equal(first.checkpoint_id, row.checkpoint_id);
    assert.match(first.sequence, /^[1-9]\d*$/); // int64 as a decimal string
    await rejectsWith(client.putCheckpoint({ ...row, state_snapshot_json: '{"n":2}' }), 'ALREADY_EXISTS', 'CHECKPOINT_EXISTS');
    const page = await client.listCheckpoints('run-c2');
    assert.equal(page.checkpoints.length, 1);
    assert.equal(page.checkpoints[0].state_snapshot_json, '{"n":1}');
  });

  test('C3 C4 latest is the last write; history pages in write order both ways', async () => {
    const written = [];
    for (let i = 0; i < 5; i += 1) {
      // node_index runs backwards: order must come from the sequence, not from node_index.
      written.push(await client.putCheckpoint(step('run-c4', `n${i}`, { node_index: String(10 - i) })));
    }
    const latest = await client.getLatestCheckpoint('run-c4');
    assert.equal(latest.checkpoint_id, written[4].checkpoint_id);

    const ids = (rows) => rows.map((r) => r.checkpoint_id);
    const first = await client.listCheckpoints('run-c4', { pageSize: 2 });
    assert.deepEqual(ids(first.checkpoints), ids(written.slice(0, 2)));
    assert.notEqual(first.next_page_token, '');
    const all = [];
    for await (const row of client.iterCheckpoints('run-c4', { pageSize: 2 })) all.push(row);
    assert.deepEqual(ids(all), ids(written));
    const sequences = all.map((r) => BigInt(r.sequence));
    assert.ok(sequences.every((s, i) => i === 0 || s > sequences[i - 1]));

    const newest = await client.listCheckpoints('run-c4', { pageSize: 2, descending: true });
    assert.deepEqual(ids(newest.checkpoints), ids([written[4], written[3]]));
    const last = await client.listCheckpoints('run-c4', { pageSize: 4, pageToken: first.next_page_token });
    assert.deepEqual(ids(last.checkpoints), ids(written.slice(2)));
    assert.equal(last.next_page_token, '');
    await rejectsWith(client.listCheckpoints('run-c4', { pageToken: 'forged' }), 'INVALID_ARGUMENT', 'INVALID_PAGE_TOKEN');
  });

  test('J3 a reply above grpc-js\'s default 4 MiB receive limit is read', { timeout: 60_000 }, async () => {
    // Rows up to the server's --max-message-bytes (16 MiB by default) come back whole.
    const big = json.stringify({ blob: 'x'.repeat(5 * 1024 * 1024) });
    const stored = await client.putCheckpoint(step('run-j3', 'big', { state_snapshot_json: big }));
    assert.equal(stored.state_snapshot_json.length, big.length);
    const read = await client.getCheckpoint('run-j3', stored.checkpoint_id);
    assert.equal(read.state_snapshot_json, big);
  });

  test('C5 N1 a missing row is NOT_FOUND, and another namespace sees nothing', async () => {
    await client.putCheckpoint(step('run-n1', 'only'));
    const other = new CheckpointdClient({ target: TARGET, namespace: `${NAMESPACE}-other` });
    try {
      await rejectsWith(other.getLatestCheckpoint('run-n1'), 'NOT_FOUND', 'NO_CHECKPOINTS');
      assert.equal((await other.listCheckpoints('run-n1')).checkpoints.length, 0);
    } finally {
      other.close();
    }
    await rejectsWith(client.getCheckpoint('run-n1', 'no-such-id'), 'NOT_FOUND', 'CHECKPOINT_NOT_FOUND');
  });

  test('E2 a bad field is INVALID_ARGUMENT naming the field in ErrorInfo metadata', async () => {
    await rejectsWith(client.putCheckpoint(step('', 'x')), 'INVALID_ARGUMENT', 'INVALID_FIELD');
    await assert.rejects(client.putCheckpoint(step('run-e2', 'x', { state_snapshot_json: '[1,2]' })), (err) => {
      assert.equal(err.metadata.field, 'checkpoint.state_snapshot_json');
      assert.match(err.metadata.rule, /object/);
      return true;
    });
    const bad = new CheckpointdClient({ target: TARGET, namespace: '-bad namespace' });
    try {
      await rejectsWith(bad.getLatestCheckpoint('x'), 'INVALID_ARGUMENT', 'INVALID_FIELD');
    } finally {
      bad.close();
    }
    assert.equal((await client.listCheckpoints('run-e2')).checkpoints.length, 0);
  });

  test('P3 UNAVAILABLE is retried up to maxAttempts with the same request, then thrown', async () => {
    const sent = [];
    const record = (options, nextCall) => {
      const call = new grpc.InterceptingCall(nextCall(options), {
        sendMessage: (message, next) => {
          sent.push(message);
          next(message);
        },
      });
      return call;
    };
    const nowhere = new CheckpointdClient({
      target: '127.0.0.1:1', // nothing listens on port 1
      namespace: NAMESPACE,
      retry: { maxAttempts: 3, initialBackoffMs: 10 },
      channelOptions: { interceptors: [record] },
    });
    try {
      await assert.rejects(nowhere.putCheckpoint(step('run-p3', 'x')), (err) => err.codeName === 'UNAVAILABLE');
    } finally {
      nowhere.close();
    }
    assert.equal(sent.length, 3);
    assert.ok(sent.every((m) => m.request_id === sent[0].request_id && m.checkpoint.checkpoint_id === sent[0].checkpoint.checkpoint_id));
  });

  test('J1 JSON fields round trip big integers and unicode exactly', async () => {
    const text = json.stringify(AWKWARD);
    const stored = await client.putCheckpoint(
      step('run-j1', 'json', { state_snapshot_json: text, node_output_json: '{"x": 1.50, "y": 1e2}' }),
    );
    const read = await client.getCheckpoint('run-j1', stored.checkpoint_id);
    assert.equal(read.state_snapshot_json, text); // the text comes back as sent
    assert.equal(read.node_output_json, '{"x": 1.50, "y": 1e2}');
    assert.deepEqual(json.parse(read.state_snapshot_json), AWKWARD); // and so does every value
    assert.equal(json.parse(read.state_snapshot_json).u64_max_plus_one, 2n ** 64n);
  });

  test('D1 the idempotency cache stores, replaces and finds JSON (null included)', async () => {
    assert.deepEqual(await client.getIdempotencyResult('run-d1', 'charge'), { found: false, result_json: '' });
    const value = { charge_id: 'ch-1', amount: 123456789012345678901234567890n, note: '領収書 ✓' };
    await client.putIdempotencyResult('run-d1', 'charge', json.stringify(value));
    const got = await client.getIdempotencyResult('run-d1', 'charge');
    assert.equal(got.found, true);
    assert.deepEqual(json.parse(got.result_json), value);

    const requestId = newId(); // a retried put is the same put
    await client.putIdempotencyResult('run-d1', 'charge', '{"v":2}', { requestId });
    await client.putIdempotencyResult('run-d1', 'charge', '{"v":2}', { requestId });
    assert.equal((await client.getIdempotencyResult('run-d1', 'charge')).result_json, '{"v":2}');

    await client.putIdempotencyResult('run-d1', 'nothing', 'null');
    assert.deepEqual(await client.getIdempotencyResult('run-d1', 'nothing'), { found: true, result_json: 'null' });
    await rejectsWith(client.putIdempotencyResult('run-d1', 'bad', 'NaN'), 'INVALID_ARGUMENT', 'INVALID_FIELD');
  });

  test('I1 I3 record an interrupt; exactly one claimer wins, a retried claim gets the row again', async () => {
    const context = { amount: 2n ** 63n, approver: 'Zoë 👩‍💼' };
    const recorded = await client.recordInterrupt(...pause('run-i3', 'manager_approval', context));
    assert.equal(recorded.pending_created, true);
    assert.equal(recorded.pending.checkpoint_id, recorded.checkpoint.checkpoint_id);
    const listed = await client.listPendingInterrupts({ reason: 'manager_approval' });
    assert.ok(listed.pending_interrupts.some((p) => p.execution_id === 'run-i3'));
    const resumePoint = await client.getResumePoint('run-i3');
    assert.equal(resumePoint.status, 'CHECKPOINT_STATUS_INTERRUPTED');

    // Five claimers on five channels at once: one row, four NO_PENDING_INTERRUPT.
    const claimers = Array.from({ length: 5 }, () => new CheckpointdClient({ target: TARGET, namespace: NAMESPACE }));
    const tokens = claimers.map(() => newId());
    try {
      const results = await Promise.allSettled(claimers.map((c, i) => c.claimInterrupt('run-i3', { claimToken: tokens[i] })));
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
      assert.equal(won.length, 1);
      assert.deepEqual(json.parse(won[0].value.context_json), context);
      for (const err of lost) {
        assert.equal(err.codeName, 'NOT_FOUND');
        assert.equal(err.reason, 'NO_PENDING_INTERRUPT'); // read from grpc-status-details-bin
        assert.equal(err.metadata.execution_id, 'run-i3');
      }
      // The winner's reply was "lost": a retry with its token gets the same row, not NOT_FOUND.
      const winner = results.findIndex((r) => r.status === 'fulfilled');
      const again = await client.claimInterrupt('run-i3', { claimToken: tokens[winner] });
      assert.deepEqual(again, won[0].value);
      await rejectsWith(client.claimInterrupt('run-i3'), 'NOT_FOUND', 'NO_PENDING_INTERRUPT');
    } finally {
      for (const c of claimers) c.close();
    }
  });

  test('K1 submitDecision: the first decision wins and is listed; a second is ALREADY_DECIDED naming it', async () => {
    const recorded = await client.recordInterrupt(...pause('run-k1', 'manager_approval', { amount: 50 }));
    await rejectsWith(client.submitDecision('run-none', { approved: true, decidedBy: 'node-bot' }), 'NOT_FOUND', 'NO_PENDING_INTERRUPT');
    const requestId = newId();
    const call = {
      approved: true,
      decidedBy: 'node-bot',
      metadata: { limit: 2n ** 64n, by: 'node-bot' },
      reason: 'under the limit',
      requestId,
    };
    const decided = await client.submitDecision('run-k1', call);
    assert.equal(decided.checkpoint_id, recorded.checkpoint.checkpoint_id);
    assert.equal(decided.decision.approved, true);
    assert.equal(decided.decision.decided_by, 'node-bot');
    assert.equal(decided.decision.reason, 'under the limit');
    assert.equal(decided.decision.status, 'DECISION_STATUS_DECIDED');
    assert.deepEqual(json.parse(decided.decision.metadata_json), { limit: 2n ** 64n, by: 'node-bot' });
    // A retry of the same call (a lost reply) gets the same answer.
    assert.deepEqual(await client.submitDecision('run-k1', call), decided);
    // C10: the request id on another request (the opposite verdict) is refused, not answered
    // with the first decision.
    await assert.rejects(client.submitDecision('run-k1', { ...call, approved: false }), (err) => {
      assert.equal(err.codeName, 'FAILED_PRECONDITION');
      assert.equal(err.reason, 'REQUEST_ID_REUSED');
      assert.deepEqual({ ...err.metadata }, { request_id: requestId, method: 'SubmitDecision' });
      return true;
    });
    await assert.rejects(client.submitDecision('run-k1', { approved: false, decidedBy: 'other' }), (err) => {
      assert.equal(err.codeName, 'FAILED_PRECONDITION');
      assert.equal(err.reason, 'ALREADY_DECIDED');
      assert.equal(err.metadata.decided_by, 'node-bot');
      assert.equal(err.metadata.approved, 'true');
      return true;
    });
    const listed = await client.listPendingInterrupts();
    const row = listed.pending_interrupts.find((p) => p.execution_id === 'run-k1');
    assert.equal(row.decision.decided_by, 'node-bot');
    const open = await client.listDecisions({ openOnly: true });
    assert.ok(open.decided.some((p) => p.execution_id === 'run-k1'));
    await rejectsWith(client.submitDecision('run-k1', { approved: true, decidedBy: '' }), 'INVALID_ARGUMENT', 'INVALID_FIELD');
  });

  test('K2 leaseDecision / reportResume: one holder at a time, renewals, a final report by the holder only', async () => {
    const recorded = await client.recordInterrupt(...pause('run-k2', 'manager_approval', { amount: 7 }));
    const checkpointId = recorded.checkpoint.checkpoint_id;
    await rejectsWith(client.leaseDecision('run-k2', checkpointId, { leaseToken: 'w1' }), 'NOT_FOUND', 'NO_DECISION');
    await client.submitDecision('run-k2', { approved: true, decidedBy: 'node-bot' });
    const leased = await client.leaseDecision('run-k2', checkpointId, { leaseToken: 'w1', leaseSeconds: 30 });
    assert.equal(leased.decision.status, 'DECISION_STATUS_RESUMING');
    assert.equal(leased.decision.attempts, 1);
    const renewed = await client.leaseDecision('run-k2', checkpointId, { leaseToken: 'w1', leaseSeconds: 30 });
    assert.equal(renewed.decision.attempts, 1);
    await assert.rejects(client.leaseDecision('run-k2', checkpointId, { leaseToken: 'w2' }), (err) => {
      assert.equal(err.reason, 'LEASE_HELD');
      assert.ok(err.metadata.lease_expires_at);
      return true;
    });
    await rejectsWith(client.reportResume('run-k2', checkpointId, { leaseToken: 'w2' }), 'FAILED_PRECONDITION', 'LEASE_LOST');
    const reported = await client.reportResume('run-k2', checkpointId, { leaseToken: 'w1' });
    assert.equal(reported.decision.status, 'DECISION_STATUS_RESUMED');
    assert.deepEqual(await client.reportResume('run-k2', checkpointId, { leaseToken: 'w1' }), reported);
    await rejectsWith(client.reportResume('run-k2', checkpointId, { leaseToken: 'w1', error: 'boom' }), 'FAILED_PRECONDITION', 'DECISION_CLOSED');
    await rejectsWith(client.leaseDecision('run-k2', checkpointId, { leaseToken: 'w3' }), 'FAILED_PRECONDITION', 'DECISION_CLOSED');
    await assert.rejects(client.leaseDecision('run-k2', checkpointId, {}), TypeError);
  });

  test('I5 watch: snapshot, marker, live events; a reconnect from a cursor replays exactly the rest', { timeout: 60_000 }, async () => {
    const ns = `${NAMESPACE}-watch`;
    const watcher = new CheckpointdClient({ target: TARGET, namespace: ns });
    try {
      await watcher.recordInterrupt(...pause('run-old', 'review', { n: 1 }));
      const stream = watcher.watchInterrupts();
      const it = stream[Symbol.asyncIterator]();
      const snap = await next(it);
      assert.equal(snap.item, 'snapshot');
      assert.equal(snap.snapshot.execution_id, 'run-old');
      const done = await next(it);
      assert.equal(done.item, 'snapshot_complete');
      const snapshotCursor = BigInt(done.snapshot_complete.cursor);

      const context = { amount: 12345678901234567890123n, note: 'über ✓' };
      await watcher.recordInterrupt(...pause('run-new', 'review', context));
      await watcher.claimInterrupt('run-new');
      await watcher.deleteExecution('run-old');
      const live = [];
      while (live.length < 3) {
        const message = await next(it);
        if (message.item === 'event') live.push(message.event);
        else assert.equal(message.item, 'progress');
      }
      stream.cancel();
      const summary = (events) => events.map((e) => [e.type, e.pending.execution_id]);
      assert.deepEqual(summary(live), [
        ['INTERRUPT_EVENT_TYPE_ADDED', 'run-new'],
        ['INTERRUPT_EVENT_TYPE_CLAIMED', 'run-new'],
        ['INTERRUPT_EVENT_TYPE_REMOVED', 'run-old'],
      ]);
      assert.deepEqual(json.parse(live[0].pending.context_json), context);
      const cursors = live.map((e) => BigInt(e.cursor));
      assert.ok(snapshotCursor < cursors[0] && cursors[0] < cursors[1] && cursors[1] < cursors[2]);

      // Reconnect after the first event: no snapshot, the two later events, once, in order.
      const resumed = watcher.watchInterrupts({ afterCursor: live[0].cursor });
      const rit = resumed[Symbol.asyncIterator]();
      const replay = [];
      while (replay.length < 2) {
        const message = await next(rit);
        assert.notEqual(message.item, 'snapshot');
        if (message.item === 'event') replay.push(message.event);
      }
      resumed.cancel();
      assert.deepEqual(replay, live.slice(1));

      // A filtered watch sees only its reason; a negative cursor is INVALID_ARGUMENT.
      const filtered = watcher.watchInterrupts({ afterCursor: String(snapshotCursor), reason: 'nobody-uses-this' });
      const fit = filtered[Symbol.asyncIterator]();
      await watcher.recordInterrupt(...pause('run-late', 'review'));
      const first = await next(fit);
      filtered.cancel();
      assert.equal(first.item, 'progress');
      const badStream = watcher.watchInterrupts({ afterCursor: '-1' });
      await rejectsWith(badStream[Symbol.asyncIterator]().next(), 'INVALID_ARGUMENT', 'INVALID_FIELD');
    } finally {
      watcher.close();
    }
  });

  test('I5 watch() from a cursor above the store\'s newest event starts again from a flagged snapshot', { timeout: 60_000 }, async () => {
    // The store went back in time under the watcher (a failover that lost commits, a restore).
    const ns = `${NAMESPACE}-behind`;
    const watcher = new CheckpointdClient({ target: TARGET, namespace: ns });
    const abort = new AbortController();
    try {
      await watcher.recordInterrupt(...pause('run-b', 'review'));
      const raw = watcher.watchInterrupts({ afterCursor: '999999999999' });
      await rejectsWith(raw[Symbol.asyncIterator]().next(), 'OUT_OF_RANGE', 'CURSOR_EXPIRED');
      const seen = [];
      for await (const message of watcher.watch({ afterCursor: '999999999999', signal: abort.signal })) {
        seen.push(message.item === 'snapshot' ? `snapshot:${message.snapshot.execution_id}` : message.item);
        if (message.item === 'snapshot_complete') abort.abort();
      }
      assert.deepEqual(seen, ['resync', 'snapshot:run-b', 'snapshot_complete']);
    } finally {
      watcher.close();
    }
  });

  test('I5 a cursor resumed with another event_time than its event\'s is CURSOR_EXPIRED', { timeout: 60_000 }, async () => {
    // The store went back in time and wrote past the cursor again: the number names another event.
    const ns = `${NAMESPACE}-rewritten`;
    const watcher = new CheckpointdClient({ target: TARGET, namespace: ns });
    try {
      await watcher.recordInterrupt(...pause('run-r', 'review'));
      let marker = null;
      const first = watcher.watchInterrupts();
      for await (const message of first) {
        if (message.item === 'snapshot_complete') {
          marker = message.snapshot_complete;
          first.cancel();
        }
      }
      assert.ok(marker.event_time, 'snapshot_complete carries the time of its cursor\'s event');
      const same = watcher.watchInterrupts({ afterCursor: marker.cursor, afterCursorEventTime: marker.event_time, progressIntervalMs: 1_000 });
      const next = await same[Symbol.asyncIterator]().next();
      assert.equal(next.value.item, 'progress');
      same.cancel();
      const other = { seconds: String(BigInt(marker.event_time.seconds) - 1n), nanos: marker.event_time.nanos };
      const raw = watcher.watchInterrupts({ afterCursor: marker.cursor, afterCursorEventTime: other });
      await rejectsWith(raw[Symbol.asyncIterator]().next(), 'OUT_OF_RANGE', 'CURSOR_EXPIRED');
    } finally {
      watcher.close();
    }
  });

  test('I5 watch() iterates through the contract and stops on abort', { timeout: 60_000 }, async () => {
    const ns = `${NAMESPACE}-watch2`;
    const watcher = new CheckpointdClient({ target: TARGET, namespace: ns });
    const abort = new AbortController();
    try {
      const seen = [];
      const iterating = (async () => {
        for await (const message of watcher.watch({ signal: abort.signal })) {
          seen.push(message.item);
          if (message.item === 'snapshot_complete') {
            await watcher.recordInterrupt(...pause('run-w', 'review'));
          }
          if (message.item === 'event') abort.abort();
        }
      })();
      await iterating;
      assert.deepEqual(seen, ['snapshot_complete', 'event']);
    } finally {
      watcher.close();
    }
  });
});
