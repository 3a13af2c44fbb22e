// The mutator contract's conformance vectors (model/bundle/testdata/
// conformance, shared with the server's sandbox) run through the client's
// local runner: the outcome of every mutation and the final state must be
// the ones the server decides.

import assert from 'node:assert/strict';
import {readdirSync, readFileSync} from 'node:fs';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';

import {canonical, type JSONObject, type JSONValue} from '../src/json.js';
import {checkMutators, run, type Mutators} from '../src/mutators.js';
import {Canonical, Layers, splitKey} from '../src/view.js';

const dir = fileURLToPath(new URL('../../../../model/bundle/testdata/conformance/', import.meta.url));

// What only the server's sandbox does: it makes a fresh module instance
// and a frozen realm for every mutation. The client runs the app's module
// as the app imported it, in the page's realm.
const skipped: Record<string, string> = {
  'nothing persists from one mutation to the next': 'a fresh module instance and frozen globals per mutation are the server sandbox\'s',
};

interface Case {
  description: string;
  bundle?: string;
  source?: string;
  state?: {scalars?: JSONObject; items?: {collection: string; id: string; data: JSONValue; meta?: JSONObject}[]};
  mutations: {client: string; name: string; args?: JSONValue; now?: number; expect: {status: string; code?: string; message?: string}}[];
  expect?: {scalars: JSONObject; items: {collection: string; id: string; data: JSONValue; meta?: JSONObject}[]};
}

async function load(c: Case, n: number): Promise<Mutators> {
  const url = c.bundle
    ? new URL(c.bundle, `file://${dir}`).href
    : `data:text/javascript;base64,${Buffer.from(c.source! + `\n// ${n}`).toString('base64')}`;
  return checkMutators(await import(url));
}

let n = 0;
for (const file of readdirSync(dir).filter(f => f.endsWith('.json')).sort()) {
  const cases = JSON.parse(readFileSync(dir + file, 'utf8')) as Case[];
  for (const c of cases) {
    test(`conformance ${file}: ${c.description}`, {skip: skipped[c.description]}, async () => {
      const mutators = await load(c, n++);
      const state = new Canonical();
      for (const [k, v] of Object.entries(c.state?.scalars ?? {})) {
        state.scalars.set(k, v);
      }
      for (const it of c.state?.items ?? []) {
        state.setItem(it.collection, it.id, {data: it.data, meta: it.meta ?? {}});
      }
      const ids = new Map<string, number>();
      for (const [i, m] of c.mutations.entries()) {
        const id = (ids.get(m.client) ?? 0) + 1;
        ids.set(m.client, id);
        const info = {org: 'conformance', project: 'vectors', branch: 'main', clientGroup: `${m.client}-group`, client: m.client, id, name: m.name};
        const r = await run(mutators[m.name], info, m.args ?? null, m.now ?? 1767225600000 + 1000 * i, new Layers(state, []));
        const got = r.ok ? {status: 'applied', code: '', message: ''} : {status: 'error', code: r.code, message: r.message};
        const what = `mutation ${i} (${m.name})`;
        assert.equal(got.status, m.expect.status, `${what}: ${JSON.stringify(got)}`);
        assert.equal(got.code, m.expect.code ?? '', `${what}: ${JSON.stringify(got)}`);
        assert.ok(got.message.startsWith(m.expect.message ?? ''), `${what}: message ${JSON.stringify(got.message)}, want a prefix ${JSON.stringify(m.expect.message)}`);
        if (r.ok) {
          for (const [k, v] of r.writes.items) {
            const [coll, itemId] = splitKey(k);
            state.setItem(coll, itemId, v ?? undefined);
          }
          for (const [k, v] of r.writes.scalars) {
            if (v === null) {
              state.scalars.delete(k);
            } else {
              state.scalars.set(k, v);
            }
          }
        }
      }
      if (c.expect) {
        assert.equal(canonical(Object.fromEntries(state.scalars)), canonical(c.expect.scalars), 'scalars');
        const items: JSONValue[] = [];
        for (const [coll, m] of state.collections) {
          for (const [id, it] of m) {
            items.push({collection: coll, id, data: it.data, meta: it.meta});
          }
        }
        const want = c.expect.items.map(it => ({collection: it.collection, id: it.id, data: it.data, meta: it.meta ?? {}}));
        const key = (x: JSONValue) => canonical(x);
        assert.deepEqual(items.map(key).sort(), want.map(key).sort(), 'items');
      }
    });
  }
}
