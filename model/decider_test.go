package model_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

type testMutation struct {
	branch, client, name, args string
	project                    string
}

// testWorkload exercises every built-in, errors, branches and large bodies.
func testWorkload() []testMutation {
	big := string(model.SampleText(100<<10, 7))
	return []testMutation{
		{client: "a", name: model.ProjectSet, args: `{"name":"Roadmap","weight":1.5}`},
		{client: "a", name: model.ItemPut, args: `{"collection":"tasks","id":"t1","meta":{"z":1,"a":2},"data":{"title":"one","n":1}}`},
		{client: "b", name: model.ItemPut, args: `{"collection":"docs","id":"big","data":{"text":` + big + `}}`},
		{client: "a", name: model.ItemPatch, args: `{"collection":"tasks","id":"t1","data":{"done":true}}`},
		{client: "b", name: model.ItemSplice, args: `{"collection":"docs","id":"big","path":"/text","index":50000,"delete":3,"insert":"EDIT"}`},
		{client: "c", name: "test.fail", args: `"x"`},
		{client: "c", name: "test.panic", args: `"y"`},
		{client: "c", name: "no.such", args: `{}`},
		{client: "a", name: model.BranchCreate, branch: "dev", args: `{"from":"main","version":3}`},
		{client: "a", name: model.ItemPatch, branch: "dev", args: `{"collection":"docs","id":"big","meta":{"on":"dev"}}`},
		{client: "b", name: "test.copy", branch: "dev", args: `{"from":"t1","to":"t2"}`},
		{client: "a", name: model.ItemDelete, args: `{"collection":"tasks","id":"t1"}`},
		{client: "a", name: model.ItemPatch, args: `{"collection":"tasks","id":"t1","data":{}}`},
		{client: "d", name: model.ItemPut, args: `{"collection":"docs","id":"copy","data":{"text":` + big + `}}`},
		{client: "d", name: model.ItemPut, project: "other", args: `{"collection":"docs","id":"copy","data":{"text":` + big + `}}`},
		{client: "a", name: "test.now", branch: "dev", args: `{}`},
		{client: "a", name: model.BranchCreate, branch: "dev2", args: `{"from":"dev"}`},
		{client: "a", name: model.ItemPut, branch: "dev2", args: `{"collection":"tasks","id":"t1","data":"back"}`},
		{client: "a", name: model.ProjectSet, args: `{"name":null}`},
	}
}

// decideAll decides a workload, committing after every `every` mutations
// (0: only at the end), and returns each decision's encoded version and
// chunk hashes.
func decideAll(t *testing.T, ms []testMutation, every int) []string {
	t.Helper()
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, testRegistry(t), schemas.Limits{})
	var pending []model.Decision
	commit := func() {
		for _, d := range pending {
			if d.Version == nil {
				continue
			}
			if err := state.Apply(d.Version, d.Chunks); err != nil {
				t.Fatalf("committing every %d: %v", every, err)
			}
		}
		pending = nil
		dec.Reset()
	}
	ids := map[string]uint64{}
	var out []string
	for i, m := range ms {
		project := testProject
		if m.project != "" {
			project = m.project
		}
		key := project + "/" + m.branch + "/" + m.client
		ids[key]++
		d, err := dec.Decide(model.MutationRecord{
			Mutation: &schemas.Mutation{
				Org: testOrg, Project: project, Branch: m.branch, ClientGroup: "g-" + m.client,
				Client: m.client, ID: ids[key], Name: m.name, Args: json.RawMessage(m.args),
				TS: int64(1000 + i), Principal: "p", ReceivedAt: int64(2000 + i),
			},
			Timestamp: testEpoch.Add(time.Duration(i) * time.Second),
			Partition: 1,
			Offset:    int64(i),
		})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%v", d.Kind)
		if d.Version != nil {
			enc, err := schemas.EncodeVersion(d.Version, schemas.DefaultLimits())
			if err != nil {
				t.Fatalf("mutation %d (%s): the version does not encode: %v", i, m.name, err)
			}
			b.Write(enc)
		}
		for _, c := range d.Chunks {
			fmt.Fprintf(&b, " %s:%d", c.Hash, len(c.Data))
		}
		out = append(out, b.String())
		pending = append(pending, d)
		if every > 0 && len(pending) >= every {
			commit()
		}
	}
	commit()
	return out
}

// The same mutations decided twice, or with batches cut elsewhere, make
// byte-identical versions and the same chunks.
func TestDecideDeterministic(t *testing.T) {
	ms := testWorkload()
	want := decideAll(t, ms, 1)
	for _, every := range []int{1, 2, 3, 5, 0} {
		got := decideAll(t, ms, every)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("committing every %d: decision %d (%s) differs:\n got %.600s\nwant %.600s", every, i, ms[i].name, got[i], want[i])
			}
		}
	}
	// The workload does what it says.
	for i, kind := range []string{"applied", "applied", "applied", "applied", "applied", "error", "error", "error",
		"applied", "applied", "applied", "applied", "error", "applied", "applied", "applied", "applied", "applied", "applied"} {
		if !strings.HasPrefix(want[i], kind) {
			t.Errorf("decision %d (%s) is %.40s, want %s", i, ms[i].name, want[i], kind)
		}
	}
}

func TestDecideChunks(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	big := string(model.SampleText(100<<10, 8))
	put := e.decide("a", model.ItemPut, `{"collection":"docs","id":"d1","data":`+big+`}`)
	// bodyChunks splits a decision's new chunks into the item body's and
	// the others (those of the large args, stored by reference).
	bodyChunks := func(d model.Decision) (body, other int) {
		in := map[string]bool{}
		for _, it := range d.Version.Items {
			for _, h := range it.Chunks {
				in[h] = true
			}
		}
		for _, c := range d.Chunks {
			if in[c.Hash] {
				body += len(c.Data)
			} else {
				other++
			}
		}
		return body, other
	}
	body, _ := bodyChunks(put)
	if len(put.Chunks) < 10 || body != len(big) {
		t.Fatalf("a 100 KB body made %d chunks of %d bytes", len(put.Chunks), body)
	}
	if ref := put.Version.Mutations[0].ArgsRef; ref == nil || put.Version.Mutations[0].Args != nil {
		t.Fatalf("100 KB of args are not stored by reference")
	}
	// Within the batch, then after a commit: the same body makes no chunk.
	same := e.decide("a", model.ItemPut, `{"collection":"docs","id":"d2","data":`+big+`}`)
	e.commit(put, same)
	again := e.decide("a", model.ItemPut, `{"collection":"docs","id":"d3","meta":{"m":1},"data":`+big+`}`)
	for name, d := range map[string]model.Decision{"same batch": same, "after commit": again} {
		// The body is known; of the args only the edges differ.
		if b, other := bodyChunks(d); d.Kind != model.Applied || b != 0 || other > 2 {
			t.Errorf("%s: the same body again made %d body bytes and %d other chunks", name, b, other)
		}
		if got := d.Version.Items[0].Chunks; strings.Join(got, ",") != strings.Join(put.Version.Items[0].Chunks, ",") {
			t.Errorf("%s: the same body has other chunks", name)
		}
	}
	// A one-character edit in the middle stores one or two chunks.
	edit := e.decide("a", model.ItemSplice, `{"collection":"docs","id":"d1","index":50000,"delete":1,"insert":"#"}`)
	n := 0
	for _, c := range edit.Chunks {
		n += len(c.Data)
	}
	if edit.Kind != model.Applied || len(edit.Chunks) < 1 || len(edit.Chunks) > 2 || n > 2*model.ChunkMaxSize {
		t.Errorf("a 1-character edit: %v, %d new chunks, %d bytes", edit.Kind, len(edit.Chunks), n)
	}
	// A meta-only patch reuses the body's chunks, in the batch and after.
	meta := e.decide("a", model.ItemPatch, `{"collection":"docs","id":"d1","meta":{"x":1}}`)
	e.commit(again, edit, meta)
	meta2 := e.decide("a", model.ItemPatch, `{"collection":"docs","id":"d1","meta":{"x":2}}`)
	e.commit(meta2)
	for _, d := range []model.Decision{meta, meta2} {
		if d.Kind != model.Applied || len(d.Chunks) != 0 || d.Version.Items[0].Hash != edit.Version.Items[0].Hash {
			t.Errorf("a meta patch: %v, %d chunks", d.Kind, len(d.Chunks))
		}
	}
	// Chunks are per project: no dedup across namespaces.
	e.dec.Reset()
	d, err := e.dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
		Org: testOrg, Project: "other", Client: "a", ID: 1, Name: model.ItemPut,
		Args: json.RawMessage(`{"collection":"docs","id":"d1","data":` + big + `}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Chunks) != len(put.Chunks) {
		t.Errorf("another project got %d chunks, want %d", len(d.Chunks), len(put.Chunks))
	}
}

func TestDecideRejects(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":1}`)
	good := schemas.Mutation{Org: testOrg, Project: testProject, Client: "a", ID: 2, Name: model.ItemPut,
		Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":2}`)}
	for _, tc := range []struct {
		edit func(m *schemas.Mutation)
		msg  string
	}{
		{func(m *schemas.Mutation) { m.Org = "" }, `field "org"`},
		{func(m *schemas.Mutation) { m.Org = "Acme" }, `field "org"`},
		{func(m *schemas.Mutation) { m.Project = "a b" }, `field "project"`},
		{func(m *schemas.Mutation) { m.Branch = "-x" }, `field "branch"`},
		{func(m *schemas.Mutation) { m.Client = "" }, `field "client"`},
		{func(m *schemas.Mutation) { m.ID = 0 }, `field "id"`},
		{func(m *schemas.Mutation) { m.Branch = "dev" }, `branch dev does not exist: create it with branch.create`},
	} {
		m := good
		tc.edit(&m)
		d, err := e.dec.Decide(model.MutationRecord{Mutation: &m})
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind != model.Rejected || d.Reason != schemas.ReasonInvalid || !strings.Contains(d.Message, tc.msg) || d.Version != nil {
			t.Errorf("%+v: %v %s %q, want rejected with %q", m, d.Kind, d.Reason, d.Message, tc.msg)
		}
	}
	if d, err := e.dec.Decide(model.MutationRecord{}); err != nil || d.Kind != model.Rejected {
		t.Errorf("no mutation: %v, %v", d.Kind, err)
	}
	// Nothing advanced.
	m := good
	if d, err := e.dec.Decide(model.MutationRecord{Mutation: &m}); err != nil || d.Kind != model.Applied || d.Version.Version != 2 {
		t.Errorf("after the rejections: %v, %v", d.Kind, err)
	}
}

func TestDecideArgsLimits(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{MaxArgsBytes: 64})
	d := e.decide("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":"`+strings.Repeat("x", 64)+`"}`)
	if d.Kind != model.Errored || !strings.Contains(outcomeError(d), "over the limit of 64 bytes (MaxArgsBytes)") {
		t.Errorf("oversized args: %v %s", d.Kind, outcomeError(d))
	}
	if d.Version.Mutations[0].Args != nil {
		t.Errorf("the oversized args were recorded")
	}
	// A long error message is cut.
	d = e.decide("a", "test.fail", `"`+strings.Repeat("é", 40)+`"`)
	e2 := newTestEnv(t, schemas.Limits{})
	long := e2.decide("a", "test.fail", `"`+strings.Repeat("é", 2000)+`"`)
	if msg := outcomeError(long); len(msg) > model.MaxErrorBytes || !strings.HasSuffix(msg, "…") {
		t.Errorf("an error of %d bytes was recorded", len(msg))
	}
	if d.Kind != model.Errored {
		t.Errorf("test.fail: %v", d.Kind)
	}
}

// A mutator that edits what Tx.Get returned, or the mutation, does not
// edit the state.
func TestTxCopies(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	if err := e.reg.Register("test.scribble", func(tx model.Tx, _ json.RawMessage) error {
		it, err := tx.Get("tasks", "t1")
		if err != nil {
			return err
		}
		copy(it.Data, "XXXX")
		copy(it.Meta, "YYYY")
		sc, _ := tx.Scalar("name")
		copy(sc, "ZZZZ")
		tx.Mutation().Client = "someone else"
		return errors.New("no change")
	}); err != nil {
		t.Fatal(err)
	}
	e.run("a", model.ProjectSet, `{"name":"Roadmap"}`)
	put := e.decide("a", model.ItemPut, `{"collection":"tasks","id":"t1","meta":{"m":1},"data":{"title":"x"}}`)
	// In the overlay, then committed.
	for i := 0; i < 2; i++ {
		d := e.decide("a", "test.scribble", `{}`)
		if d.Kind != model.Errored || d.Version.LastIDs["a"] == 0 {
			t.Fatalf("scribble: %v %v", d.Kind, d.Version.LastIDs)
		}
		e.commit(put, d)
		put = model.Decision{}
	}
	if got := e.item("tasks", "t1"); got != `{"m":1} {"title":"x"}` {
		t.Errorf("tasks/t1 is %s", got)
	}
	if h, _ := e.state.Head(testOrg, testProject, "main"); string(h.Scalars["name"]) != `"Roadmap"` {
		t.Errorf("name is %s", h.Scalars["name"])
	}
}

var errBoom = errors.New("boom")

// faultyReader fails one method.
type faultyReader struct {
	model.Reader
	fail string
}

func (f *faultyReader) Head(org, project, branch string) (model.Head, error) {
	if f.fail == "Head" {
		return model.Head{}, errBoom
	}
	return f.Reader.Head(org, project, branch)
}

func (f *faultyReader) HeadAt(org, project, branch string, v uint64) (model.Head, bool, error) {
	if f.fail == "HeadAt" {
		return model.Head{}, false, errBoom
	}
	return f.Reader.HeadAt(org, project, branch, v)
}

func (f *faultyReader) ItemRef(org, project, branch, collection, id string) (model.ItemRef, bool, error) {
	if f.fail == "ItemRef" {
		return model.ItemRef{}, false, errBoom
	}
	return f.Reader.ItemRef(org, project, branch, collection, id)
}

func (f *faultyReader) ItemRefAt(org, project, branch, collection, id string, v uint64) (model.ItemRef, bool, error) {
	if f.fail == "ItemRefAt" {
		return model.ItemRef{}, false, errBoom
	}
	return f.Reader.ItemRefAt(org, project, branch, collection, id, v)
}

func (f *faultyReader) Body(org, project, hash string) ([]byte, error) {
	if f.fail == "Body" {
		return nil, errBoom
	}
	return f.Reader.Body(org, project, hash)
}

func (f *faultyReader) HasChunk(org, project, hash string) (bool, error) {
	if f.fail == "HasChunk" {
		return false, errBoom
	}
	return f.Reader.HasChunk(org, project, hash)
}

func (f *faultyReader) LastID(org, project, branch, client string) (uint64, error) {
	if f.fail == "LastID" {
		return 0, errBoom
	}
	return f.Reader.LastID(org, project, branch, client)
}

func (f *faultyReader) GroupPrincipal(org, project, group string) (string, bool, error) {
	if f.fail == "GroupPrincipal" {
		return "", false, errBoom
	}
	return f.Reader.GroupPrincipal(org, project, group)
}

func (f *faultyReader) ClientGroup(org, project, client string) (string, bool, error) {
	if f.fail == "ClientGroup" {
		return "", false, errBoom
	}
	return f.Reader.ClientGroup(org, project, client)
}

// A Reader failure is Decide's error, never an outcome, even when the
// mutator swallows it; the overlay is left as it was.
func TestDecideReaderErrors(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":{"title":"x"}}`)
	e.run("a", model.ItemPut, `{"collection":"tasks","id":"t2","data":{"title":"y"}}`)
	if err := e.reg.Register("test.swallow", func(tx model.Tx, _ json.RawMessage) error {
		_, _ = tx.Get("tasks", "t1")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fail   string
		branch string
		name   string
		args   string
		// first is decided before the failing one, in the same batch.
		first *testMutation
	}{
		{fail: "Head", name: model.ItemPut, args: `{"collection":"tasks","id":"t3","data":1}`},
		{fail: "LastID", name: model.ItemPut, args: `{"collection":"tasks","id":"t3","data":1}`},
		{fail: "GroupPrincipal", name: model.ItemPut, args: `{"collection":"tasks","id":"t3","data":1}`},
		{fail: "ClientGroup", name: model.ItemPut, args: `{"collection":"tasks","id":"t3","data":1}`},
		{fail: "ItemRef", name: model.ItemPatch, args: `{"collection":"tasks","id":"t1","data":{}}`},
		{fail: "ItemRef", name: "test.swallow", args: `{}`},
		{fail: "Body", name: model.ItemPatch, args: `{"collection":"tasks","id":"t1","data":{"a":1}}`},
		{fail: "Body", name: "test.swallow", args: `{}`},
		{fail: "HasChunk", name: model.ItemPut, args: `{"collection":"tasks","id":"t3","data":"new"}`},
		{fail: "HeadAt", branch: "dev", name: model.BranchCreate, args: `{"from":"main","version":1}`},
		{fail: "ItemRefAt", branch: "dev", name: model.ItemPatch, args: `{"collection":"tasks","id":"t1","data":{}}`,
			first: &testMutation{branch: "dev", client: "b", name: model.BranchCreate, args: `{"from":"main","version":1}`}},
	} {
		state := e.state
		r := &faultyReader{Reader: state}
		dec := model.NewDecider(r, e.reg, schemas.Limits{})
		if tc.first != nil {
			if d, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{Org: testOrg, Project: testProject,
				Branch: tc.first.branch, Client: tc.first.client, ID: 1, Name: tc.first.name, Args: json.RawMessage(tc.first.args)}}); err != nil || d.Kind != model.Applied {
				t.Fatalf("%s: first mutation: %v %v", tc.fail, d.Kind, err)
			}
		}
		m := &schemas.Mutation{Org: testOrg, Project: testProject, Branch: tc.branch, Client: "c", ID: 1, Name: tc.name, Args: json.RawMessage(tc.args),
			ClientGroup: "gc", Principal: "carol"}
		if tc.first != nil {
			m.Client, m.ID = tc.first.client, 2
		}
		r.fail = tc.fail
		d, err := dec.Decide(model.MutationRecord{Mutation: m})
		if !errors.Is(err, errBoom) {
			t.Errorf("%s failing, %s: %v %s, %v; want the Reader's error", tc.fail, tc.name, d.Kind, outcomeError(d), err)
			continue
		}
		// The overlay did not take the mutation: it decides the same once
		// the Reader works.
		r.fail = ""
		d, err = dec.Decide(model.MutationRecord{Mutation: m})
		if err != nil || (d.Kind != model.Applied && d.Kind != model.Errored) || (tc.first == nil && d.Version.Version != 3 && tc.branch == "") {
			t.Errorf("%s, once the Reader works: %v %v", tc.fail, d.Kind, err)
		}
	}
}

// Versions hold the record's fields where the contract says.
func TestDecideVersionFields(t *testing.T) {
	s := modeltest.NewMemState()
	dec := model.NewDecider(s, model.NewRegistry(), schemas.Limits{})
	ts := time.Date(2024, 6, 1, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	m := &schemas.Mutation{Org: testOrg, Project: testProject, ClientGroup: "g1", Client: "c1", ID: 1,
		Name: model.ItemPut, Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":1}`), TS: 42, Principal: "alice", ReceivedAt: 43}
	d, err := dec.Decide(model.MutationRecord{Mutation: m, Timestamp: ts, Partition: 7, Offset: 99})
	if err != nil {
		t.Fatal(err)
	}
	v := d.Version
	want := schemas.Outcome{ClientGroup: "g1", Client: "c1", ID: 1, Name: model.ItemPut, Args: m.Args, Status: schemas.StatusApplied,
		TS: 42, Principal: "alice", ReceivedAt: 43, Offset: 99}
	got := v.Mutations[0]
	if v.Branch != "main" || v.Version != 1 || v.Parent != 0 || v.Base != nil || v.TS != ts.UnixMilli() ||
		v.Source != (schemas.SourceRef{Partition: 7, Offset: 99}) || v.LastIDs["c1"] != 1 || len(v.LastIDs) != 1 ||
		len(v.Mutations) != 1 || !bytes.Equal(got.Args, want.Args) {
		t.Errorf("version %+v", v)
	}
	got.Args, want.Args = nil, nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("outcome %+v, want %+v", got, want)
	}
	if err := s.Apply(v, d.Chunks); err != nil {
		t.Fatal(err)
	}
}

// A Tx kept past its mutator's return writes nothing.
func TestTxDeadAfterReturn(t *testing.T) {
	e := newTestEnv(t, schemas.Limits{})
	var kept model.Tx
	if err := e.reg.Register("test.keep", func(tx model.Tx, _ json.RawMessage) error {
		kept = tx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d := e.decide("a", "test.keep", `{}`)
	if err := kept.SetScalar("late", json.RawMessage(`1`)); !errors.Is(err, model.ErrTxDone) {
		t.Errorf("SetScalar on a dead Tx: %v", err)
	}
	if err := kept.Put("tasks", "late", model.Item{Data: json.RawMessage(`1`)}); !errors.Is(err, model.ErrTxDone) {
		t.Errorf("Put on a dead Tx: %v", err)
	}
	if _, err := kept.Get("tasks", "late"); !errors.Is(err, model.ErrTxDone) {
		t.Errorf("Get on a dead Tx: %v", err)
	}
	if d.Kind != model.Applied || len(d.Version.Scalars) != 0 || len(d.Version.Items) != 0 {
		t.Errorf("test.keep: %v %v %v", d.Kind, d.Version.Scalars, d.Version.Items)
	}
}

// A client group belongs to the first principal that made a version with
// it: another principal's mutations in it are rejected (unauthorized), in
// the same batch and after a commit, and advance no id; the owner goes on.
func TestDecideClientGroupBinding(t *testing.T) {
	s := modeltest.NewMemState()
	dec := model.NewDecider(s, model.NewRegistry(), schemas.Limits{})
	put := func(principal, group, client string, id uint64) model.Decision {
		t.Helper()
		m := &schemas.Mutation{Org: testOrg, Project: testProject, ClientGroup: group, Client: client, ID: id,
			Name: model.ItemPut, Args: json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":"t","data":%d}`, id)), Principal: principal}
		d, err := dec.Decide(model.MutationRecord{Mutation: m})
		if err != nil {
			t.Fatal(err)
		}
		if d.Version != nil {
			if err := s.Apply(d.Version, d.Chunks); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	if d := put("alice", "g1", "a1", 1); d.Kind != model.Applied {
		t.Fatalf("alice's first mutation: %v", d.Kind)
	}
	// Same batch: the overlay knows the binding.
	d := put("mallory", "g1", "m1", 1)
	if d.Kind != model.Rejected || d.Reason != schemas.ReasonUnauthorized || !strings.Contains(d.Message, "client group g1") {
		t.Fatalf("mallory in alice's group: %v %s %q, want rejected unauthorized", d.Kind, d.Reason, d.Message)
	}
	// Even with the id that alice's client expects next.
	if d := put("mallory", "g1", "a1", 2); d.Kind != model.Rejected || d.Reason != schemas.ReasonUnauthorized {
		t.Fatalf("mallory advancing alice's client: %v %s", d.Kind, d.Reason)
	}
	dec.Reset() // committed: the Reader knows the binding
	if d := put("mallory", "g1", "a1", 2); d.Kind != model.Rejected || d.Reason != schemas.ReasonUnauthorized {
		t.Fatalf("after a commit, mallory in alice's group: %v %s", d.Kind, d.Reason)
	}
	if d := put("alice", "g1", "a1", 2); d.Kind != model.Applied {
		t.Fatalf("alice after mallory's attempts: %v %s %q", d.Kind, d.Reason, d.Message)
	}
	if d := put("mallory", "g2", "m1", 1); d.Kind != model.Applied {
		t.Fatalf("mallory in a group of her own: %v %s", d.Kind, d.Message)
	}
	// A record without a principal comes from a trusted tool: not checked.
	if d := put("", "g1", "a1", 3); d.Kind != model.Applied {
		t.Fatalf("trusted record in alice's group: %v %s", d.Kind, d.Message)
	}
	if p, ok, _ := s.GroupPrincipal(testOrg, testProject, "g1"); !ok || p != "alice" {
		t.Fatalf("owner of g1 = %q, %v; want alice", p, ok)
	}
}

// A job's lineage on a mutation reaches its outcome, for a branch.create
// as for any mutation.
func TestDecideKeepsLineage(t *testing.T) {
	dec := model.NewDecider(modeltest.NewMemState(), testRegistry(t), schemas.Limits{})
	job := &schemas.Job{Kind: "rebase", Principal: "user:ann", At: 5}
	for i, m := range []*schemas.Mutation{
		{Org: testOrg, Project: testProject, Branch: "main", ClientGroup: "g", Client: "a", ID: 1, Name: model.ItemPut,
			Args: json.RawMessage(`{"collection":"c","id":"i","data":1}`)},
		{Org: testOrg, Project: testProject, Branch: "rb", ClientGroup: "g", Client: "tool", ID: 1, Name: model.BranchCreate,
			Args: json.RawMessage(`{"from":"main"}`), Job: job},
		{Org: testOrg, Project: testProject, Branch: "rb", ClientGroup: "g", Client: "a", ID: 1, Name: model.ItemPut,
			Args: json.RawMessage(`{"collection":"c","id":"i","data":2}`), Job: job,
			Origin: &schemas.Origin{Branch: "main", Version: 1, Client: "a", ID: 1}},
	} {
		d, err := dec.Decide(model.MutationRecord{Mutation: m, Timestamp: testEpoch, Partition: 1, Offset: int64(i)})
		if err != nil || d.Version == nil {
			t.Fatalf("mutation %d: %v, %v", i, d.Kind, err)
		}
		o := d.Version.Mutations[0]
		if o.Job != m.Job || o.Origin != m.Origin {
			t.Fatalf("mutation %d: outcome job %v origin %v, want %v %v", i, o.Job, o.Origin, m.Job, m.Origin)
		}
	}
}
