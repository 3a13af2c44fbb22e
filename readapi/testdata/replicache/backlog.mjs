// A stock Replicache client edits offline, far past one push's limits
// (1,100 small mutations and 45 of about 100 KB: over 1,000 mutations and
// over 4 MiB), then goes online. Canon takes a prefix of each push
// (docs/ingest.md); the client keeps pushing what is pending and pulling
// until nothing is. Prints {pending, clientID, view} as JSON for the Go
// test (readapi/replicache_node_test.go).
//
// Environment: CANON_URL, CANON_PROJECT (org/project), CANON_TOKEN.
import {Replicache} from 'replicache';
import {mutators} from './mutators.mjs';

const base = process.env.CANON_URL;
const [org, project] = process.env.CANON_PROJECT.split('/');

const rep = new Replicache({
  name: 'ann',
  kvStore: 'mem',
  mutators,
  auth: `Bearer ${process.env.CANON_TOKEN}`,
  pushURL: '', // offline: nothing is pushed
  pullURL: `${base}/replicache/v1/${org}/${project}/pull`,
  pullInterval: null,
  logLevel: 'error',
});

const big = 'x'.repeat(100_000);
for (let i = 0; i < 1100; i++) {
  await rep.mutate['item.put']({collection: 'small', id: `s${i}`, data: i});
}
for (let i = 0; i < 45; i++) {
  await rep.mutate['item.put']({collection: 'large', id: `l${i}`, data: {i, big}});
}
const offline = (await rep.experimentalPendingMutations()).length;

// Online: push and pull until nothing is pending, as Replicache does on
// each mutation and poke.
rep.pushURL = `${base}/replicache/v1/${org}/${project}/push`;
const deadline = Date.now() + 120_000;
let rounds = 0;
for (;;) {
  await rep.push({now: true});
  await rep.pull({now: true});
  rounds++;
  const pending = (await rep.experimentalPendingMutations()).length;
  if (pending === 0) {
    break;
  }
  if (Date.now() > deadline) {
    throw new Error(`${pending} of ${offline} mutations still pending after ${rounds} rounds`);
  }
}
const view = await rep.query(async tx => (await tx.scan().keys().toArray()).length);
console.log(JSON.stringify({offline, rounds, keys: view, clientID: rep.clientID}));
await rep.close();
