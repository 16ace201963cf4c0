'use strict';
/**
 * How the LangGraph.js saver (./index.js) shapes its requests: versions, the inbox's
 * description of an interrupt, and the checks of a config, as the Python savers' _shape.py.
 * Internal: the package exports CheckpointdSaver only.
 */

const util = require('node:util');

/** The type of a channel named in newVersions that has no value (as the Postgres saver's). */
const EMPTY = 'empty';
/** The largest page the server returns. */
const MAX_PAGE = 1000;
/** The most channels one GetGraphDeltaHistory walks. */
const MAX_DELTA_CHANNELS = 100;
/** The thread a setup() probe reads (a graph never uses it). */
const PROBE_THREAD = '__checkpointd_setup__';
const EMPTY_BYTES = Buffer.alloc(0);

/** A channel version after `current`: an increasing counter and a random tail, the text
 * langgraph-checkpoint-postgres (and the Python savers) hand out; they sort as text. */
function nextVersion(current) {
  let number = 0;
  if (typeof current === 'number') number = Math.trunc(current);
  else if (typeof current === 'string') number = Number.parseInt(current.split('.')[0], 10) || 0;
  return `${String(number + 1).padStart(32, '0')}.${String(Math.random()).padStart(16, '0')}`;
}

/** The configurable of a config, or a TypeError naming what is missing. */
function configurableOf(config, ...required) {
  const configurable = config?.configurable;
  if (configurable === undefined || configurable === null) {
    throw new TypeError('config.configurable is missing');
  }
  for (const key of required) {
    const value = configurable[key];
    if (value === undefined || value === null || value === '') {
      throw new TypeError(`config.configurable.${key} is missing`);
    }
  }
  return configurable;
}

function nsOf(configurable) {
  const ns = configurable.checkpoint_ns;
  return ns === undefined || ns === null ? '' : String(ns);
}

/**
 * The inbox's description of a LangGraph Interrupt ({ id, value }): its value as JSON (its
 * util.inspect text as {"value": ...} when it is not JSON), its reason (the value's string
 * `reason` when it is an object that has one, else "interrupt"), the node (the task path's
 * last part) and the graph's name.
 */
function describeInterrupt(interrupt, graphName, taskPath) {
  const value = interrupt.value;
  let context;
  try {
    context = JSON.stringify(value); // undefined for undefined or a function
  } catch {
    context = undefined; // a BigInt, a cycle
  }
  if (typeof context !== 'string') {
    context = JSON.stringify({ value: util.inspect(value, { depth: 4, breakLength: Infinity }) });
  }
  const reason = value !== null && typeof value === 'object' && !Array.isArray(value) ? value.reason : undefined;
  return {
    interrupt_id: String(interrupt.id),
    graph_name: graphName,
    node: taskPath.split(', ').pop().slice(0, 512),
    reason: typeof reason === 'string' ? reason.slice(0, 256) : 'interrupt',
    context_json: context,
  };
}

module.exports = { EMPTY, EMPTY_BYTES, MAX_DELTA_CHANNELS, MAX_PAGE, PROBE_THREAD, configurableOf, describeInterrupt, nextVersion, nsOf };
