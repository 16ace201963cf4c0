'use strict';
// How the LangGraph.js saver shapes what it sends (src/langgraph/shape.js; no server needed).
// The saver against a server is spec/langgraph (vitest), which
// tests/polyglot/test_langgraph_js_validation.py runs.

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { describeInterrupt, nextVersion } = require('../src/langgraph/shape');

test('G14 versions are zero-padded text that sorts as handed out, from a number or a text', () => {
  const first = nextVersion(undefined);
  assert.match(first, /^0{31}1\.\d/);
  let current = first;
  for (let i = 0; i < 12; i += 1) {
    const next = nextVersion(current);
    assert.ok(next > current, `${next} > ${current}`);
    assert.ok(next.localeCompare(current) > 0);
    current = next;
  }
  assert.equal(current.split('.')[0], String(13).padStart(32, '0'));
  assert.equal(nextVersion(7).split('.')[0], String(8).padStart(32, '0'));
  assert.notEqual(nextVersion(first), nextVersion(first)); // the random tail: forks differ
});

test('G8 an interrupt is described by id, node, reason and its value as JSON', () => {
  const described = describeInterrupt(
    { id: 'abc', value: { reason: 'approval', amount: 12 } }, 'refunds', '~__pregel_pull, approve');
  assert.deepEqual(described, {
    interrupt_id: 'abc',
    graph_name: 'refunds',
    node: 'approve',
    reason: 'approval',
    context_json: '{"reason":"approval","amount":12}',
  });
  assert.equal(describeInterrupt({ id: 'x', value: 'ok?' }, '', '').reason, 'interrupt');
  assert.equal(describeInterrupt({ id: 'x', value: { reason: 3 } }, '', '').reason, 'interrupt');
  assert.equal(describeInterrupt({ id: 'x', value: [1, 2] }, '', '').context_json, '[1,2]');
  assert.equal(describeInterrupt({ id: 'x', value: null }, '', '').context_json, 'null');
});

test('G8 a value JSON cannot hold is shown as its inspect text', () => {
  const cyclic = { name: 'loop' };
  cyclic.self = cyclic;
  for (const [value, shown] of [[10n, '10n'], [undefined, 'undefined'], [cyclic, '<ref *1> { name: \'loop\', self: [Circular *1] }']]) {
    const described = describeInterrupt({ id: 'x', value }, 'g', 'p');
    assert.deepEqual(JSON.parse(described.context_json), { value: shown });
  }
});

test('G15 the resume value is the Python worker\'s shape; a worker refuses options it cannot run with', () => {
  const { GraphResumeWorker, resumeValue } = require('../src/langgraph');
  const decision = { approved: false, decided_by: 'ana', reason: 'too big', metadata_json: '{"limit":12,"to":["x"]}' };
  assert.deepEqual(resumeValue(decision), {
    approved: false, decided_by: 'ana', reason: 'too big', metadata: { limit: 12, to: ['x'] },
  });
  assert.deepEqual(resumeValue({ approved: true, decided_by: 'bo', metadata_json: '' }), {
    approved: true, decided_by: 'bo', reason: null, metadata: {},
  });
  const client = { namespace: 'support', close() {} };
  assert.throws(() => new GraphResumeWorker({ client }), /needs graphs, a resolver, or both/);
  assert.throws(() => new GraphResumeWorker({ client, graphs: { g: {} }, leaseSeconds: 0 }), RangeError);
  assert.throws(() => new GraphResumeWorker({ client, graphs: { g: {} }, concurrency: 0 }), RangeError);
  assert.throws(() => new GraphResumeWorker({ client, graphs: { g: {} }, namespace: 'other' }), /not the client's/);
  const worker = new GraphResumeWorker({ client, resolver: () => null, workerId: 'w-1' });
  assert.equal(worker.name, 'w-1');
  assert.equal(worker.namespace, 'support');
  assert.equal(worker.leaseSeconds, 30);
});

/** A saver whose client records the requests instead of sending them. */
function recordingSaver(options = {}) {
  const { CheckpointdSaver } = require('../src/langgraph');
  const sent = [];
  const client = {
    namespace: 'default',
    graph: 'graph-service',
    async call(_service, method, request) {
      sent.push({ method, request });
      return {};
    },
    close() {},
  };
  return { saver: new CheckpointdSaver({ client, ...options }), sent };
}

test('G17 putWrites sends the last write of an index and describes an interrupt once', async () => {
  const { saver, sent } = recordingSaver({ graphName: 'g' });
  const again = { id: 'i-1', value: 'feedback?' };
  await saver.putWrites(
    { configurable: { thread_id: 't', checkpoint_id: 'c' } },
    [['__resume__', ['1']], ['log', 'x'], ['__resume__', ['1', '2']], ['__interrupt__', [again, again]]],
    'task', 'path');
  const [{ method, request }] = sent;
  assert.equal(method, 'PutGraphWrites');
  assert.deepEqual(request.writes.map((w) => [w.idx, w.channel]), [[-4, '__resume__'], [1, 'log'], [-3, '__interrupt__']]);
  const [type, data] = [request.writes[0].value.type, request.writes[0].value.data];
  assert.deepEqual(await saver.serde.loadsTyped(type, data), ['1', '2']);
  assert.deepEqual(request.interrupts.map((i) => i.interrupt_id), ['i-1']);
});

test('G8 a pause is named by graph_name, the saver\'s graphName, then an Agent Server\'s graph_id', async () => {
  const pause = ['__interrupt__', [{ id: 'i', value: 'ok?' }]];
  const nameOf = async (options, configurable) => {
    const { saver, sent } = recordingSaver(options);
    await saver.putWrites({ configurable: { thread_id: 't', checkpoint_id: 'c', ...configurable } }, [pause], 'task', 'p');
    return sent[0].request.interrupts[0].graph_name;
  };
  assert.equal(await nameOf({}, { graph_id: 'agent' }), 'agent');
  assert.equal(await nameOf({ graphName: 'mine' }, { graph_id: 'agent' }), 'mine');
  assert.equal(await nameOf({ graphName: 'mine' }, { graph_id: 'agent', graph_name: 'run' }), 'run');
  assert.equal(await nameOf({}, {}), '');
});

test('K3 the worker answers a middleware pause with the typed decisions, in both spellings', () => {
  const { resumeFor, ResumeRefused } = require('../src/langgraph/resume_worker');
  const decided = (response, approved = true, reason = null) => ({
    approved, decided_by: 'ann', reason, metadata_json: '{}', response,
  });
  const typed = decided({
    actions: [
      { type: 'ACTION_DECISION_TYPE_EDIT', edited_args_json: '{"to":"bob"}', message: '' },
      { type: 'ACTION_DECISION_TYPE_REJECT', edited_args_json: '', message: 'keep it' },
    ],
    resume_json: '',
  }, false);
  const js = {
    actionRequests: [{ name: 'send_email', args: { to: 'ann' } }, { name: 'delete_file', args: {} }],
    reviewConfigs: [
      { actionName: 'send_email', allowedDecisions: ['approve', 'edit', 'reject'] },
      { actionName: 'delete_file', allowedDecisions: ['approve', 'reject'] },
    ],
  };
  assert.deepEqual(resumeFor({ id: 'i', value: js }, typed), {
    decisions: [
      { type: 'edit', editedAction: { name: 'send_email', args: { to: 'bob' } } },
      { type: 'reject', message: 'keep it' },
    ],
  });
  const python = {
    action_requests: [{ name: 'send_email', args: {} }, { name: 'delete_file', args: {} }],
    review_configs: [{ action_name: 'delete_file', allowed_decisions: ['approve', 'reject'] }],
  };
  const approveOnly = { ...python, review_configs: [{ action_name: 'delete_file', allowed_decisions: ['approve'] }] };
  assert.equal(resumeFor({ value: python }, typed).decisions[0].edited_action.name, 'send_email');
  // A verdict alone answers every action; one an action does not allow is refused.
  assert.deepEqual(resumeFor({ value: js }, decided(null, false, 'no')), {
    decisions: [{ type: 'reject', message: 'no' }, { type: 'reject', message: 'no' }],
  });
  assert.throws(() => resumeFor({ value: approveOnly }, decided(null, false)), ResumeRefused);
  assert.throws(() => resumeFor({ value: python }, decided({ actions: typed.response.actions.slice(1), resume_json: '' })),
    /asks about 2 action/);
  // A plain interrupt takes the resume value, or the verdict's shape; actions are refused.
  assert.deepEqual(resumeFor({ value: 'pick' }, decided({ actions: [], resume_json: '[1,{"a":null}]' })), [1, { a: null }]);
  assert.equal(resumeFor({ value: 'pick' }, decided(null)).approved, true);
  assert.throws(() => resumeFor({ value: 'pick' }, typed), /not a HumanInTheLoopMiddleware request/);
});
