// The ES module entry (src/index.mjs) against the CommonJS module it wraps (no server needed).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as esm from '../src/index.mjs';

const require = createRequire(import.meta.url);
const cjs = require('../src/index.js');

test('the ES module entry exports every export of the CommonJS module, by name', () => {
  assert.deepEqual(Object.keys(esm).sort(), Object.keys(cjs).sort());
});

test('both entries are one module instance: the same classes and objects', () => {
  for (const name of Object.keys(cjs)) assert.equal(esm[name], cjs[name], name);
  const err = new esm.CheckpointdError(5, 'missing', { reason: esm.ErrorReason.NO_CHECKPOINTS });
  assert.ok(err instanceof cjs.CheckpointdError);
});
