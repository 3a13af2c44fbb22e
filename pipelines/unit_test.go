package pipelines

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

func TestParseBranchAt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want BranchAt
		err  string
	}{
		{"main", BranchAt{"main", 0}, ""},
		{"main@12", BranchAt{"main", 12}, ""},
		{"feature-1@1", BranchAt{"feature-1", 1}, ""},
		{"main@0", BranchAt{}, "integer >= 1"},
		{"main@x", BranchAt{}, "integer >= 1"},
		{"@3", BranchAt{}, "BRANCH@VERSION"},
		{"ma in", BranchAt{}, "BRANCH@VERSION"},
	} {
		got, err := ParseBranchAt(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseProject(t *testing.T) {
	if p, err := ParseProject("acme/doc"); err != nil || p != (ProjectRef{"acme", "doc"}) {
		t.Errorf("acme/doc: %+v %v", p, err)
	}
	for _, in := range []string{"acme", "acme/", "/doc", "Acme/doc", "acme/doc/x"} {
		if _, err := ParseProject(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestFirstChangeDiff(t *testing.T) {
	put := func(id, hash string) schemas.ItemChange {
		return schemas.ItemChange{Collection: "c", ID: id, Op: schemas.OpPut, Hash: hash, Meta: json.RawMessage("{}")}
	}
	del := func(id string) schemas.ItemChange {
		return schemas.ItemChange{Collection: "c", ID: id, Op: schemas.OpDelete}
	}
	for _, tc := range []struct {
		name     string
		src, dst []schemas.ItemChange
		want     string // "" for none, else "id change"
	}{
		{"equal", []schemas.ItemChange{put("a", "1")}, []schemas.ItemChange{put("a", "1")}, ""},
		{"both empty", nil, nil, ""},
		{"other hash", []schemas.ItemChange{put("a", "1"), put("b", "2")}, []schemas.ItemChange{put("a", "1"), put("b", "3")}, "b changed differently"},
		{"only source", []schemas.ItemChange{put("a", "1"), put("b", "2")}, []schemas.ItemChange{put("b", "2")}, "a changed only in source"},
		{"only target", []schemas.ItemChange{put("b", "2")}, []schemas.ItemChange{put("a", "1"), put("b", "2")}, "a changed only in target"},
		{"put and delete", []schemas.ItemChange{put("a", "1")}, []schemas.ItemChange{del("a")}, "a changed differently"},
	} {
		d := firstChangeDiff(tc.src, tc.dst)
		got := ""
		if d != nil {
			got = d.ID + " " + d.Change
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// snapshotSteps turn a state into the snapshot's: deciding them gives the
// snapshot's state hash.
func TestSnapshotStepsReachTheSnapshot(t *testing.T) {
	snap := &Snapshot{
		Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Roadmap"`), "kept": json.RawMessage(`1`)},
		Items: []SnapshotItem{
			{Collection: "t", ID: "same", Meta: json.RawMessage(`{}`), Data: json.RawMessage(`{"v":1}`)},
			{Collection: "t", ID: "changed", Meta: json.RawMessage(`{"m":2}`), Data: json.RawMessage(`{"v":2}`)},
			{Collection: "u", ID: "new", Meta: json.RawMessage(`{}`), Data: json.RawMessage(`"x"`)},
		},
	}
	for i := range snap.Items {
		snap.Items[i].Hash = model.BodyHash(snap.Items[i].Data)
	}
	want, err := snapshotHash(snap)
	if err != nil {
		t.Fatal(err)
	}
	ms := modeltest.NewMemState()
	d := model.NewDecider(ms, model.NewRegistry(), schemas.Limits{})
	target := BranchRef{ProjectRef{"acme", "doc"}, "main"}
	decide := func(s step) *schemas.Version {
		t.Helper()
		m := s.m
		dec, err := d.Decide(model.MutationRecord{Mutation: &m, Timestamp: time.UnixMilli(1)})
		if err != nil || dec.Kind != model.Applied {
			t.Fatalf("%s %s: %v %v %s", m.Name, m.Args, dec.Kind, err, dec.Version.Mutations[0].Error)
		}
		if err := ms.Apply(dec.Version, dec.Chunks); err != nil {
			t.Fatal(err)
		}
		d.Reset()
		return dec.Version
	}
	// From the empty state: all of it.
	steps := snapshotSteps(nil, snap, target, ImportClient, 1, time.UnixMilli(1))
	if len(steps) != 4 {
		t.Fatalf("%d steps from the empty state, want a project.set and 3 puts", len(steps))
	}
	var last *schemas.Version
	for _, s := range steps {
		last = decide(s)
	}
	if last.StateHash != want {
		t.Fatalf("from empty: state %s, want %s", last.StateHash, want)
	}
	// From a state that differs: only the difference.
	other := *snap
	other.Scalars = map[string]json.RawMessage{"kept": json.RawMessage(`1`), "extra": json.RawMessage(`true`)}
	other.Items = []SnapshotItem{snap.Items[0], {Collection: "t", ID: "changed", Meta: json.RawMessage(`{}`), Data: json.RawMessage(`{"v":0}`)}, {Collection: "t", ID: "gone", Meta: json.RawMessage(`{}`), Data: json.RawMessage(`0`)}}
	for i := range other.Items {
		other.Items[i].Hash = model.BodyHash(other.Items[i].Data)
	}
	st := &store.State{Scalars: other.Scalars, Collections: map[string][]model.ItemRef{}}
	for _, it := range other.Items {
		st.Collections[it.Collection] = append(st.Collections[it.Collection], model.ItemRef{Collection: it.Collection, ID: it.ID, Meta: it.Meta, Hash: it.Hash})
	}
	steps = snapshotSteps(st, snap, target, ImportClient, 2, time.UnixMilli(1))
	var names []string
	for _, s := range steps {
		names = append(names, s.m.Name+" "+string(s.m.Args))
	}
	got := strings.Join(names, "\n")
	wantSteps := strings.Join([]string{
		`project.set {"extra":null,"name":"Roadmap"}`,
		`item.put {"collection":"t","data":{"v":2},"id":"changed","meta":{"m":2}}`,
		`item.delete {"collection":"t","id":"gone"}`,
		`item.put {"collection":"u","data":"x","id":"new","meta":{}}`,
	}, "\n")
	if got != wantSteps {
		t.Errorf("steps:\n%s\nwant:\n%s", got, wantSteps)
	}
	for i, s := range steps {
		if s.m.ID != uint64(2+i) || s.m.Client != ImportClient {
			t.Errorf("step %d: client %s id %d", i, s.m.Client, s.m.ID)
		}
	}
}

func exportFile(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestReadSnapshot(t *testing.T) {
	body := `{"title":"one"}`
	h := model.BodyHash([]byte(body))
	var sum schemas.StateHasher
	sum.Add(schemas.ItemDigest("t", "t1", json.RawMessage("{}"), h))
	stateHash, err := sum.StateHash(map[string]json.RawMessage{"name": json.RawMessage(`"R"`)})
	if err != nil {
		t.Fatal(err)
	}
	header := `{"type":"header","format":"canon-export","formatVersion":1,"org":"acme","project":"doc"}`
	bodyLine := fmt.Sprintf(`{"type":"body","hash":%q,"data":%s}`, h, body)
	snapLine := fmt.Sprintf(`{"type":"snapshot","branch":"main","version":3,"stateHash":%q,"scalars":{"name":"R"},"items":1}`, stateHash)
	item := fmt.Sprintf(`{"type":"item","collection":"t","id":"t1","meta":{},"hash":%q}`, h)

	snap, err := ReadSnapshot(strings.NewReader(exportFile(header, bodyLine, snapLine, item)))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Branch != "main" || snap.Version != 3 || len(snap.Items) != 1 || string(snap.Items[0].Data) != body || snap.StateHash != stateHash {
		t.Errorf("snapshot %+v", snap)
	}
	for _, tc := range []struct {
		name, file, err string
	}{
		{"no header", exportFile(bodyLine, snapLine, item), "a snapshot before the header"},
		{"other format", exportFile(strings.Replace(header, `"formatVersion":1`, `"formatVersion":2`, 1), snapLine, item), "this build reads canon-export version 1"},
		{"no snapshot", exportFile(header, bodyLine), "holds no snapshot"},
		{"missing body", exportFile(header, snapLine, item), "no body line for hash"},
		{"truncated", exportFile(header, bodyLine, strings.Replace(snapLine, `"items":1`, `"items":2`, 1), item), "truncated"},
		{"edited body", exportFile(header, strings.Replace(bodyLine, "one", "two", 1), snapLine, item), "corrupt or was edited"},
		{"edited scalars", exportFile(header, bodyLine, strings.Replace(snapLine, `"R"`, `"S"`, 1), item), "remove stateHash"},
		{"unknown line", exportFile(header, `{"type":"blob"}`), `unknown line type "blob"`},
		{"not JSON", exportFile(header, `{"type":`), "line 2"},
		{"bad item id", exportFile(header, bodyLine, snapLine, strings.Replace(item, `"t1"`, `""`, 1)), "line 4"},
		{"twice", exportFile(header, bodyLine, strings.Replace(snapLine, `"items":1`, `"items":2`, 1), item, item), "twice"},
	} {
		_, err := ReadSnapshot(strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		}
	}
}

func FuzzReadSnapshot(f *testing.F) {
	body := `{"title":"one"}`
	h := model.BodyHash([]byte(body))
	f.Add([]byte(exportFile(
		`{"type":"header","format":"canon-export","formatVersion":1,"org":"acme","project":"doc"}`,
		fmt.Sprintf(`{"type":"body","hash":%q,"data":%s}`, h, body),
		`{"type":"snapshot","branch":"main","version":3,"scalars":{"name":"R"},"items":1}`,
		fmt.Sprintf(`{"type":"item","collection":"t","id":"t1","meta":{},"hash":%q}`, h))))
	f.Add([]byte(`{"type":"header"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := ReadSnapshot(bytes.NewReader(b))
		if err != nil {
			return
		}
		// What it accepts is importable: valid names, bodies that hash
		// to their hashes, a state hash.
		for _, it := range snap.Items {
			if schemas.ValidateCollection("c", it.Collection) != nil || schemas.ValidateItemID("id", it.ID) != nil || model.BodyHash(it.Data) != it.Hash {
				t.Fatalf("accepted a bad item %+v", it)
			}
		}
		if _, err := snapshotHash(snap); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFirstDivergence(t *testing.T) {
	orig := func(v uint64, name, status, errMsg, hash string) *origin {
		return &origin{version: v, last: true, stateHash: hash,
			outcome: schemas.Outcome{Client: "c", ID: v, Name: name, Status: status, Error: errMsg}}
	}
	same := []step{{orig: orig(1, "item.put", "applied", "", "h1")}, {orig: orig(2, "item.patch", "error", "item t/x does not exist", "h1")}}
	sameRes := []result{{kind: model.Applied, version: 1, stateHash: "h1"}, {kind: model.Errored, version: 2, errMsg: "item t/x does not exist", stateHash: "h1"}}
	for _, tc := range []struct {
		name    string
		steps   []step
		results []result
		version uint64 // 0: none
	}{
		{"equal", same, sameRes, 0},
		{"own steps are not compared", append([]step{{}}, same...), append([]result{{kind: model.Rejected}}, sameRes...), 0},
		{"state hash", same, []result{{kind: model.Applied, version: 1, stateHash: "h2"}, sameRes[1]}, 1},
		{"status", same, []result{sameRes[0], {kind: model.Applied, version: 2, stateHash: "h1"}}, 2},
		{"error message", same, []result{sameRes[0], {kind: model.Errored, version: 2, errMsg: "other", stateHash: "h1"}}, 2},
		{"branch.create names its branch", []step{{orig: orig(1, "branch.create", "error", "branch b already exists (head version 3)", "h1")}},
			[]result{{kind: model.Errored, version: 1, errMsg: "branch replay already exists (head version 1)", stateHash: "h1"}}, 0},
		{"rejected", same[:1], []result{{kind: model.Rejected, errMsg: "invalid: …"}}, 1},
	} {
		d := firstDivergence(tc.steps, tc.results)
		switch {
		case tc.version == 0 && d != nil:
			t.Errorf("%s: divergence %+v", tc.name, d)
		case tc.version != 0 && (d == nil || d.Version != tc.version):
			t.Errorf("%s: divergence %+v, want at version %d", tc.name, d, tc.version)
		}
	}
}
