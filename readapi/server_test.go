package readapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/live"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// fill makes a history on project "doc" of acme: two clients, puts,
// patches, a delete, scalars, an errored mutation, a branch.
func fill(e *env) {
	e.t.Helper()
	kinds := e.decide(
		mut{project: "doc", client: "c1", id: 1, name: "project.set", args: `{"name":"Doc"}`},                                             // v1
		mut{project: "doc", client: "c1", id: 2, name: "item.put", args: `{"collection":"notes","id":"a","meta":{"t":1},"data":{"x":1}}`}, // v2
		mut{project: "doc", client: "c2", id: 1, name: "item.put", args: `{"collection":"notes","id":"b/1","data":"bee"}`},                // v3
		mut{project: "doc", client: "c2", id: 2, name: "item.patch", args: `{"collection":"notes","id":"a","data":{"y":2}}`},              // v4
		mut{project: "doc", client: "c1", id: 3, name: "item.delete", args: `{"collection":"notes","id":"nope"}`},                         // v5: error
		mut{project: "doc", client: "c1", id: 4, name: "item.delete", args: `{"collection":"notes","id":"b/1"}`},                          // v6
		mut{project: "doc", branch: "feat", client: "c3", id: 1, name: "branch.create", args: `{"from":"main","version":4}`},              // feat v1
	)
	want := []model.Kind{model.Applied, model.Applied, model.Applied, model.Applied, model.Errored, model.Applied, model.Applied}
	if !slices.Equal(kinds, want) {
		e.t.Fatalf("decisions %v, want %v", kinds, want)
	}
}

func TestReads(t *testing.T) {
	e := newEnv(t, nil)
	fill(e)
	tok := e.token("ann", []string{"doc"}, auth.ScopeRead)
	api := e.api

	// The latest state, metadata only.
	r := api.get("/v1/projects/acme/doc", tok)
	var st StateResponse
	r.json(t, &st)
	if r.status != 200 || st.Version != 6 || string(st.Scalars["name"]) != `"Doc"` || len(st.Collections["notes"]) != 1 {
		t.Fatalf("state: %d %s", r.status, r.body)
	}
	a := st.Collections["notes"][0]
	if a.ID != "a" || a.Version != 4 || string(a.Meta) != `{"t":1}` || a.Data != nil {
		t.Fatalf("item a: %+v", a)
	}
	if r.header.Get("Cache-Control") != cacheRevalidate || r.header.Get("ETag") == "" {
		t.Fatalf("latest state headers: %v", r.header)
	}
	// Revalidation: 304 while the head has not moved.
	etag := r.header.Get("ETag")
	if r := api.get("/v1/projects/acme/doc", tok, "If-None-Match", etag); r.status != 304 || len(r.body) != 0 {
		t.Fatalf("If-None-Match: %d %s", r.status, r.body)
	}
	// The bodies, at an older version, cacheable forever.
	r = api.get("/v1/projects/acme/doc?at=3&items=full", tok)
	r.json(t, &st)
	if r.status != 200 || st.Version != 3 || len(st.Collections["notes"]) != 2 || r.header.Get("Cache-Control") != cacheImmutable {
		t.Fatalf("state at 3: %d %s", r.status, r.body)
	}
	if got := string(st.Collections["notes"][0].Data) + string(st.Collections["notes"][1].Data); got != `{"x":1}"bee"` {
		t.Fatalf("bodies at 3: %s", got)
	}
	if r.header.Get("ETag") == etag {
		t.Fatal("the state at 3 has the ETag of the state at 6")
	}
	if r := api.get("/v1/projects/acme/doc?at=3", tok, "If-None-Match", etag); r.status != 200 {
		t.Fatalf("another version's ETag: %d", r.status)
	}

	// One item, with an id that needs escaping, at an older version.
	r = api.get("/v1/projects/acme/doc/items/notes/"+url.PathEscape("b/1")+"?at=5", tok)
	var it ItemResponse
	r.json(t, &it)
	if r.status != 200 || it.ID != "b/1" || string(it.Data) != `"bee"` || it.Version != 3 || len(it.Chunks) != 1 {
		t.Fatalf("item b/1 at 5: %d %s", r.status, r.body)
	}
	r = api.get("/v1/projects/acme/doc/items/notes/a", tok)
	r.json(t, &it)
	if r.status != 200 || string(it.Data) != `{"x":1,"y":2}` || it.Version != 4 {
		t.Fatalf("item a: %d %s", r.status, r.body)
	}
	if r2 := api.get("/v1/projects/acme/doc/items/notes/a", tok, "If-None-Match", r.header.Get("ETag")); r2.status != 304 {
		t.Fatalf("item revalidation: %d", r2.status)
	}

	// The body by hash, immutable.
	r = api.get("/v1/projects/acme/doc/blobs/"+it.Hash, tok)
	if r.status != 200 || string(r.body) != `{"x":1,"y":2}` || r.header.Get("Cache-Control") != cacheImmutable ||
		r.header.Get("ETag") != `"`+it.Hash+`"` {
		t.Fatalf("blob: %d %s %v", r.status, r.body, r.header)
	}
	if r := api.get("/v1/projects/acme/doc/blobs/"+it.Hash, tok, "If-None-Match", `"`+it.Hash+`"`); r.status != 304 {
		t.Fatalf("blob revalidation: %d", r.status)
	}

	// Versions, paged.
	var vs VersionsResponse
	r = api.get("/v1/projects/acme/doc/versions?limit=4", tok)
	r.json(t, &vs)
	if r.status != 200 || len(vs.Versions) != 4 || vs.Next != 5 || vs.Head != 6 || vs.Versions[1].Mutations[0].Name != "item.put" {
		t.Fatalf("versions page 1: %d %s", r.status, r.body)
	}
	r = api.get(fmt.Sprintf("/v1/projects/acme/doc/versions?limit=4&from=%d", vs.Next), tok)
	vs = VersionsResponse{}
	r.json(t, &vs)
	if r.status != 200 || len(vs.Versions) != 2 || vs.Next != 0 || vs.Versions[0].Mutations[0].Status != "error" {
		t.Fatalf("versions page 2: %d %s", r.status, r.body)
	}
	if r2 := api.get("/v1/projects/acme/doc/versions?limit=4&from=5", tok, "If-None-Match", r.header.Get("ETag")); r2.status != 304 {
		t.Fatalf("versions revalidation: %d", r2.status)
	}
	r = api.get("/v1/projects/acme/doc/versions?from=7", tok)
	r.json(t, &vs)
	if r.status != 200 || len(vs.Versions) != 0 || vs.Head != 6 {
		t.Fatalf("versions past the head: %d %s", r.status, r.body)
	}
	r = api.get("/v1/projects/acme/doc/versions?branch=feat", tok)
	r.json(t, &vs)
	if r.status != 200 || len(vs.Versions) != 1 || vs.Versions[0].Base == nil || vs.Versions[0].Base.Version != 4 {
		t.Fatalf("versions of feat: %d %s", r.status, r.body)
	}

	// Clients and mutations.
	var cl ClientResponse
	r = api.get("/v1/projects/acme/doc/clients/c1", tok)
	r.json(t, &cl)
	if r.status != 200 || cl.LastMutationID != 4 {
		t.Fatalf("client c1: %d %s", r.status, r.body)
	}
	r = api.get("/v1/projects/acme/doc/clients/nobody", tok)
	r.json(t, &cl)
	if r.status != 200 || cl.LastMutationID != 0 {
		t.Fatalf("client nobody: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path    string
		status  string
		applied bool
		version uint64
		errText string
		code    string
	}{
		{"c1/mutations/2", StatusApplied, true, 2, "", ""},
		{"c1/mutations/3", StatusError, false, 5, "does not exist", "not_found"},
		{"c1/mutations/5", StatusPending, false, 0, "", ""},
		{"c3/mutations/1?branch=feat", StatusApplied, true, 1, "", ""},
		{"c3/mutations/1", StatusPending, false, 0, "", ""},
	} {
		var m MutationResponse
		r := api.get("/v1/projects/acme/doc/clients/"+c.path, tok)
		r.json(t, &m)
		if r.status != 200 || m.Status != c.status || m.Applied != c.applied || m.Version != c.version || !strings.Contains(m.Error, c.errText) || m.Code != c.code {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
	}

	// Mutations the sequencer rejected say why, also on a branch that
	// their rejection kept from being created.
	if err := e.st.RecordRejections([]*schemas.Rejected{
		{Reason: schemas.ReasonGap, Message: "expected id 5", ExpectedID: 5,
			Mutation: &schemas.Mutation{Org: "acme", Project: "doc", Client: "c1", ID: 7}},
		{Reason: schemas.ReasonUnauthorized, Message: "the client group belongs to user:ann",
			Mutation: &schemas.Mutation{Org: "acme", Project: "doc", Branch: "taken", Client: "m1", ID: 1}},
	}, 0, -1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, reason string
		expected     uint64
	}{
		{"c1/mutations/7", schemas.ReasonGap, 5},
		{"m1/mutations/1?branch=taken", schemas.ReasonUnauthorized, 0},
	} {
		var m MutationResponse
		r := api.get("/v1/projects/acme/doc/clients/"+c.path, tok)
		r.json(t, &m)
		if r.status != 200 || m.Status != StatusRejected || m.Applied || m.Reason != c.reason || m.ExpectedID != c.expected || m.Message == "" {
			t.Fatalf("%s: %d %s; want rejected (%s)", c.path, r.status, r.body, c.reason)
		}
	}
}

func TestErrors(t *testing.T) {
	onP0 := projectIn(0, 0)
	e := newEnv(t, []int32{1, 2, 3})
	fill(e)
	tok := e.token("ann", []string{"doc", onP0}, auth.ScopeRead)
	other := e.token("bob", []string{"other"}, auth.ScopeWrite)
	hash := strings.Repeat("ab", 32)
	for _, c := range []struct {
		path, token string
		status      int
		code, field string
	}{
		{"/v1/projects/acme/doc", "", http.StatusUnauthorized, wire.CodeUnauthenticated, ""},
		{"/v1/projects/acme/doc", "garbage", http.StatusUnauthorized, wire.CodeUnauthenticated, ""},
		{"/v1/projects/acme/doc", other, http.StatusForbidden, wire.CodeForbidden, ""},
		{"/v1/projects/Acme/doc", tok, http.StatusBadRequest, wire.CodeInvalid, "org"},
		{"/v1/projects/acme/doc?at=0", tok, http.StatusBadRequest, wire.CodeInvalid, "at"},
		{"/v1/projects/acme/doc?at=x", tok, http.StatusBadRequest, wire.CodeInvalid, "at"},
		{"/v1/projects/acme/doc?items=all", tok, http.StatusBadRequest, wire.CodeInvalid, "items"},
		{"/v1/projects/acme/doc?brnch=main", tok, http.StatusBadRequest, wire.CodeInvalid, "brnch"},
		{"/v1/projects/acme/doc?branch=-x", tok, http.StatusBadRequest, wire.CodeInvalid, "branch"},
		{"/v1/projects/acme/doc?at=1&at=2", tok, http.StatusBadRequest, wire.CodeInvalid, "at"},
		{"/v1/projects/acme/doc/versions?limit=5000", tok, http.StatusBadRequest, wire.CodeInvalid, "limit"},
		{"/v1/projects/acme/doc/items/no%20tes/a", tok, http.StatusBadRequest, wire.CodeInvalid, "collection"},
		{"/v1/projects/acme/doc/blobs/ABC", tok, http.StatusBadRequest, wire.CodeInvalid, "hash"},
		{"/v1/projects/acme/doc/clients/c1/mutations/0", tok, http.StatusBadRequest, wire.CodeInvalid, "id"},
		{"/v1/projects/acme/doc?branch=nope", tok, http.StatusNotFound, wire.CodeBranchNotFound, ""},
		{"/v1/projects/acme/doc?at=7", tok, http.StatusNotFound, wire.CodeVersionNotFound, "at"},
		{"/v1/projects/acme/doc/versions?branch=nope", tok, http.StatusNotFound, wire.CodeBranchNotFound, ""},
		{"/v1/projects/acme/doc/items/notes/b%2F1", tok, http.StatusNotFound, wire.CodeItemNotFound, ""},
		{"/v1/projects/acme/doc/items/notes/a?at=1", tok, http.StatusNotFound, wire.CodeItemNotFound, ""},
		{"/v1/projects/acme/doc/blobs/" + hash, tok, http.StatusNotFound, wire.CodeBlobNotFound, ""},
		{"/v1/projects/acme/doc/clients/c1?branch=nope", tok, http.StatusNotFound, wire.CodeBranchNotFound, ""},
		{"/v1/projects/acme/" + onP0, tok, http.StatusMisdirectedRequest, wire.CodePartitionNotServed, ""},
	} {
		r := e.api.get(c.path, c.token)
		if r.status != c.status || r.errorCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.path, r.status, r.body, c.status, c.code)
			continue
		}
		var body struct{ Error wire.Error }
		r.json(t, &body)
		if body.Error.Field != c.field || body.Error.Message == "" {
			t.Errorf("%s: field %q, want %q: %s", c.path, body.Error.Field, c.field, r.body)
		}
		if c.status == http.StatusMisdirectedRequest && !strings.Contains(body.Error.Message, "partition 0") {
			t.Errorf("%s: the error does not name the partition: %s", c.path, r.body)
		}
	}
}

// The OpenAPI document and the mux agree: every route of the server is in
// the document with its method, and the document has no other.
func TestRoutesMatchOpenAPI(t *testing.T) {
	doc, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	var inDoc, inMux []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inDoc = append(inDoc, method+" "+path)
		}
	}
	e := newEnv(t, nil)
	for _, r := range e.srv.Routes() {
		inMux = append(inMux, r.Method+" "+r.Path)
	}
	// The same server (a node of canon dev) mounts the producer's pushes
	// and the live projector's websocket; neither connects to Kafka
	// before it runs.
	p, err := producer.New(producer.Config{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:1"}}, Keys: e.keys.VerifyOnly()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ws, err := live.New(live.Config{Store: e.st, Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:1"}}, Keys: e.keys.VerifyOnly()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	e.srv.Mount(mux)
	p.Mount(mux)
	ws.Mount(mux)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	for pattern := range p.Routes() {
		inMux = append(inMux, pattern)
	}
	inMux = append(inMux, "GET /v1/projects/{org}/{project}/ws")
	slices.Sort(inDoc)
	slices.Sort(inMux)
	if !slices.Equal(inDoc, inMux) {
		t.Fatalf("docs/openapi.yaml has\n  %s\nthe server mounts\n  %s", strings.Join(inDoc, "\n  "), strings.Join(inMux, "\n  "))
	}
	// And Mount registers exactly those: a request to each reaches a
	// handler (401 without a token, 400 for the websocket without an
	// upgrade), not the mux's 404 or 405.
	for _, pattern := range inMux {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{org}", "acme", "{project}", "doc", "{collection}", "c", "{id}", "1",
			"{hash}", strings.Repeat("0", 64), "{client}", "c1").Replace(path)
		req, _ := http.NewRequestWithContext(context.Background(), method, hs.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusUnsupportedMediaType
		if strings.HasSuffix(path, "/ws") {
			// gorilla's answer to a request that is no upgrade
			want = resp.StatusCode == http.StatusBadRequest && resp.Header.Get("Sec-Websocket-Version") == "13"
		}
		if !want {
			t.Errorf("%s %s: %d %s", method, path, resp.StatusCode, body)
		}
	}
}

// On a node that also runs the sequencer, the store holds the partitions
// the sequencer owns at the moment: the others are 421 until it owns them.
func TestServesFollowsOwnership(t *testing.T) {
	e := newEnv(t, nil)
	fill(e)
	tok := e.token("ann", []string{"doc"}, auth.ScopeRead)
	doc := e.st.PartitionOf("acme", "doc")
	var owned atomic.Bool
	e.srv.cfg.Serves = func(p int32) bool { return p != doc || owned.Load() }

	r := e.api.get("/v1/projects/acme/doc", tok)
	if r.status != http.StatusMisdirectedRequest || r.errorCode() != wire.CodePartitionNotServed || !strings.Contains(string(r.body), fmt.Sprintf("partition %d", doc)) {
		t.Fatalf("not owned: %d %s", r.status, r.body)
	}
	owned.Store(true)
	if r := e.api.get("/v1/projects/acme/doc", tok); r.status != http.StatusOK {
		t.Fatalf("owned: %d %s", r.status, r.body)
	}
}

// Every route reads the Authorization header with the one parser: the
// scheme in any case, a bare token (what Replicache sends), and a 401 that
// says what to send for another scheme.
func TestAuthorizationHeader(t *testing.T) {
	e := newEnv(t, []int32{1, 2, 3})
	fill(e)
	tok := e.token("ann", []string{"doc"}, auth.ScopeRead)
	pull := []byte(`{"pullVersion":1,"clientGroupID":"g-auth","cookie":null,"profileID":"p","schemaVersion":""}`)
	for _, c := range []struct {
		header string
		status int
	}{
		{"Bearer " + tok, http.StatusOK},
		{"bearer " + tok, http.StatusOK},
		{"BEARER  " + tok, http.StatusOK},
		{tok, http.StatusOK},
		{"Basic " + tok, http.StatusUnauthorized},
	} {
		for _, r := range []*response{
			e.api.do(http.MethodGet, "/v1/projects/acme/doc", "", nil, "Authorization", c.header),
			e.api.do(http.MethodPost, "/replicache/v1/acme/doc/pull", "", pull, "Authorization", c.header),
		} {
			if r.status != c.status {
				t.Errorf("Authorization %.12q…: %d %s, want %d", c.header, r.status, r.body, c.status)
			}
			if r.status == http.StatusUnauthorized && !strings.Contains(string(r.body), "Bearer TOKEN") {
				t.Errorf("Authorization %.12q…: %s does not say what to send", c.header, r.body)
			}
		}
	}
}
