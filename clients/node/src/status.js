'use strict';
/**
 * checkpointd's error model for Node.js: every failed call becomes a CheckpointdError with
 * the gRPC status and the google.rpc.ErrorInfo the server put in the grpc-status-details-bin
 * trailer (its `reason` is what a program switches on; see docs/protocol.md).
 */

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protobuf = require('protobufjs');

const ERROR_INFO_TYPE_URL = 'type.googleapis.com/google.rpc.ErrorInfo';
const DETAILS_TRAILER = 'grpc-status-details-bin';

const root = new protobuf.Root();
root.resolvePath = (origin, target) => {
  // google/protobuf/*.proto come with protobufjs; ours live in ../proto.
  if (target.startsWith('google/protobuf/')) return protobuf.Root.prototype.resolvePath(origin, target);
  return path.join(__dirname, '..', 'proto', target);
};
root.loadSync('google/rpc/status.proto', { keepCase: true });
const StatusType = root.lookupType('google.rpc.Status');
const ErrorInfoType = root.lookupType('google.rpc.ErrorInfo');

const CODE_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));

/** A failed checkpointd call: gRPC status, ErrorInfo reason, domain and metadata. */
class CheckpointdError extends Error {
  constructor(code, message, { reason = '', domain = '', metadata = {}, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'CheckpointdError';
    /** The numeric gRPC status code (grpc.status.NOT_FOUND is 5). */
    this.code = code;
    /** The status code's name ("NOT_FOUND"). */
    this.codeName = CODE_NAMES[code] ?? `CODE_${code}`;
    /** The ErrorInfo reason ("NO_PENDING_INTERRUPT"); empty when the server sent none. */
    this.reason = reason;
    /** The ErrorInfo domain; "checkpointd.v1" for errors from checkpointd. */
    this.domain = domain;
    /** The ErrorInfo metadata, e.g. { field, rule } for INVALID_FIELD. */
    this.metadata = metadata;
  }
}

/** Decode the ErrorInfo in a grpc-status-details-bin value; null when there is none. */
function decodeErrorInfo(detailsBin) {
  const status = StatusType.decode(detailsBin);
  for (const detail of status.details) {
    if (detail.type_url === ERROR_INFO_TYPE_URL) {
      const info = ErrorInfoType.toObject(ErrorInfoType.decode(detail.value), { defaults: true });
      return { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
    }
  }
  return null;
}

/** Turn a grpc-js ServiceError into a CheckpointdError (anything else is returned as is). */
function fromServiceError(err) {
  if (err instanceof CheckpointdError || typeof err?.code !== 'number') return err;
  let info = null;
  const raw = err.metadata?.get(DETAILS_TRAILER) ?? [];
  if (raw.length > 0 && Buffer.isBuffer(raw[0])) {
    try {
      info = decodeErrorInfo(raw[0]);
    } catch {
      info = null; // A trailer that does not decode is reported as a status without a reason.
    }
  }
  return new CheckpointdError(err.code, err.details || err.message, { ...(info ?? {}), cause: err });
}

module.exports = { CheckpointdError, decodeErrorInfo, fromServiceError, ERROR_INFO_TYPE_URL };
