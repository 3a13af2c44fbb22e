// The page of the browser tests (typescript_test.go): the client with
// IndexedDB storage, driven from Go through window.canonTest.

import {createRoot} from 'react-dom/client';
import {Canon, type Outcome} from '../../src/index.js';
import type {Tx} from '../../src/mutators.js';
import {useQuery} from '../../src/react.js';
import {IndexedDBStorage} from '../../src/storage.js';
import {Changes, itemKey} from '../../src/view.js';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

// A React view of the client's local view through useQuery: the test reads
// what it rendered.
function Notes({canon}: {canon: Canon<typeof app>}) {
  const items = useQuery(canon, {collection: 'items'});
  const shared = useQuery(canon, {item: {collection: 'notes', id: 'shared'}});
  return (
    <p>
      <span id="items">{items.length}</span> items, shared text <span id="shared">{((shared?.data as {text?: string}) ?? {}).text?.length ?? -1}</span> long
    </p>
  );
}

const app = {
  // The server does not have it: its outcome is unknown_mutator, and the
  // optimistic change is rolled back.
  'note.bump'(tx: Tx, a: {id: string}) {
    const it = tx.get('notes', a.id);
    tx.put('notes', a.id, {...(it?.data as object), bumped: true});
  },
};

let canon: Canon<typeof app> | undefined;
const outcomes: Outcome[] = [];
const learned: string[] = [];
let renders = 0;
const seen = new Map<number, number>();

function view() {
  return canon!.query(tx => {
    const items: {[k: string]: unknown} = {};
    for (const c of tx.collections()) {
      for (const it of tx.collection(c)) {
        items[`${c}/${it.id}`] = it.data;
      }
    }
    return {version: tx.version, scalars: tx.scalars(), items};
  });
}

// Faults on a real Canon's socket: a version message dropped (a gap).
let dropNext = false;
let dropped = 0;
const events: string[] = [];
const errors: string[] = [];

/** FaultySocket is the browser's WebSocket with the next version message dropped on request. */
class FaultySocket extends WebSocket {
  override set onmessage(f: ((ev: MessageEvent) => void) | null) {
    super.onmessage = f === null ? null : ev => {
      if (dropNext && typeof ev.data === 'string' && (JSON.parse(ev.data) as {type?: string}).type === 'version') {
        dropNext = false;
        dropped++;
        return;
      }
      f.call(this, ev);
    };
  }
  override get onmessage(): ((ev: MessageEvent) => void) | null {
    return super.onmessage;
  }
}

const api = {
  // startFaulty starts a client whose IndexedDB holds a view at version
  // 1000 with an item Canon never had (as after Canon's topics were
  // recreated), over a socket that can drop a version; it records the
  // client's events and errors.
  async startFaulty(server: string, token: string, project: string) {
    const st = await IndexedDBStorage.open(`canon:${server}|acme/${project}/main:0`);
    await st.write(new Map<string, unknown>([
      ['canon', {version: 1000, ts: 1, stateHash: '', scalars: {stale: true}, lastIds: {}}],
      ['item\u0000' + itemKey('notes', 'stale'), {c: 'notes', id: 'stale', data: {stale: true}, meta: {}}],
    ]));
    st.close();
    canon = new Canon({server, token, org: 'acme', project, mutators: app, WebSocket: FaultySocket, onError: e => errors.push(e.code)});
    canon.listen(e => events.push(e.type === 'state' ? `state:${e.cause}:${e.version}` : e.type === 'version' ? `version:${e.version}` : e.type));
    await canon.storageLoaded();
    return canon.clientID;
  },
  dropNextVersion() {
    dropNext = true;
    return true;
  },
  dropped: () => dropped,
  events: () => JSON.stringify(events.filter(e => e.startsWith('state') || e.startsWith('version'))),
  clientErrors: () => JSON.stringify(errors),
  putLater(collection: string, id: string, data: unknown) {
    void canon!.mutate['item.put']({collection, id, data: data as never}).then(o => outcomes.push(o));
    return true;
  },
  start(server: string, token: string, project: string) {
    canon = new Canon({server, token, org: 'acme', project, mutators: app, onOutcome: o => learned.push(`${o.id}:${o.status}`), onError: e => console.warn(e.code, e.message)});
    canon.subscribe({collection: 'notes'}, () => renders++);
    const root = document.createElement('div');
    root.id = 'react';
    document.body.append(root);
    createRoot(root).render(<Notes canon={canon} />);
    return canon.storageLoaded().then(() => canon!.clientID);
  },
  status: () => canon?.status ?? 'none',
  version: () => canon?.version ?? -1,
  pending: () => canon?.pendingCount ?? -1,
  client: () => canon?.clientID ?? '',
  view: () => JSON.stringify(view()),
  // What the React view shows: the count of items and the shared text's length.
  rendered: () => `${document.querySelector('#items')?.textContent}/${document.querySelector('#shared')?.textContent}`,
  expected: () => {
    const v = view();
    return `${Object.keys(v.items).filter(k => k.startsWith('items/')).length}/${((v.items['notes/shared'] as {text?: string}) ?? {}).text?.length ?? -1}`;
  },
  learned: () => learned.length,
  // n edits without waiting: a splice at the start of the shared text
  // and a put of an item of this page's, each.
  edits(tag: string, n: number) {
    for (let i = 0; i < n; i++) {
      canon!.mutate['item.splice']({collection: 'notes', id: 'shared', path: '/text', index: 0, insert: tag}).then(o => outcomes.push(o), () => {});
      canon!.mutate['item.put']({collection: 'items', id: `${tag}${i}`, data: {i, tag}}).then(o => outcomes.push(o), () => {});
    }
    return canon!.pendingCount;
  },
  put(collection: string, id: string, data: unknown) {
    return canon!.mutate['item.put']({collection, id, data: data as never}).then(o => JSON.stringify(o));
  },
  async rollback() {
    const p = canon!.mutate['note.bump']({id: 'shared'});
    await Promise.resolve();
    const before = (canon!.query({item: {collection: 'notes', id: 'shared'}})?.data as {bumped?: boolean}).bumped === true;
    const o = await p;
    await canon!.settled();
    const after = (canon!.query({item: {collection: 'notes', id: 'shared'}})?.data as {bumped?: boolean}).bumped === true;
    return JSON.stringify({before, after, o});
  },
  settled: () => canon!.settled().then(() => true),
  outcomes: () => outcomes.length,
  errors: () => outcomes.filter(o => o.status !== 'applied').length,
  renders: () => renders,
  // Time the rebase of what is pending: mutations of this page while it is offline, then one canonical version.
  close: () => canon!.close().then(() => true),
  // Latency between tabs: the editing tab notes when it edited, the
  // watching one when its subscriber saw the edit (performance.timeOrigin
  // makes the two clocks one).
  watch() {
    canon!.subscribe({item: {collection: 'notes', id: 'latency'}}, it => {
      const seq = (it?.data as {seq?: number} | undefined)?.seq;
      if (seq !== undefined && !seen.has(seq)) {
        seen.set(seq, performance.timeOrigin + performance.now());
      }
    });
    return true;
  },
  edit(seq: number) {
    const t = performance.timeOrigin + performance.now();
    void canon!.mutate['item.put']({collection: 'notes', id: 'latency', data: {seq}});
    return t;
  },
  seenAt: (seq: number) => seen.get(seq) ?? 0,
  // mutate -> subscriber called, n times: the median in ms.
  async localLatency(n: number) {
    let at = 0;
    let want = -1;
    const off = canon!.subscribe({item: {collection: 'notes', id: 'local'}}, it => {
      if ((it?.data as {seq?: number} | undefined)?.seq === want) {
        at = performance.now();
      }
    });
    const ds: number[] = [];
    for (let i = 0; i < n; i++) {
      want = i;
      at = 0;
      const t0 = performance.now();
      void canon!.mutate['item.put']({collection: 'notes', id: 'local', data: {seq: i}});
      while (at === 0) {
        await Promise.resolve();
      }
      ds.push(at - t0);
      await new Promise(r => setTimeout(r, 0));
    }
    off();
    return median(ds);
  },
  // The rebase of what is pending (offline: nothing is decided meanwhile), 7 times: the median in ms.
  async rebaseTime() {
    const ds: number[] = [];
    for (let k = 0; k < 7; k++) {
      const t0 = performance.now();
      await (canon as unknown as {rebase(ch: Changes): void | Promise<void>}).rebase(new Changes());
      ds.push(performance.now() - t0);
    }
    return median(ds);
  },
};

(window as unknown as {canonTest: typeof api}).canonTest = api;
document.title = 'canon client test';
