// The sandbox of a mutator bundle. It runs once per engine instance (VM),
// after the bundle's loader was defined, then freezes every object reachable from the global
// object, so that nothing a mutation does to globals or built-ins can be
// seen by the next one. The bundle itself is a loader function that
// __canon_run calls afresh for every mutation: its module-level variables
// are new each time. Its value is the object of its entry points.
(function () {
  "use strict";
  const host = {
    get: globalThis.__canon_get,
    has: globalThis.__canon_has,
    put: globalThis.__canon_put,
    del: globalThis.__canon_delete,
    scalar: globalThis.__canon_scalar,
    setScalar: globalThis.__canon_set_scalar,
    charge: globalThis.__canon_charge,
    mutation: globalThis.__canon_mutation,
  };
  for (const k of ["__canon_get", "__canon_has", "__canon_put", "__canon_delete", "__canon_scalar", "__canon_set_scalar", "__canon_charge", "__canon_mutation"]) {
    delete globalThis[k];
  }

  // Determinism: no wall clock, no randomness, no GC-dependent behavior.
  const clock = (what) => function () {
    throw new Error(what + " reads the wall clock, which a mutator must not do: use tx.now(), the mutation's log time");
  };
  const RealDate = Date;
  function SafeDate(...a) {
    if (new.target === undefined) {
      return clock("Date()")();
    }
    if (a.length === 0) {
      return clock("new Date() without arguments")();
    }
    return Reflect.construct(RealDate, a, new.target);
  }
  Object.defineProperty(SafeDate, "prototype", { value: RealDate.prototype });
  Object.defineProperty(SafeDate, "name", { value: "Date" });
  Object.defineProperty(SafeDate, "length", { value: 7 });
  Object.defineProperty(RealDate.prototype, "constructor", { value: SafeDate, writable: true, configurable: true });
  SafeDate.UTC = RealDate.UTC;
  SafeDate.parse = RealDate.parse;
  SafeDate.now = clock("Date.now()");
  globalThis.Date = SafeDate;
  Math.random = function () {
    throw new Error("Math.random() is not deterministic, which a mutator must be: take ids and random choices from the args, or derive them from tx.mutation");
  };
  globalThis.performance = { now: clock("performance.now()") };
  delete globalThis.WeakRef;
  delete globalThis.FinalizationRegistry;

  // The CPU budget counts the interpreter's steps, but a built-in that
  // walks an array runs in native code without counting: indexOf over an
  // array whose length was set to 1e9 would take minutes. The built-ins
  // that walk a length charge it to the budget first (n log n for a sort);
  // over budget, the loop below makes the engine stop the mutation at its
  // next count, as for any runaway.
  const free = 4096;
  function spend(n) {
    if (host.charge(Math.min(n, 1e15))) {
      for (;;) {}
    }
  }
  function lengthOf(o) {
    if (o === null || o === undefined) {
      return 0;
    }
    const n = Number(o.length);
    return n > 0 ? n : 0;
  }
  function guard(target, names, cost) {
    for (const name of names) {
      const orig = target[name];
      if (typeof orig !== "function") {
        continue;
      }
      const wrapped = {
        [name](...args) {
          const n = cost(this, args);
          if (n > free) {
            spend(n);
          }
          return Reflect.apply(orig, this, args);
        },
      }[name];
      Object.defineProperty(target, name, { value: wrapped, writable: true, configurable: true, enumerable: false });
    }
  }
  const linear = (self) => lengthOf(self);
  const sorting = (self, args) => {
    const n = lengthOf(self);
    return args[0] === undefined ? n * Math.max(1, Math.log2(n)) : n;
  };
  const walks = ["concat", "copyWithin", "every", "fill", "filter", "find", "findIndex", "findLast", "findLastIndex", "flat", "flatMap",
    "forEach", "includes", "indexOf", "join", "lastIndexOf", "map", "reduce", "reduceRight", "reverse", "shift", "slice", "some",
    "splice", "toLocaleString", "toReversed", "toSpliced", "toString", "unshift", "with", "set", "subarray"];
  guard(Array.prototype, walks, linear);
  guard(Array.prototype, ["concat"], (self, args) => args.reduce((n, a) => n + lengthOf(a), lengthOf(self)));
  guard(Array.prototype, ["sort", "toSorted"], sorting);
  const typed = Object.getPrototypeOf(Int8Array.prototype);
  guard(typed, walks, linear);
  guard(typed, ["sort", "toSorted"], sorting);
  guard(Array, ["from"], (self, args) => lengthOf(args[0]));

  const codeRule = /^[a-z][a-z0-9_]{0,31}$/;
  function fail(code, message) {
    const e = new Error(message);
    e.code = code;
    return e;
  }

  // checkJSON throws naming the field when v is not a JSON value.
  function checkJSON(v, path, stack) {
    switch (typeof v) {
      case "string":
      case "boolean":
        return;
      case "number":
        if (!Number.isFinite(v)) {
          throw fail("invalid_args", path + " is " + String(v) + ", which is not JSON (numbers must be finite)");
        }
        return;
      case "object":
        if (v === null) {
          return;
        }
        if (stack.includes(v)) {
          throw fail("invalid_args", path + " refers to itself (a cycle), which is not JSON");
        }
        stack.push(v);
        if (Array.isArray(v)) {
          for (let i = 0; i < v.length; i++) {
            checkJSON(v[i], path + "[" + i + "]", stack);
          }
        } else {
          const proto = Object.getPrototypeOf(v);
          if (proto !== Object.prototype && proto !== null) {
            const name = proto && proto.constructor && typeof proto.constructor.name === "string" ? proto.constructor.name : "an object with a prototype";
            throw fail("invalid_args", path + " is a " + name + ", which is not JSON: use a plain object");
          }
          for (const k of Object.keys(v)) {
            checkJSON(v[k], path + "." + k, stack);
          }
        }
        stack.pop();
        return;
      default:
        throw fail("invalid_args", path + " is " + (typeof v === "undefined" ? "undefined" : "a " + typeof v) + ", which is not JSON");
    }
  }
  // isJSON is checkJSON's fast path, for the common case of a valid
  // value: no paths built, no iterators, no guarded built-ins; checkJSON
  // runs only to say what is wrong.
  function isJSON(v, stack, depth) {
    switch (typeof v) {
      case "string":
      case "boolean":
        return true;
      case "number":
        return Number.isFinite(v);
      case "object": {
        if (v === null) {
          return true;
        }
        for (let i = 0; i < depth; i++) {
          if (stack[i] === v) {
            return false;
          }
        }
        stack[depth] = v;
        if (Array.isArray(v)) {
          for (let i = 0; i < v.length; i++) {
            if (!isJSON(v[i], stack, depth + 1)) {
              return false;
            }
          }
          return true;
        }
        const proto = Object.getPrototypeOf(v);
        if (proto !== Object.prototype && proto !== null) {
          return false;
        }
        const keys = Object.keys(v);
        for (let i = 0; i < keys.length; i++) {
          if (!isJSON(v[keys[i]], stack, depth + 1)) {
            return false;
          }
        }
        return true;
      }
      default:
        return false;
    }
  }
  function toJSON(v, path) {
    if (!isJSON(v, [], 0)) {
      checkJSON(v, path, []);
    }
    return JSON.stringify(v);
  }
  function str(v, what) {
    if (typeof v !== "string") {
      throw fail("invalid_args", what + " must be a string, not " + (v === null ? "null" : typeof v));
    }
    return v;
  }
  // The host functions (engine.go) answer values, null for none, and
  // throw an Error with a code for a failure.

  // cur is the state of the mutation that runs: an engine instance runs
  // one at a time. The tx methods are made once and frozen (below), so a
  // mutation cannot leave anything on them for the next one; a tx is a
  // fresh object inheriting them. A tx dies when its mutator returns (or
  // its promise settles): a promise the mutator left running cannot write
  // after that. The methods do not use this: const { get } = tx works.
  let cur = { dead: true, now: 0, mutation: undefined };
  const live = () => {
    if (cur.dead) {
      throw fail("mutator_error", "the tx is used after its mutator returned: await every promise that uses it");
    }
  };
  const txMethods = {
    // mutation is fetched from the host the first time it is read: most
    // mutators never read it.
    get mutation() {
      if (cur.mutation === undefined) {
        cur.mutation = host.mutation();
      }
      return cur.mutation;
    },
    now() {
      return cur.now;
    },
    get(collection, id) {
      live();
      const r = host.get(str(collection, "tx.get: collection"), str(id, "tx.get: id"));
      return r === null ? undefined : r;
    },
    has(collection, id) {
      live();
      return host.has(str(collection, "tx.has: collection"), str(id, "tx.has: id"));
    },
    put(collection, id, data, meta) {
      live();
      str(collection, "tx.put: collection");
      str(id, "tx.put: id");
      const d = toJSON(data, "tx.put " + collection + "/" + id + ": data");
      let m = "";
      if (meta !== undefined) {
        if (meta === null || typeof meta !== "object" || Array.isArray(meta)) {
          throw fail("invalid_args", "tx.put " + collection + "/" + id + ": meta must be an object, not " + (meta === null ? "null" : Array.isArray(meta) ? "an array" : typeof meta));
        }
        m = toJSON(meta, "tx.put " + collection + "/" + id + ": meta");
      }
      host.put(collection, id, d, m);
    },
    delete(collection, id) {
      live();
      return host.del(str(collection, "tx.delete: collection"), str(id, "tx.delete: id"));
    },
    scalar(name) {
      live();
      const r = host.scalar(str(name, "tx.scalar: name"));
      return r === null ? undefined : r;
    },
    setScalar(name, value) {
      live();
      str(name, "tx.setScalar: name");
      host.setScalar(name, value === null ? "null" : toJSON(value, "tx.setScalar " + name + ": value"));
    },
  };
  // A tx is a fresh object inheriting the frozen members: defining them
  // as own properties of each tx cost more than the rest of a small
  // mutator's setup.
  function makeTx() {
    return Object.create(txMethods);
  }

  // errorOf turns what a mutator threw into "E" + {"code","message"}.
  function errorOf(e) {
    let code = "";
    let message;
    if (e instanceof InternalError && e.message === "out of memory") {
      code = "budget_exceeded";
      message = e.message;
    } else if (e !== null && typeof e === "object" && "message" in e) {
      // A TypeError says so; an Error (or a subclass that keeps the name)
      // is its message alone.
      const name = typeof e.name === "string" && e.name !== "Error" && e.name !== "" ? e.name + ": " : "";
      message = name + String(e.message);
      if (typeof e.code === "string" && codeRule.test(e.code)) {
        code = e.code;
      }
    } else {
      let s;
      try {
        s = typeof e === "string" ? JSON.stringify(e) : String(e);
      } catch (_) {
        s = typeof e;
      }
      message = "the mutator threw " + s + ", not an Error: throw new Error(\"message\")";
    }
    return "E" + JSON.stringify({ code: code, message: message });
  }

  const load = globalThis.__canon_load;
  delete globalThis.__canon_load;
  let state = { done: true, res: "" };

  // names lists the bundle's exports for Compile: "E" + error, or
  // "V" + JSON [[name, typeof member]...].
  const names = function () {
    let mods;
    try {
      mods = exportsOf(load());
    } catch (e) {
      return errorOf(e);
    }
    if (typeof mods === "string") {
      return "E" + JSON.stringify({ code: "", message: mods });
    }
    return "V" + JSON.stringify(Object.keys(mods).map((k) => [k, typeof mods[k]]));
  };
  function exportsOf(ns) {
    if (ns === undefined || ns === null) {
      ns = {};
    }
    const d = ns.default;
    if (d !== undefined && d !== null && typeof d === "object") {
      return d;
    }
    const m = ns.mutators;
    if (m !== undefined && m !== null && typeof m === "object") {
      return m;
    }
    if (d !== undefined || m !== undefined) {
      return "the bundle's " + (d !== undefined ? "default export" : "export mutators") + " is " + (d === null || m === null ? "null" : typeof (d !== undefined ? d : m)) + ": export an object of mutator name to function (export default { \"todo.create\": (tx, args) => {...} })";
    }
    return "the bundle exports no mutators: export default an object of mutator name to function (export default { \"todo.create\": (tx, args) => {...} }), or export const mutators = {...}";
  }

  const run = function (name, argsJSON, now) {
    state = { done: true, res: "" };
    cur = { dead: true, now: now, mutation: undefined };
    let fn;
    try {
      const mods = exportsOf(load());
      fn = typeof mods === "string" ? undefined : mods[name];
    } catch (e) {
      return errorOf(e);
    }
    if (typeof fn !== "function") {
      return "E" + JSON.stringify({ code: "unknown_mutator", message: "the bundle has no mutator " + name });
    }
    const txState = cur;
    txState.dead = false;
    const tx = makeTx();
    const args = argsJSON === "" ? null : JSON.parse(argsJSON);
    let r;
    try {
      r = fn(tx, args);
    } catch (e) {
      txState.dead = true;
      return errorOf(e);
    }
    if (r instanceof Promise) {
      state = { done: false, res: "" };
      r.then(
        () => {
          txState.dead = true;
          state = { done: true, res: "" };
        },
        (e) => {
          txState.dead = true;
          state = { done: true, res: errorOf(e) };
        },
      );
      return "P";
    }
    txState.dead = true;
    return "";
  };
  const settle = function () {
    return state.done ? state.res : "P";
  };

  // Freeze everything reachable from the global object (built-ins and
  // their prototypes included), so that no mutation leaves anything for
  // the next one to see.
  const seen = new Set();
  function freeze(o) {
    if ((typeof o !== "object" && typeof o !== "function") || o === null || seen.has(o)) {
      return;
    }
    seen.add(o);
    Object.freeze(o);
    freeze(Object.getPrototypeOf(o));
    for (const k of Reflect.ownKeys(o)) {
      const d = Object.getOwnPropertyDescriptor(o, k);
      if (d === undefined) {
        continue;
      }
      freeze(d.value);
      freeze(d.get);
      freeze(d.set);
    }
  }
  freeze(globalThis);
  freeze(txMethods);
  freeze(Object.getPrototypeOf(async function () {}));
  freeze(Object.getPrototypeOf(function* () {}));
  freeze(Object.getPrototypeOf(async function* () {}));
  freeze(Object.getPrototypeOf([][Symbol.iterator]()));
  freeze(Object.getPrototypeOf(new Map()[Symbol.iterator]()));
  freeze(Object.getPrototypeOf(new Set()[Symbol.iterator]()));
  freeze(Object.getPrototypeOf(""[Symbol.iterator]()));
  freeze(Object.getPrototypeOf(/a/[Symbol.matchAll]("")));
  freeze(Object.getPrototypeOf(Int8Array));
  // The entry points are the script's value, for the engine alone: no
  // global names them.
  return { run: run, settle: settle, names: names };
})();
