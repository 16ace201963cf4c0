'use strict';
/**
 * Writes made under a decision's lease (contract K4), as the Python client's
 * checkpointd_client.fencing does.
 *
 * A GraphResumeWorker runs the graph inside writesUnder(fence, ...): every put and putWrites
 * the saver makes in that async context carries the lease as the request's `fence`, and the
 * server refuses them (WRITE_FENCED) once another worker has taken the decision over. The
 * application passes nothing: the fence travels with the async context (AsyncLocalStorage),
 * so graphs running at once under different leases keep their own.
 */

const { AsyncLocalStorage } = require('node:async_hooks');
const { CheckpointdError, ErrorReason } = require('..');

const storage = new AsyncLocalStorage();

/**
 * The fence of a leased decision: the pause, the lease token and the lease's attempt
 * (Decision.attempts of the lease that was taken).
 */
function leaseFence(pending, leaseToken, attempts) {
  return Object.freeze({
    execution_id: String(pending.execution_id),
    checkpoint_id: String(pending.checkpoint_id),
    interrupt_id: String(pending.interrupt_id ?? ''),
    lease_token: String(leaseToken),
    attempt: Number(attempts),
  });
}

/** Run `fn` with every saver write in its async context made under `fence`. */
function writesUnder(fence, fn) {
  return storage.run(fence, fn);
}

/** The fence of the current async context, or undefined. */
function currentFence() {
  return storage.getStore();
}

/** Whether `error`, or an error it was caused by, is the server's WRITE_FENCED. */
function isWriteFenced(error) {
  for (let seen = error, depth = 0; seen && depth < 10; seen = seen.cause, depth += 1) {
    if (seen instanceof CheckpointdError && seen.reason === ErrorReason.WRITE_FENCED) return true;
  }
  return false;
}

module.exports = { currentFence, isWriteFenced, leaseFence, writesUnder };
