// The client's state: the canonical view (what Canon decided, at a
// version) and the local view over it (the canonical view plus the
// pending mutations, applied optimistically).

import {clone, type JSONObject, type JSONValue} from './json.js';

/** An item as mutators and readers see it. */
export interface Item {
  data: JSONValue;
  meta: JSONObject;
}

/** An item of the canonical view, with its body's hash when Canon gave one. */
export interface StoredItem extends Item {
  hash?: string;
}

const SEP = '\u0000';

export function itemKey(collection: string, id: string): string {
  return collection + SEP + id;
}

export function splitKey(key: string): [string, string] {
  const i = key.indexOf(SEP);
  return [key.slice(0, i), key.slice(i + 1)];
}

/** Canonical is the view Canon decided: the scalars and items at version. */
export class Canonical {
  version = 0;
  ts = 0;
  stateHash = '';
  scalars = new Map<string, JSONValue>();
  collections = new Map<string, Map<string, StoredItem>>();
  /** The last mutation id Canon decided for each client seen so far. */
  lastIds = new Map<string, number>();

  getItem(collection: string, id: string): StoredItem | undefined {
    return this.collections.get(collection)?.get(id);
  }

  setItem(collection: string, id: string, it: StoredItem | undefined): void {
    let c = this.collections.get(collection);
    if (it === undefined) {
      if (c?.delete(id) && c.size === 0) {
        this.collections.delete(collection);
      }
      return;
    }
    if (!c) {
      c = new Map();
      this.collections.set(collection, c);
    }
    c.set(id, it);
  }

  clear(): void {
    this.version = 0;
    this.ts = 0;
    this.stateHash = '';
    this.scalars.clear();
    this.collections.clear();
  }
}

/**
 * Overlay holds writes over a base: an item or scalar set to a value, or to
 * null when deleted. Pending mutations write into one; each mutation's own
 * writes go into a child overlay that is merged only if it succeeds.
 */
export class Overlay {
  items = new Map<string, Item | null>();
  scalars = new Map<string, JSONValue | null>();

  mergeInto(parent: Overlay): void {
    for (const [k, v] of this.items) {
      parent.items.set(k, v);
    }
    for (const [k, v] of this.scalars) {
      parent.scalars.set(k, v);
    }
  }
}

/** What a read touched, so that a subscription runs again only when that changed. */
export class Deps {
  items = new Set<string>();
  collections = new Set<string>();
  scalars = new Set<string>();
  allScalars = false;

  touchedBy(ch: Changes): boolean {
    if (this.allScalars && ch.scalars.size > 0) {
      return true;
    }
    for (const s of ch.scalars) {
      if (this.scalars.has(s)) {
        return true;
      }
    }
    for (const k of ch.items) {
      if (this.items.has(k) || this.collections.has(splitKey(k)[0])) {
        return true;
      }
    }
    return false;
  }
}

/** Changes are the keys whose value may have changed. */
export class Changes {
  items = new Set<string>();
  scalars = new Set<string>();
  all = false;

  addOverlay(o: Overlay): void {
    for (const k of o.items.keys()) {
      this.items.add(k);
    }
    for (const k of o.scalars.keys()) {
      this.scalars.add(k);
    }
  }

  get empty(): boolean {
    return !this.all && this.items.size === 0 && this.scalars.size === 0;
  }
}

/** ReadTx reads a view; what it returns is a copy the caller may keep. */
export interface ReadTx {
  /** The canonical version the view is at (pending mutations on top, for the local view). */
  readonly version: number;
  get(collection: string, id: string): Item | undefined;
  has(collection: string, id: string): boolean;
  scalar(name: string): JSONValue | undefined;
  /** All scalars, as an object. */
  scalars(): JSONObject;
  /** A collection's items sorted by id. */
  collection(name: string): Array<Item & {id: string}>;
  /** The names of the collections that have items, sorted. */
  collections(): string[];
}

/**
 * Layers are a read over a canonical view and overlays, newest last. With
 * deps set, every read is recorded.
 */
export class Layers {
  constructor(readonly base: Canonical, readonly overlays: Overlay[], readonly deps?: Deps) {}

  rawItem(collection: string, id: string): Item | undefined {
    const k = itemKey(collection, id);
    this.deps?.items.add(k);
    for (let i = this.overlays.length - 1; i >= 0; i--) {
      const v = this.overlays[i]!.items.get(k);
      if (v !== undefined) {
        return v ?? undefined;
      }
    }
    return this.base.getItem(collection, id);
  }

  rawScalar(name: string): JSONValue | undefined {
    this.deps?.scalars.add(name);
    for (let i = this.overlays.length - 1; i >= 0; i--) {
      const v = this.overlays[i]!.scalars.get(name);
      if (v !== undefined) {
        return v ?? undefined;
      }
    }
    return this.base.scalars.get(name);
  }

  scalarNames(): string[] {
    if (this.deps) {
      this.deps.allScalars = true;
    }
    const names = new Set(this.base.scalars.keys());
    for (const o of this.overlays) {
      for (const [k, v] of o.scalars) {
        if (v === null) {
          names.delete(k);
        } else {
          names.add(k);
        }
      }
    }
    return [...names].sort();
  }

  collectionNames(): string[] {
    const names = new Set<string>();
    for (const [c, m] of this.base.collections) {
      if (m.size) {
        names.add(c);
      }
    }
    const extra = new Set<string>();
    for (const o of this.overlays) {
      for (const k of o.items.keys()) {
        extra.add(splitKey(k)[0]);
      }
    }
    for (const c of extra) {
      names.add(c);
    }
    return [...names].filter(c => this.collectionIds(c).length > 0).sort();
  }

  collectionIds(name: string): string[] {
    this.deps?.collections.add(name);
    const ids = new Set(this.base.collections.get(name)?.keys() ?? []);
    const prefix = name + SEP;
    for (const o of this.overlays) {
      for (const [k, v] of o.items) {
        if (k.startsWith(prefix)) {
          const id = k.slice(prefix.length);
          if (v === null) {
            ids.delete(id);
          } else {
            ids.add(id);
          }
        }
      }
    }
    return [...ids].sort();
  }
}

/** readTx is the ReadTx of a Layers. */
export function readTx(l: Layers): ReadTx {
  return {
    version: l.base.version,
    get(collection, id) {
      const it = l.rawItem(collection, id);
      return it && {data: clone(it.data), meta: clone(it.meta)};
    },
    has(collection, id) {
      return l.rawItem(collection, id) !== undefined;
    },
    scalar(name) {
      return clone(l.rawScalar(name));
    },
    scalars() {
      const out: JSONObject = {};
      for (const n of l.scalarNames()) {
        out[n] = clone(l.rawScalar(n)!);
      }
      return out;
    },
    collections() {
      return l.collectionNames();
    },
    collection(name) {
      return l.collectionIds(name).map(id => {
        const it = l.rawItem(name, id)!;
        return {id, data: clone(it.data), meta: clone(it.meta)};
      });
    },
  };
}
