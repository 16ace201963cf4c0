'use strict';
/**
 * checkpointd's ErrorInfo reasons, read from proto/checkpointd/v1/error_reason.proto: the list
 * the server's error table is built from, so a reason added there needs no change here.
 *
 * The wire string of `ErrorInfo.reason` is the enum value's name without the `ERROR_REASON_`
 * prefix (ERROR_REASON_NO_PENDING_INTERRUPT is sent as "NO_PENDING_INTERRUPT"); the zero value
 * ERROR_REASON_UNSPECIFIED is never sent.
 */

const path = require('node:path');
const protobuf = require('protobufjs');

const REASON_FILE = 'checkpointd/v1/error_reason.proto';
const REASON_ENUM = 'checkpointd.v1.ErrorReason';
const REASON_PREFIX = 'ERROR_REASON_';

/**
 * The reasons of the ErrorReason enum under `protoRoot`, as a frozen object whose keys and
 * values are the wire strings: `ErrorReason.NO_PENDING_INTERRUPT === 'NO_PENDING_INTERRUPT'`.
 */
function loadErrorReasons(protoRoot) {
  const file = path.join(protoRoot, REASON_FILE);
  const values = protobuf.loadSync(file).lookupEnum(REASON_ENUM).values;
  const reasons = {};
  for (const [name, number] of Object.entries(values)) {
    if (number === 0) continue;
    if (!name.startsWith(REASON_PREFIX)) {
      throw new Error(`${file}: ${name} lacks the prefix ${REASON_PREFIX}`);
    }
    const wire = name.slice(REASON_PREFIX.length);
    reasons[wire] = wire;
  }
  return Object.freeze(reasons);
}

module.exports = { loadErrorReasons, REASON_PREFIX };
