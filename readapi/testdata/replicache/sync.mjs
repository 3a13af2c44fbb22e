// Two stock Replicache clients edit one Canon project through Canon's
// Replicache endpoints (push: producer, pull: readapi), then wait until
// both have no pending mutation and the same view, and print both views
// as JSON on stdout for the Go test (readapi/replicache_node_test.go) to
// compare with Canon's state.
//
// Environment: CANON_URL (the server), CANON_PROJECT (org/project),
// CANON_TOKEN_A and CANON_TOKEN_B (tokens with the write scope).
//
// The mutators (mutators.mjs) mirror Canon's built-ins; keys follow
// docs/readapi.md.
import {Replicache} from 'replicache';
import {mutators} from './mutators.mjs';

const base = process.env.CANON_URL;
const [org, project] = process.env.CANON_PROJECT.split('/');

function client(name, token) {
  return new Replicache({
    name,
    kvStore: 'mem',
    mutators,
    auth: `Bearer ${token}`,
    pushURL: `${base}/replicache/v1/${org}/${project}/push`,
    pullURL: `${base}/replicache/v1/${org}/${project}/pull`,
    pullInterval: null, // pulled below
    pushDelay: 10,
    logLevel: 'error',
  });
}

async function view(rep) {
  return rep.query(async tx => Object.fromEntries(await tx.scan().entries().toArray()));
}

// Each Replicache name is its user's (docs/readapi.md): a client group
// is per name, and belongs to the user that first pushed with it.
const a = client('ann', process.env.CANON_TOKEN_A);
const b = client('bob', process.env.CANON_TOKEN_B);
await Promise.all([a.pull({now: true}), b.pull({now: true})]);

// Concurrent edits: both create, both patch one item on different
// fields, one deletes the other's item, one sets a scalar, both edit the
// same field (the later decided wins).
await a.mutate['item.put']({collection: 'notes', id: 'shared', data: {title: 'draft'}});
await a.mutate['item.put']({collection: 'docs', id: 'text', data: {body: 'hello'}});
await a.mutate['item.splice']({collection: 'docs', id: 'text', path: '/body', index: 5, insert: ' world'});
if ((await a.query(tx => tx.get('docs/text')))?.body !== 'hello world') {
  throw new Error('item.splice did not edit the optimistic view');
}
await b.mutate['item.put']({collection: 'notes', id: 'b1', data: {text: 'from b'}});
await a.push({now: true});
await b.push({now: true});
// Wait until b sees a's item before patching it.
for (let i = 0; (await b.query(tx => tx.get('notes/shared'))) === undefined; i++) {
  if (i > 300) throw new Error('b never saw notes/shared');
  await b.pull({now: true});
  await new Promise(r => setTimeout(r, 100));
}
await Promise.all([
  a.mutate['item.patch']({collection: 'notes', id: 'shared', data: {a: 1, title: 'by a'}}),
  b.mutate['item.patch']({collection: 'notes', id: 'shared', data: {b: 2, title: 'by b'}}),
  a.mutate['item.put']({collection: 'tasks', id: 't/1', data: [1, 2, 3]}),
  a.mutate['project.set']({name: 'Canon + Replicache'}),
  b.mutate['item.put']({collection: 'notes', id: 'gone', data: null}),
]);
await b.mutate['item.delete']({collection: 'notes', id: 'gone'});
await a.mutate['item.patch']({collection: 'notes', id: 'b1', data: {seen: true}});

// Converge: every mutation confirmed by a pull, and equal views.
const deadline = Date.now() + 90_000;
for (;;) {
  await Promise.all([a.push({now: true}), b.push({now: true})]);
  await Promise.all([a.pull({now: true}), b.pull({now: true})]);
  const [pa, pb] = await Promise.all([a.experimentalPendingMutations(), b.experimentalPendingMutations()]);
  const [va, vb] = await Promise.all([view(a), view(b)]);
  if (pa.length === 0 && pb.length === 0 && JSON.stringify(va) === JSON.stringify(vb)) {
    console.log(JSON.stringify({a: va, b: vb, pendingA: pa.length, pendingB: pb.length, clientA: a.clientID, clientB: b.clientID}));
    break;
  }
  if (Date.now() > deadline) {
    console.error(JSON.stringify({a: va, b: vb, pendingA: pa, pendingB: pb}));
    throw new Error('the clients did not converge in 90 s');
  }
  await new Promise(r => setTimeout(r, 200));
}
await Promise.all([a.close(), b.close()]);
