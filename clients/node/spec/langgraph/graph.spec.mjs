// A real LangGraph.js StateGraph on CheckpointdSaver, end to end (contract G14): a Send
// fan-out, a subgraph that interrupts, the pause in the pending-interrupt inbox while it
// waits, a resume by interrupt id from another process, and time travel from an old
// checkpoint. Against the server at $CHECKPOINTD_TARGET, in the namespace
// $CHECKPOINTD_TEST_NAMESPACE-graph.
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Command } from '@langchain/langgraph';

const require = createRequire(import.meta.url);
const { CheckpointdClient } = require('../../src');
const { CheckpointdSaver } = require('../../src/langgraph');
const { GRAPH_NAME, buildGraph, pendingInterrupts } = require('./review_graph.cjs');

const APP = fileURLToPath(new URL('./review_graph.cjs', import.meta.url));
const namespace = `${process.env.CHECKPOINTD_TEST_NAMESPACE || `js-${process.pid}`}-graph`;

/** The inbox's pending interrupts of `thread`. */
async function inbox(client, thread) {
  const listed = await client.listPendingInterrupts({ pageSize: 100 });
  return listed.pending_interrupts.filter((p) => p.execution_id === thread);
}

describe('a LangGraph.js graph on CheckpointdSaver', () => {
  let client;
  let saver;
  let graph;
  const thread = 'review-1'; // the namespace is the run's own
  const config = { configurable: { thread_id: thread } };
  let paused;

  beforeAll(async () => {
    // The first process runs the graph until it pauses and exits.
    const { stdout } = await promisify(execFile)(process.execPath, [APP, namespace, thread, 'a', 'b', 'c'], { env: process.env });
    paused = JSON.parse(stdout).interrupts;
    // This process is the second: a saver and a graph of its own, nothing shared in memory.
    client = new CheckpointdClient({ namespace });
    saver = new CheckpointdSaver({ client, graphName: GRAPH_NAME });
    await saver.setup();
    graph = buildGraph(saver);
  });

  afterAll(async () => {
    await saver?.end();
    client?.close();
  });

  it('pauses in the subgraph after the Send fan-out, and the pause is in the inbox', async () => {
    expect(paused).toEqual([{ id: expect.any(String), value: { reason: 'approval', count: 3 } }]);
    const state = await graph.getState(config);
    expect([...state.values.done].sort()).toEqual(['A', 'B', 'C']);
    expect(state.next).toEqual(['review']);
    const rows = await inbox(client, thread);
    expect(rows.map((p) => p.interrupt_id)).toEqual([paused[0].id]);
    expect(rows[0].chain_name).toBe(GRAPH_NAME);
    expect(rows[0].node_id).toBe('approve');
    expect(rows[0].reason).toBe('approval');
    expect(rows[0].checkpoint_ns).toMatch(/^review:/);
    expect(JSON.parse(rows[0].context_json)).toEqual({ reason: 'approval', count: 3 });
  });

  it('resumes by interrupt id in another process, and the pause leaves the inbox', async () => {
    const resume = { [paused[0].id]: { approved: true, decided_by: 'ana' } };
    const out = await graph.invoke(new Command({ resume }), config);
    expect(out.verdict).toBe('approved by ana');
    expect([...out.done].sort()).toEqual(['A', 'B', 'C']);
    expect((await graph.getState(config)).next).toEqual([]);
    expect(await inbox(client, thread)).toEqual([]);
  });

  it('travels back to the checkpoint before the review and runs a new branch from it', async () => {
    const history = [];
    for await (const snapshot of graph.getStateHistory(config)) history.push(snapshot);
    const before = history.find((s) => s.next.length === 1 && s.next[0] === 'review');
    expect(before).toBeDefined();
    const fork = { configurable: { thread_id: thread, checkpoint_id: before.config.configurable.checkpoint_id } };
    await graph.invoke(null, fork);
    const again = await pendingInterrupts(graph, config);
    expect(again).toHaveLength(1);
    expect((await inbox(client, thread)).map((p) => p.interrupt_id)).toEqual([again[0].id]);
    const out = await graph.invoke(new Command({ resume: { [again[0].id]: { approved: false } } }), config);
    expect(out.verdict).toBe('rejected');
    expect([...out.done].sort()).toEqual(['A', 'B', 'C']);
    expect(await inbox(client, thread)).toEqual([]);
    // The first branch is still there: its last checkpoint keeps the first verdict.
    const first = history.find((s) => s.values.verdict === 'approved by ana' && s.next.length === 0);
    const old = await graph.getState(first.config);
    expect(old.values.verdict).toBe('approved by ana');
    const branched = [];
    for await (const snapshot of graph.getStateHistory(config)) branched.push(snapshot);
    const seen = new Set(history.map((s) => s.config.configurable.checkpoint_id));
    const forked = branched.filter((s) => !seen.has(s.config.configurable.checkpoint_id)
      && s.parentConfig?.configurable?.checkpoint_id === before.config.configurable.checkpoint_id);
    expect(forked).toHaveLength(1);
  });
});

describe('what LangGraph.js writes in one putWrites call (contract G17)', () => {
  it('finishes a node that asks twice with both answers, as on MemorySaver', async () => {
    const { Annotation, MemorySaver, START, StateGraph, interrupt } = await import('@langchain/langgraph');
    const Answers = Annotation.Root({ answers: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }) });
    const build = (checkpointer) => new StateGraph(Answers)
      .addNode('ask', () => ({ answers: [interrupt('first?'), interrupt('second?')] }))
      .addEdge(START, 'ask')
      .compile({ checkpointer });
    const run = async (checkpointer, thread) => {
      const graph = build(checkpointer);
      const config = { configurable: { thread_id: thread } };
      const seen = [(await graph.invoke({ answers: [] }, config)).__interrupt__[0].value];
      seen.push((await graph.invoke(new Command({ resume: 'one' }), config)).__interrupt__[0].value);
      seen.push((await graph.invoke(new Command({ resume: 'two' }), config)).answers);
      return seen;
    };
    const expected = await run(new MemorySaver(), 'twice');
    expect(expected).toEqual(['first?', 'second?', ['one', 'two']]);
    const client = new CheckpointdClient({ namespace: `${namespace}-g17` });
    const saver = new CheckpointdSaver({ client, graphName: 'twice' });
    try {
      expect(await run(saver, 'twice')).toEqual(expected);
    } finally {
      await saver.end();
      client.close();
    }
  });
});
