import assert from 'node:assert/strict';
import {mkdtemp, readFile, appendFile} from 'node:fs/promises';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {test} from 'node:test';

import {bundleHash} from '../src/bundle.js';
import {backoffDelay, Canon, type CanonOptions, type OutcomeEvent, type SyncEvent} from '../src/client.js';
import type {CanonError} from '../src/errors.js';
import {canonical, sha256Hex, type JSONValue} from '../src/json.js';
import {MutatorError, type Mutators, type Tx} from '../src/mutators.js';
import {FileStorage} from '../src/node.js';
import {MemoryStorage} from '../src/storage.js';
import {FakeCanon} from './fake.js';

const todo = {
  'todo.add'(tx: Tx, a: {id: string; title: string}) {
    tx.put('todos', a.id, {title: a.title, done: false, at: tx.now()});
  },
  'todo.count'(tx: Tx) {
    const n = (tx.scalar('count') as number | undefined) ?? 0;
    tx.setScalar('count', n + 1);
  },
} satisfies Mutators;

function client(server: FakeCanon, extra: Partial<CanonOptions<typeof todo>> = {}): Canon<typeof todo> {
  return new Canon({
    server: 'http://canon.test', token: 't', org: server.org, project: server.project, mutators: todo,
    WebSocket: server.WebSocket, fetch: server.fetch, backoff: {min: 1, max: 20}, onError: () => {}, ...extra,
  });
}

async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise(r => setTimeout(r, 2));
  }
}

function serverView(s: FakeCanon): JSONValue {
  const out: {[k: string]: JSONValue} = {};
  for (const [c, m] of s.state.collections) {
    for (const [id, it] of m) {
      out[`${c}/${id}`] = it.data;
    }
  }
  return {scalars: Object.fromEntries(s.state.scalars), items: out};
}

function clientView(c: Canon): JSONValue {
  return c.query(tx => {
    const out: {[k: string]: JSONValue} = {};
    for (const name of ['todos', 'notes', 'n']) {
      for (const it of tx.collection(name)) {
        out[`${name}/${it.id}`] = it.data;
      }
    }
    return {scalars: tx.scalars(), items: out};
  });
}

test('mutate applies at once, resolves with the canonical outcome, and subscribers see only changes', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  const seen: JSONValue[] = [];
  c.subscribe({collection: 'notes'}, v => seen.push(v as unknown as JSONValue));
  const counts: JSONValue[] = [];
  c.subscribe({scalar: 'count'}, v => counts.push(v ?? null));
  const p = c.mutate['item.put']({collection: 'notes', id: 't1', data: {text: 'write'}});
  // Optimistic: visible before any server answer.
  await Promise.resolve();
  assert.equal(seen.length, 2);
  assert.deepEqual((seen[1] as {id: string}[])[0]!.id, 't1');
  const o = await p;
  assert.deepEqual(o, {status: 'applied', version: 1});
  await c.settled();
  // The canonical version equals the optimistic result: no further call.
  assert.equal(seen.length, 2);
  assert.deepEqual(counts, [null]); // the scalar subscription never ran again
  assert.equal(c.pendingCount, 0);
  assert.deepEqual(clientView(c), serverView(s));
  c.close();
});

test('a server-side error rolls the optimistic change back', async () => {
  // The server refuses titles the client's mutator takes.
  const s = new FakeCanon({
    'todo.add'(tx: Tx, a: {id: string; title: string}) {
      if (a.title === 'bad') {
        throw new MutatorError('quota_exceeded', 'no more todos');
      }
      todo['todo.add'](tx, a);
    },
  });
  const c = client(s);
  await c.ready;
  const views: number[] = [];
  c.subscribe({collection: 'todos'}, v => views.push((v as unknown[]).length));
  const o = c.mutate['todo.add']({id: 't1', title: 'bad'});
  await Promise.resolve();
  assert.deepEqual(views, [0, 1], 'optimistic');
  assert.deepEqual(await o, {status: 'error', version: 1, code: 'quota_exceeded', message: 'no more todos'});
  await c.settled();
  assert.deepEqual(views, [0, 1, 0], 'rolled back');
  // The code came with the version message: nothing else was read for it.
  assert.deepEqual(s.requests.filter(r => r.includes('/versions')), []);
  c.close();
});

test('listen reports versions with every client\'s outcomes and codes, the queue, rejections and resets, in order', async () => {
  const s = new FakeCanon({
    ...todo,
    'todo.quota'() {
      throw new MutatorError('quota_exceeded', 'no more todos');
    },
  });
  const storage = new MemoryStorage();
  // Locally the quota mutator sets a scalar; Canon refuses it.
  const local = {...todo, 'todo.quota'(tx: Tx) {
    tx.setScalar('q', 1);
  }} satisfies Mutators;
  const mk = () => new Canon({server: 'http://canon.test', token: 't', org: s.org, project: s.project, mutators: local, storage,
    WebSocket: s.WebSocket, fetch: s.fetch, backoff: {min: 1, max: 20}, onError: () => {}});
  const c = mk();
  const events: SyncEvent[] = [];
  const off = c.listen(e => events.push(e));
  await c.ready;
  await until('online', () => c.status === 'online');
  // The first load: the view is replaced as a whole, at version 0.
  assert.deepEqual(events.filter(e => e.type === 'state'), [{type: 'state', version: 0, ts: 0, cause: 'load'}]);
  assert.deepEqual(events.filter(e => e.type === 'status').map(e => e.type === 'status' && e.status), ['online']);

  // Offline, two mutations queue: local, then queued once in the storage.
  s.setOffline(true);
  await until('offline', () => c.status === 'offline');
  events.length = 0;
  const a = c.mutate['todo.add']({id: 'a', title: 'A'});
  const q = c.mutate['todo.quota']({});
  const pendingStates = () => events.flatMap(e => (e.type === 'pending' ? [e.pending.map(p => `${p.id}:${p.name}:${p.state}`).join(',')] : []));
  await until('queued', () => pendingStates().at(-1) === '1:todo.add:queued,2:todo.quota:queued');
  assert.equal(pendingStates()[0], '1:todo.add:local,2:todo.quota:local');
  assert.deepEqual(c.pendingMutations().map(p => [p.id, p.name, p.args, p.state]), [[1, 'todo.add', {id: 'a', title: 'A'}, 'queued'], [2, 'todo.quota', {}, 'queued']]);

  // Another client's mutation is decided first; back online, ours are sent and decided.
  await s.decide('g2', [{client: 'other', id: 1, name: 'item.put', args: {collection: 'notes', id: 'n', data: 1}, ts: 0}]);
  events.length = 0;
  s.setOffline(false);
  assert.deepEqual(await a, {status: 'applied', version: 2});
  assert.deepEqual(await q, {status: 'error', version: 3, code: 'quota_exceeded', message: 'no more todos'});
  await c.settled();
  await new Promise(r => setTimeout(r, 0));
  const seen = events.filter(e => e.type !== 'status' && !(e.type === 'pending' && e.pending.length > 0)).map(e => {
    switch (e.type) {
      case 'version':
        return `v${e.version}:` + e.mutations.map(m => `${m.client === c.clientID ? 'me' : m.client}#${m.id}:${m.status}${m.code ? ':' + m.code : ''}:${m.mine}`).join(',') + ':' + e.items.map(i => `${i.op} ${i.collection}/${i.id} ${i.size ?? ''}`).join(',');
      case 'outcome':
        return `outcome #${e.id} ${e.status} v${e.version}${e.status === 'error' ? ' ' + e.code : ''}`;
      case 'pending':
        return 'pending empty';
      default:
        return e.type;
    }
  });
  assert.deepEqual(seen, [
    'v1:other#1:applied:false:put notes/n 1',
    'v2:me#1:applied:true:put todos/a 45',
    'outcome #1 applied v2',
    'v3:me#2:error:quota_exceeded:true:',
    'outcome #2 error v3 quota_exceeded',
    'pending empty',
  ]);
  // Sent before decided: the queue went through the sent state.
  assert.ok(events.some(e => e.type === 'pending' && e.pending.some(p => p.state === 'sent')));
  // A version event comes once the view shows it (and the rebase).
  const v2 = events.find(e => e.type === 'version' && e.version === 2);
  assert.ok(v2 && v2.type === 'version' && v2.ts > 0 && v2.parent === 1 && v2.scalars !== undefined);

  // Another client's gap rejection is reported (not mine); a reset replaces the view.
  events.length = 0;
  await s.decide('g2', [{client: 'other', id: 5, name: 'item.put', args: {collection: 'notes', id: 'm', data: 2}, ts: 0}]);
  await until('rejection', () => events.some(e => e.type === 'rejected'));
  const rej = events.find(e => e.type === 'rejected');
  assert.deepEqual(rej && {...rej, at: 0}, {type: 'rejected', reason: 'gap', message: 'gap: expected 2', clientGroup: 'g2', client: 'other', id: 5, name: 'item.put', expectedId: 2, at: 0, mine: false});
  s.resetAll();
  await until('reset', () => events.some(e => e.type === 'state'));
  assert.deepEqual(events.find(e => e.type === 'state'), {type: 'state', version: 3, ts: s.versions[2]!.ts, cause: 'reset'});

  // A new session from the storage starts with the stored view.
  off();
  const n = events.length;
  await c.mutate['todo.add']({id: 'b', title: 'B'});
  assert.equal(events.length, n, 'no events after off()');
  await c.close();
  const c2 = mk();
  const events2: SyncEvent[] = [];
  c2.listen(e => events2.push(e));
  await until('state', () => events2.some(e => e.type === 'state'));
  assert.deepEqual(events2.find(e => e.type === 'state'), {type: 'state', version: 4, ts: s.versions[3]!.ts, cause: 'storage'});
  await c2.close();
});

test('1,000 pending mutations are rebased on a version of another client, then all apply', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  await until('online', () => c.status === 'online');
  s.setOffline(true);
  for (let i = 0; i < 1000; i++) {
    void c.mutate['todo.count']({});
  }
  await until('queued', () => c.pendingCount === 1000);
  assert.equal(c.query({scalar: 'count'}), 1000);
  // Another client sets the counter meanwhile.
  await s.decide('g2', [{client: 'other', id: 1, name: 'project.set', args: {count: 500}}]);
  s.setOffline(false);
  await c.settled();
  assert.equal(c.query({scalar: 'count'}), 1500);
  assert.equal(s.state.scalars.get('count'), 1500);
  assert.equal(s.decided, 1001);
  c.close();
});

test('a reset reloads the state and keeps the pending mutations', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  await c.mutate['todo.add']({id: 'a', title: 'x'});
  await c.mutate['todo.add']({id: 'b', title: 'y'});
  s.setOffline(true);
  await until('offline', () => c.status === 'offline');
  const p = c.mutate['todo.count']({});
  // Canon lost its history (topics recreated): one version of another client.
  const s2 = new FakeCanon(todo);
  await s2.decide('g2', [{client: 'o', id: 1, name: 'item.put', args: {collection: 'notes', id: 'n1', data: 'fresh'}}]);
  Object.assign(s, {versions: s2.versions, snapshots: s2.snapshots, state: s2.state, blobs: s2.blobs, lastIds: s2.lastIds, written: s2.written});
  s.setOffline(false);
  // from=2 is ahead of head 1: reset, reload, and the pending count applies.
  assert.deepEqual(await p, {status: 'applied', version: 2});
  await c.settled();
  assert.deepEqual(clientView(c), serverView(s));
  assert.equal(c.query({item: {collection: 'todos', id: 'a'}}), undefined);
  // A reset on an open socket reloads too.
  s.resetAll();
  await until('reloaded', () => c.version === s.head);
  assert.deepEqual(clientView(c), serverView(s));
  c.close();
});

test('a version gap on the socket makes the client resume from what it holds', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  await until('online', () => c.status === 'online');
  const sockets = () => s.requests.length;
  void sockets;
  s.skipNext = true;
  await s.decide('g2', [{client: 'o', id: 1, name: 'item.put', args: {collection: 'notes', id: 'a', data: 1}}]);
  await s.decide('g2', [{client: 'o', id: 2, name: 'item.put', args: {collection: 'notes', id: 'b', data: 2}}]);
  await until('both versions', () => c.version === 2);
  assert.deepEqual(clientView(c), serverView(s));
  c.close();
});

test('the first version of a branch made from another brings the items it starts with', async () => {
  const s = new FakeCanon(todo);
  s.branch = 'draft';
  const errs: string[] = [];
  const c = client(s, {branch: 'draft', onError: e => errs.push(e.code + ': ' + e.message)});
  await until('online', () => c.status === 'online');
  const seen: number[] = [];
  c.subscribe({collection: 'notes'}, v => seen.push(v.length));
  // branch.create from main@3: the version lists no items, the branch has main's.
  const body = canonical({text: 'from main'});
  const hash = await sha256Hex(body);
  s.state.setItem('notes', 'n1', {data: {text: 'from main'}, meta: {}, hash});
  s.blobs.set(hash, body);
  s.nextBase = {branch: 'main', version: 3};
  s.addVersion([], [{clientGroup: 'g2', client: 'o', id: 1, name: 'branch.create', args: {from: 'main', version: 3}, status: 'applied', offset: 0}], {o: 1});
  s.lastIds.set('o', 1);
  await until('version 1', () => c.version === 1);
  assert.deepEqual(c.query({item: {collection: 'notes', id: 'n1'}}), {data: {text: 'from main'}, meta: {}});
  assert.deepEqual(seen, [0, 1]);
  // Later versions apply on top, as usual.
  await s.decide('g2', [{client: 'o', id: 2, name: 'item.put', args: {collection: 'notes', id: 'n2', data: 2}, ts: 0}]);
  await until('version 2', () => c.version === 2);
  assert.deepEqual(errs, []);
  assert.deepEqual(clientView(c), serverView(s));
  await c.close();
});

test('a dropped push is resent after a gap rejection; ids stay dense and nothing is duplicated', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  await until('online', () => c.status === 'online');
  s.dropPushes = 1;
  const a = c.mutate['todo.add']({id: 'a', title: '1'});
  await until('push dropped', () => s.pushes === 1);
  // The socket drops (the push was never acknowledged); the client reconnects and resends.
  for (const ws of [...s.sockets]) {
    ws.drop(1011);
  }
  const b = c.mutate['todo.add']({id: 'b', title: '2'});
  assert.deepEqual(await a, {status: 'applied', version: 1});
  assert.deepEqual(await b, {status: 'applied', version: 2});
  assert.equal(s.lastIds.get(c.clientID), 2);
  c.close();
});

test('backoff is exponential, capped and jittered', () => {
  assert.equal(backoffDelay(0, 100, 10000, () => 0), 50);
  assert.equal(backoffDelay(0, 100, 10000, () => 1), 100);
  assert.equal(backoffDelay(3, 100, 10000, () => 1), 800);
  assert.equal(backoffDelay(20, 100, 10000, () => 1), 10000);
  assert.equal(backoffDelay(20, 100, 10000, () => 0), 5000);
  const seen = new Set(Array.from({length: 50}, () => backoffDelay(2, 100, 10000)));
  assert.ok(seen.size > 40, 'jitter spreads reconnects');
  for (const d of seen) {
    assert.ok(d >= 200 && d <= 400, `${d}`);
  }
});

test('reconnects with backoff while the server is down, then resumes', async () => {
  const s = new FakeCanon(todo);
  const c = client(s, {backoff: {min: 5, max: 40}});
  await c.ready;
  await until('online', () => c.status === 'online');
  s.setOffline(true);
  const before = s.requests.length;
  await until('offline', () => c.status === 'offline');
  const p = c.mutate['todo.add']({id: 'x', title: 'offline'});
  await new Promise(r => setTimeout(r, 100));
  assert.equal(c.pendingCount, 1);
  assert.equal(s.requests.length, before, 'a socket retry is not an HTTP request');
  s.setOffline(false);
  assert.deepEqual(await p, {status: 'applied', version: 1});
  c.close();
});

test('pending mutations, ids and the canonical view survive a reload (memory storage shared)', async () => {
  const s = new FakeCanon(todo);
  const storage = new MemoryStorage();
  const c1 = client(s, {storage});
  await c1.ready;
  await c1.mutate['todo.add']({id: 'a', title: 'first'});
  await c1.settled();
  s.setOffline(true);
  void c1.mutate['todo.add']({id: 'b', title: 'offline'}).catch(() => {});
  void c1.mutate['todo.count']({}).catch(() => {});
  await until('durable', () => [...storage.data.keys()].filter(k => k.startsWith('pending')).length === 2);
  const id = c1.clientID;
  c1.close();
  // Reload.
  const outcomes: string[] = [];
  const c2 = client(s, {storage, onOutcome: o => outcomes.push(`${o.id}:${o.status}`)});
  await c2.storageLoaded();
  assert.equal(c2.clientID, id);
  assert.equal(c2.pendingCount, 2);
  assert.deepEqual(c2.query({item: {collection: 'todos', id: 'b'}})?.data, {title: 'offline', done: false, at: (c2.query({item: {collection: 'todos', id: 'b'}})!.data as {at: number}).at});
  s.setOffline(false);
  await c2.settled();
  assert.deepEqual(outcomes, ['2:applied', '3:applied']);
  assert.equal(s.lastIds.get(id), 3);
  assert.deepEqual(clientView(c2), serverView(s));
  c2.close();
});

test('a reload in the middle of a push neither loses nor duplicates the mutation', async () => {
  const s = new FakeCanon(todo);
  const storage = new MemoryStorage();
  const c1 = client(s, {storage});
  await c1.ready;
  await until('online', () => c1.status === 'online');
  // The push reaches Canon and is decided, but the tab is gone before the answer.
  const realDeliver = s.versionMessage.bind(s);
  let cut = true;
  s.versionMessage = v => {
    if (cut) {
      c1.close();
      cut = false;
    }
    return realDeliver(v);
  };
  void c1.mutate['todo.add']({id: 'a', title: 'once'}).catch(() => {});
  await until('decided', () => s.decided === 1);
  await new Promise(r => setTimeout(r, 10));
  assert.equal([...storage.data.keys()].filter(k => k.startsWith('pending')).length, 1, 'still pending in storage');
  const outcomes: string[] = [];
  const c2 = client(s, {storage, onOutcome: o => outcomes.push(`${o.id}:${o.status}@${o.version}`)});
  await c2.settled();
  assert.deepEqual(outcomes, ['1:applied@1']);
  assert.equal(s.decided, 1);
  assert.equal(s.versions.length, 1);
  assert.deepEqual(clientView(c2), serverView(s));
  c2.close();
});

test('the outcome of a previous session\'s mutation, learned from the status API, has its error code', async () => {
  const failing = {
    ...todo,
    'todo.take'(tx: Tx, a: {id: string}) {
      if (tx.has('todos', a.id)) {
        throw Object.assign(new Error(`todo ${a.id} is taken`), {code: 'todo_taken'});
      }
      tx.put('todos', a.id, {title: 'taken', done: false, at: tx.now()});
    },
  } satisfies Mutators;
  for (const old of [false, true]) {
    const s = new FakeCanon(failing);
    s.statusWithoutCode = old;
    await s.decide('other', [{client: 'other', id: 1, name: 'todo.add', args: {id: 'a', title: 'A'}, ts: 0}]);
    const storage = new MemoryStorage();
    s.setOffline(true);
    const c1 = new Canon({server: 'http://canon.test', token: 't', org: s.org, project: s.project, mutators: failing, storage,
      WebSocket: s.WebSocket, fetch: s.fetch, backoff: {min: 1, max: 20}, onError: () => {}});
    await c1.storageLoaded();
    void c1.mutate['todo.take']({id: 'a'}).catch(() => {});
    await until('durable', () => [...storage.data.keys()].some(k => k.startsWith('pending')));
    const id = c1.clientID;
    await c1.close();
    // Another session of this client decided it, and this storage's view
    // already covers that version: the outcome comes from the status API.
    await s.decide('g', [{client: id, id: 1, name: 'todo.take', args: {id: 'a'}, ts: 0}]);
    storage.data.set('canon', {version: s.head, ts: s.now, stateHash: '0'.repeat(64), scalars: {}, lastIds: {other: 1, [id]: 1}});
    s.setOffline(false);
    s.requests.length = 0;
    const outcomes: OutcomeEvent[] = [];
    const c2 = client(s, {storage, onOutcome: o => outcomes.push(o)});
    await c2.settled();
    assert.deepEqual(outcomes, [{status: 'error', version: 2, code: 'todo_taken', message: 'todo a is taken', id: 1, name: 'todo.take'}], old ? 'older server' : 'current server');
    // The code is in the status; only an older server's answer sends the client to the version for it.
    assert.equal(s.requests.some(r => r.includes('/versions?')), old, s.requests.join('\n'));
    await c2.close();
  }
});

test('file storage keeps the state across a restart and ignores a torn last write', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'canon-client-'));
  const path = join(dir, 'state.jsonl');
  const s = new FakeCanon(todo);
  const c1 = client(s, {storage: new FileStorage(path)});
  await c1.ready;
  await c1.mutate['todo.add']({id: 'a', title: 'kept'});
  await c1.settled();
  s.setOffline(true);
  void c1.mutate['todo.count']({}).catch(() => {});
  await until('written', () => c1.pendingCount === 1);
  await new Promise(r => setTimeout(r, 20));
  c1.close();
  await appendFile(path, '[["pending\\u0000000000000009",{"id":9'); // a crash mid-write
  const c2 = client(s, {storage: new FileStorage(path)});
  await c2.storageLoaded();
  assert.equal(c2.clientID, c1.clientID);
  assert.equal(c2.pendingCount, 1);
  assert.equal(c2.query({item: {collection: 'todos', id: 'a'}})?.data && true, true);
  s.setOffline(false);
  await c2.settled();
  assert.equal(s.state.scalars.get('count'), 1);
  c2.close();
  assert.ok((await readFile(path, 'utf8')).length > 0);
});

test('the HTTP fallback pushes and polls when websockets are blocked', async () => {
  const s = new FakeCanon(todo);
  const Blocked = class {
    readyState = 0;
    onclose: ((e: {code: number; reason: string}) => void) | null = null;
    constructor() {
      setTimeout(() => this.onclose?.({code: 1006, reason: ''}), 0);
    }
    close() {}
    send() {}
  } as unknown as typeof WebSocket;
  const statuses: string[] = [];
  const c = client(s, {WebSocket: Blocked, pollInterval: 5, onStatus: st => statuses.push(st)});
  await c.ready;
  assert.deepEqual(await c.mutate['todo.add']({id: 'a', title: 'over http'}), {status: 'applied', version: 1});
  await s.decide('g2', [{client: 'o', id: 1, name: 'item.put', args: {collection: 'notes', id: 'n', data: 'x'}}]);
  await until('polled', () => c.version === 2);
  assert.ok(statuses.includes('polling'));
  assert.deepEqual(clientView(c), serverView(s));
  c.close();
});

test('two clients converge under concurrent edits', async () => {
  const s = new FakeCanon(todo);
  const a = client(s), b = client(s);
  await Promise.all([a.ready, b.ready]);
  await a.mutate['item.put']({collection: 'notes', id: 'n', data: {text: ''}});
  const ps: Promise<unknown>[] = [];
  for (let i = 0; i < 50; i++) {
    ps.push(a.mutate['item.splice']({collection: 'notes', id: 'n', path: '/text', index: 0, insert: 'a'}));
    ps.push(b.mutate['todo.count']({}));
  }
  await Promise.all(ps);
  await until('converged', () => a.version === s.head && b.version === s.head);
  assert.deepEqual(clientView(a), serverView(s));
  assert.deepEqual(clientView(b), serverView(s));
  a.close();
  b.close();
});

test('mutators cannot read the clock or randomness', async () => {
  const s = new FakeCanon(todo);
  const c = new Canon({
    server: 'http://canon.test', token: 't', org: 'acme', project: 'p', WebSocket: s.WebSocket, fetch: s.fetch, onError: () => {},
    mutators: {
      'bad.clock'(tx: Tx) {
        tx.setScalar('t', Date.now());
      },
      'bad.random'(tx: Tx) {
        tx.setScalar('t', Math.random());
      },
      'bad.date'(tx: Tx) {
        tx.setScalar('t', new Date().getTime());
      },
      'ok.date'(tx: Tx) {
        tx.setScalar('t', new Date(tx.now()).getUTCFullYear());
      },
    },
  });
  await c.ready;
  s.mutators = {...s.mutators, ...{'ok.date': (tx: Tx) => tx.setScalar('t', new Date(tx.now()).getUTCFullYear())}};
  for (const name of ['bad.clock', 'bad.random', 'bad.date'] as const) {
    let msg = '';
    c.subscribe({scalar: 't'}, () => {});
    const r = (await import('../src/mutators.js')).run(
      (c as unknown as {mutators: Mutators}).mutators[name], {org: 'a', project: 'p', branch: 'main', clientGroup: 'g', client: 'c', id: 1, name}, null, 0,
      new (await import('../src/view.js')).Layers(new (await import('../src/view.js')).Canonical(), []),
    );
    if (!(r instanceof Promise) && !r.ok) {
      msg = r.message;
      assert.equal(r.code, 'mutator_error');
    }
    assert.match(msg, /tx\.now\(\)|not deterministic/, name);
  }
  assert.equal(typeof Date.now(), 'number', 'the guards are lifted after the run');
  assert.equal(typeof Math.random(), 'number');
  assert.deepEqual(await c.mutate['ok.date']({}), {status: 'applied', version: 1});
  c.close();
});

test('subscribers run outside the determinism guards, also on a rebase', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  const times: number[] = [];
  c.subscribe({collection: 'notes'}, () => times.push(Date.now() + Math.random() * 0 + performance.now() * 0));
  await c.mutate['item.put']({collection: 'notes', id: 'a', data: 1});
  await s.decide('g2', [{client: 'o', id: 1, name: 'item.put', args: {collection: 'notes', id: 'b', data: 2}}]);
  await until('the other version', () => c.version === 2);
  assert.equal(times.length, 3);
  assert.ok(times.every(t => typeof t === 'number' && t > 0));
  c.close();
});

test('bad options and bundles are refused with what to fix', () => {
  assert.throws(() => new Canon({server: '', token: 't', org: 'a', project: 'p'}), /options.server is required/);
  assert.throws(() => new Canon({server: 'http://x', token: '', org: 'a', project: 'p'}), /options.token is required/);
  assert.throws(() => new Canon({server: 'http://x', token: 't', org: 'a', project: 'p', mutators: {'item.put': () => {}}}), /built-in/);
  assert.throws(() => new Canon({server: 'http://x', token: 't', org: 'a', project: 'p', mutators: {'branch.x': () => {}}}), /reserved/);
  assert.throws(() => new Canon({server: 'http://x', token: 't', org: 'a', project: 'p', mutators: {'9x': () => {}}}), /not a valid mutator name/);
});

test('a past version is readable', async () => {
  const s = new FakeCanon(todo);
  const c = client(s);
  await c.ready;
  await c.mutate['item.put']({collection: 'notes', id: 'n', data: 'v1'});
  await c.mutate['item.put']({collection: 'notes', id: 'n', data: 'v2'});
  const at1 = await c.at(1);
  assert.equal(at1.get('notes', 'n')?.data, 'v1');
  assert.equal(c.query({item: {collection: 'notes', id: 'n'}})?.data, 'v2');
  c.close();
});

test('bodies are fetched by hash at most once, and not at all when the client made them', async () => {
  const s = new FakeCanon(todo);
  const a = client(s), b = client(s);
  await Promise.all([a.ready, b.ready]);
  await a.mutate['item.put']({collection: 'notes', id: 'n', data: {big: 'x'.repeat(1000)}});
  await until('b has it', () => b.version === 1);
  await a.mutate['item.put']({collection: 'notes', id: 'm', data: {big: 'x'.repeat(1000)}}); // the same body
  await until('b has both', () => b.version === 2);
  const blobGets = s.requests.filter(r => r.includes('/blobs/'));
  assert.equal(blobGets.length, 1, blobGets.join('\n')); // b once; a never
  a.close();
  b.close();
});

test('the app\'s bundle is checked against the deployed one: a mismatch is reported once, with both hashes', async () => {
  const mine = await bundleHash('export default {};\n');
  // Node's own SHA-256 agrees with the client's.
  const {createHash} = await import('node:crypto');
  assert.equal(mine, createHash('sha256').update('export default {};\n').digest('hex'));
  const other = 'b'.repeat(64);
  const s = new FakeCanon(todo);

  // The same bundle deployed: nothing reported.
  s.bundle = mine;
  const errs: CanonError[] = [];
  const ok = client(s, {bundleHash: mine, onError: e => errs.push(e)});
  await until('online', () => ok.status === 'online');
  await until('checked', () => s.requests.some(r => r.startsWith('GET /v1/projects/acme/p/mutators')));
  assert.equal((await ok.mutate['todo.add']({id: 'a', title: 'A'})).status, 'applied');
  await ok.settled();
  assert.deepEqual(errs.map(e => e.code), []);
  await ok.close();

  // None deployed: reported.
  s.bundle = undefined;
  const none: CanonError[] = [];
  const c1 = client(s, {bundleHash: mine, onError: e => none.push(e)});
  await until('mismatch reported', () => none.length > 0);
  assert.equal(none[0]!.code, 'bundle_mismatch');
  assert.match(none[0]!.message, /no mutator bundle deployed for acme\/p/);
  await c1.close();

  // Another bundle deployed while the app runs: the version it decides
  // makes the client ask again, and it reports the mismatch once.
  s.bundle = mine;
  const asked = () => s.requests.filter(r => r.startsWith('GET /v1/projects/acme/p/mutators')).length;
  const before = asked();
  const errs2: CanonError[] = [];
  const c2 = client(s, {bundleHash: mine, onError: e => errs2.push(e)});
  await until('online', () => c2.status === 'online');
  s.bundle = other;
  await c2.mutate['todo.add']({id: 'b', title: 'B'});
  await until('mismatch reported', () => errs2.length > 0);
  await c2.mutate['todo.add']({id: 'c', title: 'C'});
  await c2.settled();
  assert.deepEqual(errs2.map(e => e.code), ['bundle_mismatch']);
  // Asked on connect and once for the other bundle, not once per version.
  assert.equal(asked() - before, 2);
  assert.match(errs2[0]!.message, new RegExp(`acme/p with mutator bundle ${other.slice(0, 12)}…, this app runs ${mine.slice(0, 12)}…`));
  assert.match(errs2[0]!.details.hint ?? '', /canon mutators deploy/);
  await c2.close();

  assert.throws(() => client(s, {bundleHash: 'ABC'}), /options.bundleHash must be the bundle's lowercase hex SHA-256/);
});
