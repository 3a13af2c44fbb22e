// Benchmarks of the client's local paths (npm run bench), each over
// several rounds with the median reported:
//  - mutate -> subscriber called, for @canon/client and, as the baseline
//    in the same run, Replicache 15 (kvStore mem, no server);
//  - rebase: re-applying 1,000 pending small mutations over a new
//    canonical view, subscribers notified.
// Edit-to-other-tab latency needs a server: test/e2e.ts, scenario latency.

import {Replicache, type WriteTransaction} from 'replicache';
import {Canon} from '../src/client.js';
import {Changes} from '../src/view.js';
import {FakeCanon} from './fake.js';

const rounds = Number(process.env.ROUNDS ?? 5);
const n = Number(process.env.N ?? 2000);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const median = (xs: number[]) => pct(xs, 50);
const tick = () => new Promise(r => setImmediate(r));

async function canonLocal(): Promise<number[]> {
  const s = new FakeCanon();
  s.setOffline(true); // the local path only: nothing is pushed
  const c = new Canon({server: 'http://canon.test', token: 't', org: s.org, project: s.project, WebSocket: s.WebSocket, fetch: s.fetch, onError: () => {}});
  await c.storageLoaded();
  let at = 0;
  let want = -1;
  c.subscribe({item: {collection: 'notes', id: 'n'}}, it => {
    if ((it?.data as {seq?: number} | undefined)?.seq === want) {
      at = performance.now();
    }
  });
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    want = i;
    at = 0;
    const t0 = performance.now();
    void c.mutate['item.put']({collection: 'notes', id: 'n', data: {seq: i, text: 'hello'}});
    while (at === 0) {
      await Promise.resolve();
    }
    out.push(at - t0);
    await tick();
  }
  void c.close();
  return out;
}

async function replicacheLocal(round: number): Promise<number[]> {
  const rep = new Replicache({
    name: `bench-${round}`, kvStore: 'mem', licenseKey: '', logLevel: 'error', pullInterval: null,
    mutators: {async put(tx: WriteTransaction, a: {key: string; value: {seq: number; text: string}}) {
      await tx.set(a.key, a.value);
    }},
  });
  let at = 0;
  let want = -1;
  rep.subscribe(tx => tx.get('notes/n'), {onData: v => {
    if ((v as {seq?: number} | undefined)?.seq === want) {
      at = performance.now();
    }
  }});
  await new Promise(r => setTimeout(r, 50));
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    want = i;
    at = 0;
    const t0 = performance.now();
    void rep.mutate.put({key: 'notes/n', value: {seq: i, text: 'hello'}});
    while (at === 0) {
      await new Promise(r => setImmediate(r));
    }
    out.push(at - t0);
  }
  await rep.close();
  return out;
}

async function rebase1000(): Promise<number> {
  const s = new FakeCanon();
  s.setOffline(true);
  const c = new Canon({server: 'http://canon.test', token: 't', org: s.org, project: s.project, WebSocket: s.WebSocket, fetch: s.fetch, onError: () => {}});
  await c.storageLoaded();
  c.subscribe({collection: 'notes'}, () => {});
  c.subscribe({scalars: true}, () => {});
  for (let i = 0; i < 1000; i++) {
    void c.mutate[i % 2 ? 'item.put' : 'item.patch'](i % 2 ? {collection: 'notes', id: `n${i % 50}`, data: {i, text: 'small'}} : {collection: 'notes', id: `n${(i + 1) % 50}`, data: {i}} as never).catch(() => {});
  }
  await tick();
  if (c.pendingCount !== 1000) {
    throw new Error(`${c.pendingCount} pending`);
  }
  // Seven rebases of the same queue; the round's figure is their median.
  const ds: number[] = [];
  for (let k = 0; k < 7; k++) {
    const t0 = performance.now();
    const r = (c as unknown as {rebase(ch: Changes): void | Promise<void>}).rebase(new Changes());
    if (r instanceof Promise) {
      await r;
    }
    ds.push(performance.now() - t0);
    await tick();
  }
  void c.close();
  return median(ds);
}

const canonP50: number[] = [], canonP99: number[] = [], repP50: number[] = [], repP99: number[] = [], rebase: number[] = [];
for (let r = 0; r < rounds; r++) {
  const a = await canonLocal();
  const b = await replicacheLocal(r);
  canonP50.push(median(a));
  canonP99.push(pct(a, 99));
  repP50.push(median(b));
  repP99.push(pct(b, 99));
  rebase.push(await rebase1000());
}
const f = (x: number) => x.toFixed(4);
console.log(`mutate -> subscriber, ${n} edits x ${rounds} rounds (median of the rounds' figures):`);
console.log(`  @canon/client   p50 ${f(median(canonP50))} ms  p99 ${f(median(canonP99))} ms   rounds p50: ${canonP50.map(f).join(' ')}`);
console.log(`  Replicache 15   p50 ${f(median(repP50))} ms  p99 ${f(median(repP99))} ms   rounds p50: ${repP50.map(f).join(' ')}`);
console.log(`  ratio p50 Replicache / @canon/client: ${(median(repP50) / median(canonP50)).toFixed(1)}x`);
console.log(`rebase of 1,000 pending small mutations: median ${f(median(rebase))} ms   rounds: ${rebase.map(f).join(' ')}`);
process.exit(0);
