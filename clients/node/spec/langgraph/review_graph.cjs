'use strict';
/**
 * A LangGraph.js graph for the saver's end-to-end spec (graph.spec.mjs): "plan" fans out one
 * Send per item to "work", then "review" runs a subgraph whose node interrupts for a human.
 *
 * Run as a program it is the first process of the spec:
 *   node spec/langgraph/review_graph.cjs <namespace> <thread> <item>...
 * invokes the graph until it pauses, prints {"interrupts":[{id, value}]} and exits.
 */
const { Annotation, END, START, Send, StateGraph, interrupt } = require('@langchain/langgraph');
const { CheckpointdSaver } = require('../../src/langgraph');

const GRAPH_NAME = 'js-review';

const State = Annotation.Root({
  items: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
  done: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
  verdict: Annotation(),
});

const ReviewState = Annotation.Root({
  count: Annotation(),
  verdict: Annotation(),
});

/** The subgraph: one node that waits for a decision on the work done. */
const review = new StateGraph(ReviewState)
  .addNode('approve', (state) => {
    const answer = interrupt({ reason: 'approval', count: state.count });
    return { verdict: answer.approved ? `approved by ${answer.decided_by}` : 'rejected' };
  })
  .addEdge(START, 'approve')
  .addEdge('approve', END)
  .compile();

function buildGraph(saver) {
  return new StateGraph(State)
    .addNode('plan', () => ({}))
    .addNode('work', (arg) => ({ done: [String(arg.item).toUpperCase()] }))
    .addNode('review', async (state, config) => {
      const out = await review.invoke({ count: state.done.length }, config);
      return { verdict: out.verdict };
    })
    .addEdge(START, 'plan')
    .addConditionalEdges('plan', (state) => state.items.map((item) => new Send('work', { item })), ['work'])
    .addEdge('work', 'review')
    .addEdge('review', END)
    .compile({ checkpointer: saver });
}

/** The interrupts the thread waits on, as [{ id, value }]. */
async function pendingInterrupts(graph, config) {
  const state = await graph.getState(config);
  return state.tasks.flatMap((task) => task.interrupts ?? []).map(({ id, value }) => ({ id, value }));
}

module.exports = { GRAPH_NAME, buildGraph, pendingInterrupts };

if (require.main === module) {
  const [namespace, thread, ...items] = process.argv.slice(2);
  const saver = new CheckpointdSaver({ namespace, graphName: GRAPH_NAME });
  const graph = buildGraph(saver);
  const config = { configurable: { thread_id: thread } };
  (async () => {
    await saver.setup();
    await graph.invoke({ items }, config);
    process.stdout.write(JSON.stringify({ interrupts: await pendingInterrupts(graph, config) }));
    await saver.end();
  })().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
