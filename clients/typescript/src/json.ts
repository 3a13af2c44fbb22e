// JSON helpers that decide like Canon's Go side: canonical JSON (RFC 8785,
// which is what the store hashes and what limits are measured on), RFC 7396
// merge patches, RFC 6901 pointers and string splices in UTF-16 code units.

import type {JSONValue} from './wire.js';

export type {JSONValue};
export type JSONObject = {[k: string]: JSONValue};

export function isObject(v: unknown): v is JSONObject {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** canonical returns the RFC 8785 form of a JSON value, as Canon's store keeps it. */
export function canonical(v: JSONValue): string {
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'number':
      if (!Number.isFinite(v)) {
        throw new TypeError(`${v} is not a JSON number`);
      }
      // ECMAScript's number to string is RFC 8785's; -0 is 0.
      return JSON.stringify(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'object':
      if (v === null) {
        return 'null';
      }
      if (Array.isArray(v)) {
        return '[' + v.map(canonical).join(',') + ']';
      }
      break;
    default:
      throw new TypeError(`a ${typeof v} is not JSON`);
  }
  // Members sorted by their UTF-16 code units, which is JS's default sort.
  const keys = Object.keys(v).filter(k => v[k] !== undefined).sort();
  let out = '{';
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    out += (i ? ',' : '') + JSON.stringify(k) + ':' + canonical(v[k] as JSONValue);
  }
  return out + '}';
}

/** utf8Length is the length in bytes of s encoded as UTF-8. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      n += 1;
    } else if (c < 0x800) {
      n += 2;
    } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 4;
      i++;
    } else {
      n += 3;
    }
  }
  return n;
}

/** clone deep-copies a JSON value. */
export function clone<T extends JSONValue | undefined>(v: T): T {
  if (v === null || typeof v !== 'object') {
    return v;
  }
  if (Array.isArray(v)) {
    return v.map(x => clone(x)) as T;
  }
  const out: JSONObject = {};
  for (const k of Object.keys(v)) {
    const x = (v as JSONObject)[k];
    if (x !== undefined) {
      out[k] = clone(x);
    }
  }
  return out as T;
}

/** equal compares two JSON values as Canon does: by their canonical form. */
export function equal(a: JSONValue | undefined, b: JSONValue | undefined): boolean {
  if (a === b) {
    return true;
  }
  if (a === undefined || b === undefined || a === null || b === null || typeof a !== 'object' || typeof b !== 'object') {
    return false;
  }
  if (Array.isArray(a) !== Array.isArray(b)) {
    return false;
  }
  if (Array.isArray(a)) {
    const bb = b as JSONValue[];
    return a.length === bb.length && a.every((x, i) => equal(x, bb[i]));
  }
  const ao = a as JSONObject, bo = b as JSONObject;
  const ak = Object.keys(ao).filter(k => ao[k] !== undefined);
  const bk = Object.keys(bo).filter(k => bo[k] !== undefined);
  return ak.length === bk.length && ak.every(k => equal(ao[k], bo[k]));
}

/** mergePatch applies an RFC 7396 merge patch, as item.patch does; target is not changed. */
export function mergePatch(target: JSONValue | undefined, patch: JSONValue): JSONValue {
  if (!isObject(patch)) {
    return clone(patch);
  }
  const out: JSONObject = isObject(target) ? {...target} : {};
  for (const k of Object.keys(patch)) {
    const v = patch[k];
    if (v === undefined) {
      continue;
    }
    if (v === null) {
      delete out[k];
    } else {
      out[k] = mergePatch(out[k], v);
    }
  }
  return out;
}

/** parsePointer splits an RFC 6901 JSON pointer into its reference tokens. */
export function parsePointer(p: string): string[] {
  if (p === '') {
    return [];
  }
  if (!p.startsWith('/')) {
    throw new Error(`${JSON.stringify(p)} is not a JSON pointer: it must be empty or start with "/"`);
  }
  return p.slice(1).split('/').map(t => {
    if (/~[^01]|~$/.test(t)) {
      throw new Error(`${JSON.stringify(p)} is not a JSON pointer: "~" must be followed by 0 or 1`);
    }
    return t.replaceAll('~1', '/').replaceAll('~0', '~');
  });
}

function arrayIndex(tok: string): number | undefined {
  return /^(0|[1-9][0-9]*)$/.test(tok) ? Number(tok) : undefined;
}

function isHigh(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}

/**
 * splice returns a copy of doc where the string at pointer has del UTF-16
 * code units at index replaced by insert, or throws the reason it does not
 * fit (Canon's invalid_edit).
 */
export function splice(doc: JSONValue, pointer: string, index: number, del: number, insert: string): JSONValue {
  const tokens = parsePointer(pointer);
  const where = pointer === '' ? 'data' : `data at path ${JSON.stringify(pointer)}`;
  const edit = (node: JSONValue, i: number): JSONValue => {
    if (i === tokens.length) {
      if (typeof node !== 'string') {
        throw new Error(`${where}: the target is ${kind(node)}, not a string`);
      }
      if (index > node.length || index + del > node.length) {
        throw new Error(`${where}: index ${index} and delete ${del} are out of the string of ${node.length} UTF-16 code units`);
      }
      const cuts = (at: number) => at > 0 && at < node.length && isHigh(node.charCodeAt(at - 1));
      if (cuts(index) || cuts(index + del)) {
        throw new Error(`${where}: the splice would cut a character outside the BMP in half`);
      }
      return node.slice(0, index) + insert + node.slice(index + del);
    }
    const tok = tokens[i]!;
    const at = '/' + tokens.slice(0, i + 1).map(t => t.replaceAll('~', '~0').replaceAll('/', '~1')).join('/');
    if (Array.isArray(node)) {
      const n = arrayIndex(tok);
      if (n === undefined || n >= node.length) {
        throw new Error(`path ${JSON.stringify(at)}: ${JSON.stringify(tok)} is not an index of an array of ${node.length} elements`);
      }
      const copy = [...node];
      copy[n] = edit(node[n]!, i + 1);
      return copy;
    }
    if (isObject(node)) {
      if (!Object.hasOwn(node, tok)) {
        throw new Error(`path ${JSON.stringify(at)}: no member ${JSON.stringify(tok)}`);
      }
      return {...node, [tok]: edit(node[tok]!, i + 1)};
    }
    throw new Error(`path ${JSON.stringify(at)}: cannot go into ${kind(node)}`);
  };
  return edit(doc, 0);
}

/** kind names a JSON value's type as Canon's messages do. */
export function kind(v: JSONValue | undefined): string {
  if (v === undefined) {
    return 'nothing';
  }
  if (v === null) {
    return 'null';
  }
  if (Array.isArray(v)) {
    return 'an array';
  }
  switch (typeof v) {
    case 'object':
      return 'an object';
    case 'string':
      return 'a string';
    case 'boolean':
      return 'a boolean';
  }
  return 'a number';
}

/** sha256Hex is the lowercase hex SHA-256 of s's UTF-8 bytes (Web Crypto: browsers and Node). */
export async function sha256Hex(s: string): Promise<string> {
  const d = await globalThis.crypto.subtle.digest('SHA-256', new TextEncoder().encode(s));
  let out = '';
  for (const b of new Uint8Array(d)) {
    out += b.toString(16).padStart(2, '0');
  }
  return out;
}
