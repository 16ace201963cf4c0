// LangGraph's own conformance suite for checkpoint savers (@langchain/langgraph-checkpoint-
// validation): specTest (put, putWrites, getTuple, list, deleteThread) and the opt-in
// getDeltaChannelHistory tests, against the server at $CHECKPOINTD_TARGET. Every saver the
// suite creates gets a fresh namespace ($CHECKPOINTD_TEST_NAMESPACE-<n>), so listings across
// threads see only its own rows; all of them share one client (one channel).
import { createRequire } from 'node:module';
import { deltaChannelHistoryTests, specTest } from '@langchain/langgraph-checkpoint-validation';

const require = createRequire(import.meta.url);
const { CheckpointdClient } = require('../../src');
const { CheckpointdSaver } = require('../../src/langgraph');

const prefix = process.env.CHECKPOINTD_TEST_NAMESPACE || `js-${process.pid}`;
let client;
let created = 0;

const initializer = {
  checkpointerName: 'checkpointd',
  beforeAll() {
    client = new CheckpointdClient({ namespace: prefix });
  },
  afterAll() {
    client.close();
  },
  async createCheckpointer() {
    created += 1;
    const saver = new CheckpointdSaver({ client, namespace: `${prefix}-${created}` });
    await saver.setup();
    return saver;
  },
  async destroyCheckpointer(saver) {
    await saver.end(); // leaves the shared client open
  },
};

specTest(initializer);
deltaChannelHistoryTests(initializer);
