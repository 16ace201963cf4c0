'use strict';
/**
 * A LangGraph.js checkpoint saver on checkpointd's GraphService, and the worker that resumes
 * its graphs' decided pauses (GraphResumeWorker, ./resume_worker.js).
 *
 *   const { CheckpointdSaver } = require('checkpointd-client/langgraph');
 *   const saver = new CheckpointdSaver({ namespace: 'support-bot', graphName: 'refunds' });
 *   await saver.setup();
 *   const graph = builder.compile({ checkpointer: saver });
 *
 * It implements the whole BaseCheckpointSaver surface of @langchain/langgraph-checkpoint 1.2:
 * getTuple, list (with or without a thread, a metadata filter, before, limit), put,
 * putWrites (with taskPath), deleteThread and getNextVersion; getDeltaChannelHistory is the
 * base class's walk over getTuple, which this saver answers in one call per checkpoint.
 *
 * Each method is one GraphService RPC (two for a checkpoint of format v < 4, whose pending
 * sends are read from its parent), with the client's deadline and UNAVAILABLE retries, and a
 * fresh request id on every mutation. Rows are shaped as the Python savers shape them
 * (docs/protocol.md, "GraphService: LangGraph savers in any language"), so Python and
 * JavaScript graphs share a namespace: values are the serializer's dumpsTyped type and bytes,
 * the checkpoint body (without its channel values) is JSON, metadata is a JSON object,
 * versions are zero-padded text, and an __interrupt__ write describes each interrupt for the
 * pending-interrupt inbox.
 */

const {
  BaseCheckpointSaver,
  INTERRUPT,
  TASKS,
  WRITES_IDX_MAP,
  compareWritesSortKeys,
  getCheckpointId,
  maxChannelVersion,
  writesSortKey,
} = require('@langchain/langgraph-checkpoint');
const { CheckpointdClient, newId } = require('..');
const { currentFence } = require('./fencing');
const { EMPTY, EMPTY_BYTES, MAX_DELTA_CHANNELS, MAX_PAGE, PROBE_THREAD, configurableOf, describeInterrupt, nextVersion, nsOf } = require('./shape');

/**
 * The node each Send pending in a checkpoint targets, in order (TASKS, LangGraph's
 * __pregel_tasks channel; an empty name keeps the index of a packet that is not a Send). A task
 * a Send starts has only the Send's index in its task path: the server names its pauses by these
 * (contract G8).
 */
function sendNodes(values) {
  const sends = values[TASKS];
  return Array.isArray(sends) ? sends.map((packet) => String(packet?.node ?? '')) : [];
}

/** The `fence` of a write made inside a resume worker's writesUnder (contract K4), if any. */
function fenced() {
  const fence = currentFence();
  return fence ? { fence } : {};
}

/** A LangGraph.js checkpoint saver whose rows live in checkpointd. */
class CheckpointdSaver extends BaseCheckpointSaver {
  #client;
  #ownsClient;

  /**
   * @param {object} [options]
   * @param {CheckpointdClient} [options.client] a client to share (its channel stays open on
   *   end()); otherwise the saver opens one from target, token, timeoutMs, retry,
   *   credentials and channelOptions (see CheckpointdClient).
   * @param {string} [options.namespace] where the rows live; default the client's namespace
   *   ("default").
   * @param {string} [options.graphName] names the graph in the pending-interrupt inbox; a
   *   run's configurable.graph_name overrides it; without either, a run's
   *   configurable.graph_id (what LangGraph's Agent Server sets) names it, and without any of
   *   them the thread id stands in.
   * @param {number} [options.timeoutMs] deadline of each call; default the client's.
   * @param {import('@langchain/langgraph-checkpoint').SerializerProtocol} [options.serde]
   */
  constructor(options = {}) {
    super(options.serde);
    const { client, serde: _serde, graphName, ...clientOptions } = options;
    this.#ownsClient = client === undefined || client === null;
    this.#client = this.#ownsClient ? new CheckpointdClient(clientOptions) : client;
    /** The namespace every row is stored in. */
    this.namespace = options.namespace ?? this.#client.namespace;
    /** The inbox's name for this saver's graph (or undefined). */
    this.graphName = graphName;
    this.timeoutMs = options.timeoutMs;
  }

  /** The client the saver calls through. */
  get client() {
    return this.#client;
  }

  #call(method, request) {
    return this.#client.call(this.#client.graph, method, request, { timeoutMs: this.timeoutMs });
  }

  /** Check that the server serves GraphService (its schema migrates itself): safe every time. */
  async setup() {
    await this.#call('GetGraphCheckpoint', {
      namespace: this.namespace, thread_id: PROBE_THREAD, checkpoint_ns: '', checkpoint_id: '',
    });
  }

  /** Close the channel, if the saver opened it. */
  async end() {
    if (this.#ownsClient) this.#client.close();
  }

  /** The same as end(). */
  async close() {
    await this.end();
  }

  /** The checkpoint of `config` (the thread's newest without a checkpoint_id), or undefined. */
  async getTuple(config) {
    const configurable = config?.configurable ?? {};
    if (configurable.thread_id === undefined || configurable.thread_id === null || configurable.thread_id === '') {
      return undefined;
    }
    const response = await this.#call('GetGraphCheckpoint', {
      namespace: this.namespace,
      thread_id: String(configurable.thread_id),
      checkpoint_ns: nsOf(configurable),
      checkpoint_id: getCheckpointId(config) || '',
    });
    if (!response.checkpoint_tuple) return undefined;
    return this.#toTuple(response.checkpoint_tuple);
  }

  /** Checkpoints newest first, filtered by the server, read a page at a time. */
  async *list(config, options = {}) {
    const { filter, before, limit } = options;
    if (limit !== undefined && limit !== null && !(limit > 0)) return;
    const configurable = config?.configurable ?? {};
    const request = { namespace: this.namespace, thread_id: '', checkpoint_id: '', page_token: '' };
    if (configurable.thread_id !== undefined && configurable.thread_id !== null) {
      request.thread_id = String(configurable.thread_id);
    }
    if (configurable.checkpoint_ns !== undefined && configurable.checkpoint_ns !== null) {
      request.checkpoint_ns = String(configurable.checkpoint_ns);
    }
    if (config?.configurable) request.checkpoint_id = getCheckpointId(config) || '';
    if (filter && Object.keys(filter).length > 0) request.metadata_filter_json = JSON.stringify(filter);
    if (before?.configurable?.checkpoint_id !== undefined) {
      request.before_checkpoint_id = String(before.configurable.checkpoint_id);
    }
    let returned = 0;
    for (;;) {
      request.page_size = limit === undefined || limit === null ? MAX_PAGE : Math.max(1, Math.min(MAX_PAGE, limit - returned));
      const response = await this.#call('ListGraphCheckpoints', request);
      for (const message of response.checkpoint_tuples) {
        yield await this.#toTuple(message);
        returned += 1;
        if (limit !== undefined && limit !== null && returned >= limit) return;
      }
      if (!response.next_page_token) return;
      request.page_token = response.next_page_token;
    }
  }

  /** Store a checkpoint and the values of the channels in `newVersions`. */
  async put(config, checkpoint, metadata, newVersions) {
    const configurable = configurableOf(config, 'thread_id');
    const threadId = String(configurable.thread_id);
    const checkpointNs = nsOf(configurable);
    const { channel_values: values = {}, ...body } = checkpoint;
    const versions = Object.fromEntries(
      Object.entries(checkpoint.channel_versions ?? {}).map(([channel, version]) => [channel, String(version)]),
    );
    const newValues = [];
    for (const [channel, version] of Object.entries(newVersions ?? {})) {
      // A version the checkpoint does not name is one no read would find.
      if (versions[channel] !== String(version)) continue;
      const value = Object.prototype.hasOwnProperty.call(values, channel)
        ? await this.#typed(values[channel])
        : { type: EMPTY, data: EMPTY_BYTES };
      newValues.push({ channel, version: String(version), value });
    }
    const [, metadataBytes] = await this.serde.dumpsTyped(metadata ?? {});
    await this.#call('PutGraphCheckpoint', {
      namespace: this.namespace,
      request_id: newId(),
      checkpoint: {
        thread_id: threadId,
        checkpoint_ns: checkpointNs,
        checkpoint_id: String(checkpoint.id),
        parent_checkpoint_id: configurable.checkpoint_id ? String(configurable.checkpoint_id) : '',
        checkpoint: await this.#typed(body),
        metadata_json: Buffer.from(metadataBytes).toString('utf8'),
        channel_versions: versions,
      },
      new_values: newValues,
      send_nodes: sendNodes(values),
      ...fenced(),
    });
    return { configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: String(checkpoint.id) } };
  }

  /**
   * Store a task's writes against a checkpoint: special channels take their negative index
   * (WRITES_IDX_MAP), the others their position; each Interrupt of an __interrupt__ write is
   * described for the pending-interrupt inbox, in the same request. The server takes one write
   * per index and one description per interrupt id (contract G17): of writes that share an
   * index (a node that called interrupt() twice writes __resume__ twice, each longer than the
   * one before) the last is sent, and an Interrupt written twice is described once.
   */
  async putWrites(config, writes, taskId, taskPath = '') {
    const configurable = configurableOf(config, 'thread_id', 'checkpoint_id');
    const graphName = String(configurable.graph_name || this.graphName || configurable.graph_id || '');
    const path = taskPath ?? '';
    const interrupts = new Map();
    for (const [channel, value] of writes) {
      if (channel !== INTERRUPT) continue;
      for (const interrupt of Array.isArray(value) ? value : [value]) {
        // Only LangGraph's Interrupts are pauses: another value has no id to resume it by.
        if (interrupt !== null && typeof interrupt === 'object' && interrupt.id && !interrupts.has(String(interrupt.id))) {
          interrupts.set(String(interrupt.id), describeInterrupt(interrupt, graphName, path));
        }
      }
    }
    // Of writes that share an index the last is sent, at the place of the first.
    const last = new Map();
    writes.forEach(([channel], position) => last.set(WRITES_IDX_MAP[channel] ?? position, position));
    const kept = writes
      .map(([channel, value], position) => ({ idx: WRITES_IDX_MAP[channel] ?? position, channel, value, position }))
      .filter((w) => last.get(w.idx) === w.position);
    const first = new Map();
    writes.forEach(([channel], position) => {
      const idx = WRITES_IDX_MAP[channel] ?? position;
      if (!first.has(idx)) first.set(idx, position);
    });
    kept.sort((a, b) => first.get(a.idx) - first.get(b.idx));
    const typedWrites = await Promise.all(kept.map(async ({ idx, channel, value }) => ({
      idx,
      channel,
      value: await this.#typed(value),
    })));
    await this.#call('PutGraphWrites', {
      namespace: this.namespace,
      request_id: newId(),
      thread_id: String(configurable.thread_id),
      checkpoint_ns: nsOf(configurable),
      checkpoint_id: String(configurable.checkpoint_id),
      task_id: String(taskId),
      task_path: path,
      writes: typedWrites,
      interrupts: [...interrupts.values()],
      ...fenced(),
    });
  }

  /**
   * What each DeltaChannel in `channels` needs to rebuild its value at the checkpoint of
   * `config`: the writes of its ancestors, oldest first, back to the nearest stored value (the
   * seed), as the base class's walk returns them, read by the server one page of up to 1000
   * ancestors per call (GetGraphDeltaHistory, contract G19) rather than one call per ancestor.
   */
  async getDeltaChannelHistory({ config, channels }) {
    if (!channels || channels.length === 0) return {};
    const configurable = config?.configurable ?? {};
    const unique = [...new Set(channels.map(String))];
    const collected = new Map(unique.map((channel) => [channel, []]));
    const seeds = new Map();
    const threadId = configurable.thread_id;
    for (let start = 0; threadId !== undefined && threadId !== null && threadId !== '' && start < unique.length; start += MAX_DELTA_CHANNELS) {
      const request = {
        namespace: this.namespace,
        thread_id: String(threadId),
        checkpoint_ns: nsOf(configurable),
        checkpoint_id: getCheckpointId(config) || '',
        channels: unique.slice(start, start + MAX_DELTA_CHANNELS),
        page_size: MAX_PAGE,
        page_token: '',
      };
      for (;;) {
        const response = await this.#call('GetGraphDeltaHistory', request);
        for (const ancestor of response.ancestors) {
          // Newest first, as the base class collects them; reversed once at the end.
          for (let i = ancestor.writes.length - 1; i >= 0; i -= 1) {
            const write = ancestor.writes[i];
            const into = collected.get(write.channel);
            if (into && !seeds.has(write.channel)) into.push([write.task_id, write.channel, await this.#load(write.value)]);
          }
          for (const seed of ancestor.seeds) seeds.set(seed.channel, await this.#load(seed.value));
        }
        if (!response.next_page_token) break;
        request.page_token = response.next_page_token;
      }
    }
    const result = {};
    for (const channel of unique) {
      const entry = { writes: collected.get(channel).slice().reverse() };
      if (seeds.has(channel)) entry.seed = seeds.get(channel);
      result[channel] = entry;
    }
    return result;
  }

  /** Delete a thread: its checkpoints, values and writes in every checkpoint_ns. */
  async deleteThread(threadId) {
    await this.#call('DeleteGraphThread', { namespace: this.namespace, request_id: newId(), thread_id: String(threadId) });
  }

  /** Zero-padded text versions (as the Python savers'), so forks never reuse a version. */
  getNextVersion(current) {
    return nextVersion(current);
  }

  async #typed(value) {
    const [type, data] = await this.serde.dumpsTyped(value);
    return { type, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) };
  }

  #load(typed) {
    return this.serde.loadsTyped(typed.type, typed.data);
  }

  async #toTuple(message) {
    const cp = message.checkpoint;
    const checkpoint = await this.#load(cp.checkpoint);
    const channelValues = {};
    for (const value of message.channel_values) {
      if (value.value.type !== EMPTY) channelValues[value.channel] = await this.#load(value.value);
    }
    checkpoint.channel_values = channelValues;
    checkpoint.channel_versions ??= {};
    const config = { configurable: { thread_id: cp.thread_id, checkpoint_ns: cp.checkpoint_ns, checkpoint_id: cp.checkpoint_id } };
    const parentConfig = cp.parent_checkpoint_id
      ? { configurable: { thread_id: cp.thread_id, checkpoint_ns: cp.checkpoint_ns, checkpoint_id: cp.parent_checkpoint_id } }
      : undefined;
    if (checkpoint.v < 4 && parentConfig !== undefined) await this.#migratePendingSends(checkpoint, parentConfig);
    return {
      config,
      checkpoint,
      metadata: await this.serde.loadsTyped('json', cp.metadata_json),
      parentConfig,
      pendingWrites: await this.#writes(message.pending_writes),
    };
  }

  /** The pending writes in writesSortKey order, as [taskId, channel, value]. */
  async #writes(messages) {
    const sorted = [...messages].sort((a, b) => compareWritesSortKeys(
      writesSortKey(a.task_path, a.task_id, a.idx), writesSortKey(b.task_path, b.task_id, b.idx),
    ));
    return Promise.all(sorted.map(async (w) => [w.task_id, w.channel, await this.#load(w.value)]));
  }

  /**
   * A checkpoint of format v < 4 kept its pending sends as its parent's __pregel_tasks
   * writes: they become its __pregel_tasks channel value, as the Postgres saver migrates them.
   */
  async #migratePendingSends(checkpoint, parentConfig) {
    const { thread_id, checkpoint_ns, checkpoint_id } = parentConfig.configurable;
    const response = await this.#call('GetGraphCheckpoint', { namespace: this.namespace, thread_id, checkpoint_ns, checkpoint_id });
    const sends = (await this.#writes(response.checkpoint_tuple?.pending_writes ?? []))
      .filter(([, channel]) => channel === TASKS)
      .map(([, , value]) => value);
    if (sends.length === 0) return;
    checkpoint.channel_values[TASKS] = sends;
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }
}

const { GraphResumeWorker, ResumeRefused, resumeFor, resumeValue } = require('./resume_worker');

module.exports = { CheckpointdSaver, GraphResumeWorker, ResumeRefused, resumeFor, resumeValue };
