// The client against a real Canon, driven by typescript_test.go (and run
// by hand against `canon dev` for the latency figures): CANON_URL,
// CANON_PROJECT, CANON_TOKEN_A/B, CANON_DIR, CANON_SCENARIO. It prints
// one JSON line: the clients' views and what the scenario counted.

import {join} from 'node:path';
import {Canon, type CanonOptions} from '../src/client.js';
import type {JSONValue} from '../src/json.js';
import type {Mutators, Tx} from '../src/mutators.js';
import {FileStorage} from '../src/node.js';
import {MemoryStorage} from '../src/storage.js';

const env = (k: string) => {
  const v = process.env[k];
  if (!v) {
    throw new Error(`${k} is not set`);
  }
  return v;
};
const [org, project] = env('CANON_PROJECT').includes('/') ? env('CANON_PROJECT').split('/') as [string, string] : ['acme', env('CANON_PROJECT')];

// note.bump is a mutator of the app that the server does not have: Canon
// records it as unknown_mutator, and the client rolls its change back.
const app = {
  'note.bump'(tx: Tx, a: {id: string}) {
    const it = tx.get('notes', a.id);
    tx.put('notes', a.id, {...(it?.data as object), bumped: true});
  },
} satisfies Mutators;

function open(token: string, extra: Partial<CanonOptions<typeof app>> = {}): Canon<typeof app> {
  return new Canon({server: env('CANON_URL'), token, org, project, mutators: app, storage: new MemoryStorage(), onError: e => console.error(`client: ${e.code}: ${e.message}`), ...extra});
}

function view(c: Canon): JSONValue {
  return c.query(tx => {
    const items: {[k: string]: JSONValue} = {};
    for (const coll of tx.collections()) {
      for (const it of tx.collection(coll)) {
        items[`${coll}/${it.id}`] = it.data;
      }
    }
    return {version: tx.version, scalars: tx.scalars(), items};
  });
}

async function until(what: string, cond: () => boolean, ms = 60000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise(r => setTimeout(r, 5));
  }
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function converge() {
  const a = open(env('CANON_TOKEN_A')), b = open(env('CANON_TOKEN_B'));
  await Promise.all([a.ready, b.ready]);
  let head = (await a.mutate['item.put']({collection: 'notes', id: 'shared', data: {text: ''}})).version;
  await until('b sees the note', () => b.version >= head);
  const ps: Promise<{version: number}>[] = [];
  for (let i = 0; i < 30; i++) {
    ps.push(a.mutate['item.splice']({collection: 'notes', id: 'shared', path: '/text', index: 0, insert: 'a'}));
    ps.push(b.mutate['item.patch']({collection: 'notes', id: 'shared', data: {[`b${i}`]: i}}));
    ps.push(a.mutate['item.put']({collection: 'todos', id: `a${i}`, data: {n: i}, meta: {by: 'a'}}));
    ps.push(b.mutate['project.set']({count: i, name: 'converge'}));
  }
  const outcomes: string[] = [];
  const missing = await b.mutate['item.delete']({collection: 'todos', id: 'missing'});
  outcomes.push(missing.status === 'error' ? `error:${missing.code}` : missing.status);
  const bump = a.mutate['note.bump']({id: 'shared'});
  const optimistic = (a.query({item: {collection: 'notes', id: 'shared'}})?.data as {bumped?: boolean}).bumped === true;
  const o = await bump;
  await a.settled();
  const after = (a.query({item: {collection: 'notes', id: 'shared'}})?.data as {bumped?: boolean}).bumped;
  outcomes.push(optimistic && o.status === 'error' && o.code === 'unknown_mutator' && after === undefined ? 'rolled back' : `not rolled back: ${JSON.stringify(o)}`);
  for (const r of await Promise.all(ps)) {
    head = Math.max(head, r.version);
  }
  head = Math.max(head, missing.version, o.version);
  await Promise.all([a.settled(), b.settled()]);
  await until('both at the head', () => a.version >= head && b.version >= head);
  const out = {scenario: 'converge', views: [view(a), view(b)], clients: [a.clientID, b.clientID], outcomes};
  await Promise.all([a.close(), b.close()]);
  return out;
}

async function reload() {
  const path = join(env('CANON_DIR'), 'client.jsonl');
  let learned = 0;
  let closing: Promise<void> | undefined;
  // Stop as soon as the first outcome is in: most of the 300 are in flight.
  const c1 = open(env('CANON_TOKEN_A'), {storage: new FileStorage(path), onOutcome: () => {
    learned++;
    closing ??= c1.close();
  }});
  await c1.ready;
  for (let i = 1; i <= 300; i++) {
    c1.mutate['project.set']({count: i}).catch(() => {});
  }
  await until('a first outcome', () => closing !== undefined);
  await closing;
  const pushedBeforeStop = learned;
  const c2 = open(env('CANON_TOKEN_A'), {storage: new FileStorage(path), onOutcome: () => learned++});
  await c2.storageLoaded();
  if (c2.clientID !== c1.clientID) {
    throw new Error(`the restarted client is ${c2.clientID}, not ${c1.clientID}`);
  }
  await c2.settled();
  await until('the last version', () => (c2.query({scalar: 'count'}) as number) === 300);
  const out = {scenario: 'reload', views: [view(c2)], clients: [c2.clientID], counts: {count: c2.query({scalar: 'count'}) as number, learned, pushedBeforeStop}};
  await c2.close();
  return out;
}

async function latency() {
  const n = Number(process.env.CANON_EDITS ?? 200);
  const a = open(env('CANON_TOKEN_A')), b = open(env('CANON_TOKEN_B'));
  await Promise.all([a.ready, b.ready]);
  await until('both online', () => a.status === 'online' && b.status === 'online');
  let seen = -1;
  let seenAt = 0;
  b.subscribe({item: {collection: 'notes', id: 'latency'}}, it => {
    seen = ((it?.data as {seq?: number}) ?? {}).seq ?? -1;
    seenAt = performance.now();
  });
  const remote: number[] = [];
  const local: number[] = [];
  let localAt = 0;
  let want = -1;
  a.subscribe({item: {collection: 'notes', id: 'latency'}}, it => {
    if (((it?.data as {seq?: number}) ?? {}).seq === want) {
      localAt = performance.now();
    }
  });
  for (let i = 0; i < n; i++) {
    want = i;
    const t0 = performance.now();
    void a.mutate['item.put']({collection: 'notes', id: 'latency', data: {seq: i}});
    local.push(localAt - t0);
    await until(`edit ${i} in b`, () => seen === i, 30000);
    remote.push(seenAt - t0);
  }
  const out = {
    scenario: 'latency', views: [], clients: [a.clientID, b.clientID],
    figures: {edits: n, remoteP50ms: pct(remote, 50), remoteP99ms: pct(remote, 99), localP50ms: pct(local, 50), localP99ms: pct(local, 99)},
  };
  await Promise.all([a.close(), b.close()]);
  return out;
}

const scenarios: Record<string, () => Promise<object>> = {converge, reload, latency};
const run = scenarios[env('CANON_SCENARIO')];
if (!run) {
  throw new Error(`CANON_SCENARIO: one of ${Object.keys(scenarios).join(', ')}`);
}
console.log(JSON.stringify(await run()));
process.exit(0);
