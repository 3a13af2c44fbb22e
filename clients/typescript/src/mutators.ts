// Running mutators: the Tx of the shared mutator contract over the local
// view, the built-in mutators in TypeScript (deciding as model/builtins.go
// does), and the determinism guards.

import {canonical, clone, isObject, kind, mergePatch, splice, utf8Length, type JSONObject, type JSONValue} from './json.js';
import {itemKey, Layers, Overlay, type Item} from './view.js';

/** Who sent a mutation, and which one it is. */
export interface MutationInfo {
  org: string;
  project: string;
  branch: string;
  clientGroup: string;
  client: string;
  id: number;
  name: string;
}

/** Tx is what a mutator gets: the contract shared with Canon's server sandbox. */
export interface Tx {
  readonly mutation: Readonly<MutationInfo>;
  /** ms since the epoch: the mutation's log time on the server; locally, the time of mutate(). */
  now(): number;
  /** A deep copy of the item, or undefined. */
  get(collection: string, id: string): Item | undefined;
  has(collection: string, id: string): boolean;
  put(collection: string, id: string, data: JSONValue, meta?: JSONObject): void;
  /** false when the item did not exist. */
  delete(collection: string, id: string): boolean;
  scalar(name: string): JSONValue | undefined;
  /** null deletes the scalar. */
  setScalar(name: string, value: JSONValue | null): void;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Mutator = (tx: Tx, args: any) => void | Promise<void>;
export type Mutators = Record<string, Mutator>;

/** The built-in mutators' names: an application's bundle may not use them. */
export const BUILTIN_NAMES = ['item.put', 'item.patch', 'item.delete', 'item.splice', 'project.set'] as const;
const RESERVED_PREFIXES = ['branch.', 'canon.', 'system.'];
const MUTATOR_NAME = /^[A-Za-z][A-Za-z0-9._-]{0,63}$/;
const ERROR_CODE = /^[a-z][a-z0-9_]{0,31}$/;

/** Canon's default limits (schemas.Limits), on canonical JSON. */
export const Limits = {
  maxScalarsBytes: 1536,
  maxMetaBytes: 4 << 10,
  maxDataBytes: 1 << 20,
  maxArgsBytes: (1 << 20) + (64 << 10),
};

/** MutatorError is a mutator's failure with Canon's error code. */
export class MutatorError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'MutatorError';
  }
}

function argErr(field: string, reason: string): MutatorError {
  return new MutatorError('invalid_args', `field "args${field ? '.' + field : ''}": ${reason}`);
}

/**
 * checkMutators checks an application's bundle: names as Canon takes them,
 * none of them built-in or reserved, each a function.
 */
export function checkMutators(m: unknown): Mutators {
  if (m !== null && typeof m === 'object' && 'default' in m) {
    m = (m as {default: unknown}).default;
  } else if (m !== null && typeof m === 'object' && 'mutators' in m && !(typeof (m as {mutators: unknown}).mutators === 'function')) {
    m = (m as {mutators: unknown}).mutators;
  }
  if (m === null || typeof m !== 'object') {
    throw new TypeError('mutators: give an object of mutator name -> function (a bundle\'s default export)');
  }
  const out: Mutators = {};
  for (const [name, fn] of Object.entries(m)) {
    if (!MUTATOR_NAME.test(name)) {
      throw new TypeError(`mutators: ${JSON.stringify(name)} is not a valid mutator name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter`);
    }
    if ((BUILTIN_NAMES as readonly string[]).includes(name)) {
      throw new TypeError(`mutators: ${name} is a built-in mutator: give yours another name`);
    }
    const reserved = RESERVED_PREFIXES.find(p => name.startsWith(p));
    if (reserved) {
      throw new TypeError(`mutators: ${name}: names starting with ${reserved} are reserved`);
    }
    if (typeof fn !== 'function') {
      throw new TypeError(`mutators: ${name} is ${typeof fn}, not a function`);
    }
    out[name] = fn as Mutator;
  }
  return out;
}

const COLLECTION = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const SCALAR = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

function checkCollection(field: string, c: unknown): string {
  if (typeof c !== 'string') {
    throw argErr(field, `must be a string, not ${kind(c as JSONValue)}`);
  }
  if (!COLLECTION.test(c)) {
    throw argErr(field, `${JSON.stringify(c)} is not a valid collection: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit`);
  }
  return c;
}

function checkID(field: string, id: unknown): string {
  if (typeof id !== 'string') {
    throw argErr(field, `must be a string, not ${kind(id as JSONValue)}`);
  }
  if (id === '') {
    throw argErr(field, 'is empty');
  }
  const n = utf8Length(id);
  if (n > 256) {
    throw argErr(field, `is ${n} bytes long, over the limit of 256`);
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(id)) {
    throw argErr(field, 'contains a control character');
  }
  return id;
}

/** checkJSON throws naming the field (as the server's sandbox does) when v is not a JSON value. */
function checkJSON(v: unknown, path: string, stack: unknown[]): void {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(v)) {
        throw new MutatorError('invalid_args', `${path} is ${String(v)}, which is not JSON (numbers must be finite)`);
      }
      return;
    case 'object': {
      if (v === null) {
        return;
      }
      if (stack.includes(v)) {
        throw new MutatorError('invalid_args', `${path} refers to itself (a cycle), which is not JSON`);
      }
      stack.push(v);
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          checkJSON(v[i], `${path}[${i}]`, stack);
        }
      } else {
        const proto = Object.getPrototypeOf(v) as {constructor?: {name?: unknown}} | null;
        if (proto !== Object.prototype && proto !== null) {
          const name = typeof proto?.constructor?.name === 'string' ? proto.constructor.name : 'an object with a prototype';
          throw new MutatorError('invalid_args', `${path} is a ${name}, which is not JSON: use a plain object`);
        }
        for (const k of Object.keys(v)) {
          checkJSON((v as Record<string, unknown>)[k], `${path}.${k}`, stack);
        }
      }
      stack.pop();
      return;
    }
    default:
      throw new MutatorError('invalid_args', `${path} is ${v === undefined ? 'undefined' : 'a ' + typeof v}, which is not JSON`);
  }
}

function mustString(v: unknown, what: string): string {
  if (typeof v !== 'string') {
    throw new MutatorError('invalid_args', `${what} must be a string, not ${v === null ? 'null' : typeof v}`);
  }
  return v;
}

/** The Tx of one mutation: reads through the layers, writes into its own overlay. */
export class LocalTx implements Tx {
  readonly writes = new Overlay();
  /** Set when the mutator has returned or its promise settled: as on the
   * server, a promise it left running cannot write through it later. The
   * server's sandbox throws in that promise, which nobody awaits, and
   * drops the rejection; here the write is dropped without one, so that a
   * Node app is not stopped by an unhandled rejection. */
  private closed = false;
  private readonly layers: Layers;

  constructor(readonly mutation: Readonly<MutationInfo>, private readonly ts: number, base: Layers) {
    this.layers = new Layers(base.base, [...base.overlays, this.writes]);
  }

  /** close ends the tx: every later use throws. */
  close(): void {
    this.closed = true;
  }

  now(): number {
    return this.ts;
  }

  get(collection: string, id: string): Item | undefined {
    const it = this.layers.rawItem(mustString(collection, 'tx.get: collection'), mustString(id, 'tx.get: id'));
    return it && {data: clone(it.data), meta: clone(it.meta)};
  }

  has(collection: string, id: string): boolean {
    return this.layers.rawItem(mustString(collection, 'tx.has: collection'), mustString(id, 'tx.has: id')) !== undefined;
  }

  put(collection: string, id: string, data: JSONValue, meta?: JSONObject): void {
    if (this.closed) {
      return;
    }
    mustString(collection, 'tx.put: collection');
    mustString(id, 'tx.put: id');
    const at = `tx.put ${collection}/${id}`;
    checkJSON(data, `${at}: data`, []);
    if (meta === undefined) {
      meta = {};
    } else if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
      throw new MutatorError('invalid_args', `${at}: meta must be an object, not ${meta === null ? 'null' : Array.isArray(meta) ? 'an array' : typeof meta}`);
    } else {
      checkJSON(meta, `${at}: meta`, []);
    }
    checkCollection('collection', collection);
    checkID('id', id);
    const m = canonical(meta), d = canonical(data);
    if (m.length > Limits.maxMetaBytes && utf8Length(m) > Limits.maxMetaBytes) {
      throw new MutatorError('too_large', `item ${collection}/${id}: meta of ${utf8Length(m)} bytes is over the limit of ${Limits.maxMetaBytes} bytes (MaxMetaBytes)`);
    }
    if (d.length > Limits.maxDataBytes / 3 && utf8Length(d) > Limits.maxDataBytes) {
      throw new MutatorError('too_large', `item ${collection}/${id}: data of ${utf8Length(d)} bytes is over the limit of ${Limits.maxDataBytes} bytes (MaxDataBytes)`);
    }
    // Kept as parsed from the canonical text: what Canon stores.
    this.writes.items.set(itemKey(collection, id), {data: JSON.parse(d) as JSONValue, meta: JSON.parse(m) as JSONObject});
  }

  delete(collection: string, id: string): boolean {
    if (this.closed) {
      return false;
    }
    mustString(collection, 'tx.delete: collection');
    mustString(id, 'tx.delete: id');
    if (!this.has(collection, id)) {
      return false;
    }
    this.writes.items.set(itemKey(collection, id), null);
    return true;
  }

  scalar(name: string): JSONValue | undefined {
    return clone(this.layers.rawScalar(mustString(name, 'tx.scalar: name')));
  }

  setScalar(name: string, value: JSONValue | null): void {
    if (this.closed) {
      return;
    }
    mustString(name, 'tx.setScalar: name');
    if (value !== null) {
      checkJSON(value, `tx.setScalar ${name}: value`, []);
    }
    if (!SCALAR.test(name)) {
      throw argErr(name, `${JSON.stringify(name)} is not a valid scalar name: use 1-64 letters, digits or '_', starting with a letter`);
    }
    this.writes.scalars.set(name, value === null ? null : (JSON.parse(canonical(value)) as JSONValue));
  }

  /** checkScalars enforces MaxScalarsBytes on the scalars after the mutation. */
  checkScalars(): void {
    if (this.writes.scalars.size === 0) {
      return;
    }
    const all: JSONObject = {};
    for (const n of this.layers.scalarNames()) {
      all[n] = this.layers.rawScalar(n)!;
    }
    const n = utf8Length(canonical(all));
    if (n > Limits.maxScalarsBytes) {
      throw new MutatorError('too_large', `the scalars would be ${n} bytes, over the limit of ${Limits.maxScalarsBytes} bytes (MaxScalarsBytes)`);
    }
  }
}

function fields(args: unknown, known: string[]): JSONObject {
  if (!isObject(args)) {
    throw argErr('', `must be a JSON object with the fields ${known.join(', ')}`);
  }
  for (const k of Object.keys(args).sort()) {
    if (!known.includes(k)) {
      throw argErr(k, `unknown field (known: ${known.join(', ')})`);
    }
  }
  return args;
}

function target(a: JSONObject): [string, string] {
  if (a.collection === undefined) {
    throw argErr('collection', 'is required');
  }
  const c = checkCollection('collection', a.collection);
  if (a.id === undefined) {
    throw argErr('id', 'is required');
  }
  return [c, checkID('id', a.id)];
}

function uint(a: JSONObject, f: string): number | undefined {
  const v = a[f];
  if (v === undefined) {
    return undefined;
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw argErr(f, `must be an integer >= 0, not ${canonical(v).slice(0, 40)}`);
  }
  return v;
}

function str(a: JSONObject, f: string): string | undefined {
  const v = a[f];
  if (v === undefined) {
    return undefined;
  }
  if (typeof v !== 'string') {
    throw argErr(f, `must be a string, not ${kind(v)}`);
  }
  return v;
}

function notFound(c: string, id: string): MutatorError {
  return new MutatorError('not_found', `item ${c}/${id} does not exist (deleted or never created)`);
}

/** The built-in mutators, deciding as Canon's (docs/mutators.md). */
export const builtins: Mutators = {
  'project.set'(tx, args) {
    if (!isObject(args)) {
      throw argErr('', 'must be a JSON object of scalar name -> value (null deletes), such as {"name":"Roadmap"}');
    }
    const names = Object.keys(args).sort();
    if (names.length === 0) {
      throw argErr('', 'sets no scalar: give at least one name -> value (null deletes)');
    }
    for (const n of names) {
      tx.setScalar(n, args[n] as JSONValue);
    }
  },
  'item.put'(tx, args) {
    const a = fields(args, ['collection', 'id', 'meta', 'data']);
    const [c, id] = target(a);
    if (a.meta !== undefined && !isObject(a.meta)) {
      throw argErr('meta', `must be a JSON object, not ${kind(a.meta)}`);
    }
    if (a.data === undefined) {
      throw argErr('data', 'is required (any JSON value)');
    }
    tx.put(c, id, a.data, (a.meta as JSONObject | undefined) ?? {});
  },
  'item.patch'(tx, args) {
    const a = fields(args, ['collection', 'id', 'meta', 'data']);
    const [c, id] = target(a);
    if (a.meta === undefined && a.data === undefined) {
      throw argErr('', 'patches nothing: give "meta", "data" or both (JSON merge patches)');
    }
    const it = tx.get(c, id);
    if (!it) {
      throw notFound(c, id);
    }
    let meta = it.meta as JSONValue;
    if (a.meta !== undefined) {
      meta = mergePatch(it.meta, a.meta);
      if (!isObject(meta)) {
        throw argErr('meta', `the patched meta would be ${kind(meta)}: meta must stay a JSON object`);
      }
    }
    const data = a.data === undefined ? it.data : mergePatch(it.data, a.data);
    tx.put(c, id, data, meta as JSONObject);
  },
  'item.delete'(tx, args) {
    const [c, id] = target(fields(args, ['collection', 'id']));
    if (!tx.delete(c, id)) {
      throw notFound(c, id);
    }
  },
  'item.splice'(tx, args) {
    const a = fields(args, ['collection', 'id', 'path', 'index', 'delete', 'insert']);
    const [c, id] = target(a);
    const path = str(a, 'path') ?? '';
    if (path !== '' && !path.startsWith('/')) {
      throw argErr('path', `${JSON.stringify(path)} is not a JSON pointer: it must be empty or start with "/"`);
    }
    const index = uint(a, 'index');
    if (index === undefined) {
      throw argErr('index', 'is required (an integer >= 0, in UTF-16 code units)');
    }
    const del = uint(a, 'delete') ?? 0;
    const insert = str(a, 'insert') ?? '';
    const it = tx.get(c, id);
    if (!it) {
      throw notFound(c, id);
    }
    let data: JSONValue;
    try {
      data = splice(it.data, path, index, del, insert);
    } catch (e) {
      throw new MutatorError('invalid_edit', `item ${c}/${id}: ${(e as Error).message}`);
    }
    tx.put(c, id, data, it.meta);
  },
};

/** An outcome of running a mutator locally. */
export type LocalResult = {ok: true; writes: Overlay} | {ok: false; code: string; message: string};

function failure(e: unknown): LocalResult {
  if (e !== null && typeof e === 'object' && 'message' in e) {
    const code = (e as {code?: unknown}).code;
    // As the server's sandbox: a TypeError says so; an Error (or a
    // subclass that keeps the name) is its message alone.
    const name = (e as {name?: unknown}).name;
    const prefix = !(e instanceof MutatorError) && typeof name === 'string' && name !== 'Error' && name !== '' ? `${name}: ` : '';
    return {ok: false, code: typeof code === 'string' && ERROR_CODE.test(code) ? code : 'mutator_error', message: prefix + String((e as {message: unknown}).message)};
  }
  let s: string;
  try {
    s = typeof e === 'string' ? JSON.stringify(e) : String(e);
  } catch {
    s = typeof e;
  }
  return {ok: false, code: 'mutator_error', message: `the mutator threw ${s}, not an Error: throw new Error("message")`};
}

// Determinism: while a mutator runs, the clock and randomness throw and
// timers, fetch and weak references are not there, as in the server's
// sandbox (with its messages). The guards cover a mutator's synchronous
// run; an async mutator is covered up to its first await.
const HIDDEN = ['setTimeout', 'setInterval', 'setImmediate', 'queueMicrotask', 'fetch', 'WeakRef', 'FinalizationRegistry', 'XMLHttpRequest', 'WebSocket'] as const;
type Saved = {random: typeof Math.random; perf?: () => number; Date: DateConstructor; hidden: Map<string, unknown>};
let guardDepth = 0;
let saved: Saved | undefined;

const clock = (what: string) => (): never => {
  throw new Error(`${what} reads the wall clock, which a mutator must not do: use tx.now(), the mutation's log time`);
};

function guard(): void {
  if (guardDepth++ > 0) {
    return;
  }
  const g = globalThis as unknown as Record<string, unknown>;
  const RealDate = Date;
  saved = {random: Math.random, Date: RealDate, hidden: new Map()};
  Math.random = () => {
    throw new Error('Math.random() is not deterministic, which a mutator must be: take ids and random choices from the args, or derive them from tx.mutation');
  };
  const perf = globalThis.performance;
  if (perf) {
    saved.perf = perf.now;
    perf.now = clock('performance.now()');
  }
  const SafeDate = function (this: unknown, ...a: unknown[]) {
    if (new.target === undefined) {
      return clock('Date()')();
    }
    if (a.length === 0) {
      return clock('new Date() without arguments')();
    }
    return Reflect.construct(RealDate, a, new.target);
  } as unknown as DateConstructor;
  Object.defineProperty(SafeDate, 'prototype', {value: RealDate.prototype});
  (SafeDate as {UTC: unknown}).UTC = RealDate.UTC;
  (SafeDate as {parse: unknown}).parse = RealDate.parse;
  (SafeDate as {now: unknown}).now = clock('Date.now()');
  g.Date = SafeDate;
  for (const k of HIDDEN) {
    if (k in g) {
      saved.hidden.set(k, g[k]);
      g[k] = undefined;
    }
  }
}

function unguard(): void {
  if (--guardDepth > 0 || !saved) {
    return;
  }
  const g = globalThis as unknown as Record<string, unknown>;
  g.Date = saved.Date;
  Math.random = saved.random;
  if (saved.perf && globalThis.performance) {
    globalThis.performance.now = saved.perf;
  }
  for (const [k, v] of saved.hidden) {
    g[k] = v;
  }
  saved = undefined;
}

/**
 * guarded runs f with the determinism guards set once, so that the many
 * mutator runs of a rebase do not each swap the globals.
 */
export function guarded<T>(f: () => T): T {
  guard();
  try {
    return f();
  } finally {
    unguard();
  }
}

// A mutator has no timers and no I/O: its promise settles within the
// microtasks of its run. One that has not by the next macrotask never will.
const realSetTimeout = globalThis.setTimeout.bind(globalThis);

function settleOrFail(name: string, p: Promise<void>): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let done = false;
    p.then(
      () => {
        done = true;
        resolve();
      },
      e => {
        done = true;
        reject(e);
      },
    );
    realSetTimeout(() => {
      if (!done) {
        reject(new Error(`mutator ${name}: its promise never settled: it awaits something that never resolves (a mutator has no timers and no I/O to wait for)`));
      }
    }, 0);
  });
}

/**
 * run applies one mutation over the layers: synchronously when the
 * mutator is (the common case: a subscriber sees it in the same task),
 * else as a promise.
 */
export function run(fn: Mutator | undefined, info: MutationInfo, args: JSONValue, ts: number, layers: Layers): LocalResult | Promise<LocalResult> {
  if (!fn) {
    return {ok: false, code: 'unknown_mutator', message: `unknown mutator ${JSON.stringify(info.name)}`};
  }
  const tx = new LocalTx(info, ts, layers);
  let r: void | Promise<void>;
  guard();
  try {
    r = fn(tx, clone(args));
  } catch (e) {
    tx.close();
    return failure(e);
  } finally {
    unguard();
  }
  const done = (): LocalResult => {
    tx.close();
    try {
      tx.checkScalars();
    } catch (e) {
      return failure(e);
    }
    return {ok: true, writes: tx.writes};
  };
  if (r && typeof (r as Promise<void>).then === 'function') {
    return settleOrFail(info.name, r as Promise<void>).then(done, e => {
      tx.close();
      return failure(e);
    });
  }
  return done();
}
