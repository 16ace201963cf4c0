#!/usr/bin/env node
'use strict';
/**
 * Human-in-the-loop from Node.js: record a paused run, claim one, or watch a namespace and
 * claim a run as soon as it pauses. Every step prints one JSON line on stdout.
 *
 *   node examples/interrupts.js watch-and-claim --namespace NS --execution-id RUN
 *   node examples/interrupts.js record --namespace NS --execution-id RUN [--reason R] [--context-json TEXT]
 *   node examples/interrupts.js claim --namespace NS --execution-id RUN
 *
 * The server is $CHECKPOINTD_TARGET (default 127.0.0.1:7470). Exit status: 0 done, 1 the
 * call failed (the last line says how: {"step":"error","code":...,"reason":...}), 2 usage.
 */

const { parseArgs } = require('node:util');
const { CheckpointdClient, CheckpointdError, json } = require('../src');

function emit(step, fields = {}) {
  // json.stringify, so the big integers of a parsed context are written with every digit.
  process.stdout.write(`${json.stringify({ step, ...fields })}\n`);
}

/** A pending row as printed: its context parsed (big integers kept), not left as text. */
function describe(pending) {
  const { context_json: contextJson, ...rest } = pending;
  return { ...rest, context: json.parse(contextJson || '{}') };
}

/** Watch the namespace (reconnecting by itself) until `executionId` pauses; claim it. */
async function watchAndClaim(client, executionId) {
  const abort = new AbortController();
  for await (const message of client.watch({ signal: abort.signal })) {
    let pending = null;
    if (message.item === 'snapshot_complete') {
      emit('watching', { cursor: message.snapshot_complete.cursor });
    } else if (message.item === 'resync') {
      emit('resync'); // the cursor expired: a fresh snapshot follows
    } else if (message.item === 'snapshot') {
      pending = message.snapshot;
    } else if (message.item === 'event' && message.event.type === 'INTERRUPT_EVENT_TYPE_ADDED') {
      emit('seen', { cursor: message.event.cursor, execution_id: message.event.pending.execution_id });
      pending = message.event.pending;
    }
    if (pending?.execution_id === executionId) {
      abort.abort();
      emit('claimed', { pending: describe(await client.claimInterrupt(executionId)) });
      return;
    }
  }
}

async function record(client, executionId, reason, contextJson) {
  // Parse and write again: the context crosses Node's value space, big integers included.
  const context = json.stringify(json.parse(contextJson));
  const checkpoint = {
    execution_id: executionId,
    chain_name: 'node-approvals',
    node_id: 'approve',
    interrupt_reason: reason,
    interrupt_context_json: context,
  };
  const pending = { chain_name: 'node-approvals', node_id: 'approve', reason, context_json: context };
  const result = await client.recordInterrupt(checkpoint, pending);
  emit('recorded', { pending_created: result.pending_created, pending: describe(result.pending) });
}

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      namespace: { type: 'string', default: 'default' },
      'execution-id': { type: 'string' },
      reason: { type: 'string', default: 'manager_approval' },
      'context-json': { type: 'string', default: '{}' },
    },
  });
  const [command] = positionals;
  const executionId = values['execution-id'];
  if (!['watch-and-claim', 'record', 'claim'].includes(command) || !executionId || positionals.length !== 1) {
    process.stderr.write('usage: interrupts.js watch-and-claim|record|claim --execution-id RUN [--namespace NS]\n');
    return 2;
  }
  const client = new CheckpointdClient({ namespace: values.namespace });
  try {
    if (command === 'watch-and-claim') await watchAndClaim(client, executionId);
    else if (command === 'record') await record(client, executionId, values.reason, values['context-json']);
    else emit('claimed', { pending: describe(await client.claimInterrupt(executionId)) });
    return 0;
  } catch (err) {
    if (!(err instanceof CheckpointdError)) throw err;
    emit('error', { code: err.codeName, reason: err.reason, message: err.message });
    return 1;
  } finally {
    client.close();
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
