package readapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/wire"
)

type pullAnswer struct {
	Cookie                json.RawMessage   `json:"cookie"`
	LastMutationIDChanges map[string]uint64 `json:"lastMutationIDChanges"`
	Patch                 []patchOp         `json:"patch"`
	Error                 string            `json:"error"`
}

func (e *env) pull(tok, group, cookie string) (*response, pullAnswer) {
	e.t.Helper()
	body := `{"pullVersion":1,"clientGroupID":"` + group + `","cookie":` + cookie + `,"profileID":"p","schemaVersion":""}`
	r := e.api.do(http.MethodPost, "/replicache/v1/acme/doc/pull", tok, []byte(body))
	var a pullAnswer
	if r.status == http.StatusOK {
		r.json(e.t, &a)
	}
	return r, a
}

func ops(a pullAnswer) []string {
	var out []string
	for _, op := range a.Patch {
		out = append(out, op.Op+" "+op.Key+" "+string(op.Value))
	}
	return out
}

func TestReplicachePull(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token("user:c1", []string{"doc"}, auth.ScopeRead)

	// A new client group on a project with no version yet: an empty view.
	r, a := e.pull(tok, "g-c1", "null")
	if r.status != 200 || string(a.Cookie) != "0" || !reflect.DeepEqual(ops(a), []string{"clear  "}) {
		t.Fatalf("first pull: %d %s", r.status, r.body)
	}

	fill(e)
	// From nothing: a clear, every item and the scalars, and the group's
	// clients' last ids.
	r, a = e.pull(tok, "g-c1", "null")
	want := []string{"clear  ", `put notes/a {"x":1,"y":2}`, `put _scalar/name "Doc"`}
	if r.status != 200 || string(a.Cookie) != "6" || !reflect.DeepEqual(ops(a), want) ||
		!reflect.DeepEqual(a.LastMutationIDChanges, map[string]uint64{"c1": 4}) {
		t.Fatalf("pull from null: %d %s", r.status, r.body)
	}
	// From version 2: b/1 came and went (no change), a was patched.
	_, a = e.pull(tok, "g-c1", "2")
	if want := []string{`put notes/a {"x":1,"y":2}`}; !reflect.DeepEqual(ops(a), want) || string(a.Cookie) != "6" {
		t.Fatalf("pull from 2: %s", ops(a))
	}
	// From version 3: b/1 existed and is gone.
	_, a = e.pull(tok, "g-c1", "3")
	if want := []string{"del notes/b/1 ", `put notes/a {"x":1,"y":2}`}; !reflect.DeepEqual(ops(a), want) {
		t.Fatalf("pull from 3: %s", ops(a))
	}
	// At the head: nothing, not even last ids (Replicache logs an error
	// for last ids with an unchanged cookie).
	_, a = e.pull(tok, "g-c1", "6")
	if len(a.Patch) != 0 || len(a.LastMutationIDChanges) != 0 || string(a.Cookie) != "6" {
		t.Fatalf("pull at the head: %+v", a)
	}

	// Scalars deleted and changed.
	e.decide(mut{project: "doc", client: "c1", id: 5, name: "project.set", args: `{"name":null,"topic":"x"}`})
	_, a = e.pull(tok, "g-c1", "6")
	if want := []string{"del _scalar/name ", `put _scalar/topic "x"`}; !reflect.DeepEqual(ops(a), want) ||
		!reflect.DeepEqual(a.LastMutationIDChanges, map[string]uint64{"c1": 5}) {
		t.Fatalf("scalars: %s %v", ops(a), a.LastMutationIDChanges)
	}

	// A cookie from the future, from a group the store knows: a reset
	// whose cookie keeps the client's order; the next pull goes on from it.
	r, a = e.pull(tok, "g-c1", "40")
	if r.status != 200 || string(a.Cookie) != `{"order":40,"version":7}` || a.Patch[0].Op != "clear" || len(a.Patch) != 3 {
		t.Fatalf("future cookie: %d %s", r.status, r.body)
	}
	e.decide(mut{project: "doc", client: "c1", id: 6, name: "item.put", args: `{"collection":"notes","id":"n","data":1}`})
	_, a = e.pull(tok, "g-c1", `{"order":40,"version":7}`)
	if string(a.Cookie) != `{"order":40,"version":8}` || !reflect.DeepEqual(ops(a), []string{"put notes/n 1"}) {
		t.Fatalf("after the reset: %s %s", a.Cookie, ops(a))
	}
	// From a group it does not know: the client's state is lost.
	_, a = e.pull(tok, "g-unknown", "40")
	if a.Error != "ClientStateNotFound" {
		t.Fatalf("future cookie of an unknown group: %+v", a)
	}
	// An unknown group within the history pulls normally (it has not
	// pushed yet, or only reads).
	_, a = e.pull(tok, "g-unknown", "7")
	if a.Error != "" || !reflect.DeepEqual(ops(a), []string{"put notes/n 1"}) || len(a.LastMutationIDChanges) != 0 {
		t.Fatalf("unknown group: %+v", a)
	}

	// Another principal's group.
	mallory := e.token("mallory", []string{"doc"}, auth.ScopeRead)
	if r, _ := e.pull(mallory, "g-c1", "null"); r.status != http.StatusForbidden || r.errorCode() != wire.CodeForbidden {
		t.Fatalf("another principal's group: %d %s", r.status, r.body)
	}
	// Protocol and input errors.
	r = e.api.do(http.MethodPost, "/replicache/v1/acme/doc/pull", tok, []byte(`{"pullVersion":0,"clientGroupID":"g"}`))
	if r.status != 200 || string(r.body) != `{"error":"VersionNotSupported","versionType":"pull"}`+"\n" {
		t.Fatalf("pullVersion 0: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"pullVersion":1,"clientGroupID":"g","cookie":"x"}`, 400, wire.CodeInvalid},
		{`{"pullVersion":1,"clientGroupID":"g","cookie":-1}`, 400, wire.CodeInvalid},
		{`{"pullVersion":1,"clientGroupID":"g","cookie":{"order":1,"version":2}}`, 400, wire.CodeInvalid},
		{`{"pullVersion":1,"clientGroupID":""}`, 400, wire.CodeInvalid},
		{`{"pullVersion":1`, 400, wire.CodeMalformed},
	} {
		r := e.api.do(http.MethodPost, "/replicache/v1/acme/doc/pull", tok, []byte(c.body))
		if r.status != c.status || r.errorCode() != c.code {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
	r = e.api.do(http.MethodPost, "/replicache/v1/acme/doc/pull", tok, nil, "Content-Type", "text/plain")
	if r.status != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d %s", r.status, r.body)
	}
}
