package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// history builds a project with two branches that exercises puts,
// overwrites sharing chunks, deletions, re-puts, several collections,
// scalars, errored mutations and a branch made from an old version.
func history(pm *projectModel) [][]Record {
	var batches [][]Record
	add := func(r []Record) { batches = append(batches, r) }
	long := strings.Repeat("0123456789abcdef", 5) // 5 chunks
	add(pm.next("main").scalar("name", `"Doc"`).
		put("notes", "a", `{"t":"A"}`, `{"text":"`+long+`"}`).
		put("notes", "b", "", `{"text":"b"}`).
		put("tags", "x", `{"color":"red"}`, `{}`).
		mutation("c1", 1, schemas.StatusApplied, "").commit())
	add(pm.next("main").
		put("notes", "a", `{"t":"A2"}`, `{"text":"`+long+`!"}`). // shares 4 chunks
		del("notes", "b").
		mutation("c1", 2, schemas.StatusApplied, "").
		mutation("c2", 1, schemas.StatusError, "no such note").code("note_not_found").commit())
	add(pm.next("main").scalar("name", `"Doc 2"`).
		put("notes", "b", `{"t":"again"}`, `{"text":"b2"}`). // re-put
		mutation("c2", 2, schemas.StatusApplied, "").commit())
	// notes/m appears at 4: before that, its only MVCC entry is newer
	// than the version asked for, and the next item's entry is a put.
	add(pm.next("main").
		del("tags", "x").
		put("tags", "y", "", `[]`).
		put("notes", "m", "", `"m"`).
		mutation("c1", 3, schemas.StatusApplied, "").commit())
	// feature starts at main@2: a (A2), no b, tags/x.
	add(pm.fork("feature", "main", 2).
		put("notes", "c", "", `{"text":"c"}`).
		del("tags", "x").
		mutation("c3", 1, schemas.StatusApplied, "").commit())
	add(pm.next("feature").
		put("notes", "a", `{"t":"F"}`, `{"text":"f"}`).
		mutation("c3", 2, schemas.StatusApplied, "").commit())
	// hot starts at feature's head: the copy reads the latest index.
	add(pm.fork("hot", "feature", 2).
		put("tags", "h", "", `"hot"`).commit())
	add(pm.next("main").
		put("notes", "z", "", `"after the fork"`).
		mutation("c1", 4, schemas.StatusApplied, "").commit())
	return batches
}

func applyAll(t testing.TB, s *Store, p int32, batches [][]Record) {
	t.Helper()
	for i, b := range batches {
		mustApply(t, s, p, b, int64(100+10*i))
	}
}

func TestQueries(t *testing.T) {
	s := newStore(t)
	name := projectIn(1, testPartitions, 0)
	p := s.PartitionOf(testOrg, name)
	pm := newProject(testOrg, name)
	batches := history(pm)
	applyAll(t, s, p, batches)

	for branch, bm := range pm.branches {
		for v := uint64(1); v <= bm.head(); v++ {
			got, err := s.StateAt(testOrg, name, branch, v, true)
			if err != nil {
				t.Fatal(err)
			}
			if want := pm.expected(branch, v, true); !reflect.DeepEqual(got, want) {
				t.Errorf("StateAt(%s, %d):\n got %+v\nwant %+v", branch, v, got, want)
			}
			// The state hash recomputed from what StateAt returns is the
			// stored one: the latest index and the MVCC entries agree
			// with the sums.
			if h := recomputeHash(t, got); h != got.StateHash {
				t.Errorf("%s@%d: items hash to %s, stored %s", branch, v, h, got.StateHash)
			}
			want := pm.at(branch, v)
			for _, coll := range []string{"notes", "tags", "none"} {
				refs, err := s.Items(testOrg, name, branch, coll, v)
				if err != nil {
					t.Fatal(err)
				}
				if w := pm.expected(branch, v, false).Collections[coll]; !reflect.DeepEqual(refs, w) {
					t.Errorf("Items(%s, %s, %d) = %+v, want %+v", branch, coll, v, refs, w)
				}
			}
			for _, k := range []cid{{"notes", "a"}, {"notes", "b"}, {"notes", "c"}, {"notes", "m"}, {"notes", "z"}, {"tags", "x"}, {"tags", "y"}, {"tags", "a"}} {
				ref, body, ok, err := s.Item(testOrg, name, branch, k.collection, k.id, v)
				if err != nil {
					t.Fatal(err)
				}
				w, wok := want.items[k]
				if ok != wok || !reflect.DeepEqual(ref, w) || (ok && string(body) != string(pm.bodies[w.Hash])) {
					t.Errorf("Item(%s, %v, %d) = %+v %q %v, want %+v %v", branch, k, v, ref, body, ok, w, wok)
				}
				ref, ok, err = s.ItemRefAt(testOrg, name, branch, k.collection, k.id, v)
				if err != nil || ok != wok || !reflect.DeepEqual(ref, w) {
					t.Errorf("ItemRefAt(%s, %v, %d) = %+v %v %v, want %+v %v", branch, k, v, ref, ok, err, w, wok)
				}
			}
			h, ok, err := s.HeadAt(testOrg, name, branch, v)
			if err != nil || !ok || h.Version != v || h.State != want.sum || !reflect.DeepEqual(h.Scalars, want.scalars) {
				t.Errorf("HeadAt(%s, %d) = %+v %v %v", branch, v, h, ok, err)
			}
		}

		head := bm.head()
		latest, err := s.Latest(testOrg, name, branch)
		if err != nil {
			t.Fatal(err)
		}
		if want := pm.expected(branch, head, false); !reflect.DeepEqual(latest, want) {
			t.Errorf("Latest(%s) = %+v, want %+v", branch, latest, want)
		}
		for _, at := range []uint64{0, head} {
			ref, _, ok, err := s.Item(testOrg, name, branch, "notes", "a", at)
			if w := pm.at(branch, head).items[cid{"notes", "a"}]; err != nil || !ok || !reflect.DeepEqual(ref, w) {
				t.Errorf("Item(%s, notes/a, %d) = %+v %v %v", branch, at, ref, ok, err)
			}
		}
		h, err := s.Head(testOrg, name, branch)
		if want := pm.at(branch, head); err != nil || h.Version != head || h.State != want.sum || !reflect.DeepEqual(h.Scalars, want.scalars) {
			t.Errorf("Head(%s) = %+v %v", branch, h, err)
		}
		for k, w := range pm.at(branch, head).items {
			ref, ok, err := s.ItemRef(testOrg, name, branch, k.collection, k.id)
			if err != nil || !ok || !reflect.DeepEqual(ref, w) {
				t.Errorf("ItemRef(%s, %v) = %+v %v %v", branch, k, ref, ok, err)
			}
		}
	}

	t.Run("fork", func(t *testing.T) {
		// The fork copied main@2 at version 1 of feature and did not
		// follow main afterwards.
		ref, _, ok, _ := s.Item(testOrg, name, "feature", "notes", "a", 1)
		if !ok || ref.Version != 1 || string(ref.Meta) != `{"t":"A2"}` {
			t.Errorf("feature notes/a at 1 = %+v %v", ref, ok)
		}
		if _, _, ok, _ := s.Item(testOrg, name, "feature", "notes", "z", 0); ok {
			t.Error("feature sees an item main wrote after the fork")
		}
		if _, _, ok, _ := s.Item(testOrg, name, "main", "notes", "c", 0); ok {
			t.Error("main sees an item of feature")
		}
	})

	t.Run("missing", func(t *testing.T) {
		for _, err := range []error{
			second(s.Latest(testOrg, name, "nope")),
			second(s.StateAt(testOrg, name, "main", 99, false)),
			second(s.Items(testOrg, name, "main", "notes", 99)),
			fourth(s.Item(testOrg, name, "main", "notes", "a", 99)),
			fourth(s.Item(testOrg, "nope", "main", "notes", "a", 0)),
			second(s.Blob(testOrg, name, sha([]byte("never stored")))),
			second(s.Body(testOrg, "nope", sha([]byte(`{"text":"b"}`)))),
		} {
			if !errors.Is(err, ErrNotFound) || !errors.Is(err, model.ErrNotFound) {
				t.Errorf("err = %v, want ErrNotFound", err)
			}
		}
		if h, err := s.Head(testOrg, name, "nope"); err != nil || h.Version != 0 {
			t.Errorf("Head of a missing branch = %+v %v", h, err)
		}
		for _, v := range []uint64{0, 6} {
			if _, ok, err := s.HeadAt(testOrg, name, "main", v); ok || err != nil {
				t.Errorf("HeadAt(main, %d) = %v %v, want not ok", v, ok, err)
			}
		}
		if _, ok, err := s.ItemRefAt(testOrg, name, "main", "notes", "a", 0); ok || err != nil {
			t.Errorf("ItemRefAt version 0 = %v %v, want not ok", ok, err)
		}
		if _, _, err := s.ItemRefAt(testOrg, name, "main", "notes", "a", 6); !errors.Is(err, ErrNotFound) {
			t.Errorf("ItemRefAt beyond the head: %v", err)
		}
		if _, ok, err := s.ItemRef(testOrg, name, "main", "notes", "gone"); ok || err != nil {
			t.Errorf("ItemRef of a missing item = %v %v", ok, err)
		}
		if _, err := s.Blob(testOrg, name, "ABC"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Blob of a malformed hash: %v", err)
		}
	})

	t.Run("versions", func(t *testing.T) {
		main := pm.branches["main"].versions
		all, err := s.Versions(testOrg, name, "main", 0, 0)
		if err != nil || len(all) != len(main) {
			t.Fatalf("Versions = %d, %v; want %d", len(all), err, len(main))
		}
		for i, v := range all {
			if !reflect.DeepEqual(v, *main[i]) {
				t.Errorf("version %d:\n got %+v\nwant %+v", i+1, v, *main[i])
			}
		}
		page, err := s.Versions(testOrg, name, "main", 2, 2)
		if err != nil || len(page) != 2 || page[0].Version != 2 || page[1].Version != 3 {
			t.Errorf("Versions(from 2, limit 2) = %+v %v", page, err)
		}
		if len(page[0].Mutations) != 2 || page[0].Mutations[1].Error != "no such note" {
			t.Errorf("version 2 mutations = %+v", page[0].Mutations)
		}
		if end, err := s.Versions(testOrg, name, "main", 6, 10); err != nil || len(end) != 0 {
			t.Errorf("Versions past the head = %+v %v", end, err)
		}
		fv, _ := s.Versions(testOrg, name, "feature", 1, 1)
		if len(fv) != 1 || fv[0].Base == nil || *fv[0].Base != (schemas.BranchRef{Branch: "main", Version: 2}) {
			t.Errorf("feature version 1 = %+v", fv)
		}
	})

	t.Run("mutations", func(t *testing.T) {
		for _, tc := range []struct {
			branch, client string
			id             uint64
			want           MutationStatus
			ok             bool
		}{
			{"main", "c1", 1, MutationStatus{Version: 1, Status: "applied"}, true},
			{"main", "c2", 1, MutationStatus{Version: 2, Status: "error", Error: "no such note", Code: "note_not_found"}, true},
			{"main", "c1", 4, MutationStatus{Version: 5, Status: "applied"}, true},
			{"main", "c1", 5, MutationStatus{}, false},
			{"main", "c3", 1, MutationStatus{}, false},
			{"feature", "c3", 2, MutationStatus{Version: 2, Status: "applied"}, true},
		} {
			got, ok, err := s.Mutation(testOrg, name, tc.branch, tc.client, tc.id)
			if err != nil || ok != tc.ok || got != tc.want {
				t.Errorf("Mutation(%s, %s, %d) = %+v %v %v, want %+v %v", tc.branch, tc.client, tc.id, got, ok, err, tc.want, tc.ok)
			}
		}
		for _, tc := range []struct {
			branch, client string
			want           uint64
		}{{"main", "c1", 4}, {"main", "c2", 2}, {"main", "c3", 0}, {"feature", "c3", 2}, {"feature", "c1", 0}} {
			if got, err := s.LastID(testOrg, name, tc.branch, tc.client); err != nil || got != tc.want {
				t.Errorf("LastID(%s, %s) = %d %v, want %d", tc.branch, tc.client, got, err, tc.want)
			}
		}
	})

	t.Run("blobs", func(t *testing.T) {
		for h, body := range pm.bodies {
			got, err := s.Blob(testOrg, name, h)
			if err != nil || string(got) != string(body) {
				t.Errorf("Blob(%s) = %q %v, want %q", h, got, err, body)
			}
		}
		a := pm.at("main", 1).items[cid{"notes", "a"}]
		chunk := pm.bodies[a.Hash][:pm.chunkSize]
		if got, err := s.Blob(testOrg, name, a.Chunks[0]); err != nil || string(got) != string(chunk) {
			t.Errorf("Blob of a chunk = %q %v", got, err)
		}
		if ok, err := s.HasChunk(testOrg, name, sha(chunk)); !ok || err != nil {
			t.Errorf("HasChunk = %v %v", ok, err)
		}
		// Namespaces are per project: the same chunk is not another's.
		if ok, err := s.HasChunk(testOrg, name+"x", sha(chunk)); ok || err != nil {
			t.Errorf("HasChunk in another project = %v %v", ok, err)
		}
	})

	t.Run("listing", func(t *testing.T) {
		br, err := s.Branches(testOrg, name)
		if want := []Branch{{"feature", 2}, {"hot", 1}, {"main", 5}}; err != nil || !reflect.DeepEqual(br, want) {
			t.Errorf("Branches = %+v %v, want %+v", br, err, want)
		}
		other := newProject(testOrg, projectIn(1, testPartitions, 1))
		mustApply(t, s, p, other.next("main").put("c", "i", "", "1").commit(), 1000)
		pr, err := s.Projects(p)
		if want := sortedProjects(name, other.project); err != nil || !reflect.DeepEqual(pr, want) {
			t.Errorf("Projects = %+v %v, want %+v", pr, err, want)
		}
		if pr, err := s.Projects(p + 1); err != nil || len(pr) != 0 {
			t.Errorf("Projects of an empty partition = %+v %v", pr, err)
		}
		if o, ok, err := s.Offset(p); err != nil || !ok || o != 1000 {
			t.Errorf("Offset = %d %v %v", o, ok, err)
		}
		if _, ok, err := s.Offset(p + 1); ok || err != nil {
			t.Errorf("Offset of an empty partition = %v %v", ok, err)
		}
		if _, _, err := s.Offset(testPartitions); !errors.Is(err, ErrInvalid) {
			t.Errorf("Offset of partition %d: %v", testPartitions, err)
		}
	})
}

func sortedProjects(names ...string) []Project {
	var out []Project
	for _, n := range names {
		out = append(out, Project{Org: testOrg, Project: n})
	}
	if len(out) == 2 && out[0].Project > out[1].Project {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

func recomputeHash(t *testing.T, st State) string {
	t.Helper()
	var sum schemas.StateHasher
	for _, refs := range st.Collections {
		for _, r := range refs {
			sum.Add(schemas.ItemDigest(r.Collection, r.ID, r.Meta, r.Hash))
		}
	}
	h, err := sum.StateHash(st.Scalars)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func second[T any](_ T, err error) error { return err }

func fourth[A, B, C any](_ A, _ B, _ C, err error) error { return err }

func TestApplyIsIdempotent(t *testing.T) {
	name := projectIn(2, testPartitions, 0)
	pm := newProject(testOrg, name)
	batches := history(pm)
	var all []Record
	for _, b := range batches {
		all = append(all, b...)
	}
	p := schemas.Partition(schemas.ProjectKey(testOrg, name), testPartitions)

	s := newStore(t)
	applyAll(t, s, p, batches)
	last := int64(100 + 10*(len(batches)-1))
	before := scanPartition(t, s, p)

	// The same batches again, everything at once, a stale replay with an
	// older offset: nothing changes, not even the offset.
	applyAll(t, s, p, batches)
	mustApply(t, s, p, all, last)
	mustApply(t, s, p, batches[0], 5)
	if d := diffScans(before, scanPartition(t, s, p)); d != "" {
		t.Fatalf("re-applying changed the partition: %s", d)
	}

	// A store built in one Apply holds the same bytes, even when the
	// records come twice in it.
	one := newStore(t)
	mustApply(t, one, p, all, last)
	if d := diffScans(before, scanPartition(t, one, p)); d != "" {
		t.Fatalf("one batch and many differ: %s", d)
	}
	twice := newStore(t)
	mustApply(t, twice, p, append(slices.Clone(all), all...), last)
	if d := diffScans(before, scanPartition(t, twice, p)); d != "" {
		t.Fatalf("one batch with every record twice differs: %s", d)
	}
	// A version applied earlier in the same call is checked like a stored
	// one.
	other := *batches[1][len(batches[1])-1].Version
	other.StateHash = sha([]byte("another state"))
	conflict := append(slices.Concat(batches[0], batches[1], batches[2]), Record{Version: &other})
	if err := newStore(t).Apply(p, conflict, last); !errors.Is(err, ErrConflict) {
		t.Fatalf("a conflicting duplicate in the same call: %v", err)
	}

	// Replaying from the middle (the sequencer restores from its offset
	// after a crash that lost nothing) skips what is there and applies
	// the rest.
	mid := newStore(t)
	applyAll(t, mid, p, batches[:4])
	mustApply(t, mid, p, all, last)
	if d := diffScans(before, scanPartition(t, mid, p)); d != "" {
		t.Fatalf("overlapping replay differs: %s", d)
	}
}

func TestApplyErrors(t *testing.T) {
	name := projectIn(0, testPartitions, 0)
	p := schemas.Partition(schemas.ProjectKey(testOrg, name), testPartitions)
	pm := newProject(testOrg, name)
	v1 := pm.next("main").scalar("n", "1").put("c", "a", "", "aaaa").commit()
	v2 := pm.next("main").put("c", "b", "", "bbbb").commit()

	// Another changelog with a different version 2.
	alt := newProject(testOrg, name)
	alt.next("main").scalar("n", "1").put("c", "a", "", "aaaa").commit()
	alt2 := alt.next("main").put("c", "b", "", "BBBB").commit()

	other := projectIn(3, testPartitions, 0)

	s := newStore(t)
	mustApply(t, s, p, v1, 10)
	mustApply(t, s, p, v2, 20)

	tampered := func(recs []Record, f func(v *schemas.Version)) []Record {
		out := make([]Record, len(recs))
		copy(out, recs)
		v := *out[len(out)-1].Version
		v.Items = append([]schemas.ItemChange(nil), v.Items...)
		f(&v)
		out[len(out)-1] = Record{Version: &v}
		return out
	}
	v3 := pm.next("main").put("c", "c", "", "cccc").commit()
	v4 := pm.next("main").put("c", "d", "", "dddd").commit()
	chunkOnly := []Record{{Chunk: &schemas.Chunk{Org: testOrg, Project: name, Hash: sha([]byte("x")), Data: []byte("y")}}}

	for _, tc := range []struct {
		name string
		p    int32
		recs []Record
		want error
		msg  string
	}{
		{"conflict", p, alt2, ErrConflict, "two different payloads for version 2"},
		{"gap", p, v4, ErrGap, "expected version 3 (parent 2, the branch head), got version 4"},
		{"state hash", p, tampered(v3, func(v *schemas.Version) { v.Scalars = map[string]json.RawMessage{"n": json.RawMessage("2")} }), ErrStateHash, ""},
		{"wrong partition", p + 1, v3, ErrWrongPartition, "partition"},
		{"chunk of another partition", p, []Record{{Chunk: &schemas.Chunk{Org: testOrg, Project: other, Hash: sha([]byte("x")), Data: []byte("x")}}}, ErrWrongPartition, ""},
		{"chunk hash", p, chunkOnly, ErrInvalid, "does not hash"},
		{"missing chunk", p, v3[len(v3)-1:], ErrInvalid, "neither stored nor in the records"},
		{"delete of a missing item", p, tampered(v3, func(v *schemas.Version) {
			v.Items[0] = schemas.ItemChange{Collection: "c", ID: "zz", Op: schemas.OpDelete}
		}), ErrInvalid, "does not exist"},
		{"known body, wrong chunks", p, tampered(v3, func(v *schemas.Version) {
			v.Items[0] = schemas.ItemChange{Collection: "c", ID: "zz", Op: schemas.OpPut, Hash: sha([]byte("aaaa")), Size: 4, Chunks: []string{sha([]byte("bbbb"))}}
		}), ErrInvalid, "hash to"},
		{"size", p, tampered(v3, func(v *schemas.Version) { v.Items[0].Size = 3 }), ErrInvalid, "chunks make 4 bytes"},
		{"known body, wrong size", p, tampered(v3, func(v *schemas.Version) {
			v.Items[0] = schemas.ItemChange{Collection: "c", ID: "zz", Op: schemas.OpPut, Hash: sha([]byte("aaaa")), Size: 3, Chunks: []string{sha([]byte("aaaa"))}}
		}), ErrInvalid, "chunks make 4 bytes"},
		{"bad hash", p, tampered(v3, func(v *schemas.Version) { v.Items[0].Hash = strings.ToUpper(v.Items[0].Hash) }), ErrInvalid, "hash"},
		{"bad parent", p, tampered(v3, func(v *schemas.Version) { v.Parent = 1 }), ErrInvalid, "parent"},
		{"empty record", p, []Record{{}}, ErrInvalid, "exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := scanPartition(t, s, p)
			err := s.Apply(tc.p, tc.recs, 30)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if d := diffScans(before, scanPartition(t, s, p)); d != "" {
				t.Fatalf("a failed Apply wrote: %s", d)
			}
		})
	}

	// Versions may build on earlier ones of the same Apply ...
	mustApply(t, s, p, append(append([]Record{}, v3...), v4...), 30)
	// ... and a gap inside a batch fails all of it, the good version
	// before the gap and the offset included.
	v5 := pm.next("main").put("c", "e", "", "eeee").commit()
	pm.next("main").commit()
	v7 := pm.next("main").commit()
	before := scanPartition(t, s, p)
	if err := s.Apply(p, append(append([]Record{}, v5...), v7...), 40); !errors.Is(err, ErrGap) {
		t.Fatalf("gap inside a batch: %v", err)
	}
	if d := diffScans(before, scanPartition(t, s, p)); d != "" {
		t.Fatalf("a failed Apply wrote: %s", d)
	}
	if o, _, _ := s.Offset(p); o != 30 {
		t.Fatalf("offset = %d after a failed Apply, want 30", o)
	}

	// A base version the store does not have.
	fork := newProject(testOrg, name)
	fork.next("main").scalar("n", "1").put("c", "a", "", "aaaa").commit()
	fork.next("main").put("c", "b", "", "bbbb").commit()
	fork.next("main").put("c", "c", "", "cccc").commit()
	fork.next("main").put("c", "d", "", "dddd").commit()
	fork.next("main").commit()
	if err := s.Apply(p, fork.fork("f", "main", 5).commit(), 50); !errors.Is(err, ErrGap) || !strings.Contains(err.Error(), "base branch main has no version 5") {
		t.Fatalf("fork from a missing version: %v", err)
	}
}

func TestDropPartition(t *testing.T) {
	s := newStore(t)
	a := newProject(testOrg, projectIn(0, testPartitions, 0))
	b := newProject(testOrg, projectIn(3, testPartitions, 0))
	ra := a.next("main").put("c", "i", "", "one").commit()
	mustApply(t, s, 0, ra, 7)
	mustApply(t, s, 3, b.next("main").put("c", "i", "", "one").commit(), 9)
	kept := scanPartition(t, s, 3)

	if err := s.DropPartition(0); err != nil {
		t.Fatal(err)
	}
	if rest := scanPartition(t, s, 0); len(rest) != 0 {
		t.Fatalf("partition 0 still holds %d keys", len(rest))
	}
	if _, ok, err := s.Offset(0); ok || err != nil {
		t.Fatalf("offset of a dropped partition: %v %v", ok, err)
	}
	if d := diffScans(kept, scanPartition(t, s, 3)); d != "" {
		t.Fatalf("dropping partition 0 changed partition 3: %s", d)
	}
	if _, err := s.Latest(testOrg, b.project, "main"); err != nil {
		t.Fatal(err)
	}
	// The partition is rebuilt from the start of the changelog.
	mustApply(t, s, 0, ra, 7)
	if _, err := s.Latest(testOrg, a.project, "main"); err != nil {
		t.Fatal(err)
	}
	if err := s.DropPartition(-1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DropPartition(-1): %v", err)
	}
}

func TestPartitionCountIsKept(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "db")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{Dir: "db", FS: fs, Partitions: testPartitions + 1, Logger: quiet})
	if !errors.Is(err, ErrPartitionCount) || !strings.Contains(err.Error(), "built for 4 partitions") {
		t.Fatalf("open with another count: %v", err)
	}
	s = openStore(t, fs, "db")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Dir: "d", Partitions: 1}, ""},
		{Config{Partitions: 1}, "Dir"},
		{Config{Dir: "d"}, "Partitions is 0"},
		{Config{Dir: "d", Partitions: 1, CacheSize: -1}, "CacheSize"},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// HasChunk remembers the chunks it found and those Apply wrote; a dropped
// partition forgets them with its data.
func TestHasChunkForgetsDroppedPartitions(t *testing.T) {
	s := newStore(t)
	name := projectIn(2, testPartitions, 0)
	pm := newProject(testOrg, name)
	mustApply(t, s, 2, pm.next("main").put("notes", "a", "", strings.Repeat("body ", 40)).commit(), 1)
	a := pm.at("main", 1).items[cid{"notes", "a"}]
	for i := range 2 { // written by Apply, then remembered
		if ok, err := s.HasChunk(testOrg, name, a.Chunks[0]); !ok || err != nil {
			t.Fatalf("HasChunk #%d = %v %v", i, ok, err)
		}
	}
	if err := s.DropPartition(2); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HasChunk(testOrg, name, a.Chunks[0]); ok || err != nil {
		t.Fatalf("HasChunk after DropPartition = %v %v", ok, err)
	}
}

// TestApplyResumesBodyHash edits a body of many chunks version after
// version, in separate calls and in one: each new body starts with the
// chunks of the one before, whose hash Apply resumes instead of reading
// and hashing them again. Every body must read back, and a body whose
// first chunks are known must still be refused when the rest do not make
// its hash or are missing. ApplyDecided, which takes the hashes as
// computed, must find the same bodies and refuse the same missing chunks,
// around the edit and away from it.
func TestApplyResumesBodyHash(t *testing.T) {
	for _, decided := range []bool{false, true} {
		t.Run(fmt.Sprintf("decided=%v", decided), func(t *testing.T) { testApplyResumesBodyHash(t, decided) })
	}
}

func testApplyResumesBodyHash(t *testing.T, decided bool) {
	name := projectIn(0, testPartitions, 0)
	p := schemas.Partition(schemas.ProjectKey(testOrg, name), testPartitions)
	pm := newProject(testOrg, name) // 16-byte chunks
	s := newStore(t)
	body := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 30)) // 84 chunks
	edit := func(at int, text string) string {
		copy(body[at:], text)
		return string(body)
	}
	var next int64
	applyFn := s.Apply
	if decided {
		applyFn = s.ApplyDecided
	}
	apply := func(recs []Record) {
		t.Helper()
		next += 10
		if err := applyFn(p, recs, next); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want string) {
		t.Helper()
		got, err := s.Blob(testOrg, name, sha([]byte(want)))
		if err != nil || string(got) != want {
			t.Fatalf("body reads back as %.40q…, %v", got, err)
		}
	}
	b := string(body)
	apply(pm.next("main").put("c", "a", "", b).commit())
	check(b)
	for _, at := range []int{700, 300, 1300, 5} {
		b = edit(at, "EDIT")
		apply(pm.next("main").put("c", "a", "", b).commit())
		check(b)
	}
	// Two edits in one call: the second resumes the first's hash.
	b1 := edit(900, "ONE")
	recs := pm.next("main").put("c", "a", "", b1).commit()
	b2 := edit(1000, "TWO")
	recs = append(recs, pm.next("main").put("c", "a", "", b2).commit()...)
	apply(recs)
	check(b1)
	check(b2)

	// A version whose body shares its first chunks with b2 but claims
	// another hash, and one that names a chunk nobody stored after them.
	good := pm.next("main").put("c", "a", "", edit(1100, "BAD")).commit()
	forge := func(f func(c *schemas.ItemChange)) []Record {
		out := slices.Clone(good)
		v := *out[len(out)-1].Version
		v.Items = slices.Clone(v.Items)
		f(&v.Items[0])
		out[len(out)-1] = Record{Version: &v}
		return out
	}
	before := scanPartition(t, s, p)
	type refusal struct {
		name string
		recs []Record
		msg  string
	}
	cases := []refusal{
		{"missing last chunk", forge(func(c *schemas.ItemChange) {
			c.Chunks = slices.Clone(c.Chunks)
			c.Chunks[len(c.Chunks)-1] = sha([]byte("never stored"))
		}), "neither stored nor in the records"},
		{"missing chunk before the edit", forge(func(c *schemas.ItemChange) {
			c.Chunks = slices.Clone(c.Chunks)
			c.Chunks[20] = sha([]byte("never stored"))
		}), "neither stored nor in the records"},
		{"missing chunk after the edit", forge(func(c *schemas.ItemChange) {
			c.Chunks = slices.Clone(c.Chunks)
			c.Chunks[80] = sha([]byte("never stored"))
		}), "neither stored nor in the records"},
	}
	if !decided {
		cases = append(cases, refusal{"other hash", forge(func(c *schemas.ItemChange) { c.Hash = sha([]byte("something else")) }), "hash to"})
	}
	for _, tc := range cases {
		err := applyFn(p, tc.recs, next+10)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Fatalf("%s: err = %v, want ErrInvalid with %q", tc.name, err, tc.msg)
		}
		if d := diffScans(before, scanPartition(t, s, p)); d != "" {
			t.Fatalf("%s: a refused Apply changed the store: %s", tc.name, d)
		}
	}
	apply(good)
	check(string(body))
}
