#!/usr/bin/env node
'use strict';
/**
 * An approval bot in Node.js: it approves paused orders under a limit and escalates the rest.
 * It never runs the order's code: it decides (SubmitDecision), and a Python resume worker
 * (checkpointd_client.fastaiagent.ResumeWorker, see examples/approval_bot.py) resumes the run.
 *
 *   node examples/approval_bot.js --namespace NS [--limit 1000] [--name node-bot]
 *
 * It watches the namespace (reconnecting by itself), and for every pending interrupt with no
 * decision yet whose context has an `amount`: below --limit it approves with one call, else it
 * prints an escalation. Run several copies: each pause takes one decision, and the copies that
 * lose get ALREADY_DECIDED, which the bot passes over. One JSON line per step on stdout; stops
 * on SIGTERM or Ctrl-C. The server is $CHECKPOINTD_TARGET (default 127.0.0.1:7470).
 */

const { parseArgs } = require('node:util');
const { CheckpointdClient, CheckpointdError, json } = require('../src');

function emit(step, fields = {}) {
  process.stdout.write(`${json.stringify({ step, ...fields })}\n`);
}

async function main() {
  const { values } = parseArgs({
    options: {
      namespace: { type: 'string', default: 'default' },
      limit: { type: 'string', default: '1000' },
      name: { type: 'string', default: `node-bot-${process.pid}` },
    },
  });
  const limit = Number(values.limit);
  const client = new CheckpointdClient({ namespace: values.namespace });
  const abort = new AbortController();
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => abort.abort());
  const escalated = new Set();

  async function decide(pending) {
    if (pending.decision) return; // decided already, by us or anyone
    const amount = Number(json.parse(pending.context_json || '{}').amount);
    if (!Number.isFinite(amount) || amount >= limit) {
      if (!escalated.has(pending.execution_id)) {
        escalated.add(pending.execution_id);
        emit('escalated', { execution_id: pending.execution_id, amount });
      }
      return;
    }
    try {
      await client.submitDecision(pending.execution_id, {
        approved: true,
        decidedBy: values.name,
        metadata: { by: values.name },
        reason: `amount ${amount} is under ${limit}`,
      });
      emit('approved', { execution_id: pending.execution_id, amount });
    } catch (err) {
      // Another bot (or a person) decided first, or the run went away: nothing to do.
      if (!(err instanceof CheckpointdError) || !['ALREADY_DECIDED', 'NO_PENDING_INTERRUPT'].includes(err.reason)) throw err;
    }
  }

  try {
    for await (const message of client.watch({ signal: abort.signal })) {
      if (message.item === 'snapshot') await decide(message.snapshot);
      else if (message.item === 'snapshot_complete') emit('watching', { cursor: message.snapshot_complete.cursor });
      else if (message.item === 'event' && message.event.type === 'INTERRUPT_EVENT_TYPE_ADDED') await decide(message.event.pending);
    }
  } finally {
    client.close();
  }
  emit('stopped');
}

main().catch((err) => {
  emit('error', { message: String(err.message || err), code: err.codeName, reason: err.reason });
  process.exit(1);
});
