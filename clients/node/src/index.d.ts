// The types of checkpointd-client (src/index.js), written by hand; ./error_reason.d.ts is
// generated from proto/checkpointd/v1/error_reason.proto by tools/gen_proto.py.
//
// Messages are plain objects with the field names of the .proto files (keepCase): int64 fields
// are decimal strings, enums their names, timestamps { seconds, nanos }. In a reply an unset
// message field is null and an unset `optional` field is absent; the message fields the
// server always sets (a checkpoint's created_at) are typed as present.

import type * as grpc from '@grpc/grpc-js';
import type { ErrorReasons } from './error_reason';

export type { ErrorReasonName, ErrorReasons } from './error_reason';

// --- protocol values ---------------------------------------------------------------------------

/** An int64 of a reply: its decimal digits, exact beyond 2^53 ("9007199254740993"). */
export type Int64 = string;
/** An int64 of a request: decimal digits, a safe integer or a BigInt. */
export type Int64Input = string | number | bigint;

/** A google.protobuf.Timestamp of a reply. */
export interface Timestamp {
  seconds: Int64;
  nanos: number;
}

/** A google.protobuf.Timestamp of a request (timestampFromDate() makes one). */
export interface TimestampInput {
  seconds: Int64Input;
  nanos?: number;
}

export type CheckpointStatus =
  | 'CHECKPOINT_STATUS_UNSPECIFIED'
  | 'CHECKPOINT_STATUS_COMPLETED'
  | 'CHECKPOINT_STATUS_INTERRUPTED'
  | 'CHECKPOINT_STATUS_FAILED';

export type DecisionStatus =
  | 'DECISION_STATUS_UNSPECIFIED'
  | 'DECISION_STATUS_DECIDED'
  | 'DECISION_STATUS_RESUMING'
  | 'DECISION_STATUS_RESUMED'
  | 'DECISION_STATUS_RESUME_FAILED';

export type ExecutionStatus =
  | 'EXECUTION_STATUS_UNSPECIFIED'
  | 'EXECUTION_STATUS_RUNNING'
  | 'EXECUTION_STATUS_PAUSED'
  | 'EXECUTION_STATUS_ENDED'
  | 'EXECUTION_STATUS_FAILED';

/** listExecutions()' status filter: a short name, or an ExecutionStatus name. */
export type ExecutionStatusFilter =
  | 'running'
  | 'paused'
  | 'ended'
  | 'failed'
  | Exclude<ExecutionStatus, 'EXECUTION_STATUS_UNSPECIFIED'>;

export type InterruptEventType =
  | 'INTERRUPT_EVENT_TYPE_UNSPECIFIED'
  | 'INTERRUPT_EVENT_TYPE_ADDED'
  | 'INTERRUPT_EVENT_TYPE_CLAIMED'
  | 'INTERRUPT_EVENT_TYPE_REMOVED'
  | 'INTERRUPT_EVENT_TYPE_DECIDED'
  | 'INTERRUPT_EVENT_TYPE_RESUMED'
  | 'INTERRUPT_EVENT_TYPE_RESUME_FAILED';

/** A stored checkpoint (checkpointd.v1.Checkpoint), as a reply carries it. */
export interface Checkpoint {
  execution_id: string;
  checkpoint_id: string;
  parent_checkpoint_id?: string;
  chain_name: string;
  node_id: string;
  node_index: Int64;
  step_type?: string;
  status: CheckpointStatus;
  state_snapshot_json: string;
  node_input_json: string;
  node_output_json: string;
  iteration: Int64;
  iteration_counters_json: string;
  interrupt_reason?: string;
  interrupt_context_json: string;
  agent_path?: string;
  created_at: Timestamp;
  /** The store-wide insertion sequence that orders an execution's history. */
  sequence: Int64;
}

/**
 * A checkpoint to store. `checkpoint_id` may be left out: the client fills in a UUID before
 * the first attempt, so a retry writes the same row. `created_at` and `sequence` are the
 * server's to set.
 */
export interface CheckpointInput {
  execution_id: string;
  checkpoint_id?: string;
  parent_checkpoint_id?: string;
  chain_name?: string;
  node_id?: string;
  node_index?: Int64Input;
  step_type?: string;
  status: CheckpointStatus;
  state_snapshot_json?: string;
  node_input_json?: string;
  node_output_json?: string;
  iteration?: Int64Input;
  iteration_counters_json?: string;
  interrupt_reason?: string;
  interrupt_context_json?: string;
  agent_path?: string;
}

/** The checkpoint of recordInterrupt(): its status is set to CHECKPOINT_STATUS_INTERRUPTED. */
export type InterruptedCheckpointInput = Omit<CheckpointInput, 'status'> & {
  status?: CheckpointStatus;
};

/** The decision taken on a pause (checkpointd.v1.Decision). */
export interface Decision {
  approved: boolean;
  metadata_json: string;
  decided_by: string;
  reason?: string;
  decided_at: Timestamp;
  status: DecisionStatus;
  attempts: number;
  lease_expires_at: Timestamp | null;
  error: string;
  reported_at: Timestamp | null;
  /** The typed answer the pause asked for (contract K3); null for the verdict alone. */
  response: DecisionResponse | null;
}

/** A run waiting for a human (checkpointd.v1.PendingInterrupt), as a reply carries it. */
export interface PendingInterrupt {
  execution_id: string;
  chain_name: string;
  node_id: string;
  reason: string;
  context_json: string;
  agent_path?: string;
  created_at: Timestamp;
  checkpoint_id: string;
  /** null until the pause is decided. */
  decision: Decision | null;
  interrupt_id: string;
  checkpoint_ns: string;
}

/** The pending row of recordInterrupt(); `execution_id` defaults to the checkpoint's. */
export interface PendingInterruptInput {
  execution_id?: string;
  chain_name?: string;
  node_id?: string;
  reason?: string;
  context_json?: string;
  agent_path?: string;
  /** When the run paused; the interrupted checkpoint's created_at when absent. */
  created_at?: TimestampInput;
}

/** The summary of one run (checkpointd.v1.Execution). */
/** Which framework a run is of (contract C12). */
export type Framework = 'FRAMEWORK_UNSPECIFIED' | 'FRAMEWORK_FASTAIAGENT' | 'FRAMEWORK_LANGGRAPH';

/** The framework option: a short name, or a Framework name. */
export type FrameworkFilter = 'fastaiagent' | 'langgraph' | Framework;

export interface Execution {
  execution_id: string;
  chain_name: string;
  status: ExecutionStatus;
  checkpoint_count: Int64;
  last_activity_at: Timestamp;
  last_checkpoint_id: string;
  last_node_id: string;
  last_sequence: Int64;
  framework: Framework;
}

export interface InterruptEvent {
  cursor: Int64;
  type: InterruptEventType;
  pending: PendingInterrupt;
  event_time: Timestamp;
}

/** One message of a WatchInterrupts stream: `item` names the one field that is set. */
export type WatchInterruptsMessage =
  | { item: 'snapshot'; snapshot: PendingInterrupt }
  | { item: 'snapshot_complete'; snapshot_complete: { cursor: Int64; event_time: Timestamp | null } }
  | { item: 'event'; event: InterruptEvent }
  | { item: 'progress'; progress: { cursor: Int64; event_time: Timestamp | null } };

/** What watch() yields: the stream's messages, and a marker before a fresh snapshot. */
export type WatchMessage = WatchInterruptsMessage | { item: 'resync' };

// --- replies ---------------------------------------------------------------------------------

export interface ListCheckpointsResponse {
  checkpoints: Checkpoint[];
  next_page_token: string;
}

export interface DeleteExecutionResponse {
  checkpoints_deleted: Int64;
  pending_interrupt_deleted: boolean;
  idempotency_results_deleted: Int64;
}

export interface PruneCheckpointsResponse {
  checkpoints_deleted: Int64;
  idempotency_results_deleted: Int64;
}

export interface ListExecutionsResponse {
  executions: Execution[];
  next_page_token: string;
}

export interface ListNamespacesResponse {
  /** The names of this page's namespaces, in name order. */
  namespaces: string[];
  next_page_token: string;
}

export interface ListNamespacesOptions extends CallOptions {
  pageSize?: number;
  pageToken?: string;
}

export interface GetExecutionResponse {
  execution: Execution;
  pending_interrupt: PendingInterrupt | null;
  /** Every pause of the run or thread (a thread may wait on several). */
  pending_interrupts: PendingInterrupt[];
  last_decided: PendingInterrupt | null;
  idempotency_keys: string[];
  idempotency_key_count: Int64;
}

export interface RecordInterruptResponse {
  checkpoint: Checkpoint;
  pending: PendingInterrupt;
  /** false when the pending row was there already (a retry, or a second record). */
  pending_created: boolean;
}

export interface ListDecisionsResponse {
  decided: PendingInterrupt[];
  next_page_token: string;
}

export interface ListPendingInterruptsResponse {
  pending_interrupts: PendingInterrupt[];
  next_page_token: string;
}

export interface ApplyGraphRetentionResponse {
  threads_deleted: Int64;
  checkpoints_deleted: Int64;
  writes_deleted: Int64;
  channel_values_deleted: Int64;
  paused_threads_kept: Int64;
  delta_threads_kept: Int64;
}

export interface GetIdempotencyResultResponse {
  found: boolean;
  result_json: string;
}

// --- options -----------------------------------------------------------------------------------

/** How UNAVAILABLE is retried within a call's deadline. */
export interface RetryOptions {
  /** Default 5. */
  maxAttempts: number;
  /** Default 50. */
  initialBackoffMs: number;
  /** Default 2000. */
  maxBackoffMs: number;
  /** Default 2. */
  multiplier: number;
}

export interface ClientOptions {
  /** gRPC target ("127.0.0.1:7470", "unix:///run/cpd.sock"); default $CHECKPOINTD_TARGET, then 127.0.0.1:7470. */
  target?: string;
  /** Sent with every request; default "default". */
  namespace?: string;
  /** Sent as `authorization: Bearer <token>` on every call and watch stream; default $CHECKPOINTD_TOKEN, then none. */
  token?: string;
  /** The default deadline of a call, retries included; default 10000. */
  timeoutMs?: number;
  retry?: Partial<RetryOptions>;
  /** Default insecure; grpc.credentials.createSsl(ca, key, cert) for TLS. */
  credentials?: grpc.ChannelCredentials;
  /** grpc-js channel options, over the client's own. */
  channelOptions?: grpc.ChannelOptions;
}

export interface CallOptions {
  /** The deadline of this call, retries included; default the client's timeoutMs. */
  timeoutMs?: number;
}

export interface WriteOptions extends CallOptions {
  /** Default a fresh UUID; pass the same one to carry a write across your own retries. */
  requestId?: string;
}

export interface ListCheckpointsOptions extends CallOptions {
  pageSize?: number;
  pageToken?: string;
  descending?: boolean;
}

export interface ExecutionFilters {
  /** Exact chain name. */
  chainName?: string;
  /** Any status when absent. */
  status?: ExecutionStatusFilter | null;
  /** Last activity at or after. */
  activeSince?: Date;
  /** Only fastaiagent runs or only LangGraph threads; both when absent. */
  framework?: FrameworkFilter | null;
}

export interface GetExecutionOptions extends CallOptions {
  /** The run or the thread, when both have this id (default: the run, if there is one). */
  framework?: FrameworkFilter | null;
}

export interface ListExecutionsOptions extends ExecutionFilters, CallOptions {
  pageSize?: number;
  pageToken?: string;
}

export interface ClaimInterruptOptions extends WriteOptions {
  /** Default a fresh UUID; pass the same one to retry a claim whose reply was lost. */
  claimToken?: string;
}

interface SubmitDecisionCommon extends WriteOptions {
  decidedBy?: string;
  /** An object (written with json.stringify) or JSON text: the run's Resume.metadata. */
  metadata?: string | object;
  reason?: string;
  /** One pause of a graph thread (a pending interrupt's interrupt_id); default the run's one pause. */
  interruptId?: string;
}

/**
 * A decision: the verdict (`approved`), with the typed answer a graph pause asks for
 * (`response`, contract K3). A response with actions carries its verdict (false when one
 * rejects), so `approved` may be left out only then.
 */
export type SubmitDecisionOptions = SubmitDecisionCommon &
  (
    | { approved: boolean; response?: DecisionResponseInput }
    | { approved?: boolean; response: { actions: ActionDecisionInput[] } }
  );

/** One answer to an action of a HumanInTheLoopMiddleware pause (contract K3). */
export interface ActionDecisionInput {
  type: 'approve' | 'edit' | 'reject' | 'respond';
  /** edit: the action's new arguments. */
  args?: Record<string, unknown>;
  /** reject: why (optional); respond: the tool's answer. */
  message?: string;
}

/** A decision's typed answer: one per action of a middleware pause, or a resume value. */
export type DecisionResponseInput = { actions: ActionDecisionInput[] } | { resume: unknown };

/** A decision's typed answer as a reply carries it (checkpointd.v1.DecisionResponse). */
export interface DecisionResponse {
  actions: { type: string; edited_args_json: string; message: string }[];
  resume_json: string;
}

export interface LeaseDecisionOptions extends WriteOptions {
  /** The token this worker holds the lease by: the same one renews it. */
  leaseToken: string;
  /** How long the lease lasts unless renewed; 0: the server's default. */
  leaseSeconds?: number;
  /** One pause of a graph thread (the decided event's interrupt_id); default the run's one pause. */
  interruptId?: string;
}

export interface ReportResumeOptions extends WriteOptions {
  /** The token the lease is held by. */
  leaseToken: string;
  /** Absent: RESUMED; the error's text: RESUME_FAILED. */
  error?: string | null;
  /** One pause of a graph thread; default the run's one pause. */
  interruptId?: string;
}

export interface ListDecisionsOptions extends CallOptions {
  /** Only the decisions no worker reported on yet. */
  openOnly?: boolean;
  pageSize?: number;
  pageToken?: string;
}

export interface InterruptFilters {
  chainName?: string;
  reason?: string;
  agentPathPrefix?: string;
}

export interface ListPendingInterruptsOptions extends InterruptFilters, CallOptions {
  pageSize?: number;
  pageToken?: string;
}

export interface WatchInterruptsOptions extends InterruptFilters {
  /** Default '0': a snapshot first. */
  afterCursor?: Int64Input;
  /** The event_time the stream gave with afterCursor: the server checks its event there is
   * that one, and answers CURSOR_EXPIRED when the store's history changed (I5). */
  afterCursorEventTime?: TimestampInput | null;
  /** The longest silence before the server sends progress; 0 (the default): the server's. */
  progressIntervalMs?: number;
}

export interface WatchOptions extends InterruptFilters {
  /** Default '0': a snapshot first. */
  afterCursor?: Int64Input;
  /** Stops the watch. */
  signal?: AbortSignal;
  /** Default 100. */
  backoffMs?: number;
  /** Default 5000. */
  maxBackoffMs?: number;
  /** 1000 to 300000, default 10000: a stream silent for 3 times that is reconnected. */
  progressIntervalMs?: number;
}

export interface ApplyGraphRetentionOptions extends WriteOptions {
  idleForSeconds?: number;
  keepNewest?: number;
  dryRun?: boolean;
}

/** One WatchInterrupts stream: iterate it, cancel() to end it quietly. */
export interface InterruptStream extends AsyncIterable<WatchInterruptsMessage> {
  cancel(): void;
}

/** A client of one checkpointd service (grpc-js' generated stub). */
export type ServiceClient = InstanceType<grpc.ServiceClientConstructor>;

// --- the client ----------------------------------------------------------------------------------

/** A checkpointd client over one gRPC channel. */
export declare class CheckpointdClient {
  constructor(options?: ClientOptions);

  readonly target: string;
  readonly namespace: string;
  readonly timeoutMs: number;
  readonly retry: RetryOptions;
  /** The stubs of checkpointd.v1's services, over one channel (for call()). */
  readonly checkpoints: ServiceClient;
  readonly interrupts: ServiceClient;
  readonly idempotency: ServiceClient;
  readonly graph: ServiceClient;

  /** Close the channel; calls in flight are cancelled. */
  close(): void;

  /**
   * Send one unary request of `stub` (one of the client's stubs), retrying UNAVAILABLE within
   * the deadline, with the same request on every attempt. Rejects with a CheckpointdError.
   */
  call<Response = unknown>(stub: ServiceClient, method: string, request: object, options?: CallOptions): Promise<Response>;

  /** Store a checkpoint; returns the stored row. */
  putCheckpoint(checkpoint: CheckpointInput, options?: WriteOptions): Promise<Checkpoint>;
  /** One checkpoint by id; NOT_FOUND (CHECKPOINT_NOT_FOUND) when missing. */
  getCheckpoint(executionId: string, checkpointId: string, options?: CallOptions): Promise<Checkpoint>;
  /** The newest checkpoint (by sequence); NOT_FOUND (NO_CHECKPOINTS) when none. */
  getLatestCheckpoint(executionId: string, options?: CallOptions): Promise<Checkpoint>;
  /** One page of history. */
  listCheckpoints(executionId: string, options?: ListCheckpointsOptions): Promise<ListCheckpointsResponse>;
  /** The whole history of an execution, page after page. */
  iterCheckpoints(executionId: string, options?: Omit<ListCheckpointsOptions, 'pageToken'>): AsyncGenerator<Checkpoint, void, undefined>;
  /** Delete an execution's checkpoints, pending interrupt and idempotency results. */
  deleteExecution(executionId: string, options?: WriteOptions): Promise<DeleteExecutionResponse>;
  /** Prune completed and failed rows older than olderThanSeconds. */
  pruneCheckpoints(olderThanSeconds: number, options?: WriteOptions): Promise<PruneCheckpointsResponse>;
  /** The checkpoint a resume re-enters at (FAILED_PRECONDITION when finished). */
  getResumePoint(executionId: string, options?: CallOptions): Promise<Checkpoint>;
  /** The checkpoint a fork branches from (the newest step, or checkpointId). */
  getForkPoint(executionId: string, options?: CallOptions & { checkpointId?: string }): Promise<Checkpoint>;

  /** One page of a namespace's runs, newest activity first (contract C11). */
  listExecutions(options?: ListExecutionsOptions): Promise<ListExecutionsResponse>;
  /** Every run listExecutions() would list, page after page. */
  iterExecutions(options?: Omit<ListExecutionsOptions, 'pageToken'>): AsyncGenerator<Execution, void, undefined>;
  /** One run (contract C11); NOT_FOUND when it has no checkpoint. */
  getExecution(executionId: string, options?: GetExecutionOptions): Promise<GetExecutionResponse>;
  /** One page of the namespaces that hold a run, in name order; only the token's (contract N2). */
  listNamespaces(options?: ListNamespacesOptions): Promise<ListNamespacesResponse>;
  /** Every namespace listNamespaces() would list, page after page. */
  iterNamespaces(options?: Omit<ListNamespacesOptions, 'pageToken'>): AsyncGenerator<string, void, undefined>;

  /** Record a paused run: its interrupted checkpoint and its pending row, atomically. */
  recordInterrupt(
    checkpoint: InterruptedCheckpointInput,
    pending: PendingInterruptInput,
    options?: WriteOptions,
  ): Promise<RecordInterruptResponse>;
  /** Claim an execution's pending interrupt; losers get NOT_FOUND (NO_PENDING_INTERRUPT). */
  claimInterrupt(executionId: string, options?: ClaimInterruptOptions): Promise<PendingInterrupt>;
  /** Decide an execution's pending interrupt (contract K1); returns it with its decision. */
  submitDecision(executionId: string, options: SubmitDecisionOptions): Promise<PendingInterrupt>;
  /**
   * Take or renew the lease on a decision, to carry it out (contract K2); FAILED_PRECONDITION
   * (LEASE_HELD, DECISION_CLOSED) or NOT_FOUND (NO_DECISION) otherwise.
   */
  leaseDecision(executionId: string, checkpointId: string, options: LeaseDecisionOptions): Promise<PendingInterrupt>;
  /** Report a leased decision carried out, or failed with `error` (K2); the holder only. */
  reportResume(executionId: string, checkpointId: string, options: ReportResumeOptions): Promise<PendingInterrupt>;
  /** One page of decided pauses, oldest first. */
  listDecisions(options?: ListDecisionsOptions): Promise<ListDecisionsResponse>;
  /** One page of pending interrupts, newest first. */
  listPendingInterrupts(options?: ListPendingInterruptsOptions): Promise<ListPendingInterruptsResponse>;
  /** One WatchInterrupts stream, without reconnects (see watch()). */
  watchInterrupts(options?: WatchInterruptsOptions): InterruptStream;
  /** Watch pending interrupts for as long as the caller iterates, reconnecting by itself. */
  watch(options?: WatchOptions): AsyncGenerator<WatchMessage, void, undefined>;

  /** Apply graph retention rules once in this namespace (contracts G12, G13). */
  applyGraphRetention(options?: ApplyGraphRetentionOptions): Promise<ApplyGraphRetentionResponse>;

  /** Cache resultJson (JSON text, "null" included) for (executionId, key). */
  putIdempotencyResult(executionId: string, key: string, resultJson: string, options?: WriteOptions): Promise<void>;
  getIdempotencyResult(executionId: string, key: string, options?: CallOptions): Promise<GetIdempotencyResultResponse>;
}

// --- errors ------------------------------------------------------------------------------------

export interface CheckpointdErrorOptions {
  reason?: string;
  domain?: string;
  metadata?: Record<string, string>;
  cause?: unknown;
}

/** A failed checkpointd call: gRPC status, ErrorInfo reason, domain and metadata. */
export declare class CheckpointdError extends Error {
  constructor(code: grpc.status, message: string, options?: CheckpointdErrorOptions);
  name: 'CheckpointdError';
  /** The numeric gRPC status code (grpc.status.NOT_FOUND is 5). */
  code: grpc.status;
  /** The status code's name ("NOT_FOUND"). */
  codeName: keyof typeof grpc.status | `CODE_${number}`;
  /**
   * The ErrorInfo reason ("NO_PENDING_INTERRUPT", one of ErrorReason for checkpointd's own,
   * or a reason this client does not know yet); empty when the server sent none.
   */
  reason: string;
  /** The ErrorInfo domain; "checkpointd.v1" for errors from checkpointd. */
  domain: string;
  /** The ErrorInfo metadata, e.g. { field, rule } for INVALID_FIELD. */
  metadata: Record<string, string>;
}

/** checkpointd's ErrorInfo reasons by wire string: `ErrorReason.LEASE_HELD === 'LEASE_HELD'`. */
export declare const ErrorReason: ErrorReasons;

// --- helpers -----------------------------------------------------------------------------------

/** A value of JSON text as json.parse() returns it: integers beyond 2^53 are BigInt. */
export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | { [key: string]: JsonValue };

/** JSON text that keeps every digit of an integer. */
export declare namespace json {
  /** Parse standard JSON; integers beyond 2^53 come back as BigInt. Throws SyntaxError. */
  function parse<T = JsonValue>(text: string): T;
  /** Write a value as JSON text; a BigInt is written as its digits. Throws on NaN/Infinity. */
  function stringify(value: unknown): string;
}

/** The default target: 127.0.0.1:7470. */
export declare const DEFAULT_TARGET: string;
/** The environment variable the token is read from when the `token` option is absent. */
export declare const TOKEN_ENV_VAR: 'CHECKPOINTD_TOKEN';
/** The folder of the .proto files the client loads (inside this package). */
export declare const PROTO_ROOT: string;
/** The checkpointd.v1 package (service constructors and message types), loaded once. */
export declare function loadProtocol(): grpc.GrpcObject;
/** A fresh UUID4, as used for request ids, checkpoint ids and claim tokens. */
export declare function newId(): string;
/** A google.protobuf.Timestamp for a Date (millisecond precision). */
export declare function timestampFromDate(date: Date): Timestamp;
/** A Date for a google.protobuf.Timestamp (microseconds and finer are dropped). */
export declare function dateFromTimestamp(ts: { seconds: Int64Input; nanos: number }): Date;
