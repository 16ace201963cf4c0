// Types of the LangGraph.js saver and resume worker (./index.js, ./resume_worker.js).
import type { RunnableConfig } from '@langchain/core/runnables';
import type {
  BaseCheckpointSaver,
  ChannelVersions,
  Checkpoint,
  CheckpointListOptions,
  CheckpointMetadata,
  CheckpointTuple,
  DeltaChannelHistory,
  PendingWrite,
  SerializerProtocol,
} from '@langchain/langgraph-checkpoint';

/** What the saver's own client is opened with (the options of CheckpointdClient). */
export interface CheckpointdSaverClientOptions {
  /** gRPC target ("127.0.0.1:7470", "unix:///run/cpd.sock"); default $CHECKPOINTD_TARGET, then 127.0.0.1:7470. */
  target?: string;
  /** Sent as `authorization: Bearer <token>`; default $CHECKPOINTD_TOKEN, then none. */
  token?: string;
  /** How UNAVAILABLE is retried within a call's deadline. */
  retry?: { maxAttempts?: number; initialBackoffMs?: number; maxBackoffMs?: number; multiplier?: number };
  /** A grpc-js ChannelCredentials; default insecure. */
  credentials?: unknown;
  /** grpc-js channel options. */
  channelOptions?: Record<string, unknown>;
}

export interface CheckpointdSaverOptions extends CheckpointdSaverClientOptions {
  /**
   * A CheckpointdClient to share: the saver calls through it and leaves its channel open on
   * end(). Without it the saver opens a client of its own from the other options.
   */
  client?: { namespace: string; graph: unknown; close(): void; call(...args: unknown[]): Promise<any> };
  /** Where the rows live (1 to 63 of [A-Za-z0-9._-]); default the client's namespace, "default". */
  namespace?: string;
  /**
   * Names the graph in the pending-interrupt inbox (the chain name of its pauses); a run's
   * `configurable.graph_name` overrides it; without either the thread id stands in.
   */
  graphName?: string;
  /** Deadline of each call in milliseconds, retries included; default the client's (10 s). */
  timeoutMs?: number;
  /** LangGraph's serializer; default JsonPlusSerializer. */
  serde?: SerializerProtocol;
}

/** A LangGraph.js checkpoint saver whose checkpoints, values and writes live in checkpointd. */
// Declared over the base's default (number) versions, which is what compile() takes; the
// versions are text at run time (see getNextVersion).
export declare class CheckpointdSaver extends BaseCheckpointSaver {
  constructor(options?: CheckpointdSaverOptions);
  /** The namespace every row is stored in. */
  readonly namespace: string;
  /** The inbox's name for this saver's graph. */
  graphName: string | undefined;
  /** Deadline of each call, or undefined for the client's. */
  timeoutMs: number | undefined;
  /** The client the saver calls through. */
  readonly client: NonNullable<CheckpointdSaverOptions['client']>;
  /** Checks that the server serves GraphService; safe to call every time. */
  setup(): Promise<void>;
  /** Closes the channel, if the saver opened it. */
  end(): Promise<void>;
  /** The same as end(). */
  close(): Promise<void>;
  getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined>;
  list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple>;
  put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig>;
  putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void>;
  /** A DeltaChannel's ancestor writes and seed, walked by the server a page at a time. */
  getDeltaChannelHistory(options: {
    config: RunnableConfig;
    channels: string[];
  }): Promise<Record<string, DeltaChannelHistory>>;
  deleteThread(threadId: string): Promise<void>;
  /**
   * "<32-digit counter>.<random>", the Python savers' versions: they sort as text. Declared
   * as the base's number so that `compile({ checkpointer })` takes the saver; LangGraph only
   * compares versions and hands them back.
   */
  getNextVersion(current: number | undefined): number;
}

/** A pending interrupt as the Node client returns it (field names as in the .proto files). */
export interface PendingInterruptRow {
  execution_id: string;
  chain_name: string;
  node_id: string;
  reason: string;
  context_json: string;
  checkpoint_id: string;
  checkpoint_ns: string;
  interrupt_id: string;
  decision: {
    approved: boolean;
    metadata_json: string;
    decided_by: string;
    reason?: string | null;
    status: string;
    attempts: number;
    error: string;
    /** The typed answer the pause asked for (contract K3). */
    response?: {
      actions: { type: string; edited_args_json: string; message: string }[];
      resume_json: string;
    } | null;
  } | null;
  [field: string]: unknown;
}

/** What interrupt() returns in a node once its decision is carried out. */
export interface ResumeValue {
  approved: boolean;
  decided_by: string;
  reason: string | null;
  metadata: Record<string, unknown>;
}

/** A compiled LangGraph.js graph, as far as the worker uses it. */
export interface ResumableGraph {
  getState(config: RunnableConfig): Promise<{ tasks?: ReadonlyArray<{ interrupts?: ReadonlyArray<{ id?: string }> }> }>;
  invoke(input: unknown, config?: RunnableConfig): Promise<unknown>;
}

export interface GraphResumeWorkerOptions extends CheckpointdSaverClientOptions {
  /** Compiled graphs by graph name (the chain name of their pauses: the saver's graphName). */
  graphs?: Record<string, ResumableGraph>;
  /** Finds or builds the graph of a pause whose graph name is not in `graphs`. */
  resolver?: (pending: PendingInterruptRow) => ResumableGraph | undefined | null;
  /** A CheckpointdClient to share (left open by close()); otherwise the worker opens one. */
  client?: CheckpointdSaverOptions['client'];
  /** The namespace to serve; default the client's, "default". */
  namespace?: string;
  /** Names the worker in lease tokens and logs; default "<host>-<pid>". */
  name?: string;
  /** The same as name. */
  workerId?: string;
  /** How long a lease lasts unless renewed (every third of it), 1 to 3600; default 30. */
  leaseSeconds?: number;
  /** Resumes at once; default 4. */
  concurrency?: number;
  /** Where the worker logs; default warnings to console.warn. */
  logger?: { debug(message: string): void; info(message: string): void; warn(message: string): void };
  /** Deadline of each call in milliseconds; default 10 s. */
  timeoutMs?: number;
}

/**
 * Watches a namespace for decided LangGraph.js pauses and resumes each exactly once (contract
 * G11): leases the decision, resumes the thread with
 * `new Command({ resume: { [interruptId]: ResumeValue } })` unless it no longer waits on that
 * interrupt, reports resumed or resume_failed; takes a decision over when a killed worker's
 * lease runs out.
 */
export declare class GraphResumeWorker {
  constructor(options: GraphResumeWorkerOptions);
  /** Names the worker in lease tokens and logs. */
  readonly name: string;
  readonly leaseSeconds: number;
  readonly concurrency: number;
  /** The namespace the worker serves. */
  readonly namespace: string;
  /** The client the worker calls through. */
  readonly client: NonNullable<CheckpointdSaverOptions['client']>;
  /** Runs until stop(); resolves once the resumes in progress have finished and reported. */
  run(): Promise<void>;
  /** Starts run() in the background. */
  start(): this;
  /** Stops watching; resolves when the resumes in progress have finished and reported. */
  stop(): Promise<void>;
  /** stop(), then closes the channel if the worker opened it. */
  close(): Promise<void>;
}

/** The resume value of a decision (a Decision as the Node client returns it). */
export declare function resumeValue(decision: NonNullable<PendingInterruptRow['decision']>): ResumeValue;

/** A decision that cannot answer its pause (reported resume_failed before the graph runs). */
export declare class ResumeRefused extends Error {}

/**
 * The answer the graph expects to the interrupt a decision is on (contracts G15, K3): for a
 * HumanInTheLoopMiddleware request `{ decisions: [...] }` (one per action, the decision's typed
 * answers or its verdict), for a per-call tool approval one answer, for any other interrupt the
 * decision's resume value or resumeValue(decision). Throws ResumeRefused when the pause does not
 * allow the answer.
 */
export declare function resumeFor(
  interrupt: { id?: string; value?: unknown },
  decision: NonNullable<PendingInterruptRow['decision']>,
): unknown;
