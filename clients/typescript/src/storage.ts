// Where a client keeps what must survive a reload: its ids, its pending
// mutations and the canonical view. A Storage is an ordered key-value
// store whose batches apply whole and in order.

/** Storage keeps one client's durable state. */
export interface Storage {
  /** Every entry, as last written. */
  load(): Promise<Map<string, unknown>>;
  /** Applies a batch: a value puts it, undefined deletes the key. Batches apply in call order. */
  write(batch: Map<string, unknown>): Promise<void>;
  /** Releases the storage (a browser tab's claim on it). */
  close?(): void;
}

/** MemoryStorage keeps nothing across a restart: for tests and short-lived Node programs. */
export class MemoryStorage implements Storage {
  readonly data = new Map<string, unknown>();

  async load(): Promise<Map<string, unknown>> {
    return new Map([...this.data].map(([k, v]) => [k, structuredClone(v)]));
  }

  async write(batch: Map<string, unknown>): Promise<void> {
    for (const [k, v] of batch) {
      if (v === undefined) {
        this.data.delete(k);
      } else {
        this.data.set(k, structuredClone(v));
      }
    }
  }
}

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** IndexedDBStorage keeps the state in one IndexedDB database of the browser. */
export class IndexedDBStorage implements Storage {
  private constructor(private readonly db: IDBDatabase, private readonly release?: () => void) {}

  /**
   * open opens (or creates) the database name. release, if given, is called
   * on close (the lock that made the database this tab's).
   */
  static async open(name: string, release?: () => void): Promise<IndexedDBStorage> {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => r.result.createObjectStore('kv');
    return new IndexedDBStorage(await req(r), release);
  }

  async load(): Promise<Map<string, unknown>> {
    const t = this.db.transaction('kv', 'readonly');
    const s = t.objectStore('kv');
    const [keys, values] = await Promise.all([req(s.getAllKeys()), req(s.getAll())]);
    return new Map(keys.map((k, i) => [String(k), values[i]]));
  }

  write(batch: Map<string, unknown>): Promise<void> {
    return new Promise((resolve, reject) => {
      const t = this.db.transaction('kv', 'readwrite', {durability: 'strict'});
      const s = t.objectStore('kv');
      for (const [k, v] of batch) {
        if (v === undefined) {
          s.delete(k);
        } else {
          s.put(v, k);
        }
      }
      t.oncomplete = () => resolve();
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error ?? new Error('IndexedDB transaction aborted'));
    });
  }

  close(): void {
    this.db.close();
    this.release?.();
  }
}

/**
 * browserStorage opens the IndexedDB storage of scope for this tab. Each
 * tab needs a client of its own (a client's ids go up by 1), so a tab
 * claims the first free slot of the scope with a Web Lock it holds while it
 * lives: a reloaded tab gets its slot back, with its client id and pending
 * mutations; a second tab open at the same time gets another slot.
 */
export async function browserStorage(scope: string): Promise<Storage> {
  const locks = (globalThis.navigator as Navigator | undefined)?.locks;
  if (!locks) {
    return IndexedDBStorage.open(`canon:${scope}:0`);
  }
  for (let slot = 0; ; slot++) {
    const name = `canon:${scope}:${slot}`;
    let release!: () => void;
    const held = new Promise<void>(r => (release = r));
    const got = await new Promise<boolean>(resolve => {
      void locks.request(name, {ifAvailable: true}, lock => {
        resolve(lock !== null);
        return lock === null ? undefined : held;
      });
    });
    if (got) {
      return IndexedDBStorage.open(name, release);
    }
  }
}
