'use strict';
/**
 * JSON text that keeps every digit of an integer.
 *
 * checkpointd carries JSON fields as text (the `*_json` fields) so that integers survive the
 * trip exactly. JavaScript's JSON.parse turns every number into a double, which rounds
 * integers beyond 2^53 (9007199254740993 becomes 9007199254740992). This module parses
 * standard JSON (RFC 8259) the same way JSON.parse does, except that an integer literal
 * outside Number's safe range becomes a BigInt; stringify writes BigInts back as their digits.
 * Safe integers and all other numbers stay Numbers, so ordinary data looks as usual. A number
 * that overflows a double (1e999) is refused, as the server refuses it.
 */

const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);
const SAFE_MIN = BigInt(Number.MIN_SAFE_INTEGER);
const NUMBER_RE = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
const STRING_RE = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const WHITESPACE_RE = /[ \t\n\r]*/y;
const MAX_DEPTH = 10000;

/** Parse JSON text; integers beyond 2^53 come back as BigInt. Throws SyntaxError. */
function parse(text) {
  if (typeof text !== 'string') {
    throw new TypeError('parse() takes JSON text');
  }
  let pos = 0;
  let depth = 0;

  const fail = (what) => {
    throw new SyntaxError(`JSON: ${what} at position ${pos}`);
  };
  const skipSpace = () => {
    WHITESPACE_RE.lastIndex = pos;
    WHITESPACE_RE.exec(text);
    pos = WHITESPACE_RE.lastIndex;
  };
  const literal = (word, value) => {
    if (text.startsWith(word, pos)) {
      pos += word.length;
      return value;
    }
    return fail('unexpected token');
  };
  const string = () => {
    STRING_RE.lastIndex = pos;
    const match = STRING_RE.exec(text);
    if (!match) fail('bad string');
    pos = STRING_RE.lastIndex;
    return JSON.parse(match[0]);
  };
  const number = () => {
    NUMBER_RE.lastIndex = pos;
    const match = NUMBER_RE.exec(text);
    if (!match) fail('unexpected token');
    pos = NUMBER_RE.lastIndex;
    if (match[1] === undefined && match[2] === undefined) {
      const big = BigInt(match[0]);
      if (big > SAFE_MAX || big < SAFE_MIN) return big;
    }
    const number = Number(match[0]);
    // Standard JSON syntax, but beyond a double: the server refuses it (it would read back as
    // Infinity, which JSON cannot write), so this parser does too.
    if (!Number.isFinite(number)) fail('number overflows to Infinity');
    return number;
  };
  const value = () => {
    skipSpace();
    const ch = text[pos];
    if (ch === '{' || ch === '[') {
      if (++depth > MAX_DEPTH) fail('nesting too deep');
      const result = ch === '{' ? object() : array();
      depth -= 1;
      return result;
    }
    if (ch === '"') return string();
    if (ch === 't') return literal('true', true);
    if (ch === 'f') return literal('false', false);
    if (ch === 'n') return literal('null', null);
    return number();
  };
  const object = () => {
    pos += 1;
    const result = {};
    skipSpace();
    if (text[pos] === '}') {
      pos += 1;
      return result;
    }
    for (;;) {
      skipSpace();
      if (text[pos] !== '"') fail('expected a string key');
      const key = string();
      skipSpace();
      if (text[pos] !== ':') fail("expected ':'");
      pos += 1;
      // defineProperty, so a "__proto__" key is data, as with JSON.parse.
      Object.defineProperty(result, key, {
        value: value(),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      skipSpace();
      if (text[pos] === ',') {
        pos += 1;
      } else if (text[pos] === '}') {
        pos += 1;
        return result;
      } else {
        fail("expected ',' or '}'");
      }
    }
  };
  const array = () => {
    pos += 1;
    const result = [];
    skipSpace();
    if (text[pos] === ']') {
      pos += 1;
      return result;
    }
    for (;;) {
      result.push(value());
      skipSpace();
      if (text[pos] === ',') {
        pos += 1;
      } else if (text[pos] === ']') {
        pos += 1;
        return result;
      } else {
        fail("expected ',' or ']'");
      }
    }
  };

  const result = value();
  skipSpace();
  if (pos !== text.length) fail('unexpected text after the value');
  return result;
}

/** Write a value as JSON text; a BigInt is written as its digits. Throws on NaN/Infinity. */
function stringify(value) {
  const seen = new Set();
  const write = (v) => {
    switch (typeof v) {
      case 'bigint':
        return v.toString();
      case 'number':
        if (!Number.isFinite(v)) throw new TypeError(`JSON has no ${v}`);
        return JSON.stringify(v);
      case 'string':
        return JSON.stringify(v);
      case 'boolean':
        return v ? 'true' : 'false';
      case 'object':
        break;
      default:
        throw new TypeError(`cannot write a ${typeof v} as JSON`);
    }
    if (v === null) return 'null';
    if (seen.has(v)) throw new TypeError('cannot write a cyclic structure as JSON');
    seen.add(v);
    let out;
    if (Array.isArray(v)) {
      out = `[${v.map(write).join(',')}]`;
    } else {
      const parts = Object.keys(v)
        .filter((k) => v[k] !== undefined)
        .map((k) => `${JSON.stringify(k)}:${write(v[k])}`);
      out = `{${parts.join(',')}}`;
    }
    seen.delete(v);
    return out;
  };
  return write(value);
}

module.exports = { parse, stringify };
