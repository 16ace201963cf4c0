'use strict';
/**
 * The resume worker of LangGraph.js pauses: carries out each decision on a graph's interrupt
 * exactly once (contracts K2, G11), as the Python client's GraphResumeWorker does.
 *
 * A node that calls interrupt(value) on a CheckpointdSaver puts a pending interrupt in the
 * inbox (G8): a person on the approvals page, the CLI or a bot in any language decides it with
 * SubmitDecision (naming its interrupt_id). A GraphResumeWorker, in the process that has the
 * compiled graphs, resumes the thread:
 *
 *   const { CheckpointdSaver, GraphResumeWorker } = require('checkpointd-client/langgraph');
 *   const saver = new CheckpointdSaver({ namespace: 'support', graphName: 'support' });
 *   const graph = builder.compile({ checkpointer: saver });
 *   const worker = new GraphResumeWorker({ namespace: 'support', graphs: { support: graph } });
 *   await worker.run();               // until worker.stop()
 *
 * Graphs are keyed by the chain name of their pauses: the saver's graphName (or the run's
 * configurable.graph_name). How a decision is carried out once, across any number of workers
 * in any language:
 *
 * 1. The worker watches the namespace (a decided pending interrupt in the snapshot, or a
 *    "decided" event, is work) and reads every open decision (ListDecisions open_only) at
 *    start and every leaseSeconds: a decision whose worker died mid-resume may have no
 *    pending interrupt left for the watch to show.
 * 2. It takes the decision's lease (LeaseDecision by interrupt_id): one holder at a time,
 *    renewed every third of leaseSeconds while the graph runs. The others keep the decision
 *    and try again when the lease would run out; a worker killed mid-resume leaves the lease
 *    to run out, and another takes over (attempts + 1).
 * 3. It reads the thread's state. While the thread waits on the interrupt it resumes it with
 *    new Command({ resume: { [interruptId]: { approved, decided_by, reason, metadata } } }),
 *    which is what interrupt() returns in the node, the Python worker's value shape. When the
 *    interrupt is answered but the thread stopped midway (tasks left, no pause: a worker
 *    before it died after the resume was saved), it goes on from the newest checkpoint
 *    (invoke(null)). When the thread is at a new pause or its end (a worker before it died
 *    before reporting), it runs nothing.
 * 4. It reports resumed (only once the thread is at a new pause or its end), or resume_failed
 *    with the error's text.
 *
 * The graph is aborted (its config's signal) when the lease goes to another worker. Runs of
 * one thread must not overlap: a worker resumes a thread's pauses one after another, but two
 * workers may each take one pause of the same thread at once; run one worker per namespace,
 * or decide a thread's parallel pauses one at a time, when that matters.
 */

const crypto = require('node:crypto');
const os = require('node:os');
const { CheckpointdClient, CheckpointdError, ErrorReason } = require('..');
const { isWriteFenced, leaseFence, writesUnder } = require('./fencing');

/** Milliseconds before trying again after the server could not be reached. */
const RETRY_MS = 2_000;
/** What lease_seconds may be (the server's bounds). */
const MIN_LEASE_SECONDS = 1;
const MAX_LEASE_SECONDS = 3600;
/** Decision statuses that still need a worker. */
const OPEN = new Set(['DECISION_STATUS_DECIDED', 'DECISION_STATUS_RESUMING']);
/** Events after which nobody needs to carry the decision out. */
const CLOSING = new Set([
  'INTERRUPT_EVENT_TYPE_RESUMED',
  'INTERRUPT_EVENT_TYPE_RESUME_FAILED',
  'INTERRUPT_EVENT_TYPE_REMOVED',
]);
/** Returned by a resume whose lease went to another worker. */
const LOST = Symbol('lease lost');

const QUIET_LOGGER = {
  debug() {},
  info() {},
  warn: (...args) => console.warn(...args),
};

/**
 * What interrupt() returns in the node once the decision is carried out. The metadata is read
 * with JSON.parse (integers above 2^53 rounded), not the client's BigInt-safe json.parse:
 * LangGraph.js's serializer cannot store a BigInt in the thread's resume write.
 */
function resumeValue(decision) {
  return {
    approved: decision.approved,
    decided_by: decision.decided_by,
    reason: decision.reason ?? null,
    metadata: decision.metadata_json ? JSON.parse(decision.metadata_json) : {},
  };
}

/** A decision that cannot answer its pause: reported resume_failed before the graph runs. */
class ResumeRefused extends Error {
  constructor(message) {
    super(message);
    this.name = 'ResumeRefused';
  }
}

/** How LangChain.js (camelCase) and LangChain (snake_case) write a batched HITL request. */
const BATCH_SPELLINGS = [
  { requests: 'actionRequests', configs: 'reviewConfigs', name: 'actionName', allowed: 'allowedDecisions', edited: 'editedAction' },
  { requests: 'action_requests', configs: 'review_configs', name: 'action_name', allowed: 'allowed_decisions', edited: 'edited_action' },
];
const ACTION_TYPE_NAMES = {
  ACTION_DECISION_TYPE_APPROVE: 'approve',
  ACTION_DECISION_TYPE_EDIT: 'edit',
  ACTION_DECISION_TYPE_REJECT: 'reject',
  ACTION_DECISION_TYPE_RESPOND: 'respond',
};

/** The middleware's answer to action `index` (named `name`): the decision's typed one, or its verdict. */
function actionAnswer(decision, index, name, editedKey) {
  const actions = decision.response?.actions ?? [];
  if (actions.length) {
    const action = actions[index];
    if (!action) throw new ResumeRefused(`the decision answers ${actions.length} action(s); the pause asks about more`);
    const type = ACTION_TYPE_NAMES[action.type];
    if (type === 'edit') return { type, [editedKey]: { name, args: JSON.parse(action.edited_args_json) } };
    return action.message ? { type, message: action.message } : { type };
  }
  if (decision.approved) return { type: 'approve' };
  return decision.reason ? { type: 'reject', message: decision.reason } : { type: 'reject' };
}

function refuseUnlessAllowed(answer, name, allowed) {
  if (Array.isArray(allowed) && !allowed.includes(answer.type)) {
    throw new ResumeRefused(`the pause does not allow '${answer.type}' for '${name}' (allowed: ${allowed.join(', ')})`);
  }
}

/**
 * The answer the graph expects to the interrupt a decision is on (contracts G15, K3): for a
 * HumanInTheLoopMiddleware request, `{ decisions: [...] }`, one per action in order (the
 * decision's typed answers, else its verdict), refused when an action does not allow it; for a
 * per-call tool approval, one such answer; for any other interrupt, the decision's resume value,
 * else resumeValue(decision).
 */
function resumeFor(interrupt, decision) {
  const value = interrupt?.value;
  const actions = decision.response?.actions ?? [];
  if (value && typeof value === 'object') {
    const spelling = BATCH_SPELLINGS.find((s) => Array.isArray(value[s.requests]));
    if (spelling) {
      const requests = value[spelling.requests];
      if (actions.length && actions.length !== requests.length) {
        throw new ResumeRefused(`the pause asks about ${requests.length} action(s); the decision answers ${actions.length}`);
      }
      const allowed = new Map((value[spelling.configs] ?? []).map((c) => [c?.[spelling.name], c?.[spelling.allowed]]));
      const decisions = requests.map((request, index) => {
        const answer = actionAnswer(decision, index, request?.name, spelling.edited);
        refuseUnlessAllowed(answer, request?.name, allowed.get(request?.name));
        return answer;
      });
      return { decisions };
    }
    if (value.type === 'tool_approval') {
      if (actions.length > 1) throw new ResumeRefused('a per-call tool approval takes exactly one action decision');
      const answer = actionAnswer(decision, 0, value.name, 'edited_action');
      refuseUnlessAllowed(answer, value.name, value.allowed_decisions ?? value.allowedDecisions);
      return answer;
    }
  }
  if (actions.length) throw new ResumeRefused('the pause is not a HumanInTheLoopMiddleware request: it takes a resume value');
  if (decision.response?.resume_json) return JSON.parse(decision.response.resume_json);
  return resumeValue(decision);
}

/** The interrupts a graph's state waits on: its own and its tasks' (a subgraph's). */
function interruptsOf(state) {
  return [...(state?.interrupts ?? []), ...(state?.tasks ?? []).flatMap((t) => t.interrupts ?? [])];
}

/** Whether a graph's state still waits on the interrupt. */
function waitsOn(state, interruptId) {
  return interruptsOf(state).some((i) => i?.id === interruptId);
}

/**
 * Whether the thread has tasks left to run and waits on no interrupt: a run that stopped (its
 * process died) between two steps, not at a pause or at its end.
 */
function stoppedMidway(state) {
  return (state?.next ?? []).length > 0 && interruptsOf(state).length === 0;
}

/** A pause's key: execution, checkpoint, interrupt id. */
function keyOf(pending) {
  return `${pending.execution_id}\u0000${pending.checkpoint_id}\u0000${pending.interrupt_id}`;
}

/** Sleep for `ms`, or less when `signal` aborts. */
function delay(ms, signal) {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Watches a namespace for decided LangGraph.js pauses and resumes each exactly once (G11). */
class GraphResumeWorker {
  #client;
  #ownsClient;
  #graphs;
  #resolver;
  #logger;
  #work = new Map(); // key -> { pending, due }
  #running = new Map(); // key -> Promise
  #threads = new Map(); // thread id -> the tail of its resumes
  #unknownGraphs = new Set();
  #stopping = false;
  #abort = new AbortController();
  #wake = null;
  #run = null;

  /**
   * @param {object} options
   * @param {Record<string, object>} [options.graphs] compiled graphs by graph name (the chain
   *   name of their pauses), whose checkpointer is a CheckpointdSaver on the same server and
   *   namespace.
   * @param {(pending: object) => object | undefined} [options.resolver] finds (or builds) the
   *   graph of a pause whose graph name is not in `graphs`; undefined when this worker has none.
   * @param {CheckpointdClient} [options.client] a client to share (left open by close());
   *   otherwise the worker opens one from target, token, timeoutMs, retry, credentials and
   *   channelOptions (see CheckpointdClient).
   * @param {string} [options.namespace] default the client's ("default").
   * @param {string} [options.name] names this worker in lease tokens and logs (workerId is the
   *   same option); default "<host>-<pid>".
   * @param {number} [options.leaseSeconds] how long a lease lasts unless renewed, 1 to 3600
   *   (default 30): a worker that dies mid-resume delays the thread's re-drive by that long.
   * @param {number} [options.concurrency] resumes at once (default 4).
   * @param {{debug: Function, info: Function, warn: Function}} [options.logger] default: warnings
   *   to console.warn.
   */
  constructor(options = {}) {
    const {
      graphs, resolver, client, name, workerId, leaseSeconds = 30, concurrency = 4, logger, ...clientOptions
    } = options;
    if ((!graphs || Object.keys(graphs).length === 0) && !resolver) {
      throw new TypeError('a GraphResumeWorker needs graphs, a resolver, or both');
    }
    if (!(Number.isInteger(leaseSeconds) && leaseSeconds >= MIN_LEASE_SECONDS && leaseSeconds <= MAX_LEASE_SECONDS)) {
      throw new RangeError(`leaseSeconds must be an integer from ${MIN_LEASE_SECONDS} to ${MAX_LEASE_SECONDS}`);
    }
    if (!(Number.isInteger(concurrency) && concurrency >= 1)) throw new RangeError('concurrency must be at least 1');
    this.#ownsClient = client === undefined || client === null;
    if (!this.#ownsClient && options.namespace !== undefined && options.namespace !== client.namespace) {
      throw new TypeError(`namespace ${options.namespace} is not the client's (${client.namespace})`);
    }
    this.#client = this.#ownsClient ? new CheckpointdClient(clientOptions) : client;
    this.#graphs = { ...graphs };
    this.#resolver = resolver ?? null;
    this.#logger = logger ?? QUIET_LOGGER;
    /** Names this worker in its lease tokens and logs. */
    this.name = name ?? workerId ?? `${os.hostname()}-${process.pid}`;
    /** How long a lease lasts unless renewed. */
    this.leaseSeconds = leaseSeconds;
    this.concurrency = concurrency;
  }

  /** The namespace the worker serves. */
  get namespace() {
    return this.#client.namespace;
  }

  /** The client the worker calls through. */
  get client() {
    return this.#client;
  }

  // --- entry points --------------------------------------------------------------------------

  /**
   * Run until stop(): resolves once the resumes in progress have finished and reported;
   * rejects when the watch fails with an error it does not reconnect after.
   */
  run() {
    if (this.#run === null) this.#run = this.#main();
    return this.#run;
  }

  /** Start run() in the background; returns the worker. */
  start() {
    this.run().catch((error) => this.#logger.warn(`resume worker ${this.name} stopped: ${error.message}`));
    return this;
  }

  /** Stop watching; resolves when the resumes in progress have finished and reported. */
  async stop() {
    this.#stopping = true;
    this.#abort.abort();
    this.#wakeUp();
    if (this.#run !== null) await this.#run.catch(() => {});
  }

  /** stop(), then close the channel if the worker opened it. */
  async close() {
    await this.stop();
    if (this.#ownsClient) this.#client.close();
  }

  async #main() {
    const scheduler = this.#schedule();
    const sweeper = this.#sweep();
    try {
      for await (const message of this.#client.watch({ signal: this.#abort.signal })) {
        if (message.item === 'snapshot') {
          this.#offer(message.snapshot);
        } else if (message.item === 'event') {
          const { type, pending } = message.event;
          if (type === 'INTERRUPT_EVENT_TYPE_DECIDED') this.#offer(pending);
          else if (CLOSING.has(type)) this.#forget(pending);
        }
      }
    } finally {
      this.#stopping = true;
      this.#abort.abort();
      this.#wakeUp();
      await Promise.all([scheduler, sweeper]);
      this.#logger.info(`resume worker ${this.name} stopped`);
    }
  }

  // --- bookkeeping ---------------------------------------------------------------------------

  #wakeUp() {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  /** Take note of a decision that may need carrying out: a graph's (it has an interrupt id). */
  #offer(pending) {
    const decision = pending?.decision;
    if (!decision || !OPEN.has(decision.status) || !pending.interrupt_id) return;
    const key = keyOf(pending);
    if (!this.#work.has(key)) {
      this.#work.set(key, { pending, due: Date.now() });
      this.#wakeUp();
    }
  }

  #forget(pending) {
    if (pending.execution_id && pending.checkpoint_id) {
      this.#work.delete(keyOf(pending));
      return;
    }
    for (const [key, work] of this.#work) {
      if (work.pending.execution_id === pending.execution_id) this.#work.delete(key);
    }
  }

  #graphFor(pending) {
    let graph = this.#graphs[pending.chain_name];
    if (!graph && this.#resolver) graph = this.#resolver(pending);
    if (!graph && !this.#unknownGraphs.has(pending.chain_name)) {
      this.#unknownGraphs.add(pending.chain_name);
      this.#logger.warn(
        `resume worker ${this.name} has no graph ${JSON.stringify(pending.chain_name)}: its decisions wait for a `
        + `worker that has it (first: thread ${pending.execution_id})`,
      );
    }
    return graph ?? null;
  }

  /** Start the attempts that are due, at most `concurrency` at once. */
  async #schedule() {
    while (!this.#stopping) {
      const now = Date.now();
      let nextDue = now + 60_000;
      for (const [key, work] of this.#work) {
        if (this.#running.has(key)) continue;
        if (work.due <= now && this.#running.size < this.concurrency) {
          const attempt = this.#attempt(key, work.pending)
            .catch((error) => this.#logger.warn(`resume worker ${this.name}: ${error?.stack ?? error}`))
            .finally(() => {
              this.#running.delete(key);
              this.#wakeUp();
            });
          this.#running.set(key, attempt);
        } else if (work.due > now) {
          nextDue = Math.min(nextDue, work.due);
        }
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, Math.max(nextDue - now, 10));
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    await Promise.all(this.#running.values());
  }

  /** Offer every open decision, now and every leaseSeconds. */
  async #sweep() {
    while (!this.#stopping) {
      try {
        let pageToken = '';
        do {
          const page = await this.#client.listDecisions({ openOnly: true, pageToken });
          for (const pending of page.decided) this.#offer(pending);
          pageToken = page.next_page_token;
        } while (pageToken && !this.#stopping);
      } catch (error) {
        this.#logger.warn(`resume worker ${this.name}: listing decisions failed: ${error.message}`);
      }
      await delay(this.leaseSeconds * 1000, this.#abort.signal);
    }
  }

  #retryAt(key, due) {
    const work = this.#work.get(key);
    if (work) work.due = due;
  }

  // --- one decision --------------------------------------------------------------------------

  async #attempt(key, pending) {
    const graph = this.#graphFor(pending);
    if (!graph) {
      this.#work.delete(key); // left waiting for a worker that has the graph
      return;
    }
    const { execution_id: thread, checkpoint_id: checkpointId, interrupt_id: interruptId } = pending;
    const where = { interruptId };
    const leaseToken = `${this.name}:${crypto.randomUUID()}`;
    let leased;
    try {
      leased = await this.#client.leaseDecision(thread, checkpointId, { ...where, leaseToken, leaseSeconds: this.leaseSeconds });
    } catch (error) {
      if (error instanceof CheckpointdError && error.reason === ErrorReason.LEASE_HELD) {
        const until = Date.parse(error.metadata?.lease_expires_at ?? '');
        const jitter = 50 + Math.random() * 250;
        this.#logger.debug(`resume worker ${this.name}: ${thread} is leased by another worker`);
        this.#retryAt(key, (Number.isNaN(until) ? Date.now() + RETRY_MS : Math.max(until, Date.now())) + jitter);
      } else if (error instanceof CheckpointdError && (error.reason === ErrorReason.DECISION_CLOSED || error.codeName === 'NOT_FOUND')) {
        this.#work.delete(key); // reported by someone, or the thread was deleted
      } else {
        this.#logger.warn(`resume worker ${this.name}: lease on ${thread} ${interruptId} failed: ${error.message}`);
        this.#retryAt(key, Date.now() + RETRY_MS);
      }
      return;
    }
    const { decision } = leased;
    if (decision.attempts > 1) {
      this.#logger.info(
        `resume worker ${this.name} re-drives ${thread} ${interruptId} (attempt ${decision.attempts}; an earlier worker's lease ran out)`,
      );
    }
    const fence = leaseFence(pending, leaseToken, decision.attempts);
    const outcome = await this.#resumeUnderLease(graph, pending, leaseToken, decision, fence);
    if (outcome === LOST) return; // another worker holds it now and will report
    try {
      await this.#client.reportResume(thread, checkpointId, { ...where, leaseToken, error: outcome });
    } catch (error) {
      if (error instanceof CheckpointdError && error.codeName === 'FAILED_PRECONDITION') {
        this.#logger.warn(`resume worker ${this.name}: report on ${thread} refused (${error.reason})`);
      } else {
        // The lease runs out and another worker takes over: the thread no longer waits on the
        // interrupt, so it reports without resuming again.
        this.#logger.warn(`resume worker ${this.name}: report on ${thread} failed: ${error.message}`);
        this.#retryAt(key, Date.now() + this.leaseSeconds * 1000);
        return;
      }
    }
    this.#work.delete(key);
  }

  /** Resume while renewing the lease: null (resumed), the error text, or LOST. */
  async #resumeUnderLease(graph, pending, leaseToken, decision, fence) {
    const lost = new AbortController();
    const finished = new AbortController();
    const renewer = (async () => {
      for (;;) {
        await delay((this.leaseSeconds * 1000) / 3, finished.signal);
        if (finished.signal.aborted) return;
        try {
          await this.#client.leaseDecision(pending.execution_id, pending.checkpoint_id, {
            interruptId: pending.interrupt_id, leaseToken, leaseSeconds: this.leaseSeconds,
          });
        } catch (error) {
          if (error instanceof CheckpointdError && (error.codeName === 'FAILED_PRECONDITION' || error.codeName === 'NOT_FOUND')) {
            this.#logger.warn(`resume worker ${this.name} lost the lease on ${pending.execution_id}; stopping its resume`);
            lost.abort();
            return;
          }
          // The server is away: keep trying while the lease lasts.
        }
      }
    })();
    try {
      // K4: the saver's writes carry the lease, so none lands once another worker has it.
      await writesUnder(fence, () => this.#resumeThread(graph, pending, decision, lost.signal));
      return lost.signal.aborted ? LOST : null;
    } catch (error) {
      if (lost.signal.aborted) return LOST;
      if (isWriteFenced(error)) {
        this.#logger.warn(`resume worker ${this.name}: its lease on ${pending.execution_id} was taken over (WRITE_FENCED); stopping its resume`);
        return LOST;
      }
      this.#logger.warn(`resume of ${pending.execution_id} failed: ${error?.stack ?? error}`);
      return `${error?.name ?? 'Error'}: ${error?.message ?? String(error)}`;
    } finally {
      finished.abort();
      await renewer;
    }
  }

  /** Resume the thread with the decision, after the thread's earlier resumes here. */
  async #resumeThread(graph, pending, decision, signal) {
    const thread = pending.execution_id;
    const before = this.#threads.get(thread) ?? Promise.resolve();
    const mine = before.then(() => this.#resume(graph, pending, decision, signal));
    const tail = mine.catch(() => {});
    this.#threads.set(thread, tail);
    try {
      return await mine;
    } finally {
      if (this.#threads.get(thread) === tail) this.#threads.delete(thread);
    }
  }

  async #resume(graph, pending, decision, signal) {
    const { Command } = require('@langchain/langgraph');
    const config = { configurable: { thread_id: pending.execution_id } };
    const state = await graph.getState(config);
    let input;
    const waited = interruptsOf(state).find((i) => i?.id === pending.interrupt_id);
    if (waited) {
      input = new Command({ resume: { [pending.interrupt_id]: resumeFor(waited, decision) } });
    } else if (stoppedMidway(state)) {
      // A worker before this one resumed the thread and died before it reached a new pause or
      // the end (G15): the resume is saved, its next tasks are not run yet. LangGraph goes on
      // from the newest checkpoint when invoked with null.
      input = null;
    } else {
      return; // resumed to a pause or the end by a worker that died before it reported
    }
    await graph.invoke(input, { ...config, signal });
  }
}

module.exports = { GraphResumeWorker, ResumeRefused, resumeFor, resumeValue };
