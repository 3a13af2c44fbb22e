package bundle_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// The same logic as a JavaScript and as a Go mutator: toggle a todo's
// done flag.
const toggleJS = `export default {
  "todo.toggle": (tx, args) => {
    const it = tx.get("todos", args.id);
    if (it === undefined) throw new Error("todo " + args.id + " does not exist");
    it.data.done = !it.data.done;
    tx.put("todos", args.id, it.data, it.meta);
  },
};`

func toggleGo(tx model.Tx, raw json.RawMessage) error {
	var args struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return err
	}
	it, err := tx.Get("todos", args.ID)
	if errors.Is(err, model.ErrNotFound) {
		return fmt.Errorf("todo %s does not exist", args.ID)
	} else if err != nil {
		return err
	}
	var data map[string]any
	if err := json.Unmarshal(it.Data, &data); err != nil {
		return err
	}
	done, _ := data["done"].(bool)
	data["done"] = !done
	if it.Data, err = json.Marshal(data); err != nil {
		return err
	}
	return tx.Put("todos", args.ID, it)
}

// toggleWorld is a Decider with a todo to toggle, deciding todo.toggle
// with fn in batches of 100 between Resets, as the sequencer does.
type toggleWorld struct {
	dec  *model.Decider
	recs []model.MutationRecord
	i    int
}

func newToggleWorld(b *testing.B, fn model.Mutator) *toggleWorld {
	reg := model.NewRegistry()
	if err := reg.Register("todo.toggle", fn); err != nil {
		b.Fatal(err)
	}
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, reg, schemas.Limits{})
	setup, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
		Org: "acme", Project: "p", Client: "setup", ID: 1, Name: model.ItemPut,
		Args: json.RawMessage(`{"collection":"todos","id":"t1","meta":{"owner":"ann"},"data":{"title":"Write the spec","done":false,"order":3}}`),
	}, Timestamp: epoch})
	if err != nil || setup.Kind != model.Applied {
		b.Fatal(setup.Kind, err)
	}
	if err := state.Apply(setup.Version, setup.Chunks); err != nil {
		b.Fatal(err)
	}
	dec.Reset()
	w := &toggleWorld{dec: dec, recs: make([]model.MutationRecord, 100)}
	for i := range w.recs {
		w.recs[i] = model.MutationRecord{Mutation: &schemas.Mutation{
			Org: "acme", Project: "p", ClientGroup: "g", Client: "c", ID: uint64(i + 1), Name: "todo.toggle",
			Args: json.RawMessage(`{"id":"t1"}`),
		}, Timestamp: epoch, Offset: int64(i)}
	}
	return w
}

func (w *toggleWorld) decide(b *testing.B) {
	d, err := w.dec.Decide(w.recs[w.i])
	if err != nil || d.Kind != model.Applied {
		b.Fatal(d.Kind, err, d.Version.Mutations[0].Error)
	}
	if w.i++; w.i == len(w.recs) {
		w.i = 0
		w.dec.Reset() // the store is not written: the batch starts over
	}
}

func toggleJSMutator(b *testing.B) model.Mutator {
	js := compile(b, toggleJS, bundle.Options{})
	m, _ := js.Mutator("todo.toggle")
	return m
}

// BenchmarkDecideToggle decides todo.toggle through model.Decider with
// the mutator in Go and in JavaScript.
func BenchmarkDecideToggle(b *testing.B) {
	for _, bc := range []struct {
		name string
		fn   func(*testing.B) model.Mutator
	}{
		{"go", func(*testing.B) model.Mutator { return toggleGo }},
		{"js", toggleJSMutator},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := newToggleWorld(b, bc.fn(b))
			b.ReportAllocs()
			for b.Loop() {
				w.decide(b)
			}
		})
	}
}

// BenchmarkDecideToggleRatio decides a Go and a JavaScript todo.toggle
// alternately and reports the cost of each and their ratio (goal:
// JavaScript at most 10x Go).
func BenchmarkDecideToggleRatio(b *testing.B) {
	goW := newToggleWorld(b, toggleGo)
	jsW := newToggleWorld(b, toggleJSMutator(b))
	alternate(b, goW.decide, jsW.decide)
}

// alternate runs goOp and jsOp alternately, so that both see the same
// load of the machine, and reports the wall time of each and their ratio,
// and the same of the CPU time of the benchmark's thread (where the
// system reports it): on a shared machine the wall times also count the
// time other processes took the core, the CPU times do not.
func alternate(b *testing.B, goOp, jsOp func(*testing.B)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var goNS, jsNS, goCPU, jsCPU time.Duration
	for b.Loop() {
		c0, t0 := threadCPU(), time.Now()
		goOp(b)
		c1, t1 := threadCPU(), time.Now()
		jsOp(b)
		c2, t2 := threadCPU(), time.Now()
		goNS += t1.Sub(t0)
		jsNS += t2.Sub(t1)
		goCPU += c1 - c0
		jsCPU += c2 - c1
	}
	n := float64(b.N)
	b.ReportMetric(float64(goNS.Nanoseconds())/n, "go-ns/op")
	b.ReportMetric(float64(jsNS.Nanoseconds())/n, "js-ns/op")
	b.ReportMetric(float64(jsNS)/float64(goNS), "js/go")
	if goCPU > 0 {
		b.ReportMetric(float64(goCPU.Nanoseconds())/n, "go-cpu-ns/op")
		b.ReportMetric(float64(jsCPU.Nanoseconds())/n, "js-cpu-ns/op")
		b.ReportMetric(float64(jsCPU)/float64(goCPU), "js/go-cpu")
	}
}

// BenchmarkCompileTodo compiles the todo example's bundle: transform,
// engine start, load and export checks.
func BenchmarkCompileTodo(b *testing.B) {
	src, err := os.ReadFile(todoJS)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		bu, err := bundle.Compile(src, bundle.Options{})
		if err != nil {
			b.Fatal(err)
		}
		bu.Close()
	}
}

// BenchmarkSteps runs a loop of a million iterations and reports the
// time of one (a plain loop's iteration is 2 steps of the CPU budget: its
// two jumps).
func BenchmarkSteps(b *testing.B) {
	bu := compile(b, `export default {"s.spin": (tx, args) => { let x = 0; for (let i = 0; i < args.n; i++) x += i; tx.setScalar("x", x); }};`, bundle.Options{})
	w := newWorld(b, bu)
	for b.Loop() {
		if o := w.do("c", "s.spin", `{"n":1000000}`); o.Status != "applied" {
			b.Fatal(o.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ns/iteration")
}

// BenchmarkVMMemory reports the memory an engine instance with the todo
// bundle loaded holds: resident set growth per instance, as the engine's
// heap is not Go's.
func BenchmarkVMMemory(b *testing.B) {
	src, err := os.ReadFile(todoJS)
	if err != nil {
		b.Fatal(err)
	}
	const n = 50
	for b.Loop() {
		runtime.GC()
		before := rss(b)
		var bs []*bundle.Bundle
		for range n {
			bu, err := bundle.Compile(src, bundle.Options{})
			if err != nil {
				b.Fatal(err)
			}
			bs = append(bs, bu)
		}
		runtime.GC()
		b.ReportMetric(float64(rss(b)-before)/n/1024, "KiB/vm")
		for _, bu := range bs {
			bu.Close()
		}
	}
}

func rss(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skip("no /proc/self/statm:", err)
	}
	var size, res int64
	if _, err := fmt.Sscan(string(raw), &size, &res); err != nil {
		b.Fatal(err)
	}
	return res * int64(os.Getpagesize())
}

// tasksWorld decides the sequencer benchmark's mix of mutations (puts of
// bodies of about 1 KB, patches and splices of them; one third each)
// with the built-ins (prefix "item.") or modeltest.TasksBundle
// ("task."), in batches of 100 between Resets, as the sequencer does.
type tasksWorld struct {
	dec  *model.Decider
	recs []model.MutationRecord
	i    int
}

func newTasksWorld(b *testing.B, prefix string) *tasksWorld {
	reg := model.NewRegistry()
	if prefix == "task." {
		js := compile(b, modeltest.TasksBundle, bundle.Options{})
		for _, n := range js.Names() {
			m, _ := js.Mutator(n)
			if err := reg.Register(n, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, reg, schemas.Limits{})
	pad := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 28)[:1000]
	put := func(id string, n int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":%q,"data":{"text":"hello world","n":%d,"pad":%q}}`, id, n, pad))
	}
	for i := range 5 {
		d, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
			Org: "acme", Project: "p", Client: "setup", ID: uint64(i + 1), Name: model.ItemPut, Args: put(fmt.Sprint("t", i), i),
		}, Timestamp: epoch})
		if err != nil || d.Kind != model.Applied {
			b.Fatal(d.Kind, err)
		}
		if err := state.Apply(d.Version, d.Chunks); err != nil {
			b.Fatal(err)
		}
		dec.Reset()
	}
	w := &tasksWorld{dec: dec, recs: make([]model.MutationRecord, 99)}
	for i := range w.recs {
		id := fmt.Sprint("t", i%5)
		var name string
		var args json.RawMessage
		switch i % 3 {
		case 0:
			name, args = "put", put(id, i)
		case 1:
			name, args = "patch", json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":%q,"data":{"n":%d}}`, id, i))
		default:
			name, args = "splice", json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":%q,"path":"/text","index":0,"delete":0,"insert":"x"}`, id))
		}
		w.recs[i] = model.MutationRecord{Mutation: &schemas.Mutation{
			Org: "acme", Project: "p", Branch: "main", ClientGroup: "g", Client: "c", ID: uint64(i + 1), Name: prefix + name, Args: args,
		}, Timestamp: epoch, Offset: int64(i)}
	}
	return w
}

func (w *tasksWorld) decide(b *testing.B) {
	d, err := w.dec.Decide(w.recs[w.i])
	if err != nil || d.Kind != model.Applied {
		b.Fatal(d.Kind, err, d.Version.Mutations[0].Error)
	}
	if w.i++; w.i == len(w.recs) {
		w.i = 0
		w.dec.Reset()
	}
}

// BenchmarkDecideTasksRatio decides the sequencer benchmark's mix with the
// built-ins and with modeltest.TasksBundle alternately and reports the
// cost of each and their ratio.
func BenchmarkDecideTasksRatio(b *testing.B) {
	goW := newTasksWorld(b, "item.")
	jsW := newTasksWorld(b, "task.")
	alternate(b, goW.decide, jsW.decide)
}
