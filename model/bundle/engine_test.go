package bundle_test

import (
	"strings"
	"testing"

	"github.com/canon-sync/canon/model/bundle"
)

// engineBundle exercises the sandbox: each mutator one behavior.
const engineBundle = `
let calls = 0;
export default {
  "todo.create": (tx, args) => { tx.put("todos", args.id, {title: args.title, done: false, at: tx.now()}); },
  "todo.toggle": async (tx, args) => {
    const it = tx.get("todos", args.id);
    if (!it) throw Object.assign(new Error("no todo " + args.id), {code: "no_todo"});
    it.data.done = !it.data.done;
    tx.put("todos", args.id, it.data);
  },
  "t.loop": () => { for (;;) {} },
  "t.redos": (tx) => { tx.setScalar("r", /(a+)+$/.test("a".repeat(40) + "b")); },
  "t.sparse": () => { const a = []; a.length = 1e9; a.indexOf(1); },
  "t.arraylike": () => Array.prototype.includes.call({length: 1e15}, 1),
  "t.sparseloop": () => { const a = []; a.length = 5000; for (;;) a.forEach(() => {}); },
  "t.arrays": (tx) => { const a = Array.from({length: 5000}, (_, i) => 5000 - i); a.reverse(); tx.setScalar("arrays", [a.indexOf(1), a.includes(5000), a.slice(-2), a.join("").length]); },
  "t.floating": (tx) => { Promise.resolve().then(() => tx.put("c", "float", 1)).catch((e) => globalThis.x = e); tx.setScalar("floated", true); },
  "t.afterawait": async (tx) => { Promise.resolve().then(() => null).then(() => null).then(() => null).then(() => null).then(() => null).then(() => tx.setScalar("late", 1)); await null; },
  "t.recurse": () => { const f = () => f() + 1; f(); },
  "t.hog": () => { const a = []; for (;;) a.push("x".repeat(1e5) + a.length); },
  "t.strhog": () => { let s = "x"; for (;;) s = s + s; },
  "t.asyncloop": async () => { await null; for (;;) {} },
  "t.throw": () => { throw new Error("nope"); },
  "t.throwcode": () => { const e = new Error("over quota"); e.code = "quota_exceeded"; throw e; },
  "t.badcode": () => { const e = new Error("bad code"); e.code = "Not A Code"; throw e; },
  "t.throwstr": () => { throw "plain"; },
  "t.reject": async () => { throw new Error("async nope"); },
  "t.never": () => new Promise(() => {}),
  "t.returns": (tx) => { tx.setScalar("name", "x"); return 42; },
  "t.datenow": () => Date.now(),
  "t.newdate": () => new Date(),
  "t.datefn": () => Date(),
  "t.datearg": (tx) => { tx.setScalar("iso", new Date(tx.now()).toISOString()); },
  "t.random": () => Math.random(),
  "t.perf": () => performance.now(),
  "t.fn": (tx) => tx.put("c", "x", {f: () => 1}),
  "t.undef": (tx) => tx.put("c", "x", {a: [1, undefined]}),
  "t.nan": (tx) => tx.put("c", "x", {n: NaN}),
  "t.inf": (tx) => tx.setScalar("n", Infinity),
  "t.cycle": (tx) => { const o = {a: {}}; o.a.b = o; tx.put("c", "x", o); },
  "t.bigint": (tx) => tx.put("c", "x", {b: 10n}),
  "t.map": (tx) => tx.put("c", "x", {m: new Map()}),
  "t.metaarr": (tx) => tx.put("c", "x", 1, []),
  "t.badcoll": (tx) => tx.put("no/slash", "x", 1),
  "t.catchhost": (tx) => { try { tx.put("no/slash", "x", 1); } catch (e) { tx.setScalar("caught_host", [e instanceof Error, e.name, e.code, e.message.slice(0, 8)]); } },
  "t.missing": (tx) => { if (tx.delete("c", "nope")) throw new Error("deleted what does not exist"); tx.setScalar("deleted", false); },
  "t.global": () => { globalThis.leak = 1; },
  "t.proto": () => { Object.prototype.polluted = 1; },
  "t.counter": (tx) => { calls++; tx.setScalar("calls", calls); },
  "t.seeleak": (tx) => { tx.setScalar("seen", typeof leak + "/" + typeof ({}).polluted); },
  "t.writefail": (tx) => { tx.put("c", "y", 1); throw new Error("after write"); },
  "t.catchoom": (tx) => { try { const a = []; for (;;) a.push("x".repeat(1e5) + a.length); } catch (e) { tx.setScalar("caught", String(e)); } },
  "t.mutation": (tx) => { tx.setScalar("m", tx.mutation); },
};`

func TestEngine(t *testing.T) {
	b := compile(t, engineBundle, bundle.Options{CPUBudget: 100_000, MemoryBudget: 4 << 20})
	w := newWorld(t, b)
	tests := []struct {
		name, args string
		status     string // "applied" or "error"
		code       string
		msg        string // prefix of the error message
	}{
		{"todo.create", `{"id":"t1","title":"x"}`, "applied", "", ""},
		{"todo.toggle", `{"id":"t1"}`, "applied", "", ""},
		{"todo.toggle", `{"id":"t2"}`, "error", "no_todo", "no todo t2"},
		{"t.loop", `{}`, "error", "budget_exceeded", "mutator t.loop ran over the CPU budget of 100000 steps (--mutator-cpu-budget)"},
		{"t.asyncloop", `{}`, "error", "budget_exceeded", "mutator t.asyncloop ran over the CPU budget"},
		{"t.hog", `{}`, "error", "budget_exceeded", "mutator t.hog ran over the memory budget of 4 MiB (--mutator-memory-budget)"},
		{"t.strhog", `{}`, "error", "mutator_error", "InternalError: string too long"}, // ropes: QuickJS caps the length first
		// Hitting the memory budget fails the mutation, even when it
		// catches the error (with no memory left, QuickJS may throw null).
		{"t.catchoom", `{}`, "error", "budget_exceeded", "mutator t.catchoom ran over the memory budget of 4 MiB"},
		{"t.redos", `{}`, "error", "budget_exceeded", "mutator t.redos ran over the CPU budget"}, // the regexp engine counts its backtracking
		// Built-ins that walk an array charge its length to the budget:
		// native code does not count steps.
		{"t.sparse", `{}`, "error", "budget_exceeded", "mutator t.sparse ran over the CPU budget"},
		{"t.arraylike", `{}`, "error", "budget_exceeded", "mutator t.arraylike ran over the CPU budget"},
		{"t.sparseloop", `{}`, "error", "budget_exceeded", "mutator t.sparseloop ran over the CPU budget"},
		{"t.arrays", `{}`, "applied", "", ""},
		// A promise a mutator leaves running cannot write after it returned,
		// nor in a later mutation.
		{"t.floating", `{}`, "applied", "", ""},
		{"t.afterawait", `{}`, "applied", "", ""},
		{"t.recurse", `{}`, "error", "mutator_error", "InternalError: stack overflow"},
		{"t.throw", `{}`, "error", "mutator_error", "nope"},
		{"t.throwcode", `{}`, "error", "quota_exceeded", "over quota"},
		{"t.badcode", `{}`, "error", "mutator_error", "bad code"},
		{"t.throwstr", `{}`, "error", "mutator_error", `the mutator threw "plain", not an Error`},
		{"t.reject", `{}`, "error", "mutator_error", "async nope"},
		{"t.never", `{}`, "error", "mutator_error", "mutator t.never: its promise never settled"},
		{"t.returns", `{}`, "applied", "", ""},
		{"t.datenow", `{}`, "error", "mutator_error", "Date.now() reads the wall clock"},
		{"t.newdate", `{}`, "error", "mutator_error", "new Date() without arguments reads the wall clock"},
		{"t.datefn", `{}`, "error", "mutator_error", "Date() reads the wall clock"},
		{"t.datearg", `{}`, "applied", "", ""},
		{"t.random", `{}`, "error", "mutator_error", "Math.random() is not deterministic"},
		{"t.perf", `{}`, "error", "mutator_error", "performance.now() reads the wall clock"},
		{"t.fn", `{}`, "error", "invalid_args", "tx.put c/x: data.f is a function, which is not JSON"},
		{"t.undef", `{}`, "error", "invalid_args", "tx.put c/x: data.a[1] is undefined, which is not JSON"},
		{"t.nan", `{}`, "error", "invalid_args", "tx.put c/x: data.n is NaN, which is not JSON"},
		{"t.inf", `{}`, "error", "invalid_args", "tx.setScalar n: value is Infinity, which is not JSON"},
		{"t.cycle", `{}`, "error", "invalid_args", "tx.put c/x: data.a.b refers to itself (a cycle)"},
		{"t.bigint", `{}`, "error", "invalid_args", "tx.put c/x: data.b is a bigint, which is not JSON"},
		{"t.map", `{}`, "error", "invalid_args", "tx.put c/x: data.m is a Map, which is not JSON"},
		{"t.metaarr", `{}`, "error", "invalid_args", "tx.put c/x: meta must be an object, not an array"},
		{"t.badcoll", `{}`, "error", "invalid_args", "put item: field \"collection\""},
		// A host function's error is an Error with the code, which a
		// mutator can catch.
		{"t.catchhost", `{}`, "applied", "", ""},
		{"t.missing", `{}`, "applied", "", ""},
		{"t.global", `{}`, "error", "mutator_error", "TypeError: object is not extensible"},
		{"t.proto", `{}`, "error", "mutator_error", "TypeError: object is not extensible"},
		{"t.seeleak", `{}`, "applied", "", ""},
		{"t.counter", `{}`, "applied", "", ""},
		{"t.counter", `{}`, "applied", "", ""},
		{"t.writefail", `{}`, "error", "mutator_error", "after write"},
		{"t.mutation", `{}`, "applied", "", ""},
		{"no.such", `{}`, "error", "unknown_mutator", ""},
	}
	for i, tc := range tests {
		o := w.do("c1", tc.name, tc.args)
		if o.Status != tc.status || o.Code != tc.code || !strings.HasPrefix(o.Error, tc.msg) {
			t.Errorf("%d %s: got %s %s %q, want %s %s %q...", i, tc.name, o.Status, o.Code, o.Error, tc.status, tc.code, tc.msg)
		}
	}
	for name, want := range map[string]string{
		"seen":        `"undefined/undefined"`,
		"caught_host": `[true,"Error","invalid_args","put item"]`,
		"arrays":      `[0,true,[4999,5000],18893]`,
		"floated":     `true`,
		"late":        ``,
		"calls":       `1`, // module state is fresh for every mutation
		"iso":         `"2026-11-27T12:00:27.000Z"`,
		"name":        `"x"`,
		"deleted":     `false`,
		"m":           `{"branch":"main","client":"c1","clientGroup":"g-c1","id":47,"name":"t.mutation","org":"acme","project":"p"}`,
	} {
		h, err := w.state.Head("acme", "p", "main")
		if err != nil {
			t.Fatal(err)
		}
		if got := string(h.Scalars[name]); got != want {
			t.Errorf("scalar %s = %s, want %s", name, got, want)
		}
	}
	if _, ok, _ := w.state.ItemRef("acme", "p", "main", "c", "float"); ok {
		t.Error("a promise left running wrote after its mutator returned")
	}
	if _, ok, _ := w.state.ItemRef("acme", "p", "main", "c", "y"); ok {
		t.Error("the write of a mutator that threw was kept")
	}
}
