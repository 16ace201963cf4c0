// The ES module entry of checkpointd-client: the CommonJS module's exports, by name. It is the
// same module instance as require('checkpointd-client'), so one CheckpointdError class serves
// both (test/esm.test.mjs checks that every export is here).
import client from './index.js';

export const {
  CheckpointdClient,
  CheckpointdError,
  DEFAULT_TARGET,
  ErrorReason,
  PROTO_ROOT,
  TOKEN_ENV_VAR,
  dateFromTimestamp,
  json,
  loadProtocol,
  newId,
  timestampFromDate,
} = client;
