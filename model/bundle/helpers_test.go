package bundle_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

var epoch = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// world is a state and a Decider with a bundle's mutators registered.
type world struct {
	t     testing.TB
	state *modeltest.MemState
	dec   *model.Decider
	ids   map[string]uint64
}

func compile(t testing.TB, src string, opts bundle.Options) *bundle.Bundle {
	t.Helper()
	b, err := bundle.Compile([]byte(src), opts)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func newWorld(t testing.TB, b *bundle.Bundle) *world {
	t.Helper()
	reg := model.NewRegistry()
	for _, n := range b.Names() {
		m, ok := b.Mutator(n)
		if !ok {
			t.Fatalf("Mutator(%q) not found though Names lists it", n)
		}
		if err := reg.Register(n, m); err != nil {
			t.Fatal(err)
		}
	}
	st := modeltest.NewMemState()
	return &world{t: t, state: st, dec: model.NewDecider(st, reg, schemas.Limits{}), ids: map[string]uint64{}}
}

// do decides one mutation of client c and commits it to the state.
func (w *world) do(client, name, args string) schemas.Outcome {
	w.t.Helper()
	w.ids[client]++
	d, err := w.dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
		Org: "acme", Project: "p", Branch: "main", ClientGroup: "g-" + client, Client: client,
		ID: w.ids[client], Name: name, Args: json.RawMessage(args),
	}, Timestamp: epoch.Add(time.Duration(w.ids[client]) * time.Second)})
	if err != nil {
		w.t.Fatalf("decide %s: %v", name, err)
	}
	if d.Version == nil {
		w.t.Fatalf("decide %s: %v, no version", name, d.Kind)
	}
	if err := w.state.Apply(d.Version, d.Chunks); err != nil {
		w.t.Fatal(err)
	}
	w.dec.Reset()
	return d.Version.Mutations[len(d.Version.Mutations)-1]
}
