// Canon: the local-first client. mutate.name(args) applies the mutator to
// the local view at once, queues the mutation durably and pushes it; each
// canonical version that arrives replaces the canonical view, drops the
// mutations it decided and re-applies the pending ones on top (rebase).

import {CanonError} from './errors.js';
import {Api, type Fetch} from './http.js';
import {canonical, clone, equal, sha256Hex, utf8Length, type JSONObject, type JSONValue} from './json.js';
import {builtins, checkMutators, guarded, Limits, run, type LocalResult, type MutationInfo, type Mutator, type Mutators} from './mutators.js';
import {browserStorage, MemoryStorage, type Storage} from './storage.js';
import {Canonical, Changes, Deps, itemKey, Layers, Overlay, readTx, splitKey, type Item, type ReadTx, type StoredItem} from './view.js';
import type * as wire from './wire.js';

/** The canonical outcome of a mutation. */
export type Outcome =
  | {status: 'applied'; version: number}
  | {status: 'error'; version: number; code: string; message: string};

/** The result of a query. */
export type QueryResult<Q> = Q extends (tx: ReadTx) => infer T
  ? T
  : Q extends {item: unknown}
    ? Item | undefined
    : Q extends {collection: string}
      ? Array<Item & {id: string}>
      : Q extends {scalar: string}
        ? JSONValue | undefined
        : JSONObject;

/** An outcome the client learned, with the mutation it is of (also of a previous session's mutations). */
export type OutcomeEvent = Outcome & {id: number; name: string};

/** A mutation of this client that waits for its canonical outcome, as listen() reports the queue. */
export interface PendingMutation {
  id: number;
  name: string;
  args: JSONValue;
  /** When mutate() was called, ms since the epoch. */
  ts: number;
  /**
   * local: applied to the local view, not yet in the storage; queued: in the
   * storage, not sent (offline, or waiting for an earlier push); sent: pushed,
   * the version that decides it not seen yet.
   */
  state: 'local' | 'queued' | 'sent';
}

/** A canonical version as it was applied to the client's view (after its rebase). */
export interface VersionEvent {
  type: 'version';
  version: number;
  parent: number;
  /** The version's time, ms since the epoch. */
  ts: number;
  /** Set on the first version of a branch created from another one. */
  base?: {branch: string; version: number};
  /** The mutator bundle that decided it; absent for the built-ins. */
  bundle?: string;
  /** All of the branch's scalars after it. */
  scalars: JSONObject;
  /** The items it changed (bodies by hash from the read API). */
  items: {collection: string; id: string; op: 'put' | 'delete'; meta?: JSONValue; hash?: string; size?: number}[];
  /** Its mutations in canonical order, of every client, with their outcome; mine marks this client's. */
  mutations: {clientGroup: string; client: string; id: number; name: string; status: 'applied' | 'error'; error?: string; code?: string; mine: boolean}[];
}

/**
 * The canonical view was replaced as a whole: loaded from the storage
 * (storage), loaded from the read API because nothing was stored (load), or
 * reloaded after the server's reset or a branch found behind the view
 * (reset). Versions after it follow as version events.
 */
export interface StateEvent {
  type: 'state';
  version: number;
  ts: number;
  cause: 'storage' | 'load' | 'reset';
}

/** A mutation of the branch the sequencer rejected (any client's; websocket only). */
export interface RejectedEvent {
  type: 'rejected';
  reason: string;
  message: string;
  clientGroup: string;
  client: string;
  id: number;
  name: string;
  /** A gap: the id the sequencer expects. */
  expectedId?: number;
  at: number;
  mine: boolean;
}

/** This client's queue changed: what is pending now, in id order. */
export interface PendingEvent {
  type: 'pending';
  pending: PendingMutation[];
}

/** What listen() reports, in the order the client applies it. */
export type SyncEvent =
  | VersionEvent
  | StateEvent
  | RejectedEvent
  | PendingEvent
  | ({type: 'outcome'} & OutcomeEvent)
  | {type: 'status'; status: Status};

/** A query: a function of a read transaction, or one of the shorthands. */
export type Query<T> =
  | ((tx: ReadTx) => T)
  | {scalars: true}
  | {scalar: string}
  | {collection: string}
  | {item: {collection: string; id: string}};

export interface CanonOptions<M extends Mutators = Mutators> {
  /** Canon's HTTP address, e.g. http://127.0.0.1:8080. */
  server: string;
  /** An access token with the write scope, or a function that returns a fresh one. */
  token: string | (() => string | Promise<string>);
  org: string;
  project: string;
  /** Default main. */
  branch?: string;
  /** The application's mutator bundle (its module, or its default export); the built-ins are always there. */
  mutators?: M | {default: M} | {mutators: M};
  /** Where the client's state survives reloads: IndexedDB in browsers by default, memory elsewhere. */
  storage?: Storage;
  /** websocket (default when available), http (push and polling), or auto: websocket, falling back to http when it cannot connect. */
  transport?: 'auto' | 'websocket' | 'http';
  /** How often the HTTP fallback polls for versions, ms (default 1000). */
  pollInterval?: number;
  /** Reconnect backoff in ms: the first delay and the cap (default 100 and 10000), with jitter. */
  backoff?: {min: number; max: number};
  /** Limits of one push (default Canon's: 1000 mutations, 4 MiB; the socket's hello may lower the bytes). */
  maxPushMutations?: number;
  WebSocket?: typeof WebSocket;
  fetch?: Fetch;
  /**
   * The hash of the mutator bundle this app runs (lowercase hex SHA-256 of
   * its built bytes, as `canon mutators deploy` prints it; bundleHash()
   * computes it). The client compares it with the bundle Canon has active
   * for the project (GET …/mutators, on every connect) and with the bundle
   * each version was decided by, and reports a difference through onError
   * with code bundle_mismatch: the optimistic results then differ from
   * Canon's. Without it nothing is checked.
   */
  bundleHash?: string;
  /** Problems the client cannot act on itself: a refused token, a push Canon will never take, a bundle that is not the deployed one. */
  onError?: (e: CanonError) => void;
  /** Every outcome of this client's mutations, including the previous session's ones learned after a reload. */
  onOutcome?: (o: OutcomeEvent) => void;
  /** Connection state changes. */
  onStatus?: (s: Status) => void;
}

export type Status = 'connecting' | 'online' | 'offline' | 'polling' | 'closed';

interface Pending {
  id: number;
  name: string;
  args: JSONValue;
  ts: number;
  durable: boolean;
  sent: boolean;
  resolve?: (o: Outcome) => void;
  reject?: (e: Error) => void;
}

/** A version as the client applies it, from the websocket or the versions API. */
interface VersionIn {
  version: number;
  parent: number;
  ts: number;
  base?: {branch: string; version: number};
  bundle?: string;
  stateHash: string;
  scalars: {[k: string]: JSONValue};
  items: {collection: string; id: string; op: 'put' | 'delete'; meta?: JSONValue; hash?: string; size?: number}[];
  mutations: {clientGroup: string; client: string; id: number; name: string; status: 'applied' | 'error'; error?: string; code?: string}[];
  lastIds: {[k: string]: number};
  bodies?: Map<string, JSONValue>;
  /** The branch at this version, for a version that starts a branch from another (its base's items are not listed). */
  full?: wire.State | undefined;
}

interface Sub {
  run: (tx: ReadTx) => unknown;
  onData: (v: never) => void;
  deps: Deps;
  last: unknown;
  has: boolean;
}

type Task = () => void | Promise<void>;

const K_META = 'meta';
const K_CANON = 'canon';
const K_ITEM = 'item\u0000';
const K_PENDING = 'pending\u0000';

function pendingKey(id: number): string {
  return K_PENDING + String(id).padStart(12, '0');
}

function randomID(): string {
  const b = new Uint8Array(12);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
}

function toQuery<T>(q: Query<T>): (tx: ReadTx) => T {
  if (typeof q === 'function') {
    return q;
  }
  if ('scalars' in q) {
    return tx => tx.scalars() as T;
  }
  if ('scalar' in q) {
    return tx => tx.scalar(q.scalar) as T;
  }
  if ('collection' in q) {
    return tx => tx.collection(q.collection) as T;
  }
  return tx => tx.get(q.item.collection, q.item.id) as T;
}

type MutateArgs<F> = F extends (tx: never, args: infer A) => unknown ? A : never;
export type MutateFns<M extends Mutators> = {[K in keyof M]: (args: MutateArgs<M[K]>) => Promise<Outcome>} & {
  'item.put': (args: {collection: string; id: string; data: JSONValue; meta?: JSONObject}) => Promise<Outcome>;
  'item.patch': (args: {collection: string; id: string; data?: JSONValue; meta?: JSONValue}) => Promise<Outcome>;
  'item.delete': (args: {collection: string; id: string}) => Promise<Outcome>;
  'item.splice': (args: {collection: string; id: string; path?: string; index: number; delete?: number; insert?: string}) => Promise<Outcome>;
  'project.set': (args: {[name: string]: JSONValue}) => Promise<Outcome>;
};

/** Canon is one client of one branch of a project. */
export class Canon<M extends Mutators = Mutators> {
  /** mutate.name(args) runs the mutator locally at once and resolves with its canonical outcome. */
  readonly mutate: MutateFns<M>;
  /** Resolves once the durable state is loaded (and rejects if it cannot be). */
  readonly ready: Promise<void>;

  readonly org: string;
  readonly project: string;
  readonly branch: string;
  clientGroup = '';
  clientID = '';

  private readonly opts: CanonOptions<M>;
  private readonly mutators: Mutators;
  private readonly api: Api;
  private storage!: Storage;
  private readonly canon = new Canonical();
  private local = new Overlay();
  private pending: Pending[] = [];
  private lastId = 0;
  private subs = new Set<Sub>();
  private blobs = new Map<string, JSONValue>();
  private tasks: Task[] = [];
  private running = false;
  private persistBatch: Map<string, unknown> | undefined;
  /** The item keys the storage holds, so that a full save deletes the others. */
  private storedItems = new Set<string>();
  private persistChain: Promise<void> = Promise.resolve();
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  private isLoaded = false;
  private loadedResolve!: () => void;
  private loadedReject!: (e: unknown) => void;
  private readonly loaded = new Promise<void>((res, rej) => {
    this.loadedResolve = res;
    this.loadedReject = rej;
  });

  // Sync state.
  private ws: WebSocket | undefined;
  private helloSeen = false;
  private received = 0; // the last version received and queued for applying
  private versionChain: Promise<void> = Promise.resolve();
  private epoch = 0; // bumped on reset and reconnect: stale version work is dropped
  private inflight: {requestId: string; ids: number[]} | undefined;
  private requestSeq = 0;
  private attempts = 0;
  private everOpened = false;
  private mode: 'websocket' | 'http';
  private timer: ReturnType<typeof setTimeout> | undefined;
  private maxPushBytes = 4 << 20;
  private maxPushMutations: number;
  private statusNow: Status = 'connecting';
  /** The active bundle hashes already reported as a mismatch (once each), and a check in flight. */
  private bundleReported = new Set<string>();
  private bundleChecking = false;
  private bundleAgain = false;
  /** The other bundles versions named that made the client ask (once each: a catch-up over old versions asks once). */
  private bundleAsked = new Set<string>();

  constructor(opts: CanonOptions<M>) {
    for (const f of ['server', 'org', 'project'] as const) {
      if (typeof opts[f] !== 'string' || opts[f] === '') {
        throw new TypeError(`Canon: options.${f} is required (a string)`);
      }
    }
    if (opts.token === undefined || opts.token === '') {
      throw new TypeError('Canon: options.token is required: an access token with the write scope, or a function returning one');
    }
    if (opts.bundleHash !== undefined && !/^[0-9a-f]{64}$/.test(opts.bundleHash)) {
      throw new TypeError(`Canon: options.bundleHash must be the bundle's lowercase hex SHA-256 (64 characters), not ${JSON.stringify(opts.bundleHash)}`);
    }
    this.opts = opts;
    this.org = opts.org;
    this.project = opts.project;
    this.branch = opts.branch ?? 'main';
    this.mutators = {...builtins, ...(opts.mutators ? checkMutators(opts.mutators) : {})};
    this.maxPushMutations = Math.min(opts.maxPushMutations ?? 1000, 1000);
    const tok = opts.token;
    const fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.api = new Api(opts.server, this.org, this.project, this.branch, async () => (typeof tok === 'function' ? tok() : tok), fetchFn);
    const hasWS = (opts.WebSocket ?? globalThis.WebSocket) !== undefined;
    this.mode = opts.transport === 'http' || !hasWS ? 'http' : 'websocket';
    const mutate: Record<string, (args: JSONValue) => Promise<Outcome>> = {};
    for (const name of Object.keys(this.mutators)) {
      mutate[name] = args => this.doMutate(name, args);
    }
    this.mutate = mutate as unknown as MutateFns<M>;
    this.loaded.catch(() => {});
    this.ready = this.start();
    this.ready.catch(e => this.report(e instanceof CanonError ? e : new CanonError('storage', String(e))));
  }

  /** storageLoaded resolves once the durable state is loaded: ids, pending mutations, the view (offline too). */
  storageLoaded(): Promise<void> {
    return this.loaded;
  }

  /** The canonical version the view is at. */
  get version(): number {
    return this.canon.version;
  }

  /** How many mutations wait for their canonical outcome. */
  get pendingCount(): number {
    return this.pending.length;
  }

  get status(): Status {
    return this.statusNow;
  }

  // ---- lifecycle ----

  private async start(): Promise<void> {
    const scope = `${this.opts.server}|${this.org}/${this.project}/${this.branch}`;
    let data: Map<string, unknown>;
    try {
      this.storage = this.opts.storage ?? (typeof indexedDB !== 'undefined' ? await browserStorage(scope) : new MemoryStorage());
      data = await this.storage.load();
    } catch (e) {
      this.loadedReject(e);
      throw e;
    }
    const meta = data.get(K_META) as {clientGroup: string; client: string; lastId: number} | undefined;
    const batch = new Map<string, unknown>();
    if (meta) {
      this.clientGroup = meta.clientGroup;
      this.clientID = meta.client;
      this.lastId = meta.lastId;
    } else {
      this.clientGroup = randomID();
      this.clientID = randomID();
      batch.set(K_META, {clientGroup: this.clientGroup, client: this.clientID, lastId: 0});
    }
    const cs = data.get(K_CANON) as {version: number; ts: number; stateHash: string; scalars: JSONObject; lastIds: JSONObject} | undefined;
    if (cs) {
      this.canon.version = cs.version;
      this.canon.ts = cs.ts;
      this.canon.stateHash = cs.stateHash;
      for (const [k, v] of Object.entries(cs.scalars)) {
        this.canon.scalars.set(k, v);
      }
      for (const [k, v] of Object.entries(cs.lastIds)) {
        this.canon.lastIds.set(k, v as number);
      }
    }
    const stale: Pending[] = [];
    for (const [k, v] of data) {
      if (k.startsWith(K_ITEM)) {
        const it = v as StoredItem & {c: string; id: string};
        this.canon.setItem(it.c, it.id, {data: it.data, meta: it.meta, ...(it.hash && {hash: it.hash})});
        this.storedItems.add(itemKey(it.c, it.id));
      } else if (k.startsWith(K_PENDING)) {
        const p = v as {id: number; name: string; args: JSONValue; ts: number};
        const e: Pending = {...p, durable: true, sent: false};
        if (p.id <= (this.canon.lastIds.get(this.clientID) ?? 0)) {
          stale.push(e); // decided in a version this view holds: learn how
        } else {
          this.pending.push(e);
        }
      }
    }
    this.pending.sort((a, b) => a.id - b.id);
    this.pendingChanged();
    for (const p of stale) {
      batch.set(pendingKey(p.id), undefined);
      void this.learnOutcome(p);
    }
    if (batch.size) {
      this.persist(batch);
    }
    this.received = this.canon.version;
    this.enqueue(() => this.rebase(new Changes(), true));
    this.isLoaded = true;
    this.loadedResolve();
    if (cs) {
      this.enqueue(() => this.emit({type: 'state', version: this.canon.version, ts: this.canon.ts, cause: 'storage'}));
    } else {
      await this.loadState(undefined, 'load');
    }
    this.watchNetwork();
    this.connect();
  }

  /**
   * close stops syncing; pending mutations stay in the storage for the next
   * session. It resolves once what the client wrote is in the storage.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.unwatch?.();
    clearTimeout(this.timer);
    clearTimeout(this.pushTimer);
    this.pollWake?.();
    const ws = this.ws;
    this.ws = undefined;
    ws?.close(1000);
    this.setStatus('closed');
    await this.loaded.catch(() => {});
    // Tasks queued before the close (a mutation's record, the rest of a
    // version whose first outcome made a listener call close) finish
    // first, so that what they write is in the storage; versions not yet
    // applied are not applied any more (receive). Otherwise the next
    // session would find mutations pending whose outcomes this one
    // already reported, and report them a second time.
    await new Promise<void>(r => this.enqueue(r));
    await this.persistChain.catch(() => {});
    this.storage?.close?.();
  }

  private setStatus(s: Status): void {
    if (this.statusNow !== s) {
      this.statusNow = s;
      this.opts.onStatus?.(s);
      this.emit({type: 'status', status: s});
      if (s === 'online' || s === 'polling') {
        void this.checkBundle();
      }
    }
  }

  // ---- the bundle this app runs against the deployed one ----

  /** checkBundle asks Canon which bundle decides the project and reports a mismatch with options.bundleHash. */
  private async checkBundle(): Promise<void> {
    const want = this.opts.bundleHash;
    if (want === undefined || this.closed) {
      return;
    }
    if (this.bundleChecking) {
      this.bundleAgain = true;
      return;
    }
    this.bundleChecking = true;
    try {
      const active = await this.api.activeBundle();
      this.bundleMismatch(active?.hash ?? 'none');
    } catch (e) {
      // Unreachable now: the next connect checks again.
      if (!(e instanceof CanonError && e.code === 'network')) {
        this.report(new CanonError('bundle_check', `check the deployed mutator bundle of ${this.org}/${this.project}: ${(e as Error).message}`));
      }
    } finally {
      this.bundleChecking = false;
    }
    if (this.bundleAgain) {
      this.bundleAgain = false;
      await this.checkBundle();
    }
  }

  /** bundleMismatch reports, once per hash, that Canon decides with another bundle than the app's ('none': no bundle deployed). */
  private bundleMismatch(active: string): void {
    const want = this.opts.bundleHash;
    if (want === undefined || active === want || this.bundleReported.has(active)) {
      return;
    }
    this.bundleReported.add(active);
    const scope = `${this.org}/${this.project}`;
    const msg =
      active === 'none'
        ? `Canon has no mutator bundle deployed for ${scope}, this app runs bundle ${want.slice(0, 12)}…: the mutations of its own mutators will be errors (unknown_mutator), their optimistic changes rolled back`
        : `Canon decides ${scope} with mutator bundle ${active.slice(0, 12)}…, this app runs ${want.slice(0, 12)}…: optimistic results can differ from Canon's`;
    this.report(new CanonError('bundle_mismatch', msg, {hint: 'deploy the app\'s bundle (canon mutators deploy) or reload the app built with the deployed one'}));
  }

  private report(e: CanonError): void {
    if (this.opts.onError) {
      this.opts.onError(e);
    } else {
      console.warn(`canon: ${e.code}: ${e.message}`);
    }
  }

  // ---- the serial executor: local runs, versions and rebases in order ----

  private enqueue(t: Task): void {
    this.tasks.push(t);
    if (!this.running) {
      this.drain();
    }
  }

  private drain(): void {
    this.running = true;
    while (this.tasks.length) {
      const t = this.tasks.shift()!;
      let r: void | Promise<void>;
      try {
        r = t();
      } catch (e) {
        this.report(new CanonError('internal', `client task: ${(e as Error).stack ?? e}`));
        continue;
      }
      if (r) {
        r.then(
          () => this.drain(),
          e => {
            this.report(new CanonError('internal', `client task: ${(e as Error).stack ?? e}`));
            this.drain();
          },
        );
        return;
      }
    }
    this.running = false;
    this.wakeIdle();
  }

  /** settled resolves once no mutation is pending (every outcome is known). */
  async settled(): Promise<void> {
    await this.loaded;
    if (this.pending.length === 0 && this.learning === 0 && !this.running) {
      return;
    }
    return new Promise(r => this.idleWaiters.push(r));
  }

  // ---- mutations ----

  private doMutate(name: string, args: JSONValue): Promise<Outcome> {
    if (this.closed) {
      return Promise.reject(new CanonError('closed', `mutate ${name}: the client is closed`));
    }
    let text: string;
    try {
      text = canonical(args === undefined ? null : args);
    } catch (e) {
      return Promise.reject(new CanonError('invalid_args', `mutate ${name}: the args are not JSON: ${(e as Error).message}`));
    }
    if (utf8Length(text) > Limits.maxArgsBytes) {
      return Promise.reject(new CanonError('too_large', `mutate ${name}: the args are ${utf8Length(text)} bytes, over the limit of ${Limits.maxArgsBytes} (MaxArgsBytes)`));
    }
    return new Promise<Outcome>((resolve, reject) => {
      const p: Pending = {id: 0, name, args: JSON.parse(text) as JSONValue, ts: Date.now(), durable: false, sent: false, resolve, reject};
      const go = () => {
        p.id = ++this.lastId;
        this.pending.push(p);
        this.pendingChanged();
        const r = this.applyLocal(p, this.local);
        const after = () => {
          const batch = new Map<string, unknown>([
            [K_META, {clientGroup: this.clientGroup, client: this.clientID, lastId: this.lastId}],
            [pendingKey(p.id), {id: p.id, name: p.name, args: p.args, ts: p.ts}],
          ]);
          this.persist(batch).then(() => {
            p.durable = true;
            this.pendingChanged();
            this.kick();
          }, reject);
        };
        if (r instanceof Promise) {
          return r.then(after);
        }
        after();
      };
      // Ids are known once the storage is loaded.
      if (this.isLoaded) {
        this.enqueue(go);
      } else {
        this.loaded.then(() => this.enqueue(go), reject);
      }
    });
  }

  private info(p: Pending): MutationInfo {
    return {org: this.org, project: this.project, branch: this.branch, clientGroup: this.clientGroup, client: this.clientID, id: p.id, name: p.name};
  }

  /** applyLocal runs a pending mutation over the local view and notifies subscribers. */
  private applyLocal(p: Pending, into: Overlay): void | Promise<void> {
    const r = run(this.mutators[p.name], this.info(p), p.args, p.ts, new Layers(this.canon, [into]));
    const done = (res: LocalResult) => {
      if (res.ok) {
        res.writes.mergeInto(into);
        if (into === this.local) {
          const ch = new Changes();
          ch.addOverlay(res.writes);
          this.notify(ch);
        }
      }
    };
    if (r instanceof Promise) {
      return r.then(done);
    }
    done(r);
  }

  /** rebase re-applies every pending mutation over the canonical view. */
  private rebase(ch: Changes, force = false): void | Promise<void> {
    const old = this.local;
    const finish = (next: Overlay) => {
      this.local = next;
      ch.addOverlay(old);
      ch.addOverlay(next);
      // Subscribers run outside the determinism guards.
      if (!ch.empty || force) {
        this.notify(ch, force);
      }
    };
    const r = guarded(() => this.rebaseRuns());
    if (r instanceof Promise) {
      return r.then(finish);
    }
    finish(r);
  }

  /** rebaseRuns runs the pending mutations over the canonical view into a new overlay. */
  private rebaseRuns(): Overlay | Promise<Overlay> {
    const next = new Overlay();
    for (let i = 0; i < this.pending.length; i++) {
      const p = this.pending[i]!;
      const r = run(this.mutators[p.name], this.info(p), p.args, p.ts, new Layers(this.canon, [next]));
      if (r instanceof Promise) {
        // An async mutator: the rest goes on asynchronously, in order.
        return (async () => {
          let res: LocalResult = await r;
          for (let j = i; ; ) {
            if (res.ok) {
              res.writes.mergeInto(next);
            }
            if (++j >= this.pending.length) {
              break;
            }
            const q = this.pending[j]!;
            res = await run(this.mutators[q.name], this.info(q), q.args, q.ts, new Layers(this.canon, [next]));
          }
          return next;
        })();
      }
      if (r.ok) {
        r.writes.mergeInto(next);
      }
    }
    return next;
  }

  private persist(batch: Map<string, unknown>): Promise<void> {
    if (this.persistBatch) {
      for (const [k, v] of batch) {
        this.persistBatch.set(k, v);
      }
    } else {
      this.persistBatch = batch;
      this.persistChain = this.persistChain.then(async () => {
        const b = this.persistBatch!;
        this.persistBatch = undefined;
        await this.storage.write(b);
      });
    }
    return this.persistChain;
  }

  // ---- reads ----

  /** query reads the local view once. */
  query<Q extends Query<unknown>>(q: Q): QueryResult<Q> {
    return toQuery(q)(readTx(new Layers(this.canon, [this.local]))) as QueryResult<Q>;
  }

  /**
   * subscribe calls onData with the query's result over the local view now
   * and whenever it changes (compared as JSON); it returns the unsubscribe.
   */
  subscribe<Q extends Query<unknown>>(q: Q, onData: (result: QueryResult<Q>) => void): () => void {
    const s: Sub = {run: toQuery(q), onData: onData as (v: never) => void, deps: new Deps(), last: undefined, has: false};
    this.subs.add(s);
    this.runSub(s);
    return () => this.subs.delete(s);
  }

  private runSub(s: Sub): void {
    const deps = new Deps();
    let v: unknown;
    try {
      v = s.run(readTx(new Layers(this.canon, [this.local], deps)));
    } catch (e) {
      this.report(new CanonError('query', `subscription query threw: ${(e as Error).message}`));
      return;
    }
    s.deps = deps;
    if (s.has && equal(v as JSONValue, s.last as JSONValue)) {
      return;
    }
    s.last = v;
    s.has = true;
    try {
      (s.onData as (v: unknown) => void)(v);
    } catch (e) {
      this.report(new CanonError('subscriber', `a subscriber threw: ${(e as Error).message}`));
    }
  }

  private notify(ch: Changes, all = false): void {
    for (const s of this.subs) {
      if (all || ch.all || s.deps.touchedBy(ch)) {
        this.runSub(s);
      }
    }
  }

  /** at reads the branch as it was at a past version, from Canon's read API. */
  async at(version: number): Promise<ReadTx> {
    const st = await this.api.state(version);
    const c = new Canonical();
    if (st) {
      this.loadInto(c, st);
    }
    return readTx(new Layers(c, []));
  }

  private loadInto(c: Canonical, st: wire.State): void {
    c.clear();
    c.version = st.version;
    c.ts = st.ts;
    c.stateHash = st.stateHash;
    for (const [k, v] of Object.entries(st.scalars)) {
      c.scalars.set(k, v);
    }
    for (const [coll, items] of Object.entries(st.collections)) {
      for (const it of items) {
        const data = it.data ?? null;
        this.blobs.set(it.hash, data);
        c.setItem(coll, it.id, {data, meta: it.meta, hash: it.hash});
      }
    }
  }

  /** loadState replaces the canonical view with the branch at version at (the latest when undefined). */
  private async loadState(at: number | undefined, cause: 'load' | 'reset'): Promise<void> {
    const st = at === 0 ? undefined : await this.retry(() => this.api.state(at));
    await new Promise<void>(resolve =>
      this.enqueue(() => {
        const ch = new Changes();
        ch.all = true;
        if (st) {
          this.loadInto(this.canon, st);
        } else {
          this.canon.clear();
        }
        this.received = this.canon.version;
        this.saveCanonical(undefined, true);
        const done = () => {
          this.emit({type: 'state', version: this.canon.version, ts: this.canon.ts, cause});
          resolve();
        };
        const r = this.rebase(ch, true);
        if (r instanceof Promise) {
          return r.then(done);
        }
        done();
      }),
    );
  }

  private async retry<T>(f: () => Promise<T>): Promise<T> {
    for (let i = 0; ; i++) {
      try {
        return await f();
      } catch (e) {
        if (this.closed || (e instanceof CanonError && e.details.status !== undefined && e.details.status < 500 && e.details.status !== 429 && e.details.status !== 408)) {
          throw e;
        }
        await new Promise(r => setTimeout(r, this.delay(i)));
      }
    }
  }

  private delay(attempt: number): number {
    const {min, max} = this.opts.backoff ?? {min: 100, max: 10000};
    return backoffDelay(attempt, min, max);
  }

  /** saveCanonical persists the canonical view: the changed items, or all of it. */
  private saveCanonical(changed: Iterable<string> | undefined, all = false): void {
    const batch = new Map<string, unknown>();
    batch.set(K_CANON, {
      version: this.canon.version,
      ts: this.canon.ts,
      stateHash: this.canon.stateHash,
      scalars: Object.fromEntries(this.canon.scalars),
      lastIds: Object.fromEntries(this.canon.lastIds),
    });
    const keys = all ? undefined : changed;
    if (keys === undefined) {
      // Everything: what is not there any more is deleted, in the same batch.
      for (const k of this.storedItems) {
        batch.set(K_ITEM + k, undefined);
      }
      this.storedItems.clear();
      for (const [c, m] of this.canon.collections) {
        for (const [id, it] of m) {
          const k = itemKey(c, id);
          this.storedItems.add(k);
          batch.set(K_ITEM + k, {c, id, data: it.data, meta: it.meta, hash: it.hash});
        }
      }
      void this.persist(batch);
      return;
    }
    for (const k of keys) {
      const [c, id] = splitKey(k);
      const it = this.canon.getItem(c, id);
      batch.set(K_ITEM + k, it && {c, id, data: it.data, meta: it.meta, hash: it.hash});
      if (it) {
        this.storedItems.add(k);
      } else {
        this.storedItems.delete(k);
      }
    }
    void this.persist(batch);
  }

  // ---- versions ----

  private fromWire(m: wire.WebsocketVersion | wire.Version): VersionIn {
    this.noteBundle(m);
    return {
      version: m.version,
      parent: m.parent,
      ts: m.ts,
      ...(m.base !== undefined && {base: {branch: m.base.branch, version: m.base.version}}),
      ...(m.bundle !== undefined && {bundle: m.bundle}),
      stateHash: m.stateHash,
      scalars: m.scalars as {[k: string]: JSONValue},
      items: (m.items ?? []).map(i => ({
        collection: i.collection,
        id: i.id,
        op: i.op,
        ...(i.meta !== undefined && {meta: i.meta}),
        ...(i.hash !== undefined && {hash: i.hash}),
        ...(i.size !== undefined && {size: i.size}),
      })),
      mutations: (m.mutations ?? []).map(x => ({
        clientGroup: x.clientGroup,
        client: x.client,
        id: x.id,
        name: x.name,
        status: x.status,
        ...(x.error !== undefined && {error: x.error}),
        ...(x.code !== undefined && {code: x.code}),
      })),
      lastIds: (m.lastIds ?? {}) as {[k: string]: number},
    };
  }

  /**
   * noteBundle asks Canon again which bundle is active when a version was
   * decided by another bundle than the app's (a deploy while the app runs;
   * or an old version decided before a deploy, which the check finds fine).
   */
  private noteBundle(m: wire.WebsocketVersion | wire.Version): void {
    if (m.bundle !== undefined && this.opts.bundleHash !== undefined && m.bundle !== this.opts.bundleHash && !this.bundleAsked.has(m.bundle)) {
      this.bundleAsked.add(m.bundle);
      void this.checkBundle();
    }
  }

  /** receive queues a version for applying; bodies are fetched first, in order. */
  private receive(v: VersionIn): void {
    this.received = v.version;
    const epoch = this.epoch;
    this.versionChain = this.versionChain
      .then(() => this.prepare(v))
      .then(
        () =>
          new Promise<void>(resolve =>
            this.enqueue(() => {
              // Nothing is applied after close: the storage may be closed,
              // and the next session learns these outcomes instead.
              if (!this.closed && epoch === this.epoch && v.version === this.canon.version + 1) {
                this.applyVersion(v);
              }
              resolve();
            }),
          ),
        e => {
          // A body that cannot be read: start over from what is applied.
          this.report(e instanceof CanonError ? e : new CanonError('sync', String(e)));
          this.restart();
        },
      );
  }

  /** prepare fetches the bodies a version needs (by hash, once); error outcomes carry their code. */
  private async prepare(v: VersionIn): Promise<void> {
    v.bodies = new Map();
    if (v.base) {
      // The first version of a branch made from another lists only what it
      // changed, not the items it starts with: read the branch at it.
      v.full = await this.retry(() => this.api.state(v.version));
      return;
    }
    const local = new Layers(this.canon, [this.local]);
    await Promise.all(
      v.items.map(async it => {
        if (it.op !== 'put' || !it.hash) {
          return;
        }
        const hash = it.hash;
        let body = this.blobs.get(hash);
        if (body === undefined) {
          // Most bodies are the client's own optimistic result: hash it before fetching.
          const mine = local.rawItem(it.collection, it.id);
          if (mine && (await sha256Hex(canonical(mine.data))) === hash) {
            body = mine.data;
          } else {
            body = JSON.parse(await this.retry(() => this.api.blob(hash))) as JSONValue;
          }
          this.remember(hash, body);
        }
        v.bodies!.set(hash, body);
      }),
    );
  }

  private remember(hash: string, body: JSONValue): void {
    if (this.blobs.size > 10000) {
      this.blobs.delete(this.blobs.keys().next().value!);
    }
    this.blobs.set(hash, body);
  }

  private applyVersion(v: VersionIn): void | Promise<void> {
    const ch = new Changes();
    const c = this.canon;
    if (v.full) {
      this.loadInto(c, v.full);
      ch.all = true;
    }
    c.version = v.version;
    c.ts = v.ts;
    c.stateHash = v.stateHash;
    const names = new Set(v.full ? [] : [...c.scalars.keys(), ...Object.keys(v.scalars)]);
    for (const n of names) {
      const nv = v.scalars[n];
      if (!equal(c.scalars.get(n), nv)) {
        ch.scalars.add(n);
        if (nv === undefined) {
          c.scalars.delete(n);
        } else {
          c.scalars.set(n, nv);
        }
      }
    }
    for (const it of v.full ? [] : v.items) {
      const k = itemKey(it.collection, it.id);
      ch.items.add(k);
      if (it.op === 'delete') {
        c.setItem(it.collection, it.id, undefined);
      } else {
        const data = v.bodies!.get(it.hash!) ?? null;
        c.setItem(it.collection, it.id, {data, meta: (it.meta ?? {}) as JSONObject, ...(it.hash && {hash: it.hash})});
      }
    }
    for (const [client, id] of Object.entries(v.lastIds)) {
      c.lastIds.set(client, id);
    }
    // Our mutations this version decided leave the queue.
    const decided = new Map<number, VersionIn['mutations'][number]>();
    for (const m of v.mutations) {
      if (m.client === this.clientID) {
        decided.set(m.id, m);
      }
    }
    const last = c.lastIds.get(this.clientID) ?? 0;
    const del = new Map<string, unknown>();
    const done: [Pending, Outcome | undefined][] = [];
    this.pending = this.pending.filter(p => {
      const m = decided.get(p.id);
      if (m) {
        const o: Outcome =
          m.status === 'applied'
            ? {status: 'applied', version: v.version}
            : {status: 'error', version: v.version, code: m.code ?? 'unknown', message: m.error ?? ''};
        done.push([p, o]);
      } else if (p.id <= last) {
        done.push([p, undefined]); // decided before this view: ask the status API
      } else {
        return true;
      }
      del.set(pendingKey(p.id), undefined);
      return false;
    });
    if (this.inflight) {
      this.inflight.ids = this.inflight.ids.filter(id => !decided.has(id));
    }
    this.saveCanonical(ch.items, v.full !== undefined);
    if (del.size) {
      void this.persist(del);
      this.pendingChanged();
    }
    // Outcomes and the event once the view shows the version and the rebase.
    const after = () => {
      this.emit({
        type: 'version',
        version: v.version,
        parent: v.parent,
        ts: v.ts,
        ...(v.base && {base: v.base}),
        ...(v.bundle !== undefined && {bundle: v.bundle}),
        scalars: {...v.scalars},
        items: v.items.map(it => ({...it})),
        mutations: v.mutations.map(m => ({...m, mine: m.client === this.clientID})),
      });
      for (const [p, o] of done) {
        if (o) {
          this.settle(p, o);
        } else {
          void this.learnOutcome(p);
        }
      }
    };
    const r = this.rebase(ch);
    if (r instanceof Promise) {
      return r.then(after);
    }
    after();
  }

  private settle(p: Pending, o: Outcome): void {
    p.resolve?.(o);
    this.opts.onOutcome?.({...o, id: p.id, name: p.name});
    this.emit({type: 'outcome', ...o, id: p.id, name: p.name});
  }

  // ---- events ----

  private listeners = new Set<(e: SyncEvent) => void>();
  private pendingQueued = false;
  private pendingLast = '';

  /**
   * listen calls listener with what the client learns and does, in order:
   * each canonical version once it is applied to the view (its mutations of
   * every client with their outcomes and codes), the view replaced as a
   * whole (state), the branch's rejections, this client's outcomes, changes
   * of its pending queue (coalesced within a task) and of the connection.
   * It returns the function that stops listening. The current queue is
   * pendingMutations(), the current version the version property.
   */
  listen(listener: (e: SyncEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** pendingMutations is this client's queue now, in id order. */
  pendingMutations(): PendingMutation[] {
    return this.pending.map(p => ({id: p.id, name: p.name, args: clone(p.args), ts: p.ts, state: p.sent ? 'sent' : p.durable ? 'queued' : 'local'}));
  }

  private emit(e: SyncEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (x) {
        this.report(new CanonError('subscriber', `a listener threw on a ${e.type} event: ${(x as Error).message}`));
      }
    }
  }

  /** pendingChanged reports the queue once the current task is done, if it differs from what was reported. */
  private pendingChanged(): void {
    if (this.pendingQueued || this.listeners.size === 0) {
      return;
    }
    this.pendingQueued = true;
    queueMicrotask(() => {
      this.pendingQueued = false;
      const now = this.pendingMutations();
      const sig = now.map(p => `${p.id}:${p.name}:${p.state}`).join(',');
      if (sig !== this.pendingLast) {
        this.pendingLast = sig;
        this.emit({type: 'pending', pending: now});
      }
    });
  }

  /** learnOutcome asks the status API how a mutation decided before this view was decided (a previous session's). */
  private learning = 0;

  private async learnOutcome(p: Pending): Promise<void> {
    this.learning++;
    try {
      await this.learnOutcome1(p);
    } finally {
      this.learning--;
      this.wakeIdle();
    }
  }

  private wakeIdle(): void {
    if (this.pending.length === 0 && this.learning === 0 && !this.running) {
      for (const w of this.idleWaiters.splice(0)) {
        w();
      }
    }
  }

  private async learnOutcome1(p: Pending): Promise<void> {
    try {
      const m = await this.retry(() => this.api.mutation(this.clientID, p.id));
      if (m.status === 'applied' || m.status === 'error') {
        let code = m.code ?? 'unknown';
        if (m.status === 'error' && m.code === undefined && m.version) {
          // A status recorded before Canon stored codes: the version has it.
          const page = await this.api.versions(m.version, 1).catch(() => undefined);
          code = page?.versions[0]?.mutations?.find(x => x.client === this.clientID && x.id === p.id)?.code ?? code;
        }
        const o: Outcome =
          m.status === 'applied'
            ? {status: 'applied', version: m.version ?? 0}
            : {status: 'error', version: m.version ?? 0, code, message: m.error ?? ''};
        this.settle(p, o);
      } else {
        p.reject?.(new CanonError(m.reason ?? m.status, m.message ?? `mutation ${p.id} is ${m.status}`));
      }
    } catch (e) {
      p.reject?.(e as Error);
    }
  }

  // ---- sync ----

  private restart(): void {
    this.epoch++;
    this.versionChain = Promise.resolve();
    this.enqueue(() => {
      this.received = this.canon.version;
    });
    this.ws?.close(4000 + 999);
  }

  private connect(): void {
    if (this.closed) {
      return;
    }
    if (this.mode === 'http') {
      this.setStatus('polling');
      void this.pollLoop();
      return;
    }
    if (this.browserOffline()) {
      // The browser knows it is offline: wait for its online event.
      this.setStatus('offline');
      return;
    }
    this.setStatus('connecting');
    const WS = this.opts.WebSocket ?? globalThis.WebSocket;
    // Resume after what is applied: wait for what was received to be.
    void this.versionChain.then(async () => {
      await new Promise<void>(r => this.enqueue(() => r()));
      if (this.closed) {
        return;
      }
      this.received = this.canon.version;
      const tok = typeof this.opts.token === 'function' ? await this.opts.token() : this.opts.token;
      const u = new URL(`${this.api.base}/ws`);
      u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
      u.searchParams.set('branch', this.branch);
      u.searchParams.set('from', String(this.canon.version));
      u.searchParams.set('token', tok);
      let ws: WebSocket;
      try {
        ws = new WS(u.toString());
      } catch (e) {
        this.onClose(1006, String(e));
        return;
      }
      this.ws = ws;
      this.helloSeen = false;
      this.inflight = undefined;
      ws.onmessage = ev => {
        if (this.ws === ws) {
          this.onMessage(typeof ev.data === 'string' ? ev.data : String(ev.data));
        }
      };
      ws.onclose = ev => {
        if (this.ws === ws) {
          this.ws = undefined;
          this.onClose(ev.code, ev.reason);
        }
      };
      ws.onerror = () => {};
    });
  }

  private lastCloseError: wire.WebsocketError['error'] | undefined;

  private browserOffline(): boolean {
    const nav = (globalThis as {navigator?: {onLine?: boolean}}).navigator;
    return typeof window !== 'undefined' && nav?.onLine === false;
  }

  /** watchNetwork follows the browser's online and offline events. */
  private watchNetwork(): void {
    if (typeof window === 'undefined' || typeof window.addEventListener !== 'function') {
      return;
    }
    const offline = () => {
      const ws = this.ws;
      this.ws = undefined;
      ws?.close(4000 + 998);
      if (ws) {
        this.onClose(1006, 'offline');
      }
    };
    const online = () => {
      if (this.closed || this.ws || this.mode === 'http') {
        return;
      }
      clearTimeout(this.timer);
      this.attempts = 0;
      this.connect();
    };
    window.addEventListener('offline', offline);
    window.addEventListener('online', online);
    this.unwatch = () => {
      window.removeEventListener('offline', offline);
      window.removeEventListener('online', online);
    };
  }

  private unwatch: (() => void) | undefined;

  private onClose(code: number, reason: string): void {
    this.setStatus('offline');
    for (const p of this.pending) {
      p.sent = false;
    }
    this.pendingChanged();
    this.inflight = undefined;
    if (this.closed) {
      return;
    }
    const err = this.lastCloseError;
    this.lastCloseError = undefined;
    if (code === 4000 || code === 4003 || (code === 4001 && typeof this.opts.token !== 'function')) {
      this.report(new CanonError(err?.code ?? `close_${code}`, err?.message ?? `the server closed the subscription (${code} ${reason})`, err?.hint ? {hint: err.hint} : {}));
      this.setStatus('closed');
      return;
    }
    if (code === 1009) {
      this.maxPushBytes = Math.max(64 << 10, this.maxPushBytes >> 1);
    }
    if (!this.everOpened && this.opts.transport !== 'websocket' && ++this.attempts >= 3) {
      // Websockets seem blocked: push over HTTP and poll the versions.
      this.mode = 'http';
      this.attempts = 0;
      this.connect();
      return;
    }
    if (this.everOpened) {
      this.attempts++;
    }
    this.timer = setTimeout(() => this.connect(), this.delay(this.attempts));
  }

  private onMessage(text: string): void {
    let m: {type?: string};
    try {
      m = JSON.parse(text) as {type?: string};
    } catch {
      this.report(new CanonError('malformed_message', `the server sent a message that is not JSON: ${text.slice(0, 80)}`));
      return;
    }
    switch (m.type) {
      case 'hello': {
        const h = m as wire.WebsocketHello;
        if (h.protocol !== 1) {
          this.report(new CanonError('unsupported_protocol', `the server speaks websocket protocol ${h.protocol}; this client knows 1: update @canon/client`));
          this.closed = true;
          this.ws?.close(1000);
          return;
        }
        this.helloSeen = true;
        this.everOpened = true;
        this.attempts = 0;
        this.maxPushBytes = Math.min(h.maxMessageBytes, 4 << 20);
        if (!h.push) {
          this.report(new CanonError('push_unavailable', 'this server takes no pushes on the websocket: pushing over HTTP'));
        }
        this.pushOverWS = h.push;
        this.setStatus('online');
        this.kick();
        return;
      }
      case 'version': {
        const v = m as wire.WebsocketVersion;
        if (v.version !== this.received + 1) {
          // Never skip a version: resume from what is held.
          this.report(new CanonError('version_gap', `version ${v.version} after ${this.received}: resuming from ${this.canon.version}`));
          this.restart();
          return;
        }
        this.receive(this.fromWire(v));
        return;
      }
      case 'reset': {
        // Drop the canonical view and load the branch at head; the
        // versions that follow on this socket start at head+1.
        const r = m as wire.WebsocketReset;
        this.epoch++;
        this.received = r.head;
        this.versionChain = this.versionChain.then(() => this.loadState(r.head, 'reset')).catch(e => {
          this.report(e instanceof CanonError ? e : new CanonError('sync', String(e)));
          this.restart();
        });
        return;
      }
      case 'pushed': {
        const p = m as wire.WebsocketPushed;
        if (this.inflight?.requestId === p.requestId) {
          this.inflight = undefined;
          this.kick();
        }
        return;
      }
      case 'rejected':
        this.onRejected(m as wire.WebsocketRejected);
        return;
      case 'error': {
        const e = m as wire.WebsocketError;
        if (e.requestId === undefined) {
          this.lastCloseError = e.error;
          return;
        }
        if (this.inflight?.requestId === e.requestId) {
          this.onPushError(this.inflight.ids, new CanonError(e.error.code, e.error.message, {...(e.error.field !== undefined && {field: e.error.field}), ...(e.error.hint !== undefined && {hint: e.error.hint})}));
        }
        return;
      }
      case 'pong':
        return;
    }
  }

  private pushOverWS = true;

  private onRejected(r: wire.WebsocketRejected): void {
    if (r.branch !== this.branch) {
      return;
    }
    const mine = r.client === this.clientID;
    this.enqueue(() => {
      this.emit({
        type: 'rejected',
        reason: r.reason,
        message: r.message,
        clientGroup: r.clientGroup,
        client: r.client,
        id: r.id,
        name: r.name,
        ...(r.expectedId !== undefined && {expectedId: r.expectedId}),
        at: r.at,
        mine,
      });
    });
    if (!mine) {
      return;
    }
    this.enqueue(() => {
      if (r.reason === 'gap') {
        const from = r.expectedId ?? r.id;
        const first = this.pending[0];
        if (first && from < first.id && first.durable) {
          // Canon expects an id below every pending one: it lost this
          // client's history (its topics were recreated). Number the
          // pending mutations from the id it expects.
          this.renumber(from);
        }
        for (const p of this.pending) {
          if (p.id >= from) {
            p.sent = false;
          }
        }
        this.pendingChanged();
        this.kick();
        return;
      }
      const i = this.pending.findIndex(p => p.id === r.id);
      if (i >= 0) {
        this.drop(i, new CanonError(r.reason, r.message));
      }
    });
  }

  /**
   * drop removes a pending mutation Canon will never record (its id is not
   * used) and renumbers the later ones, which were then not recorded either.
   */
  private drop(i: number, err: CanonError): void | Promise<void> {
    const [p] = this.pending.splice(i, 1);
    const batch = new Map<string, unknown>();
    batch.set(pendingKey(this.lastId), undefined);
    for (let j = i; j < this.pending.length; j++) {
      const q = this.pending[j]!;
      q.id--;
      q.sent = false;
      batch.set(pendingKey(q.id), {id: q.id, name: q.name, args: q.args, ts: q.ts});
    }
    this.lastId--;
    batch.set(K_META, {clientGroup: this.clientGroup, client: this.clientID, lastId: this.lastId});
    void this.persist(batch);
    this.pendingChanged();
    p!.reject?.(err);
    this.report(err);
    return this.rebase(new Changes());
  }

  private renumber(from: number): void {
    const batch = new Map<string, unknown>();
    for (const p of this.pending) {
      batch.set(pendingKey(p.id), undefined);
    }
    let id = from;
    for (const p of this.pending) {
      p.id = id++;
      batch.set(pendingKey(p.id), {id: p.id, name: p.name, args: p.args, ts: p.ts});
    }
    this.lastId = id - 1;
    batch.set(K_META, {clientGroup: this.clientGroup, client: this.clientID, lastId: this.lastId});
    void this.persist(batch);
    this.pendingChanged();
  }

  private onPushError(ids: number[], e: CanonError): void {
    this.inflight = undefined;
    const retryable = ['rate_limited', 'kafka_unavailable', 'request_timeout', 'network', 'internal', 'token_expired', 'unauthenticated'];
    if (retryable.includes(e.code) || (e.details.status ?? 0) >= 500) {
      for (const p of this.pending) {
        p.sent = false;
      }
      clearTimeout(this.pushTimer);
      this.pushTimer = setTimeout(() => this.kick(), this.delay(this.pushAttempts++));
      return;
    }
    if (e.code === 'push_unavailable') {
      this.pushOverWS = false;
      this.kick();
      return;
    }
    const at = /^mutations\[(\d+)\]/.exec(e.details.field ?? '');
    if (at && ids[Number(at[1])] !== undefined) {
      const id = ids[Number(at[1])]!;
      this.enqueue(() => {
        const i = this.pending.findIndex(p => p.id === id);
        for (const p of this.pending) {
          p.sent = false;
        }
        if (i >= 0) {
          const r = this.drop(i, e);
          this.kick();
          return r;
        }
      });
      return;
    }
    if (e.code === 'too_large' && ids.length > 1) {
      this.maxPushMutations = Math.max(1, ids.length >> 1);
      for (const p of this.pending) {
        p.sent = false;
      }
      this.kick();
      return;
    }
    // forbidden, client_group_owned …: nothing the client can fix; the queue waits.
    this.report(e);
  }

  private pushTimer: ReturnType<typeof setTimeout> | undefined;
  private pushAttempts = 0;
  private kicked = false;

  /** kick schedules a push of what is durable and not sent. */
  private kick(): void {
    if (this.kicked) {
      return;
    }
    this.kicked = true;
    queueMicrotask(() => {
      this.kicked = false;
      void this.pushSome();
    });
  }

  private batch(): Pending[] {
    const out: Pending[] = [];
    let bytes = 256;
    for (const p of this.pending) {
      if (!p.durable) {
        break; // keep ids in order: a later one waits for this one
      }
      if (p.sent) {
        continue;
      }
      const n = 96 + p.name.length + this.clientID.length + utf8Length(canonical(p.args));
      if (out.length >= this.maxPushMutations || (out.length > 0 && bytes + n > this.maxPushBytes)) {
        break;
      }
      bytes += n;
      out.push(p);
    }
    return out;
  }

  private async pushSome(): Promise<void> {
    if (this.closed || this.inflight) {
      return;
    }
    const viaWS = this.mode === 'websocket' && this.pushOverWS;
    if (viaWS && (!this.ws || !this.helloSeen || this.ws.readyState !== 1)) {
      return;
    }
    const ps = this.batch();
    if (ps.length === 0) {
      return;
    }
    const mutations: wire.PushMutation[] = ps.map(p => ({client: this.clientID, id: p.id, name: p.name, args: p.args, ts: p.ts}));
    const requestId = `r${++this.requestSeq}`;
    this.inflight = {requestId, ids: ps.map(p => p.id)};
    for (const p of ps) {
      p.sent = true;
    }
    this.pendingChanged();
    if (viaWS) {
      const msg: wire.WebsocketPush = {type: 'push', requestId, clientGroup: this.clientGroup, mutations};
      this.ws!.send(JSON.stringify(msg));
      return;
    }
    try {
      await this.api.push({branch: this.branch, clientGroup: this.clientGroup, mutations});
      if (this.inflight?.requestId === requestId) {
        this.inflight = undefined;
        this.pushAttempts = 0;
        this.kick();
        if (this.mode === 'http') {
          this.pollSoon();
        }
      }
    } catch (e) {
      if (this.inflight?.requestId === requestId) {
        this.onPushError(this.inflight.ids, e instanceof CanonError ? e : new CanonError('network', String(e)));
      }
    }
  }

  // ---- the HTTP fallback: polling the versions ----

  private polling = false;
  private pollWake: (() => void) | undefined;

  private pollSoon(): void {
    this.pollWake?.();
  }

  private async pollLoop(): Promise<void> {
    if (this.polling) {
      return;
    }
    this.polling = true;
    this.kick();
    let failures = 0;
    while (!this.closed && this.mode === 'http') {
      let more = false;
      try {
        await this.versionChain;
        const from = this.received + 1;
        const page = await this.api.versions(from, 1000);
        failures = 0;
        if (page && page.head < this.received) {
          await this.loadState(undefined, 'reset'); // the branch is behind what we hold: reload
        } else if (page) {
          for (const v of page.versions) {
            if (v.version === this.received + 1) {
              this.receive(this.fromWire(v));
            }
          }
          more = page.next !== undefined;
        }
        this.setStatus('polling');
      } catch (e) {
        failures++;
        this.setStatus('offline');
        if (e instanceof CanonError && (e.code === 'forbidden' || e.code === 'unauthenticated') && typeof this.opts.token !== 'function') {
          this.report(e);
          break;
        }
      }
      if (!more) {
        await new Promise<void>(r => {
          const t = setTimeout(r, failures ? this.delay(failures) : (this.opts.pollInterval ?? 1000));
          this.pollWake = () => {
            clearTimeout(t);
            r();
          };
        });
        this.pollWake = undefined;
      }
    }
    this.polling = false;
  }
}

/** backoffDelay is the jittered exponential delay of a reconnect attempt: within [d/2, d] for d = min(max, min·2^attempt). */
export function backoffDelay(attempt: number, min: number, max: number, random: () => number = Math.random): number {
  const d = Math.min(max, min * 2 ** Math.min(attempt, 30));
  return d / 2 + (random() * d) / 2;
}

export type {Mutator, Mutators, ReadTx};
