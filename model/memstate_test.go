package model_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// MemState refuses versions a store must never be given, and changes
// nothing when it does.
func TestMemStateApplyRefuses(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	first := e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":{"title":"x"}}`)
	d := e.decide("a", model.ItemPut, `{"collection":"tasks","id":"t2","data":{"title":"y"}}`)
	e.dec.Reset()
	for _, tc := range []struct {
		name string
		edit func(v *schemas.Version, chunks *[]schemas.Chunk)
		err  string
	}{
		{"replayed version", func(v *schemas.Version, _ *[]schemas.Chunk) { *v = *modeltest.CloneVersion(first.Version) }, "does not follow the head 1"},
		{"skipped version", func(v *schemas.Version, _ *[]schemas.Chunk) { v.Version, v.Parent = 3, 2 }, "does not follow"},
		{"missing chunk", func(_ *schemas.Version, c *[]schemas.Chunk) { *c = nil }, "is neither stored nor given"},
		{"bad chunk", func(_ *schemas.Version, c *[]schemas.Chunk) { (*c)[0].Data = []byte(`{}`) }, "hashes to"},
		{"chunk of another project", func(_ *schemas.Version, c *[]schemas.Chunk) { (*c)[0].Project = "other" }, "belongs to"},
		{"bad size", func(v *schemas.Version, _ *[]schemas.Chunk) { v.Items[0].Size++ }, "not 14 bytes"},
		{"bad state hash", func(v *schemas.Version, _ *[]schemas.Chunk) { v.StateHash = strings.Repeat("0", 64) }, "state hashes to"},
		{"unsorted items", func(v *schemas.Version, _ *[]schemas.Chunk) {
			v.Items = append(v.Items, schemas.ItemChange{Collection: "tasks", ID: "t1", Op: schemas.OpDelete})
		}, "not sorted"},
		{"delete of a missing item", func(v *schemas.Version, _ *[]schemas.Chunk) {
			v.Items = append(v.Items, schemas.ItemChange{Collection: "tasks", ID: "t9", Op: schemas.OpDelete})
		}, "does not exist"},
		{"meta not canonical", func(v *schemas.Version, _ *[]schemas.Chunk) { v.Items[0].Meta = json.RawMessage(`{ }`) }, "canonical"},
		{"skipped mutation id", func(v *schemas.Version, _ *[]schemas.Chunk) { v.Mutations[0].ID = 3; v.LastIDs["a"] = 3 }, "expected id 2"},
		{"last ids", func(v *schemas.Version, _ *[]schemas.Chunk) { v.LastIDs["b"] = 1 }, "lastIds"},
		{"base on version 2", func(v *schemas.Version, _ *[]schemas.Chunk) {
			v.Base = &schemas.BranchRef{Branch: "x", Version: 1}
		}, "first version"},
		{"scalar not canonical", func(v *schemas.Version, _ *[]schemas.Chunk) {
			v.Scalars = map[string]json.RawMessage{"a": json.RawMessage(`1.0`)}
		}, "not canonical"},
	} {
		v := modeltest.CloneVersion(d.Version)
		chunks := append([]schemas.Chunk(nil), d.Chunks...)
		tc.edit(v, &chunks)
		err := e.state.Apply(v, chunks)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: Apply = %v, want an error with %q", tc.name, err, tc.err)
		}
		if h, _ := e.state.Head(testOrg, testProject, "main"); h.Version != 1 {
			t.Fatalf("%s: a refused version changed the head to %d", tc.name, h.Version)
		}
	}
	// The untouched decision applies.
	if err := e.state.Apply(d.Version, d.Chunks); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := e.state.Outcome(testOrg, testProject, "main", "a", 2); !ok {
		t.Errorf("the outcome of a/2 is not found")
	}
}

// A branch with a base starts as the base's state at that version, and
// keeps it when the base moves on.
func TestMemStateBase(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","meta":{"m":1},"data":"one"}`)
	e.run("a", model.ProjectSet, `{"name":"P"}`)
	create := e.decideOn("dev", "a", model.BranchCreate, `{"from":"main","version":1}`)
	e.commit(create)
	e.run("a", model.ItemDelete, `{"collection":"tasks","id":"t1"}`)

	refs, ok := e.state.Items(testOrg, testProject, "dev", 1)
	if !ok || len(refs) != 1 || refs[0].ID != "t1" || refs[0].Version != 1 || string(refs[0].Meta) != `{"m":1}` {
		t.Fatalf("dev@1 items %+v", refs)
	}
	h, _ := e.state.Head(testOrg, testProject, "dev")
	if h.Version != 1 || len(h.Scalars) != 0 {
		t.Errorf("dev head %+v: the scalars of main@1 are none", h)
	}
	main1, _ := e.state.Version(testOrg, testProject, "main", 1)
	if create.Version.StateHash != main1.StateHash {
		t.Errorf("dev@1 has state hash %s, main@1 %s", create.Version.StateHash, main1.StateHash)
	}
	if id, _ := e.state.LastID(testOrg, testProject, "dev", "a"); id != 1 {
		t.Errorf("dev's last id of a is %d, want 1 (ids are per branch)", id)
	}
	if got := e.state.Branches(testOrg, testProject); strings.Join(got, ",") != "dev,main" {
		t.Errorf("branches %v", got)
	}
	if _, ok, _ := e.state.ItemRef(testOrg, testProject, "main", "tasks", "t1"); ok {
		t.Errorf("t1 is still on main")
	}
	if _, ok, _ := e.state.ItemRefAt(testOrg, testProject, "main", "tasks", "t1", 2); !ok {
		t.Errorf("t1 is not on main@2")
	}
}
