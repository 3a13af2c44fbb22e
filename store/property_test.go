package store_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// gen makes random but plausible mutations: several clients of two
// projects, items in two collections, every built-in mutator, branches,
// and the occasional duplicate, gap, unknown mutator or bad args.
type gen struct {
	rng      *rand.Rand
	next     map[string]uint64 // next id per project/branch/client
	branches map[string][]string
}

func (g *gen) mutation(ts time.Time) *schemas.Mutation {
	projects := []string{"roadmap", "budget"}
	project := projects[g.rng.IntN(len(projects))]
	client := fmt.Sprintf("c%d", g.rng.IntN(5))
	branch := "main"
	if bs := g.branches[project]; len(bs) > 0 && g.rng.IntN(3) == 0 {
		branch = bs[g.rng.IntN(len(bs))]
	}
	key := project + "/" + branch + "/" + client
	if g.next[key] == 0 {
		g.next[key] = 1
	}
	id := g.next[key]
	switch r := g.rng.IntN(40); {
	case r == 0 && id > 1:
		id = uint64(1 + g.rng.IntN(int(id-1))) // duplicate
	case r == 1:
		id += 2 // gap
	default:
		g.next[key]++
	}
	coll := []string{"tasks", "docs"}[g.rng.IntN(2)]
	item := fmt.Sprintf("i%d", g.rng.IntN(6))
	var name, args string
	switch r := g.rng.IntN(100); {
	case r < 30:
		name = "item.put"
		size := g.rng.IntN(40)
		if g.rng.IntN(8) == 0 {
			size = 2000 + g.rng.IntN(6000) // bodies of several chunks
		}
		args = fmt.Sprintf(`{"collection":%q,"id":%q,"meta":{"title":"t%d"},"data":{"text":%q,"n":%d}}`,
			coll, item, g.rng.IntN(9), g.text(size), g.rng.IntN(100))
	case r < 50:
		name = "item.patch"
		args = fmt.Sprintf(`{"collection":%q,"id":%q,"data":{"n":%d,"f%d":true}}`, coll, item, g.rng.IntN(100), g.rng.IntN(4))
	case r < 62:
		name = "item.splice"
		args = fmt.Sprintf(`{"collection":%q,"id":%q,"path":"/text","index":%d,"delete":%d,"insert":%q}`,
			coll, item, g.rng.IntN(8), g.rng.IntN(3), g.text(g.rng.IntN(5)))
	case r < 72:
		name = "item.delete"
		args = fmt.Sprintf(`{"collection":%q,"id":%q}`, coll, item)
	case r < 84:
		name = "project.set"
		args = fmt.Sprintf(`{"name":"p%d","s%d":%d}`, g.rng.IntN(50), g.rng.IntN(3), g.rng.IntN(10))
	case r < 88 && branch == "main":
		nb := fmt.Sprintf("b%d", len(g.branches[project])+1)
		g.branches[project] = append(g.branches[project], nb)
		// branch.create is decided on the new branch, by a client of it.
		branch, key = nb, project+"/"+nb+"/"+client
		g.next[key] = 2
		id = 1
		name = "branch.create"
		args = fmt.Sprintf(`{"from":"main","version":%d}`, g.rng.IntN(3)) // 0: head; may exceed the head: error
	case r < 90:
		name = "no.such.mutator"
		args = `{}`
	default:
		name = "item.put"
		args = fmt.Sprintf(`{"collection":%q,"id":%q}`, coll, item) // bad args: no data
	}
	// Client groups: mostly the client's own, sometimes one shared by
	// clients of different principals (bound to the first; the others'
	// mutations are rejected as unauthorized, as are those of a client in
	// a group other than its first); some records carry no principal, as
	// if written by a trusted tool.
	group := "g" + client
	if g.rng.IntN(20) == 0 {
		group = "shared"
	}
	principal := map[string]string{"c0": "alice", "c1": "alice", "c2": "bob", "c3": "bob"}[client]
	return &schemas.Mutation{Org: "acme", Project: project, Branch: branch, ClientGroup: group, Client: client,
		ID: id, Name: name, Args: json.RawMessage(args), TS: ts.UnixMilli(), Principal: principal}
}

func (g *gen) text(n int) string {
	const letters = "abcdefghij klmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[g.rng.IntN(len(letters))]
	}
	return string(b)
}

// TestStoreMatchesNaiveModel decides random mutation sequences with the
// Decider over the Pebble store (plus its overlay, reset at random batch
// boundaries) and applies the decisions to the store, then checks that
// (1) a second Decider over the naive in-memory model, reset after every
// mutation, makes byte-identical decisions, and (2) the store answers
// every query like the naive model replayed from scratch, at every version
// as it is made and at random past versions afterwards.
func TestStoreMatchesNaiveModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { checkAgainstModel(t, seed, 500) })
	}
}

func checkAgainstModel(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	const partitions = 4
	st, err := store.Open(store.Config{Dir: t.TempDir(), Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mem := modeltest.NewMemState()
	limits := schemas.DefaultLimits()
	reg := model.NewRegistry()
	overStore := model.NewDecider(st, reg, limits)
	overMem := model.NewDecider(mem, reg, limits)
	g := &gen{rng: rng, next: map[string]uint64{}, branches: map[string][]string{}}

	ts := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	offset := int64(0)
	var pending []store.Record
	pendingPart := int32(-1)
	kinds := map[model.Kind]int{}
	unauthorized := 0

	flush := func() {
		t.Helper()
		if pendingPart >= 0 {
			if err := st.Apply(pendingPart, pending, offset); err != nil {
				t.Fatalf("apply: %v", err)
			}
		}
		pending, pendingPart = nil, -1
		overStore.Reset()
	}
	for i := range n {
		ts = ts.Add(time.Duration(1+rng.IntN(2000)) * time.Millisecond)
		m := g.mutation(ts)
		part := schemas.Partition(schemas.ProjectKey(m.Org, m.Project), partitions)
		if pendingPart >= 0 && part != pendingPart {
			flush() // one Apply per partition, as the sequencer does
		}
		rec := model.MutationRecord{Mutation: m, Timestamp: ts, Partition: part, Offset: int64(i)}
		got, err := overStore.Decide(rec)
		if err != nil {
			t.Fatalf("decide over the store: %v", err)
		}
		want, err := overMem.Decide(rec)
		if err != nil {
			t.Fatalf("decide over the model: %v", err)
		}
		overMem.Reset()
		if !sameDecision(got, want) {
			t.Fatalf("mutation %d (%s %s/%s id %d): decision over the store %s differs from the model's %s",
				i, m.Name, m.Branch, m.Client, m.ID, describe(got), describe(want))
		}
		kinds[got.Kind]++
		if got.Reason == schemas.ReasonUnauthorized {
			unauthorized++
		}
		if got.Version != nil {
			if err := mem.Apply(want.Version, want.Chunks); err != nil {
				t.Fatalf("model apply: %v", err)
			}
			for j := range got.Chunks {
				pending = append(pending, store.Record{Chunk: &got.Chunks[j]})
				offset++
			}
			pending = append(pending, store.Record{Version: got.Version})
			offset++
			pendingPart = part
		}
		if rng.IntN(6) == 0 {
			flush()
			compareHeads(t, st, mem)
		}
	}
	flush()
	compareHeads(t, st, mem)
	for _, k := range []model.Kind{model.Applied, model.Errored, model.Duplicate, model.Gap} {
		if kinds[k] == 0 {
			t.Errorf("the generator made no %s decision: %v", k, kinds)
		}
	}
	if unauthorized == 0 {
		t.Errorf("the generator made no unauthorized rejection")
	}
	// The client-group index: owners and clients as the model has them.
	for _, project := range []string{"roadmap", "budget"} {
		for _, group := range []string{"shared", "gc0", "gc1", "gc2", "gc3", "gc4"} {
			got, gotOK, err := st.GroupPrincipal("acme", project, group)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK, _ := mem.GroupPrincipal("acme", project, group)
			if got != want || gotOK != wantOK {
				t.Errorf("owner of group %s of %s: store %q %v, model %q %v", group, project, got, gotOK, want, wantOK)
			}
		}
	}
	// The clients' groups, as the model has them.
	for _, project := range []string{"roadmap", "budget"} {
		for _, client := range []string{"c0", "c1", "c2", "c3", "c4"} {
			got, gotOK, err := st.ClientGroup("acme", project, client)
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK, _ := mem.ClientGroup("acme", project, client)
			if got != want || gotOK != wantOK {
				t.Errorf("group of client %s of %s: store %q %v, model %q %v", client, project, got, gotOK, want, wantOK)
			}
		}
	}
	// Every version of every branch, after the fact.
	for _, project := range []string{"roadmap", "budget"} {
		for _, branch := range append([]string{"main"}, g.branches[project]...) {
			h, _ := mem.Head("acme", project, branch)
			for v := uint64(1); v <= h.Version; v++ {
				compareAt(t, st, mem, project, branch, v)
			}
		}
	}
	t.Logf("decisions: %v", kinds)
}

func sameDecision(a, b model.Decision) bool {
	if a.Kind != b.Kind || a.ExpectedID != b.ExpectedID || a.LastID != b.LastID || len(a.Chunks) != len(b.Chunks) {
		return false
	}
	for i := range a.Chunks {
		if a.Chunks[i].Hash != b.Chunks[i].Hash {
			return false
		}
	}
	if (a.Version == nil) != (b.Version == nil) {
		return false
	}
	if a.Version == nil {
		return true
	}
	ja, _ := json.Marshal(a.Version)
	jb, _ := json.Marshal(b.Version)
	return bytes.Equal(ja, jb)
}

func describe(d model.Decision) string {
	s := d.Kind.String()
	if d.Version != nil {
		j, _ := json.Marshal(d.Version)
		s += " " + string(j)
	}
	return s
}

func compareHeads(t *testing.T, st *store.Store, mem *modeltest.MemState) {
	t.Helper()
	for _, project := range []string{"roadmap", "budget"} {
		for _, branch := range mem.Branches("acme", project) {
			want, _ := mem.Head("acme", project, branch)
			got, err := st.Head("acme", project, branch)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != want.Version || got.State != want.State {
				t.Fatalf("%s@%s head: store v%d, model v%d", project, branch, got.Version, want.Version)
			}
			compareAt(t, st, mem, project, branch, want.Version)
		}
	}
}

// compareAt checks the store's answers for one version against the model.
func compareAt(t *testing.T, st *store.Store, mem *modeltest.MemState, project, branch string, v uint64) {
	t.Helper()
	where := fmt.Sprintf("%s@%s v%d", project, branch, v)
	wantItems, ok := mem.Items("acme", project, branch, v)
	if !ok {
		t.Fatalf("%s: not in the model", where)
	}
	state, err := st.StateAt("acme", project, branch, v, true)
	if err != nil {
		t.Fatalf("%s: StateAt: %v", where, err)
	}
	var gotItems []model.ItemRef
	for _, c := range slices.Sorted(maps.Keys(state.Collections)) {
		gotItems = append(gotItems, state.Collections[c]...)
	}
	if len(gotItems) != len(wantItems) {
		t.Fatalf("%s: store has %d items, model %d", where, len(gotItems), len(wantItems))
	}
	for i := range wantItems {
		w, g := wantItems[i], gotItems[i]
		if w.Collection != g.Collection || w.ID != g.ID || w.Hash != g.Hash || w.Size != g.Size ||
			!bytes.Equal(w.Meta, g.Meta) || !slices.Equal(w.Chunks, g.Chunks) {
			t.Fatalf("%s: item %d: store %+v, model %+v", where, i, g, w)
		}
		body, err := mem.Body("acme", project, w.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(state.Bodies[w.Hash], body) {
			t.Fatalf("%s: body of %s/%s differs", where, w.Collection, w.ID)
		}
		ref, gotBody, ok, err := st.Item("acme", project, branch, w.Collection, w.ID, v)
		if err != nil || !ok || ref.Hash != w.Hash || !bytes.Equal(gotBody, body) {
			t.Fatalf("%s: Item %s/%s: ok=%v err=%v", where, w.Collection, w.ID, ok, err)
		}
	}
	// A deleted or never written item is absent.
	if _, _, ok, err := st.Item("acme", project, branch, "tasks", "never", v); ok || err != nil {
		t.Fatalf("%s: an item never written: ok=%v err=%v", where, ok, err)
	}
	wantV, _ := mem.Version("acme", project, branch, v)
	if state.StateHash != wantV.StateHash || !sameJSONMap(state.Scalars, wantV.Scalars) {
		t.Fatalf("%s: state hash or scalars differ", where)
	}
	vs, err := st.Versions("acme", project, branch, v, 1)
	if err != nil || len(vs) != 1 {
		t.Fatalf("%s: Versions: %v %d", where, err, len(vs))
	}
	gj, _ := json.Marshal(vs[0])
	wj, _ := json.Marshal(wantV)
	if !bytes.Equal(gj, wj) {
		t.Fatalf("%s: version record differs:\nstore %s\nmodel %s", where, gj, wj)
	}
	for _, o := range wantV.Mutations {
		ms, ok, err := st.Mutation("acme", project, branch, o.Client, o.ID)
		if err != nil || !ok || ms.Version != v || ms.Status != o.Status || ms.Error != o.Error {
			t.Fatalf("%s: mutation %s/%d: %+v ok=%v err=%v", where, o.Client, o.ID, ms, ok, err)
		}
		last, err := st.LastID("acme", project, branch, o.Client)
		wantLast, _ := mem.LastID("acme", project, branch, o.Client)
		if err != nil || last != wantLast {
			t.Fatalf("%s: last id of %s: store %d, model %d", where, o.Client, last, wantLast)
		}
	}
}

func sameJSONMap(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
