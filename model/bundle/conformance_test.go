package bundle_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// A conformance vector: testdata/conformance/README.md documents the
// format, which the TypeScript client's tests read too.
type vector struct {
	Description string       `json:"description"`
	Bundle      string       `json:"bundle"`
	Source      string       `json:"source"`
	State       vectorState  `json:"state"`
	Mutations   []vectorMut  `json:"mutations"`
	Expect      *vectorState `json:"expect"`
}

type vectorState struct {
	Scalars map[string]json.RawMessage `json:"scalars"`
	Items   []vectorItem               `json:"items"`
}

type vectorItem struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Data       json.RawMessage `json:"data"`
	Meta       json.RawMessage `json:"meta,omitempty"`
}

type vectorMut struct {
	Client string          `json:"client"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
	Now    *int64          `json:"now"`
	Expect vectorOutcome   `json:"expect"`
}

type vectorOutcome struct {
	Status  string `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Constants of the vectors' mutations (README.md).
const (
	vectorOrg     = "conformance"
	vectorProject = "vectors"
	vectorBranch  = "main"
	vectorNow     = 1767225600000 // 2026-01-01T00:00:00Z
	setupClient   = "conformance-setup"
)

// TestConformance runs every vector through model.Decider with the
// engine, committing the decisions after every mutation, after every
// second one and only at the end: outcomes, versions and the final state
// must be the same for every cut (a decision may not depend on where a
// batch ends), and match the vector.
func TestConformance(t *testing.T) {
	files, err := filepath.Glob("testdata/conformance/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var vs []vector
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&vs); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, v := range vs {
				t.Run(v.Description, func(t *testing.T) {
					src := []byte(v.Source)
					if v.Bundle != "" {
						if src, err = os.ReadFile(filepath.Join(filepath.Dir(f), v.Bundle)); err != nil {
							t.Fatal(err)
						}
					}
					b := compile(t, string(src), bundle.Options{})
					var first []string
					for _, cut := range []int{1, 2, 0} {
						got := runVector(t, b, v, cut)
						if first == nil {
							first = got
						} else if !slices.Equal(got, first) {
							t.Errorf("committing every %d mutations gives other versions than after each one:\n%s\n---\n%s", cut, strings.Join(got, "\n"), strings.Join(first, "\n"))
						}
					}
				})
			}
		})
	}
}

// runVector decides a vector's mutations, committing every cut decisions
// (0: at the end), checks outcomes and final state, and returns the
// versions' records.
func runVector(t *testing.T, b *bundle.Bundle, v vector, cut int) []string {
	t.Helper()
	reg := model.NewRegistry()
	for _, n := range b.Names() {
		m, _ := b.Mutator(n)
		if err := reg.Register(n, m); err != nil {
			t.Fatal(err)
		}
	}
	st := modeltest.NewMemState()
	d := model.NewDecider(st, reg, schemas.Limits{})
	var pending []model.Decision
	commit := func() {
		for _, x := range pending {
			if err := st.Apply(x.Version, x.Chunks); err != nil {
				t.Fatal(err)
			}
		}
		pending = pending[:0]
		d.Reset()
	}
	var offset int64
	ids := map[string]uint64{}
	decide := func(client, name string, args json.RawMessage, now int64) schemas.Outcome {
		ids[client]++
		offset++
		x, err := d.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
			Org: vectorOrg, Project: vectorProject, Branch: vectorBranch, ClientGroup: client + "-group",
			Client: client, ID: ids[client], Name: name, Args: args,
		}, Timestamp: time.UnixMilli(now).UTC(), Offset: offset})
		if err != nil {
			t.Fatalf("decide %s: %v", name, err)
		}
		if x.Version == nil {
			t.Fatalf("decide %s: %v %s", name, x.Kind, x.Message)
		}
		pending = append(pending, x)
		return x.Version.Mutations[len(x.Version.Mutations)-1]
	}

	// The starting state, by the built-ins.
	if len(v.State.Scalars) > 0 {
		args, _ := json.Marshal(v.State.Scalars)
		if o := decide(setupClient, model.ProjectSet, args, vectorNow); o.Status != "applied" {
			t.Fatalf("state: scalars: %s", o.Error)
		}
	}
	for _, it := range v.State.Items {
		args, _ := json.Marshal(it)
		if o := decide(setupClient, model.ItemPut, args, vectorNow); o.Status != "applied" {
			t.Fatalf("state: item %s/%s: %s", it.Collection, it.ID, o.Error)
		}
	}
	commit()

	for i, m := range v.Mutations {
		now := vectorNow + 1000*int64(i)
		if m.Now != nil {
			now = *m.Now
		}
		o := decide(m.Client, m.Name, m.Args, now)
		if o.Status != m.Expect.Status || o.Code != m.Expect.Code || !strings.HasPrefix(o.Error, m.Expect.Message) {
			t.Errorf("mutation %d %s %s: got %s %s %q, want %s %s %q...", i, m.Name, m.Args, o.Status, o.Code, o.Error, m.Expect.Status, m.Expect.Code, m.Expect.Message)
		}
		if cut > 0 && len(pending) >= cut {
			commit()
		}
	}
	commit()

	h, err := st.Head(vectorOrg, vectorProject, vectorBranch)
	if err != nil {
		t.Fatal(err)
	}
	if v.Expect != nil {
		checkState(t, st, h, *v.Expect)
	}
	var out []string
	for n := uint64(1); n <= h.Version; n++ {
		rec, ok := st.Version(vectorOrg, vectorProject, vectorBranch, n)
		if !ok {
			t.Fatalf("no version %d", n)
		}
		j, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(j))
	}
	return out
}

func checkState(t *testing.T, st *modeltest.MemState, h model.Head, want vectorState) {
	t.Helper()
	wantScalars := map[string]string{}
	for k, v := range want.Scalars {
		wantScalars[k] = canon(t, v)
	}
	gotScalars := map[string]string{}
	for k, v := range h.Scalars {
		gotScalars[k] = string(v)
	}
	if fmt.Sprint(gotScalars) != fmt.Sprint(wantScalars) {
		t.Errorf("scalars: got %v, want %v", gotScalars, wantScalars)
	}
	refs, _ := st.Items(vectorOrg, vectorProject, vectorBranch, h.Version)
	var got, exp []string
	for _, r := range refs {
		body, err := st.Body(vectorOrg, vectorProject, r.Hash)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s %s meta %s", r.Collection, r.ID, body, r.Meta))
	}
	for _, it := range want.Items {
		meta := "{}"
		if it.Meta != nil {
			meta = canon(t, it.Meta)
		}
		exp = append(exp, fmt.Sprintf("%s/%s %s meta %s", it.Collection, it.ID, canon(t, it.Data), meta))
	}
	slices.Sort(exp)
	slices.Sort(got)
	if !slices.Equal(got, exp) {
		t.Errorf("items:\ngot  %s\nwant %s", strings.Join(got, "\n     "), strings.Join(exp, "\n     "))
	}
}

func canon(t *testing.T, v json.RawMessage) string {
	t.Helper()
	c, err := model.Canonical(v)
	if err != nil {
		t.Fatalf("canonical %s: %v", v, err)
	}
	return string(c)
}
