'use strict';
/**
 * A process that pauses a LangGraph.js thread, runs a GraphResumeWorker, or lists checkpoints,
 * against checkpointd (the JavaScript twin of tests/graph/graph_worker.py):
 *
 *   node spec/langgraph/support_graph.cjs pause --target T --namespace NS --thread THREAD --dir D
 *   node spec/langgraph/support_graph.cjs work --target T --namespace NS --dir D [--block] [--name N]
 *   node spec/langgraph/support_graph.cjs list --target T --namespace NS --thread THREAD
 *   (pause and work take --graph js-chain for the second graph, buildChain's)
 *
 * The graph "js-support": `a` and `b` run in parallel, each calls interrupt() and, once
 * resumed, appends "<node>:<approved>:<decided_by>" to D/<thread>.log and writes the value
 * interrupt() returned to D/<thread>.<node>.json; then `ship` appends
 * "ship". `pause` runs the thread up to its two interrupts and prints their ids as JSON by
 * node. `work` runs a worker (2 s leases) until SIGTERM (or a kill); with --block, a node that
 * got its resume value writes D/<thread>.entered and then hangs, so that a test can kill the
 * worker mid-resume; with --die-before-report it kills itself (SIGKILL) when it is about to
 * report a resume, the graph having run; with --fail a resumed node throws. `list` prints the thread ids of the checkpoints that list() returns for
 * THREAD and across threads (or the error of the latter).
 */
const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');
const { Annotation, END, START, StateGraph, interrupt } = require('@langchain/langgraph');
const { CheckpointdSaver, GraphResumeWorker } = require('../../src/langgraph');

const GRAPH_NAME = 'js-support';
const CHAIN_NAME = 'js-chain';

const State = Annotation.Root({
  log: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

function build(saver, directory, block, fail) {
  const asker = (name) => async (state, config) => {
    const answer = interrupt({ reason: `approve-${name}`, node: name });
    const thread = config.configurable.thread_id;
    if (fail) throw new Error(`${name} refuses ${answer.decided_by}`);
    if (block) {
      fs.writeFileSync(path.join(directory, `${thread}.entered`), String(process.pid));
      await new Promise(() => setInterval(() => {}, 60_000)); // hangs until the test kills it
    }
    fs.appendFileSync(path.join(directory, `${thread}.log`), `${name}:${answer.approved}:${answer.decided_by}\n`);
    fs.writeFileSync(path.join(directory, `${thread}.${name}.json`), JSON.stringify(answer));
    return { log: [`${name}:${answer.approved}`] };
  };
  const ship = (state, config) => {
    fs.appendFileSync(path.join(directory, `${config.configurable.thread_id}.log`), 'ship\n');
    return { log: ['ship'] };
  };
  return new StateGraph(State)
    .addNode('a', asker('a'))
    .addNode('b', asker('b'))
    .addNode('ship', ship)
    .addEdge(START, 'a')
    .addEdge(START, 'b')
    .addEdge(['a', 'b'], 'ship')
    .addEdge('ship', END)
    .compile({ checkpointer: saver });
}

/**
 * The graph "js-chain": `approve` calls interrupt() and, once resumed, appends
 * "approve:<approved>:<decided_by>"; `slow` appends "slow-entered" and, with --block, waits
 * until the approve step's checkpoint is saved (LangGraph saves it in the background), writes
 * D/<thread>.entered and hangs, else appends "slow"; then `finish` appends "finish".
 */
function buildChain(saver, directory, block) {
  const log = (config, line) => fs.appendFileSync(path.join(directory, `${config.configurable.thread_id}.log`), `${line}\n`);
  let compiled;
  const approve = (state, config) => {
    const answer = interrupt({ reason: 'approve', node: 'approve' });
    log(config, `approve:${answer.approved}:${answer.decided_by}`);
    return { log: ['approve'] };
  };
  const slow = async (state, config) => {
    log(config, 'slow-entered');
    if (block) {
      const thread = config.configurable.thread_id;
      for (;;) {
        const saved = await compiled.getState({ configurable: { thread_id: thread } });
        if (saved.next.length === 1 && saved.next[0] === 'slow') break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      fs.writeFileSync(path.join(directory, `${thread}.entered`), String(process.pid));
      await new Promise(() => setInterval(() => {}, 60_000)); // hangs until the test kills it
    }
    log(config, 'slow');
    return { log: ['slow'] };
  };
  const finish = (state, config) => {
    log(config, 'finish');
    return { log: ['finish'] };
  };
  compiled = new StateGraph(State)
    .addNode('approve', approve)
    .addNode('slow', slow)
    .addNode('finish', finish)
    .addEdge(START, 'approve')
    .addEdge('approve', 'slow')
    .addEdge('slow', 'finish')
    .addEdge('finish', END)
    .compile({ checkpointer: saver });
  return compiled;
}

async function threadsOf(saver, config) {
  const threads = [];
  for await (const tuple of saver.list(config)) threads.push(tuple.config.configurable.thread_id);
  return threads;
}

async function main() {
  const { positionals: [phase], values: args } = parseArgs({
    allowPositionals: true,
    options: {
      target: { type: 'string' },
      namespace: { type: 'string' },
      thread: { type: 'string', default: '' },
      dir: { type: 'string', default: '.' },
      name: { type: 'string' },
      block: { type: 'boolean', default: false },
      fail: { type: 'boolean', default: false },
      'die-before-report': { type: 'boolean', default: false },
      graph: { type: 'string', default: GRAPH_NAME },
    },
  });
  const graphName = args.graph;
  const saver = new CheckpointdSaver({ target: args.target, namespace: args.namespace, graphName });
  const graph = graphName === CHAIN_NAME
    ? buildChain(saver, args.dir, args.block)
    : build(saver, args.dir, args.block, args.fail);
  if (phase === 'pause') {
    const config = { configurable: { thread_id: args.thread } };
    const result = await graph.invoke({ log: [] }, config);
    const ids = Object.fromEntries(result.__interrupt__.map((i) => [i.value.node, i.id]));
    process.stdout.write(`${JSON.stringify(ids)}\n`);
    await saver.end();
    return;
  }
  if (phase === 'list') {
    const own = await threadsOf(saver, { configurable: { thread_id: args.thread } });
    let across;
    try {
      across = { threads: await threadsOf(saver, {}) };
    } catch (error) {
      across = { error: error.message };
    }
    process.stdout.write(`${JSON.stringify({ own, across })}\n`);
    await saver.end();
    return;
  }
  if (args['die-before-report']) {
    saver.client.reportResume = async () => process.kill(process.pid, 'SIGKILL');
  }
  const worker = new GraphResumeWorker({
    client: saver.client, graphs: { [graphName]: graph }, leaseSeconds: 2, name: args.name,
  });
  process.on('SIGTERM', () => {
    worker.close().then(() => saver.end()).then(() => process.exit(0));
  });
  process.stdout.write(`${JSON.stringify({ worker: process.pid })}\n`);
  await worker.run();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
