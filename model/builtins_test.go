package model_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// testEnv is a MemState and a Decider over it that commit every decision.
type testEnv struct {
	t     testing.TB
	state *modeltest.MemState
	dec   *model.Decider
	reg   *model.Registry // dec's
	ids   map[string]uint64
	off   int64
}

func newTestEnv(t testing.TB, limits schemas.Limits) *testEnv {
	s, reg := modeltest.NewMemState(), testRegistry(t)
	return &testEnv{t: t, state: s, dec: model.NewDecider(s, reg, limits), reg: reg, ids: map[string]uint64{}}
}

// decide decides the next mutation of a client on main, without committing.
func (e *testEnv) decide(client, name, args string) model.Decision {
	e.t.Helper()
	return e.decideOn(schemas.DefaultBranch, client, name, args)
}

func (e *testEnv) decideOn(branch, client, name, args string) model.Decision {
	e.t.Helper()
	e.ids[branch+"/"+client]++
	e.off++
	d, err := e.dec.Decide(model.MutationRecord{
		Mutation: &schemas.Mutation{
			Org: testOrg, Project: testProject, Branch: branch, Client: client, ClientGroup: "g",
			ID: e.ids[branch+"/"+client], Name: name, Args: json.RawMessage(args),
		},
		Timestamp: testEpoch.Add(time.Duration(e.off) * time.Millisecond),
		Offset:    e.off,
	})
	if err != nil {
		e.t.Fatalf("decide %s %s: %v", name, args, err)
	}
	return d
}

// commit applies decisions to the MemState and resets the Decider.
func (e *testEnv) commit(ds ...model.Decision) {
	e.t.Helper()
	for _, d := range ds {
		if d.Version != nil {
			if err := e.state.Apply(d.Version, d.Chunks); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	e.dec.Reset()
}

// run decides and commits, and wants the mutation applied.
func (e *testEnv) run(client, name, args string) model.Decision {
	e.t.Helper()
	d := e.decide(client, name, args)
	if d.Kind != model.Applied {
		e.t.Fatalf("%s %s: %v %s", name, args, d.Kind, outcomeError(d))
	}
	e.commit(d)
	return d
}

func outcomeError(d model.Decision) string {
	if d.Version != nil && len(d.Version.Mutations) > 0 {
		return d.Version.Mutations[0].Error
	}
	return d.Message
}

// item is an item's "meta data" at main's head, or "-" when missing.
func (e *testEnv) item(collection, id string) string {
	e.t.Helper()
	ref, ok, err := e.state.ItemRef(testOrg, testProject, schemas.DefaultBranch, collection, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if !ok {
		return "-"
	}
	body, err := e.state.Body(testOrg, testProject, ref.Hash)
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprintf("%s %s", ref.Meta, body)
}

type builtinCase struct {
	args string
	// err is a part of the wanted error outcome; "" wants it applied.
	err string
	// item is tasks/t1's "meta data" afterwards, when applied.
	item string
}

// testBuiltin runs each case on a fresh state holding tasks/t1.
func testBuiltin(t *testing.T, name string, cases []builtinCase) {
	t.Helper()
	for _, tc := range cases {
		e := newTestEnv(t, schemas.Limits{MaxMetaBytes: 64, MaxDataBytes: 128, MaxScalarsBytes: 64})
		e.run("setup", model.ItemPut, `{"collection":"tasks","id":"t1","meta":{"m":1},"data":{"title":"hello","n":1}}`)
		d := e.decide("x", name, tc.args)
		e.commit(d)
		switch {
		case tc.err == "" && d.Kind != model.Applied:
			t.Errorf("%s %s: %v %s, want applied", name, tc.args, d.Kind, outcomeError(d))
		case tc.err != "" && (d.Kind != model.Errored || !strings.Contains(outcomeError(d), tc.err)):
			t.Errorf("%s %s: %v %q, want an error outcome with %q", name, tc.args, d.Kind, outcomeError(d), tc.err)
		case tc.item != "":
			if got := e.item("tasks", "t1"); got != tc.item {
				t.Errorf("%s %s: tasks/t1 is %s, want %s", name, tc.args, got, tc.item)
			}
		}
		if tc.err != "" {
			if got, want := e.item("tasks", "t1"), `{"m":1} {"n":1,"title":"hello"}`; got != want {
				t.Errorf("%s %s failed but changed tasks/t1 to %s", name, tc.args, got)
			}
		}
	}
}

func TestItemPutArgs(t *testing.T) {
	testBuiltin(t, model.ItemPut, []builtinCase{
		{args: `{"collection":"tasks","id":"t1","data":[1, 2]}`, item: `{} [1,2]`},
		{args: `{"collection":"tasks","id":"t1","meta":{"b":1,"a":2},"data":null}`, item: `{"a":2,"b":1} null`},
		{args: `{"collection":"tasks","id":"t2","data":"new"}`, item: `{"m":1} {"n":1,"title":"hello"}`},
		{args: `{"collection":"tasks","id":"t1","meta":{"b":1,"a":2},"data":null}`, item: `{"a":2,"b":1} null`},
		{args: `[]`, err: `field "args": must be a JSON object`},
		{args: `null`, err: `field "args": must be a JSON object`},
		{args: `{"id":"t1","data":1}`, err: `"args.collection": is required`},
		{args: `{"collection":"","id":"t1","data":1}`, err: `"args.collection": "" is not a valid collection`},
		{args: `{"collection":"a/b","id":"t1","data":1}`, err: `not a valid collection`},
		{args: `{"collection":"tasks","data":1}`, err: `"args.id": is required`},
		{args: `{"collection":"tasks","id":"a\nb","data":1}`, err: `"args.id": contains the control character`},
		{args: `{"collection":"tasks","id":"` + strings.Repeat("x", 257) + `","data":1}`, err: `over the limit of 256`},
		{args: `{"collection":["tasks"],"id":"t1","data":1}`, err: `"args.collection": must be a string, not an array`},
		{args: `{"collection":"tasks","id":"t1"}`, err: `"args.data": is required`},
		{args: `{"collection":"tasks","id":"t1","meta":"m","data":1}`, err: `"args.meta": must be a JSON object, not a string`},
		{args: `{"collection":"tasks","id":"t1","meta":null,"data":1}`, err: `"args.meta": must be a JSON object, not null`},
		{args: `{"collection":"tasks","id":"t1","data":1,"extra":true}`, err: `"args.extra": unknown field`},
		{args: `{"collection":"tasks","id":"t1","data":"\ud800"}`, err: `field "args": canonicalize JSON: Missing surrogate`},
		{args: `{"collection":"tasks","id":"t1","meta":{"big":"` + strings.Repeat("m", 64) + `"},"data":1}`, err: `(MaxMetaBytes)`},
		{args: `{"collection":"tasks","id":"t1","data":"` + strings.Repeat("d", 127) + `"}`, err: `data is 129 bytes of canonical JSON, over the limit of 128 bytes (MaxDataBytes)`},
	})
}

func TestItemPatchArgs(t *testing.T) {
	testBuiltin(t, model.ItemPatch, []builtinCase{
		{args: `{"collection":"tasks","id":"t1","data":{"title":"bye"}}`, item: `{"m":1} {"n":1,"title":"bye"}`},
		{args: `{"collection":"tasks","id":"t1","meta":{"m":null,"k":[1]}}`, item: `{"k":[1]} {"n":1,"title":"hello"}`},
		{args: `{"collection":"tasks","id":"t1","meta":{},"data":{}}`, item: `{"m":1} {"n":1,"title":"hello"}`},
		{args: `{"collection":"tasks","id":"t1","data":"replaced"}`, item: `{"m":1} "replaced"`},
		{args: `{"collection":"tasks","id":"t1","data":null}`, item: `{"m":1} null`},
		{args: `{"collection":"tasks","id":"t1"}`, err: `patches nothing`},
		{args: `{"collection":"tasks","id":"t2","data":{}}`, err: `item tasks/t2 does not exist (deleted or never created)`},
		{args: `{"collection":"tasks","id":"t1","meta":[1]}`, err: `"args.meta": the patched meta would be an array`},
		{args: `{"collection":"tasks","id":"t1","meta":null}`, err: `"args.meta": the patched meta would be null`},
		{args: `{"collection":"tasks","id":"t1","data":{},"patch":{}}`, err: `"args.patch": unknown field`},
		{args: `{"collection":"tasks","id":"t1","data":{"t":"` + strings.Repeat("d", 120) + `"}}`, err: `(MaxDataBytes)`},
		{args: `{"collection":"tasks","id":"t1","meta":{"t":"` + strings.Repeat("d", 60) + `"}}`, err: `(MaxMetaBytes)`},
	})
}

func TestItemDeleteArgs(t *testing.T) {
	testBuiltin(t, model.ItemDelete, []builtinCase{
		{args: `{"collection":"tasks","id":"t1"}`},
		{args: `{"collection":"tasks","id":"t2"}`, err: `item tasks/t2 does not exist`},
		{args: `{"collection":"tasks"}`, err: `"args.id": is required`},
		{args: `{"collection":"tasks","id":"t1","meta":{}}`, err: `"args.meta": unknown field`},
		{args: `"t1"`, err: `must be a JSON object`},
	})
	e := newTestEnv(t, schemas.Limits{})
	e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":1}`)
	e.run("a", model.ItemDelete, `{"collection":"tasks","id":"t1"}`)
	if got := e.item("tasks", "t1"); got != "-" {
		t.Errorf("deleted item is %s", got)
	}
}

func TestItemSpliceArgs(t *testing.T) {
	testBuiltin(t, model.ItemSplice, []builtinCase{
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":5,"insert":"!"}`, item: `{"m":1} {"n":1,"title":"hello!"}`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"delete":1,"insert":"J"}`, item: `{"m":1} {"n":1,"title":"Jello"}`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"delete":5}`, item: `{"m":1} {"n":1,"title":""}`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0}`, item: `{"m":1} {"n":1,"title":"hello"}`},
		{args: `{"collection":"tasks","id":"t1","path":"/title"}`, err: `"args.index": is required`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":"1"}`, err: `"args.index": must be an integer >= 0, not "1"`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":1e0,"insert":"!"}`, item: `{"m":1} {"n":1,"title":"h!ello"}`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"delete":-2}`, err: `"args.delete": must be an integer >= 0`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"delete":null}`, err: `"args.delete": must be an integer >= 0`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"insert":null}`, err: `"args.insert": must be a string, not null`},
		{args: `{"collection":"tasks","id":"t1","path":5,"index":0}`, err: `"args.path": must be a string`},
		{args: `{"collection":"tasks","id":"t1","path":"title","index":0}`, err: `"args.path": path "title" is not a JSON pointer`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":6}`, err: `index 6 is out of range: the string is 5 UTF-16 code units long`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":3,"delete":3}`, err: `runs past the end`},
		{args: `{"collection":"tasks","id":"t1","path":"/n","index":0}`, err: `data at path "/n": the target is a number, not a string`},
		{args: `{"collection":"tasks","id":"t1","index":0}`, err: `data: the target is an object, not a string`},
		{args: `{"collection":"tasks","id":"t9","path":"/title","index":0}`, err: `item tasks/t9 does not exist`},
		{args: `{"collection":"tasks","id":"t1","path":"/title","index":0,"insert":"` + strings.Repeat("x", 120) + `"}`, err: `(MaxDataBytes)`},
	})
}

func TestProjectSetArgs(t *testing.T) {
	for _, tc := range []struct {
		args, err, want string
	}{
		{args: `{"name":"P","n":1.0}`, want: `{"n":1,"name":"P"}`},
		{args: `{"name":null}`, want: `{}`},
		{args: `{"absent":null}`, want: `{}`},
		{args: `{"name":{"nested":[true]}}`, want: `{"name":{"nested":[true]}}`},
		{args: `{}`, err: `sets no scalar`},
		{args: `[]`, err: `must be a JSON object of scalar name`},
		{args: `{"1st":1}`, err: `"1st" is not a valid scalar name`},
		{args: `{"ok":1,"no-dash":1}`, err: `"no-dash" is not a valid scalar name`},
		{args: `{"a":"\ud800"}`, err: `Missing surrogate`},
		{args: `{"long":"` + strings.Repeat("x", 60) + `"}`, err: `scalars would be 71 bytes of canonical JSON, over the limit of 64 bytes (MaxScalarsBytes)`},
	} {
		e := newTestEnv(t, schemas.Limits{MaxScalarsBytes: 64})
		d := e.decide("x", model.ProjectSet, tc.args)
		e.commit(d)
		if tc.err != "" {
			if d.Kind != model.Errored || !strings.Contains(outcomeError(d), tc.err) {
				t.Errorf("project.set %s: %v %q, want an error outcome with %q", tc.args, d.Kind, outcomeError(d), tc.err)
			}
			continue
		}
		if d.Kind != model.Applied {
			t.Errorf("project.set %s: %v %s", tc.args, d.Kind, outcomeError(d))
			continue
		}
		got, err := json.Marshal(d.Version.Scalars)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := model.Canonical(got); string(got) != tc.want {
			t.Errorf("project.set %s: scalars %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestBranchCreateArgs(t *testing.T) {
	for _, tc := range []struct {
		args string
		err  string
	}{
		{args: `{"from":"main"}`},
		{args: `{"from":"main","version":1}`},
		{args: `{"from":"main","version":0}`},
		{args: `{}`, err: `"args.from": is required`},
		{args: `{"from":""}`, err: `"args.from": "" is not a valid branch`},
		{args: `{"from":"main","version":-1}`, err: `"args.version": must be an integer >= 0`},
		{args: `{"from":"main","version":3}`, err: `branch main has no version 3: its head is 2`},
		{args: `{"from":"dev"}`, err: `branch dev does not exist`},
		{args: `{"from":"main","at":1}`, err: `"args.at": unknown field`},
		{args: `"main"`, err: `must be a JSON object`},
	} {
		e := newTestEnv(t, schemas.Limits{})
		e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":1}`)
		e.run("a", model.ItemPut, `{"collection":"tasks","id":"t1","data":2}`)
		d := e.decideOn("feature", "a", model.BranchCreate, tc.args)
		e.commit(d)
		if tc.err == "" {
			if d.Kind != model.Applied {
				t.Errorf("branch.create %s: %v %s", tc.args, d.Kind, outcomeError(d))
			}
			continue
		}
		// The branch does not exist: the failure cannot be recorded on it.
		if d.Kind != model.Rejected || d.Reason != schemas.ReasonInvalid || !strings.Contains(d.Message, tc.err) {
			t.Errorf("branch.create %s: %v %s %q, want rejected with %q", tc.args, d.Kind, d.Reason, d.Message, tc.err)
		}
		if h, _ := e.state.Head(testOrg, testProject, "feature"); h.Version != 0 {
			t.Errorf("branch.create %s failed but made version %d", tc.args, h.Version)
		}
	}
}
