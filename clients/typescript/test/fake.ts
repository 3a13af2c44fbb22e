// A fake Canon for the unit tests: the websocket protocol and the HTTP
// endpoints the client uses, over an in-memory sequencer that decides with
// the built-ins (and the mutators a test gives it). Tests steer it: take it
// offline, make it skip a version, reset a subscription, drop a push.
// Behaviour against the real server is tested by the Go tests that drive
// the client against Canon (clients/typescript/client_test.go).

import {canonical, clone, sha256Hex, type JSONObject, type JSONValue} from '../src/json.js';
import {builtins, run, type Mutators} from '../src/mutators.js';
import {Canonical, Layers, splitKey} from '../src/view.js';
import type * as wire from '../src/wire.js';

interface Snapshot {
  scalars: JSONObject;
  items: Map<string, {data: JSONValue; meta: JSONObject; hash: string; version: number}>;
}

export class FakeCanon {
  org = 'acme';
  project = 'p';
  branch = 'main';
  mutators: Mutators;
  state = new Canonical();
  hashes = new Map<string, string>(); // item key -> hash
  written = new Map<string, number>(); // item key -> version
  blobs = new Map<string, string>();
  versions: wire.Version[] = [];
  snapshots: Snapshot[] = [];
  lastIds = new Map<string, number>();
  sockets = new Set<FakeSocket>();
  offline = false;
  /** Pushes the server takes but never decides (a crash before Kafka acknowledged). */
  dropPushes = 0;
  /** The next live version sent is skipped on the sockets (a gap). */
  skipNext = false;
  /** The base of the next version: it starts the branch from another one (its items are not listed, as Canon does). */
  nextBase: {branch: string; version: number} | undefined;
  /** The status API answers without code, as Canon did before it stored codes. */
  statusWithoutCode = false;
  requests: string[] = [];
  /** The hash of the bundle deployed for the project (GET …/mutators); its versions record it. */
  bundle: string | undefined;
  pushes = 0;
  decided = 0;
  duplicates = 0;
  now = 1767225600000;

  constructor(mutators: Mutators = {}) {
    this.mutators = {...builtins, ...mutators};
  }

  get head(): number {
    return this.versions.length;
  }

  /** decide sequences mutations as Canon does: one version per mutation taken. */
  async decide(clientGroup: string, muts: wire.PushMutation[]): Promise<void> {
    for (const m of muts) {
      const last = this.lastIds.get(m.client) ?? 0;
      if (m.id <= last) {
        this.duplicates++;
        continue;
      }
      if (m.id > last + 1) {
        this.broadcast({type: 'rejected', reason: 'gap', message: `gap: expected ${last + 1}`, branch: this.branch, clientGroup, client: m.client, id: m.id, name: m.name, expectedId: last + 1, at: this.now});
        continue;
      }
      this.decided++;
      const info = {org: this.org, project: this.project, branch: this.branch, clientGroup, client: m.client, id: m.id, name: m.name};
      const r = await run(this.mutators[m.name], info, (m.args ?? null) as JSONValue, ++this.now, new Layers(this.state, []));
      this.lastIds.set(m.client, m.id);
      const items: wire.ItemChange[] = [];
      if (r.ok) {
        for (const [k, v] of r.writes.items) {
          const [c, id] = splitKey(k);
          if (v === null) {
            this.state.setItem(c, id, undefined);
            items.push({collection: c, id, op: 'delete'});
          } else {
            const body = canonical(v.data);
            const hash = await sha256Hex(body);
            this.blobs.set(hash, body);
            this.state.setItem(c, id, {data: v.data, meta: v.meta, hash});
            items.push({collection: c, id, op: 'put', meta: v.meta, hash, size: body.length});
          }
        }
        for (const [n, v] of r.writes.scalars) {
          if (v === null) {
            this.state.scalars.delete(n);
          } else {
            this.state.scalars.set(n, v);
          }
        }
      }
      const outcome: wire.Outcome = {clientGroup, client: m.client, id: m.id, name: m.name, args: (m.args ?? null) as JSONValue, status: r.ok ? 'applied' : 'error', offset: 0,
        ...(!r.ok && {error: r.message, code: r.code})};
      this.addVersion(items, [outcome], {[m.client]: m.id});
    }
  }

  /** addVersion appends a version and sends it to the subscribers. */
  addVersion(items: wire.ItemChange[], mutations: wire.Outcome[], lastIds: {[k: string]: number}): wire.Version {
    const v: wire.Version = {
      org: this.org, project: this.project, branch: this.branch, version: this.head + 1, parent: this.head, ts: this.now,
      scalars: Object.fromEntries(this.state.scalars), items, mutations, lastIds, stateHash: '0'.repeat(64), source: {partition: 0, offset: 0},
      ...(this.bundle !== undefined && mutations.length > 0 && {bundle: this.bundle}),
      ...(this.nextBase !== undefined && {base: this.nextBase}),
    };
    this.nextBase = undefined;
    this.versions.push(v);
    for (const it of items) {
      this.written.set(it.collection + '\u0000' + it.id, v.version);
    }
    this.snapshots.push(this.snapshot());
    if (this.skipNext) {
      this.skipNext = false;
      return v;
    }
    for (const s of this.sockets) {
      if (s.live) {
        s.deliver(this.versionMessage(v));
      }
    }
    return v;
  }

  private snapshot(): Snapshot {
    const items = new Map<string, {data: JSONValue; meta: JSONObject; hash: string; version: number}>();
    for (const [c, m] of this.state.collections) {
      for (const [id, it] of m) {
        const k = c + '\u0000' + id;
        items.set(k, {data: clone(it.data), meta: clone(it.meta), hash: it.hash!, version: this.written.get(k) ?? 1});
      }
    }
    return {scalars: Object.fromEntries([...this.state.scalars].map(([k, v]) => [k, clone(v)])), items};
  }

  versionMessage(v: wire.Version): wire.WebsocketVersion {
    return {
      type: 'version', org: v.org, project: v.project, branch: v.branch, version: v.version, parent: v.parent, ts: v.ts, stateHash: v.stateHash,
      scalars: v.scalars, items: (v.items ?? []).map(i => ({collection: i.collection, id: i.id, op: i.op, ...(i.meta && {meta: i.meta}), ...(i.hash && {hash: i.hash, size: i.size ?? 0})})),
      mutations: (v.mutations ?? []).map(m => ({clientGroup: m.clientGroup, client: m.client, id: m.id, name: m.name, status: m.status, ...(m.error !== undefined && {error: m.error}), ...(m.code !== undefined && {code: m.code})})),
      lastIds: v.lastIds ?? {},
      ...(v.bundle !== undefined && {bundle: v.bundle}),
      ...(v.base !== undefined && {base: v.base}),
    };
  }

  broadcast(m: object): void {
    for (const s of this.sockets) {
      if (s.live) {
        s.deliver(m);
      }
    }
  }

  /** setOffline takes the server off the network (sockets drop with 1006) or back. */
  setOffline(off: boolean): void {
    this.offline = off;
    if (off) {
      for (const s of [...this.sockets]) {
        s.drop(1006);
      }
    }
  }

  /** resetAll sends every socket a reset to the head (as after a topic was recreated). */
  resetAll(): void {
    for (const s of this.sockets) {
      s.deliver({type: 'reset', reason: 'future_version', branch: this.branch, from: s.from, head: this.head});
    }
  }

  // ---- HTTP ----

  fetch = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const u = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    this.requests.push(`${init.method ?? 'GET'} ${u.pathname}${u.search}`);
    if (this.offline) {
      throw new TypeError('fetch failed');
    }
    await Promise.resolve();
    const base = `/v1/projects/${this.org}/${this.project}`;
    const path = u.pathname.slice(base.length);
    const json = (status: number, body: unknown) => new Response(JSON.stringify(body), {status, headers: {'Content-Type': 'application/json'}});
    if (path === '' || path === '/') {
      if (this.head === 0) {
        return json(404, {error: {code: 'branch_not_found', message: 'no branch'}});
      }
      const at = Number(u.searchParams.get('at') ?? this.head);
      const snap = this.snapshots[at - 1]!;
      const collections: {[k: string]: wire.ItemInfo[]} = {};
      for (const [k, it] of [...snap.items].sort(([a], [b]) => (a < b ? -1 : 1))) {
        const [c, id] = splitKey(k);
        (collections[c] ??= []).push({id, meta: it.meta, hash: it.hash, size: 0, version: it.version, data: it.data});
      }
      const st: wire.State = {org: this.org, project: this.project, branch: this.branch, version: at, ts: this.versions[at - 1]!.ts, stateHash: '0'.repeat(64), scalars: snap.scalars, collections};
      return json(200, st);
    }
    if (path === '/versions') {
      if (this.head === 0) {
        return json(404, {error: {code: 'branch_not_found', message: 'no branch'}});
      }
      const from = Math.max(1, Number(u.searchParams.get('from') ?? 1));
      const limit = Number(u.searchParams.get('limit') ?? 100);
      const vs = this.versions.slice(from - 1, from - 1 + limit);
      const page: wire.Versions = {org: this.org, project: this.project, branch: this.branch, head: this.head, versions: vs};
      if (vs.length && vs[vs.length - 1]!.version < this.head) {
        page.next = vs[vs.length - 1]!.version + 1;
      }
      return json(200, page);
    }
    let m = /^\/blobs\/([0-9a-f]{64})$/.exec(path);
    if (m) {
      const b = this.blobs.get(m[1]!);
      return b === undefined ? json(404, {error: {code: 'blob_not_found', message: 'no blob'}}) : new Response(b, {status: 200});
    }
    m = /^\/clients\/([^/]+)\/mutations\/(\d+)$/.exec(path);
    if (m) {
      const client = decodeURIComponent(m[1]!), id = Number(m[2]);
      for (const v of this.versions) {
        const o = v.mutations?.find(x => x.client === client && x.id === id);
        if (o) {
          return json(200, {client, branch: this.branch, id, status: o.status, applied: o.status === 'applied', version: v.version, ...(o.error && {error: o.error}),
            ...(o.code && !this.statusWithoutCode && {code: o.code}), lastMutationID: this.lastIds.get(client) ?? 0});
        }
      }
      return json(200, {client, branch: this.branch, id, status: 'pending', applied: false, lastMutationID: this.lastIds.get(client) ?? 0});
    }
    if (path === '/mutators') {
      if (this.bundle === undefined) {
        return json(404, {error: {code: 'no_bundle', message: `no mutator bundle is deployed for ${this.org}/${this.project}`}});
      }
      const ab: wire.ActiveBundle = {org: this.org, project: this.project, scope: 'project', hash: this.bundle, deployedAt: this.now, activatedAt: this.now, source: {partition: 0, offset: 0}};
      return json(200, ab);
    }
    if (path === '/push' && init.method === 'POST') {
      const body = JSON.parse(String(init.body)) as wire.PushRequest;
      this.pushes++;
      if (this.dropPushes > 0) {
        this.dropPushes--;
      } else {
        await this.decide(body.clientGroup, body.mutations);
      }
      return json(200, {mutations: body.mutations.map(x => ({client: x.client, id: x.id, partition: 0, offset: 0}))});
    }
    return json(404, {error: {code: 'not_found', message: path}});
  };

  /** WebSocket is a constructor bound to this server, for CanonOptions.WebSocket. */
  get WebSocket(): typeof WebSocket {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const server = this;
    return class extends FakeSocket {
      constructor(url: string) {
        super(server, url);
      }
    } as unknown as typeof WebSocket;
  }
}

export class FakeSocket {
  readyState = 0;
  onmessage: ((ev: {data: string}) => void) | null = null;
  onclose: ((ev: {code: number; reason: string}) => void) | null = null;
  onerror: (() => void) | null = null;
  onopen: (() => void) | null = null;
  from: number;
  live = false;
  sent: object[] = [];

  constructor(readonly server: FakeCanon, url: string) {
    const u = new URL(url);
    this.from = Number(u.searchParams.get('from') ?? 0);
    setTimeout(() => this.open(), 0);
  }

  private open(): void {
    if (this.server.offline) {
      this.drop(1006);
      return;
    }
    this.readyState = 1;
    this.server.sockets.add(this);
    this.onopen?.();
    const s = this.server;
    this.deliver({type: 'hello', protocol: 1, org: s.org, project: s.project, branch: s.branch, from: this.from, head: s.head, maxMessageBytes: 4 << 20, pingSeconds: 25, push: true});
    if (this.from > s.head) {
      this.deliver({type: 'reset', reason: 'future_version', branch: s.branch, from: this.from, head: s.head});
    } else {
      for (const v of s.versions.slice(this.from)) {
        this.deliver(s.versionMessage(v));
      }
    }
    this.live = true;
  }

  deliver(m: object): void {
    if (this.readyState !== 1) {
      return;
    }
    this.sent.push(m);
    const data = JSON.stringify(m);
    this.onmessage?.({data});
  }

  send(text: string): void {
    const m = JSON.parse(text) as wire.WebsocketPush;
    if (m.type !== 'push') {
      return;
    }
    this.server.pushes++;
    void (async () => {
      if (this.server.dropPushes > 0) {
        this.server.dropPushes--;
        return; // never answered: the socket will drop
      }
      await this.server.decide(m.clientGroup, m.mutations);
      this.deliver({type: 'pushed', requestId: m.requestId, mutations: m.mutations.map(x => ({client: x.client, id: x.id, partition: 0, offset: 0}))});
    })();
  }

  close(code = 1000): void {
    this.drop(code);
  }

  drop(code: number): void {
    if (this.readyState === 3) {
      return;
    }
    this.readyState = 3;
    this.live = false;
    this.server.sockets.delete(this);
    setTimeout(() => this.onclose?.({code, reason: ''}), 0);
  }
}
