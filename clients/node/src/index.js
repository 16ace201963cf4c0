'use strict';
/**
 * A small Node.js client for checkpointd, loading at run time the copy of the protocol its
 * package carries (../proto, kept equal to the repository's proto/ by tools/gen_proto.py).
 *
 * Choices (see README.md beside this folder):
 * - Field names are kept as written in the .proto files (keepCase): `execution_id`,
 *   `state_snapshot_json`, so code reads like docs/protocol.md.
 * - int64 fields (`sequence`, `node_index`, cursors, counts) are decimal strings, so a cursor
 *   above 2^53 is exact. Enums are their names ("CHECKPOINT_STATUS_COMPLETED").
 * - JSON fields stay text; ./json.js parses and writes them without losing big integers.
 * - Every call has a deadline (timeoutMs, default 10 s) and is retried on UNAVAILABLE with
 *   backoff inside it, carrying the same request id (and checkpoint id / claim token), which
 *   the server answers like the first call. Failures are CheckpointdError with `reason`, one
 *   of ErrorReason (read from ../proto/checkpointd/v1/error_reason.proto) for checkpointd's own.
 * - A token (option `token`, else $CHECKPOINTD_TOKEN) is sent as `authorization: Bearer <token>`
 *   on every call and every watch stream; it is kept in a private field, out of util.inspect,
 *   logs and error messages.
 */

const crypto = require('node:crypto');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const json = require('./json');
const { loadErrorReasons } = require('./reasons');
const { CheckpointdError, fromServiceError } = require('./status');

const DEFAULT_TARGET = '127.0.0.1:7470';
/** The progress interval watch() asks for unless told otherwise (the server's default too). */
const DEFAULT_PROGRESS_INTERVAL_MS = 10_000;
/** watch() takes a stream silent for this many progress intervals for dead (P6). */
const SILENCE_FACTOR = 3;
/** The environment variable the token is read from when the `token` option is absent. */
const TOKEN_ENV_VAR = 'CHECKPOINTD_TOKEN';
/**
 * The protocol this package carries: proto/checkpointd/v1 is a copy of the repository's
 * proto/ (tools/gen_proto.py writes it), proto/google/rpc/status.proto the client's subset.
 */
const PROTO_ROOT = path.resolve(__dirname, '..', 'proto');
const PROTO_FILES = [
  'checkpointd/v1/checkpoint_service.proto',
  'checkpointd/v1/interrupt_service.proto',
  'checkpointd/v1/idempotency_service.proto',
  'checkpointd/v1/graph_service.proto',
];
/** ListExecutions' status filter by its short name (the enum's names are accepted too). */
const EXECUTION_STATUSES = {
  running: 'EXECUTION_STATUS_RUNNING',
  paused: 'EXECUTION_STATUS_PAUSED',
  ended: 'EXECUTION_STATUS_ENDED',
  failed: 'EXECUTION_STATUS_FAILED',
};
/** checkpointd's ErrorInfo reasons by wire string: `ErrorReason.LEASE_HELD === 'LEASE_HELD'`. */
const ErrorReason = loadErrorReasons(PROTO_ROOT);
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

let cachedPackage = null;

/** The checkpointd.v1 package (service constructors and message types), loaded once. */
function loadProtocol() {
  if (cachedPackage === null) {
    const definition = protoLoader.loadSync(PROTO_FILES, LOADER_OPTIONS);
    cachedPackage = grpc.loadPackageDefinition(definition).checkpointd.v1;
  }
  return cachedPackage;
}

/** A fresh UUID4, used for request ids, checkpoint ids and claim tokens. */
function newId() {
  return crypto.randomUUID();
}

/** A google.protobuf.Timestamp for a Date (millisecond precision). */
function timestampFromDate(date) {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: (ms - seconds * 1000) * 1e6 };
}

/** A google.protobuf.Duration for a number of milliseconds. */
function durationFromMs(ms) {
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** A Date for a google.protobuf.Timestamp (microseconds and finer are dropped). */
function dateFromTimestamp(ts) {
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
}

/**
 * The metadata that carries `token` (else $CHECKPOINTD_TOKEN; an empty variable counts as
 * unset); null without one. A token that cannot travel in a header is refused with a message
 * that does not repeat it.
 */
function authMetadata(token) {
  const given = token ?? (process.env[TOKEN_ENV_VAR] || null);
  if (given === null) return null;
  if (typeof given !== 'string') throw new TypeError(`token must be a string, got ${typeof given}`);
  const text = given.trim();
  if (!/^[\x21-\x7e]+$/.test(text)) {
    throw new TypeError('the token must be non-empty printable ASCII without spaces');
  }
  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${text}`);
  return metadata;
}

/** The Framework names for the framework option of listExecutions and getExecution. */
const FRAMEWORKS = { fastaiagent: 'FRAMEWORK_FASTAIAGENT', langgraph: 'FRAMEWORK_LANGGRAPH' };

/** The Framework name for a framework option (undefined: both kinds of run). */
function framework(value) {
  if (value === undefined || value === null) return 'FRAMEWORK_UNSPECIFIED';
  const name = FRAMEWORKS[value] ?? value;
  if (!Object.values(FRAMEWORKS).includes(name)) {
    throw new TypeError(`framework must be one of ${Object.keys(FRAMEWORKS).join(', ')}, got ${String(value)}`);
  }
  return name;
}

/** The ExecutionStatus name for listExecutions' status option (undefined: any). */
function executionStatus(status) {
  if (status === undefined || status === null) return 'EXECUTION_STATUS_UNSPECIFIED';
  const name = EXECUTION_STATUSES[status] ?? status;
  if (!Object.values(EXECUTION_STATUSES).includes(name)) {
    throw new TypeError(`status must be one of ${Object.keys(EXECUTION_STATUSES).join(', ')}, got ${String(status)}`);
  }
  return name;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The proto names of a typed answer's action types (contract K3). */
const ACTION_TYPES = {
  approve: 'ACTION_DECISION_TYPE_APPROVE',
  edit: 'ACTION_DECISION_TYPE_EDIT',
  reject: 'ACTION_DECISION_TYPE_REJECT',
  respond: 'ACTION_DECISION_TYPE_RESPOND',
};

/**
 * A decision's typed answer (K3) as the wire carries it: `{ actions: [{ type, args, message }] }`
 * for a HumanInTheLoopMiddleware pause, or `{ resume: value }` for any other graph pause.
 */
function responseToWire(response) {
  if (response === null || typeof response !== 'object') throw new TypeError('response must be an object');
  if ('resume' in response) {
    return { actions: [], resume_json: json.stringify(response.resume) };
  }
  if (!Array.isArray(response.actions)) throw new TypeError('response needs actions (an array) or resume');
  return {
    actions: response.actions.map((action, index) => {
      const type = ACTION_TYPES[action?.type];
      if (!type) throw new TypeError(`response.actions[${index}].type must be one of ${Object.keys(ACTION_TYPES).join(', ')}`);
      return {
        type,
        edited_args_json: action.args === undefined ? '' : json.stringify(action.args),
        message: action.message ?? '',
      };
    }),
    resume_json: '',
  };
}

/** A checkpointd client over one gRPC channel. */
class CheckpointdClient {
  /** The authorization metadata, or null: private, so util.inspect and logs never show it. */
  #auth;

  /**
   * @param {object} [options]
   * @param {string} [options.target] gRPC target ("127.0.0.1:7470", "unix:///run/cpd.sock");
   *   default $CHECKPOINTD_TARGET, then 127.0.0.1:7470.
   * @param {string} [options.namespace] sent with every request; default "default".
   * @param {string} [options.token] sent as `authorization: Bearer <token>` on every call and
   *   watch stream; default $CHECKPOINTD_TOKEN, then none.
   * @param {number} [options.timeoutMs] default deadline of a call, retries included.
   * @param {object} [options.retry] { maxAttempts: 5, initialBackoffMs: 50, maxBackoffMs: 2000,
   *   multiplier: 2 }: how UNAVAILABLE is retried within the deadline.
   * @param {grpc.ChannelCredentials} [options.credentials] default insecure.
   * @param {object} [options.channelOptions] grpc-js channel options.
   */
  constructor(options = {}) {
    this.target = options.target || process.env.CHECKPOINTD_TARGET || DEFAULT_TARGET;
    this.namespace = options.namespace ?? 'default';
    this.#auth = authMetadata(options.token);
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retry = { maxAttempts: 5, initialBackoffMs: 50, maxBackoffMs: 2_000, multiplier: 2, ...options.retry };
    const pkg = loadProtocol();
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    const channelOptions = {
      // Replies carry rows up to the server's --max-message-bytes (16 MiB by default), above
      // grpc-js's default 4 MiB receive limit; the server bounds what it sends itself.
      'grpc.max_receive_message_length': -1,
      // Leave a connection that has gone silent (a dead server, or a path that still takes
      // our bytes but brings back nothing) within 15 s: a ping every 10 s, closed when one is
      // not answered within 5 s, so the next call opens a new connection (docs/protocol.md).
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      ...options.channelOptions,
    };
    this.checkpoints = new pkg.CheckpointService(this.target, credentials, channelOptions);
    const channelOverride = this.checkpoints.getChannel();
    const shared = { ...channelOptions, channelOverride };
    this.interrupts = new pkg.InterruptService(this.target, credentials, shared);
    this.idempotency = new pkg.IdempotencyService(this.target, credentials, shared);
    this.graph = new pkg.GraphService(this.target, credentials, shared);
  }

  /** Fresh metadata for one call (grpc-js may add to what it is given). */
  #metadata() {
    return this.#auth === null ? new grpc.Metadata() : this.#auth.clone();
  }

  /** Close the channel; calls in flight are cancelled. */
  close() {
    this.checkpoints.close();
  }

  /**
   * Send one unary request, retrying UNAVAILABLE within the call's deadline.
   * The request (and so its request id) is the same on every attempt.
   */
  async call(stub, method, request, { timeoutMs } = {}) {
    const deadline = Date.now() + (timeoutMs ?? this.timeoutMs);
    let backoff = this.retry.initialBackoffMs;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await new Promise((resolve, reject) => {
          stub[method](request, this.#metadata(), { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
        });
      } catch (err) {
        const error = fromServiceError(err);
        const delay = Math.min(backoff * (0.5 + Math.random() / 2), deadline - Date.now());
        const retriable = error instanceof CheckpointdError && error.code === grpc.status.UNAVAILABLE;
        if (!retriable || attempt >= this.retry.maxAttempts || delay <= 0) {
          throw error;
        }
        await sleep(delay);
        backoff = Math.min(backoff * this.retry.multiplier, this.retry.maxBackoffMs);
      }
    }
  }

  // --- checkpoints ------------------------------------------------------------------------

  /**
   * Store a checkpoint; returns the stored row. An empty checkpoint_id is filled with a
   * UUID here, before the first attempt, so that a retry writes the same row.
   */
  async putCheckpoint(checkpoint, { requestId = newId(), timeoutMs } = {}) {
    const row = { ...checkpoint, checkpoint_id: checkpoint.checkpoint_id || newId() };
    const request = { namespace: this.namespace, request_id: requestId, checkpoint: row };
    return (await this.call(this.checkpoints, 'PutCheckpoint', request, { timeoutMs })).checkpoint;
  }

  /** Return one checkpoint by id; NOT_FOUND (CHECKPOINT_NOT_FOUND) when missing. */
  async getCheckpoint(executionId, checkpointId, { timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId, checkpoint_id: checkpointId };
    return (await this.call(this.checkpoints, 'GetCheckpoint', request, { timeoutMs })).checkpoint;
  }

  /** Return the newest checkpoint (by sequence); NOT_FOUND (NO_CHECKPOINTS) when none. */
  async getLatestCheckpoint(executionId, { timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId };
    return (await this.call(this.checkpoints, 'GetLatestCheckpoint', request, { timeoutMs })).checkpoint;
  }

  /** Return one page of history: { checkpoints, next_page_token }. */
  async listCheckpoints(executionId, { pageSize = 0, pageToken = '', descending = false, timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      execution_id: executionId,
      page_size: pageSize,
      page_token: pageToken,
      descending,
    };
    return this.call(this.checkpoints, 'ListCheckpoints', request, { timeoutMs });
  }

  /** Iterate over the whole history of an execution, page after page. */
  async *iterCheckpoints(executionId, { pageSize = 0, descending = false, timeoutMs } = {}) {
    let pageToken = '';
    do {
      const page = await this.listCheckpoints(executionId, { pageSize, pageToken, descending, timeoutMs });
      yield* page.checkpoints;
      pageToken = page.next_page_token;
    } while (pageToken);
  }

  /** Delete an execution's checkpoints, pending interrupt and idempotency results. */
  async deleteExecution(executionId, { requestId = newId(), timeoutMs } = {}) {
    const request = { namespace: this.namespace, request_id: requestId, execution_id: executionId };
    return this.call(this.checkpoints, 'DeleteExecution', request, { timeoutMs });
  }

  /** Prune completed and failed rows older than olderThanSeconds; returns the counts. */
  async pruneCheckpoints(olderThanSeconds, { requestId = newId(), timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      older_than: { seconds: String(Math.floor(olderThanSeconds)), nanos: 0 },
    };
    return this.call(this.checkpoints, 'PruneCheckpoints', request, { timeoutMs });
  }

  /** Return the checkpoint a resume re-enters at (FAILED_PRECONDITION when finished). */
  async getResumePoint(executionId, { timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId };
    return (await this.call(this.checkpoints, 'GetResumePoint', request, { timeoutMs })).checkpoint;
  }

  /** Return the checkpoint a fork branches from (the newest step, or checkpointId). */
  async getForkPoint(executionId, { checkpointId = '', timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId, checkpoint_id: checkpointId };
    return (await this.call(this.checkpoints, 'GetForkPoint', request, { timeoutMs })).checkpoint;
  }

  // --- executions -------------------------------------------------------------------------

  /**
   * Return one page of a namespace's runs, newest activity first (contract C11):
   * { executions, next_page_token }, each with its `status`, `checkpoint_count` and
   * `last_activity_at`. Filters: chainName (exact), status ('running', 'paused', 'ended',
   * 'failed', or an ExecutionStatus name), activeSince (a Date: last activity at or after),
   * framework ('fastaiagent' runs or 'langgraph' threads, contract C12; both when absent).
   */
  async listExecutions({ pageSize = 0, pageToken = '', chainName, status, activeSince, framework: kind, timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      page_size: pageSize,
      page_token: pageToken,
      chain_name: chainName,
      status: executionStatus(status),
      active_since: activeSince === undefined ? null : timestampFromDate(activeSince),
      framework: framework(kind),
    };
    return this.call(this.checkpoints, 'ListExecutions', request, { timeoutMs });
  }

  /** Iterate over every run that listExecutions() would list, page after page. */
  async *iterExecutions({ pageSize = 0, chainName, status, activeSince, framework: kind, timeoutMs } = {}) {
    let pageToken = '';
    do {
      const page = await this.listExecutions({ pageSize, pageToken, chainName, status, activeSince, framework: kind, timeoutMs });
      yield* page.executions;
      pageToken = page.next_page_token;
    } while (pageToken);
  }

  /**
   * Describe one run or LangGraph thread (contracts C11, C12): { execution,
   * pending_interrupt, pending_interrupts, last_decided, idempotency_keys,
   * idempotency_key_count }; pending_interrupt (the first of pending_interrupts: a thread may
   * wait on several) and last_decided are null when there is none. NOT_FOUND when the run has
   * no checkpoint. framework picks the run or the thread when both have this id (default: the
   * run, if there is one).
   */
  async getExecution(executionId, { framework: kind, timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId, framework: framework(kind) };
    return this.call(this.checkpoints, 'GetExecution', request, { timeoutMs });
  }

  /**
   * Return one page of the names of the namespaces that hold a run, a pause or a LangGraph
   * thread, in name order (contract N2): { namespaces, next_page_token }. With tokens on, only
   * the namespaces the client's token is granted; the client's own namespace plays no part.
   */
  async listNamespaces({ pageSize = 0, pageToken = '', timeoutMs } = {}) {
    const request = { page_size: pageSize, page_token: pageToken };
    return this.call(this.checkpoints, 'ListNamespaces', request, { timeoutMs });
  }

  /** Iterate over every namespace name that listNamespaces() would list, page after page. */
  async *iterNamespaces({ pageSize = 0, timeoutMs } = {}) {
    let pageToken = '';
    do {
      const page = await this.listNamespaces({ pageSize, pageToken, timeoutMs });
      yield* page.namespaces;
      pageToken = page.next_page_token;
    } while (pageToken);
  }

  // --- interrupts -------------------------------------------------------------------------

  /**
   * Record a paused run: its interrupted checkpoint and its pending row, atomically.
   * Returns { checkpoint, pending, pending_created }.
   */
  async recordInterrupt(checkpoint, pending, { requestId = newId(), timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      checkpoint: {
        ...checkpoint,
        checkpoint_id: checkpoint.checkpoint_id || newId(),
        status: 'CHECKPOINT_STATUS_INTERRUPTED',
      },
      pending: { ...pending, execution_id: pending.execution_id || checkpoint.execution_id },
    };
    return this.call(this.interrupts, 'RecordInterrupt', request, { timeoutMs });
  }

  /**
   * Claim an execution's pending interrupt; exactly one caller wins. Losers get a
   * CheckpointdError with code NOT_FOUND and reason NO_PENDING_INTERRUPT. Pass the same
   * claimToken to retry a claim whose reply was lost.
   */
  async claimInterrupt(executionId, { claimToken = newId(), requestId = newId(), timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      execution_id: executionId,
      claim_token: claimToken,
    };
    return (await this.call(this.interrupts, 'ClaimInterrupt', request, { timeoutMs })).pending;
  }

  /**
   * Decide an execution's pending interrupt (contract K1): approve or reject it, with
   * `metadata` (an object, or JSON text) handed to the run as fastaiagent's Resume.metadata.
   * A Python resume worker carries the decision out. Returns the pending interrupt with its
   * `decision`. A pause takes one decision: a later one rejects with FAILED_PRECONDITION,
   * reason ALREADY_DECIDED, whose metadata (decided_by, approved, decided_at) names the
   * winner; a retry with the same requestId after a lost reply gets the first answer.
   * `interruptId` names one pause of a graph thread (a pending interrupt's `interrupt_id`,
   * e.g. a LangGraph interrupt); without it the run's one fastaiagent pause is decided.
   */
  async submitDecision(executionId, { approved, decidedBy, metadata = {}, reason, interruptId = '', response, requestId = newId(), timeoutMs } = {}) {
    const wire = response === undefined ? undefined : responseToWire(response);
    if (approved === undefined && wire?.actions.length) {
      // A typed answer carries its verdict: not approved exactly when an action is rejected.
      approved = !response.actions.some((action) => action.type === 'reject');
    }
    if (typeof approved !== 'boolean') throw new TypeError('submitDecision needs approved: true or false');
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      execution_id: executionId,
      approved,
      metadata_json: typeof metadata === 'string' ? metadata : json.stringify(metadata),
      decided_by: decidedBy,
      reason,
      interrupt_id: interruptId,
      response: wire,
    };
    return (await this.call(this.interrupts, 'SubmitDecision', request, { timeoutMs })).pending;
  }

  /**
   * Return one page of decided pauses, oldest first, each a pending interrupt with its
   * `decision`: { decided, next_page_token }. With openOnly, those no worker reported on yet.
   */
  async listDecisions({ openOnly = false, pageSize = 0, pageToken = '', timeoutMs } = {}) {
    const request = { namespace: this.namespace, page_size: pageSize, page_token: pageToken, open_only: openOnly };
    return this.call(this.interrupts, 'ListDecisions', request, { timeoutMs });
  }

  /**
   * Take, or renew, the lease on the decision of a pause, to carry it out (contract K2).
   * Name the pause as the "decided" event does (executionId, checkpointId, interruptId for a
   * graph's). The same leaseToken renews; another one while the lease runs is
   * FAILED_PRECONDITION (LEASE_HELD, metadata lease_expires_at); a reported decision is
   * FAILED_PRECONDITION (DECISION_CLOSED); no decision is NOT_FOUND (NO_DECISION). Returns the
   * pending interrupt with its decision (status DECISION_STATUS_RESUMING, attempts).
   */
  async leaseDecision(executionId, checkpointId, { leaseToken, leaseSeconds = 0, interruptId = '', requestId = newId(), timeoutMs } = {}) {
    if (!leaseToken) throw new TypeError('leaseDecision needs a leaseToken');
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      execution_id: executionId,
      checkpoint_id: checkpointId,
      lease_token: leaseToken,
      lease_seconds: leaseSeconds,
      interrupt_id: interruptId,
    };
    return (await this.call(this.interrupts, 'LeaseDecision', request, { timeoutMs })).pending;
  }

  /**
   * Report a leased decision carried out (no `error`: RESUMED) or failed (`error`, the text:
   * RESUME_FAILED) (contract K2). Only the current lease holder may report (LEASE_LOST
   * otherwise); a report is final, a retry of it gets the stored decision again.
   */
  async reportResume(executionId, checkpointId, { leaseToken, error = null, interruptId = '', requestId = newId(), timeoutMs } = {}) {
    if (!leaseToken) throw new TypeError('reportResume needs a leaseToken');
    const failed = error !== null && error !== undefined;
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      execution_id: executionId,
      checkpoint_id: checkpointId,
      lease_token: leaseToken,
      outcome: failed ? 'RESUME_OUTCOME_RESUME_FAILED' : 'RESUME_OUTCOME_RESUMED',
      error: failed ? String(error) : '',
      interrupt_id: interruptId,
    };
    return (await this.call(this.interrupts, 'ReportResume', request, { timeoutMs })).pending;
  }

  /** Return one page of pending interrupts, newest first: { pending_interrupts, next_page_token }. */
  async listPendingInterrupts({ pageSize = 0, pageToken = '', chainName, reason, agentPathPrefix, timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      page_size: pageSize,
      page_token: pageToken,
      chain_name: chainName,
      reason,
      agent_path_prefix: agentPathPrefix,
    };
    return this.call(this.interrupts, 'ListPendingInterrupts', request, { timeoutMs });
  }

  /**
   * Open a WatchInterrupts stream. Returns an async iterable of responses, each with
   * `item` naming the one field set ("snapshot", "snapshot_complete", "event", "progress"),
   * and cancel() to end it. Iteration throws a CheckpointdError when the stream ends with an
   * error status and ends quietly after cancel(). It does not reconnect: see watch().
   */
  watchInterrupts({
    afterCursor = '0',
    afterCursorEventTime = null,
    chainName,
    reason,
    agentPathPrefix,
    progressIntervalMs = 0,
  } = {}) {
    const request = {
      namespace: this.namespace,
      after_cursor: String(afterCursor),
      // The event_time given with the cursor: the server checks its event there is the same
      // one, so a store that went back in time and reused the cursor is told (I5).
      after_cursor_event_time: afterCursorEventTime,
      chain_name: chainName,
      reason,
      agent_path_prefix: agentPathPrefix,
    };
    // The longest silence before the server sends progress (I6); 0: the server's default.
    if (progressIntervalMs) request.progress_interval = durationFromMs(progressIntervalMs);
    const call = this.interrupts.WatchInterrupts(request, this.#metadata());
    // Errors reach the iterator; this listener only keeps an un-iterated, cancelled stream
    // from raising an unhandled 'error' event.
    call.on('error', () => {});
    let cancelled = false;
    async function* messages() {
      try {
        for await (const message of call) yield message;
      } catch (err) {
        if (cancelled && err.code === grpc.status.CANCELLED) return;
        throw fromServiceError(err);
      } finally {
        cancelled = true;
        call.cancel();
      }
    }
    const iterator = messages();
    return {
      [Symbol.asyncIterator]: () => iterator,
      cancel() {
        cancelled = true;
        call.cancel();
      },
    };
  }

  /**
   * Watch pending interrupts for as long as the caller iterates, reconnecting by itself.
   *
   * It keeps the cursor (and its event_time) of the last snapshot_complete, event or progress
   * it yielded and reconnects with it after UNAVAILABLE, RESOURCE_EXHAUSTED, CANCELLED (by the
   * server or a proxy) or a stream that ended without a status, so nothing is lost or
   * repeated; after OUT_OF_RANGE (CURSOR_EXPIRED) it starts over with a fresh snapshot
   * (yielded again, after a { item: "resync" } marker). Other errors are thrown. Pass
   * `signal` (an AbortSignal) to stop.
   *
   * It asks for progress every `progressIntervalMs` (I6, default 10 s, 1 s to 300 s) and takes
   * a stream that sent nothing for 3 times that for dead (black-holed on its way, although its
   * connection may still answer pings): it cancels it and reconnects from its cursor (P6).
   * The time the caller spends on a yielded message does not count as silence.
   */
  async *watch({
    afterCursor = '0',
    signal,
    backoffMs = 100,
    maxBackoffMs = 5_000,
    progressIntervalMs = DEFAULT_PROGRESS_INTERVAL_MS,
    ...filters
  } = {}) {
    if (!(progressIntervalMs >= 1_000 && progressIntervalMs <= 300_000)) {
      throw new RangeError(`progressIntervalMs must be 1000 to 300000, got ${progressIntervalMs}`);
    }
    const silenceMs = SILENCE_FACTOR * progressIntervalMs;
    let cursor = String(afterCursor);
    let cursorTime = null;
    let backoff = backoffMs;
    while (!signal?.aborted) {
      const stream = this.watchInterrupts({
        ...filters,
        afterCursor: cursor,
        afterCursorEventTime: cursorTime,
        progressIntervalMs,
      });
      const onAbort = () => stream.cancel();
      signal?.addEventListener('abort', onAbort);
      let silence = null;
      const listen = () => {
        clearTimeout(silence);
        // Cancelled, the stream ends quietly and is reconnected below, like one that ended.
        silence = setTimeout(() => stream.cancel(), silenceMs);
      };
      try {
        listen();
        for await (const message of stream) {
          clearTimeout(silence);
          backoff = backoffMs;
          const item = message[message.item];
          if (message.item !== 'snapshot') {
            cursor = item.cursor;
            cursorTime = item.event_time ?? null;
          }
          yield message;
          listen();
        }
      } catch (err) {
        if (err.code === grpc.status.OUT_OF_RANGE) {
          cursor = '0';
          cursorTime = null;
          yield { item: 'resync' };
          continue;
        }
        // CANCELLED here is the server's or a proxy's (a stream this watch cancelled ends
        // quietly): a server stopping may cancel what it could not end in time. Retried, as
        // the Python watch does.
        const retried = [grpc.status.UNAVAILABLE, grpc.status.RESOURCE_EXHAUSTED, grpc.status.CANCELLED];
        if (!retried.includes(err.code)) throw err;
      } finally {
        clearTimeout(silence);
        signal?.removeEventListener('abort', onAbort);
      }
      if (signal?.aborted) return;
      await sleep(backoff * (0.5 + Math.random() / 2));
      backoff = Math.min(backoff * 2, maxBackoffMs);
    }
  }

  // --- graphs -----------------------------------------------------------------------------

  /**
   * Apply graph retention rules once in this namespace (contracts G12, G13): delete whole the
   * LangGraph threads idle (by the server's clock) longer than idleForSeconds, and keep only
   * the keepNewest newest checkpoints of each checkpoint_ns of a thread; a thread paused on
   * an interrupt is kept whole. At least one rule is required (INVALID_ARGUMENT, reason
   * INVALID_FIELD, otherwise). With dryRun nothing changes. Returns the counts (decimal
   * strings): { threads_deleted, checkpoints_deleted, writes_deleted, channel_values_deleted,
   * paused_threads_kept, delta_threads_kept }.
   */
  async applyGraphRetention({ idleForSeconds, keepNewest = 0, dryRun = false, requestId = newId(), timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      idle_for: idleForSeconds === undefined ? null : durationFromMs(idleForSeconds * 1000),
      keep_newest: keepNewest,
      dry_run: dryRun,
    };
    return this.call(this.graph, 'ApplyGraphRetention', request, { timeoutMs });
  }

  // --- idempotency ------------------------------------------------------------------------

  /** Cache resultJson (JSON text, "null" included) for (executionId, key). */
  async putIdempotencyResult(executionId, key, resultJson, { requestId = newId(), timeoutMs } = {}) {
    const request = {
      namespace: this.namespace,
      request_id: requestId,
      execution_id: executionId,
      key,
      result_json: resultJson,
    };
    await this.call(this.idempotency, 'PutIdempotencyResult', request, { timeoutMs });
  }

  /** Return { found, result_json } for (executionId, key). */
  async getIdempotencyResult(executionId, key, { timeoutMs } = {}) {
    const request = { namespace: this.namespace, execution_id: executionId, key };
    return this.call(this.idempotency, 'GetIdempotencyResult', request, { timeoutMs });
  }
}

module.exports = {
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
};
