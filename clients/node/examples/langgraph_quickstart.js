// A LangGraph.js graph whose checkpoints live in checkpointd: pause for a person, resume.
const crypto = require('node:crypto');
const { Annotation, START, StateGraph, interrupt } = require('@langchain/langgraph');
const { CheckpointdSaver, GraphResumeWorker } = require('checkpointd-client/langgraph');

const Order = Annotation.Root({
  amount: Annotation(),
  log: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

function approve(state) {
  // Waits in the approvals inbox; returns the decision once a person has made it.
  const decision = interrupt({ amount: state.amount });
  const verdict = decision.approved ? 'approved' : 'rejected';
  return { log: [`${verdict} by ${decision.decided_by}`] };
}

async function main() {
  // $CHECKPOINTD_TARGET, default 127.0.0.1:7470; graphName is the pause's chain in the inbox.
  const saver = new CheckpointdSaver({ graphName: 'orders' });
  const graph = new StateGraph(Order).addNode('approve', approve).addEdge(START, 'approve')
    .compile({ checkpointer: saver });
  const thread = `order-${crypto.randomUUID().slice(0, 8)}`;
  const config = { configurable: { thread_id: thread } };

  const paused = await graph.invoke({ amount: 500 }, config);
  const [pause] = paused.__interrupt__;
  console.log(`paused: thread ${thread}, interrupt ${pause.id}, waiting for ${JSON.stringify(pause.value)}`);
  console.log('decide it on http://127.0.0.1:7471/ or in another terminal with:');
  console.log(`  checkpointd interrupts decide ${thread} --interrupt-id ${pause.id} --approve`);

  // A worker (in this process here; usually a service of its own) resumes decided pauses.
  const worker = new GraphResumeWorker({ client: saver.client, graphs: { orders: graph } }).start();
  while ((await graph.getState(config)).tasks.some((task) => task.interrupts.length > 0)) {
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await worker.close();
  console.log('resumed:', JSON.stringify((await graph.getState(config)).values.log));
  await saver.end();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
