'use strict';
// ErrorReason comes from proto/checkpointd/v1/error_reason.proto (no server needed).

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');
const { ErrorReason, PROTO_ROOT } = require('../src');
const { loadErrorReasons } = require('../src/reasons');

const REASON_PROTO = path.join(PROTO_ROOT, 'checkpointd', 'v1', 'error_reason.proto');

test('ErrorReason holds every value of the proto enum but UNSPECIFIED, by its wire string', () => {
  // Read the value names straight from the text, independently of protobufjs.
  const names = [...fs.readFileSync(REASON_PROTO, 'utf8').matchAll(/^\s*ERROR_REASON_(\w+) = \d+;/gm)]
    .map((m) => m[1])
    .filter((name) => name !== 'UNSPECIFIED');
  assert.ok(names.length > 20, `only ${names.length} values found`);
  assert.deepEqual(Object.keys(ErrorReason), names);
  for (const name of names) assert.equal(ErrorReason[name], name);
  assert.equal(ErrorReason.NO_PENDING_INTERRUPT, 'NO_PENDING_INTERRUPT');
  assert.equal(ErrorReason.UNSPECIFIED, undefined);
  assert.ok(Object.isFrozen(ErrorReason));
});

test('a value without the ERROR_REASON_ prefix is refused with the file and the name', (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'reasons-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  fs.mkdirSync(path.join(root, 'checkpointd', 'v1'), { recursive: true });
  fs.writeFileSync(
    path.join(root, 'checkpointd', 'v1', 'error_reason.proto'),
    'syntax = "proto3";\npackage checkpointd.v1;\n'
      + 'enum ErrorReason {\n  ERROR_REASON_UNSPECIFIED = 0;\n  LEASE_HELD = 1;\n}\n',
  );
  assert.throws(() => loadErrorReasons(root), /error_reason\.proto: LEASE_HELD lacks the prefix ERROR_REASON_/);
});
