package bundle_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/schemas"
)

// FuzzCompileRun compiles arbitrary source and, when it compiles, runs
// every mutator of it through model.Decider: whatever the source, no
// crash, no hang (small budgets), and an outcome for every mutation.
func FuzzCompileRun(f *testing.F) {
	for _, s := range []string{
		`export default {"a.b": (tx, args) => { tx.put("c", "x", args); }};`,
		`export default {"a.b": async (tx) => { await null; tx.setScalar("s", tx.scalar("s") ?? 1); }};`,
		`export const mutators = {"a.b": () => { for (;;) {} }};`,
		`export default {"a.b": () => { const a = []; for (;;) a.push(new Array(1e5)); }};`,
		`let n = 0; export default {"a.b": () => { n++; throw Object.assign(new Error("x" + n), {code: "c_" + n}); }};`,
		`export default {"a.b": (tx) => tx.put("c", "x", {d: new Date(0), m: new Map(), u: undefined})};`,
		`export default {"a.b": () => new Promise((r) => r(Promise.reject(new Error("x"))))};`,
		`export default new Proxy({}, {get() { throw new Error("trap"); }});`,
		`export default {get "a.b"() { throw new Error("getter"); }};`,
	} {
		f.Add(s, `{"id":"t1"}`)
	}
	f.Fuzz(func(t *testing.T, src, args string) {
		b, err := bundle.Compile([]byte(src), bundle.Options{CPUBudget: 100_000, MemoryBudget: 2 << 20})
		if err != nil {
			if !errors.Is(err, bundle.ErrInvalidBundle) && !errors.Is(err, bundle.ErrBundleTooLarge) {
				t.Fatalf("Compile error without its sentinel: %v", err)
			}
			return
		}
		defer b.Close()
		if !json.Valid([]byte(args)) {
			args = "null"
		}
		w := newWorld(t, b)
		for _, n := range b.Names() {
			o := w.do("c", n, args)
			if o.Status != "applied" && (o.Status != "error" || o.Code == "") {
				t.Fatalf("%s: outcome %+v", n, o)
			}
		}
	})
}

// panicTx is a Tx whose Get panics, as a broken Reader might make it.
type panicTx struct{ model.Tx }

func (panicTx) Mutation() *schemas.Mutation { return &schemas.Mutation{Name: "a.get"} }
func (panicTx) Now() time.Time              { return epoch }
func (panicTx) Get(string, string) (model.Item, error) {
	panic("reader broke")
}

// A Go panic under a mutator goes on to the caller (the Decider records
// it as a panic outcome), and the bundle keeps working.
func TestHostPanic(t *testing.T) {
	b := compile(t, `export default {"a.get": (tx) => { tx.get("c", "x"); }};`, bundle.Options{})
	m, _ := b.Mutator("a.get")
	func() {
		defer func() {
			if p := recover(); p != "reader broke" {
				t.Errorf("recovered %v", p)
			}
		}()
		_ = m(panicTx{}, json.RawMessage(`{}`))
		t.Error("no panic")
	}()
	w := newWorld(t, b)
	if o := w.do("c", "a.get", `{}`); o.Status != "applied" {
		t.Errorf("after a panic: %+v", o)
	}
}
