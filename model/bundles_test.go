package model_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// goSet is a MutatorSet of Go functions: the Decider's side of bundles,
// without a JavaScript engine.
type goSet struct {
	hash string
	m    map[string]model.Mutator
}

func (s goSet) Hash() string { return s.hash }

func (s goSet) Mutator(name string) (model.Mutator, bool) { f, ok := s.m[name]; return f, ok }

func setOf(tag string) goSet {
	return goSet{hash: schemas.BundleHash([]byte(tag)), m: map[string]model.Mutator{
		"note.add": func(tx model.Tx, _ json.RawMessage) error {
			return tx.Put("notes", "n", model.Item{Data: json.RawMessage(`"` + tag + `"`)})
		},
	}}
}

// committed is Bundles over fixed deploys by scope.
type committed map[[2]string]model.MutatorSet

func (c committed) Deployed(_ int32, org, project string) (model.MutatorSet, error) {
	return c[[2]string{org, project}], nil
}

type failing struct{}

func (failing) Deployed(int32, string, string) (model.MutatorSet, error) {
	return nil, errors.New("disk on fire")
}

// The Decider resolves a name in the project's bundle (its own deploy,
// else its org's, activated in the overlay or committed), then in the
// registry; a version names the bundle that decided it; Reset drops the
// overlay's activations; a failure to read the deploys is an error of
// Decide, not an outcome.
func TestDeciderResolvesBundles(t *testing.T) {
	mem := modeltest.NewMemState()
	org, proj := setOf("org"), setOf("project")
	d := model.NewDecider(mem, model.NewRegistry(), schemas.Limits{})
	d.SetBundles(committed{{"acme", ""}: org})
	// One mutation per project, each the first of its client.
	decide := func(project, name string) model.Decision {
		t.Helper()
		m := &schemas.Mutation{Org: "acme", Project: project, Branch: "main", ClientGroup: "g", Client: "c",
			ID: 1, Name: name, Args: json.RawMessage(`{}`)}
		if name == "item.put" {
			m.Args = json.RawMessage(`{"collection":"notes","id":"x","data":1}`)
		}
		dec, err := d.Decide(model.MutationRecord{Mutation: m, Timestamp: time.UnixMilli(1)})
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	check := func(dec model.Decision, kind model.Kind, bundle string) {
		t.Helper()
		if dec.Kind != kind || dec.Version.Bundle != bundle {
			t.Errorf("decision %v bundle %q (%+v), want %v bundle %q", dec.Kind, dec.Version.Bundle, dec.Version.Mutations[0], kind, bundle)
		}
	}
	check(decide("a", "note.add"), model.Applied, org.Hash())  // the org's committed deploy
	check(decide("b", "item.put"), model.Applied, "")          // a built-in
	d.Activate(0, "acme", "c", proj)                           // a project deploy in the overlay
	check(decide("c", "note.add"), model.Applied, proj.Hash()) // overrides the org's
	check(decide("d", "no.such"), model.Errored, "")           // unknown: no bundle decided it
	d.Reset()
	check(decide("e", "note.add"), model.Applied, org.Hash())
	if set, _ := d.Deployed(0, "acme", "c"); set != nil {
		t.Errorf("after Reset the overlay's activation is still there")
	}

	d.SetBundles(failing{})
	m := &schemas.Mutation{Org: "acme", Project: "f", Branch: "main", ClientGroup: "g", Client: "c", ID: 1, Name: "note.add"}
	if _, err := d.Decide(model.MutationRecord{Mutation: m, Timestamp: time.UnixMilli(1)}); err == nil {
		t.Errorf("a failing Bundles gave no error")
	}
}

// BundleCache compiles a hash once and refuses a source of another hash.
func TestBundleCache(t *testing.T) {
	compiled := 0
	c := model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
		compiled++
		return goSet{hash: schemas.BundleHash(src)}, nil
	})
	src := []byte("export default {}")
	h := schemas.BundleHash(src)
	for range 3 {
		if _, err := c.Get(h, func() ([]byte, error) { return src, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if compiled != 1 {
		t.Errorf("compiled %d times, want once", compiled)
	}
	if _, err := c.Get(schemas.BundleHash([]byte("other")), func() ([]byte, error) { return src, nil }); err == nil {
		t.Errorf("a source of another hash was taken")
	}
}
