'use strict';
// The big-integer-safe JSON parser and writer (no server needed).

const assert = require('node:assert/strict');
const { test } = require('node:test');
const json = require('../src/json');

test('J1 integers beyond 2^53 keep every digit', () => {
  const text = '{"big":123456789012345678901234567890,"neg":-9007199254740993,"edge":9007199254740991}';
  const value = json.parse(text);
  assert.equal(value.big, 123456789012345678901234567890n);
  assert.equal(value.neg, -9007199254740993n);
  assert.equal(value.edge, 9007199254740991); // the largest safe integer stays a Number
  assert.equal(json.stringify(value), text);
  // JSON.parse would have rounded it: the reason this module exists.
  assert.notEqual(String(JSON.parse(text).neg), '-9007199254740993');
});

test('J1 ordinary JSON parses exactly as JSON.parse does', () => {
  const texts = [
    '{"a":[1,2.5,-0.125,1e-7,6.02e23,true,false,null],"b":{"c":{}},"d":[]}',
    '"caf\\u00e9 \\ud83d\\ude80 \\n\\t\\"\\\\\\/"',
    ' [ 1 , { "x" : "y" } ] ',
    '{"__proto__":{"polluted":true},"日本語":"✓"}',
    '0',
    '-1.5E+3',
  ];
  for (const text of texts) {
    assert.deepEqual(json.parse(text), JSON.parse(text), text);
  }
  assert.equal({}.polluted, undefined);
});

test('J2 text that is not standard JSON is refused like JSON.parse refuses it', () => {
  const bad = ['', 'NaN', 'Infinity', '-Infinity', '{"a":1,}', '[1 2]', "{'a':1}", '01', '1.', '.5',
    '"\u0001"', '"\\x41"', '{"a"}', 'nul', '[1]x', '+1', '"abc'];
  for (const text of bad) {
    assert.throws(() => JSON.parse(text), SyntaxError, `JSON.parse accepted ${text}`);
    assert.throws(() => json.parse(text), SyntaxError, `parse accepted ${text}`);
  }
});

test('J2 stringify refuses what JSON cannot hold', () => {
  assert.throws(() => json.stringify({ a: NaN }), TypeError);
  assert.throws(() => json.stringify([Infinity]), TypeError);
  const cyclic = {};
  cyclic.self = cyclic;
  assert.throws(() => json.stringify(cyclic), TypeError);
  assert.equal(json.stringify({ a: undefined, b: [2n ** 64n] }), '{"b":[18446744073709551616]}');
});

test('J2 a number that overflows to Infinity is refused, as the server refuses it', () => {
  for (const text of ['1e999', '-1e999', '{"a":[1E400]}', '-0.5e99999']) {
    assert.equal(Math.abs(Number(JSON.parse(text.replace(/^\{"a":\[|\]\}$/g, '')))), Infinity);
    assert.throws(() => json.parse(text), /overflows to Infinity/, text);
  }
  assert.deepEqual(json.parse('[1.7976931348623157e308,1e-999]'), [1.7976931348623157e308, 0]);
});
