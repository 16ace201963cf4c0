// The types of the ES module entry (./index.mjs): the named exports of ./index.js.
export * from './index.js';
