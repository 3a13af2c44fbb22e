package readapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

func TestProjects(t *testing.T) {
	// The instance serves partitions 1 to 3: projects of 0 are not listed.
	e := newEnv(t, []int32{1, 2, 3})
	fill(e)
	var served, all []string
	for p := range int32(testPartitions) {
		for i := range 3 {
			name := projectIn(p, i)
			e.decide(mut{project: name, client: "c1", id: 1, name: "item.put", args: `{"collection":"c","id":"i","data":1}`})
			all = append(all, name)
			if p != 0 {
				served = append(served, name)
			}
		}
	}
	if e.st.PartitionOf("acme", "doc") != 0 {
		served = append(served, "doc")
	}
	slices.Sort(served)
	everything := e.token("ann", []string{"*"}, auth.ScopeRead)

	// One page: every served project, sorted, with its branches.
	var pr ProjectsResponse
	r := e.api.get("/v1/projects", everything)
	r.json(t, &pr)
	if r.status != 200 || pr.Org != "acme" || pr.Next != "" || r.header.Get("Cache-Control") != cacheRevalidate {
		t.Fatalf("projects: %d %s", r.status, r.body)
	}
	var names []string
	for _, p := range pr.Projects {
		names = append(names, p.Project)
		if p.Partition != e.st.PartitionOf("acme", p.Project) {
			t.Errorf("%s: partition %d, want %d", p.Project, p.Partition, e.st.PartitionOf("acme", p.Project))
		}
		want := []store.Branch{{Name: "main", Version: 1}}
		if p.Project == "doc" {
			want = []store.Branch{{Name: "feat", Version: 1}, {Name: "main", Version: 6}}
		}
		if !slices.Equal(p.Branches, want) {
			t.Errorf("%s: branches %+v, want %+v", p.Project, p.Branches, want)
		}
	}
	if !slices.Equal(names, served) {
		t.Fatalf("projects %v, want %v (all: %v)", names, served, all)
	}
	if r2 := e.api.get("/v1/projects", everything, "If-None-Match", r.header.Get("ETag")); r2.status != 304 {
		t.Fatalf("projects revalidation: %d", r2.status)
	}

	// Paged by 2 and by 1: the same projects, in order.
	for _, limit := range []int{1, 2} {
		var paged []string
		after := ""
		for {
			path := fmt.Sprintf("/v1/projects?org=acme&limit=%d", limit)
			if after != "" {
				path += "&after=" + after
			}
			var page ProjectsResponse
			r := e.api.get(path, everything)
			r.json(t, &page)
			if r.status != 200 || len(page.Projects) > limit {
				t.Fatalf("%s: %d %s", path, r.status, r.body)
			}
			for _, p := range page.Projects {
				paged = append(paged, p.Project)
			}
			if page.Next == "" {
				break
			}
			if page.Next <= after {
				t.Fatalf("%s: next %q does not move on", path, page.Next)
			}
			after = page.Next
		}
		if !slices.Equal(paged, served) {
			t.Errorf("by pages of %d: %v, want %v", limit, paged, served)
		}
	}

	// Only what the token reaches.
	only := e.token("bob", []string{"doc", served[0]}, auth.ScopeRead)
	r = e.api.get("/v1/projects", only)
	pr = ProjectsResponse{}
	r.json(t, &pr)
	names = nil
	for _, p := range pr.Projects {
		names = append(names, p.Project)
	}
	want := []string{"doc", served[0]}
	slices.Sort(want)
	want = slices.Compact(want)
	if r.status != 200 || !slices.Equal(names, want) {
		t.Fatalf("projects of a token for %v: %d %s", want, r.status, r.body)
	}

	for _, c := range []struct {
		path, token string
		status      int
		code, field string
	}{
		{"/v1/projects", "", http.StatusUnauthorized, wire.CodeUnauthenticated, ""},
		{"/v1/projects?org=other", everything, http.StatusForbidden, wire.CodeForbidden, ""},
		{"/v1/projects?org=Acme", everything, http.StatusBadRequest, wire.CodeInvalid, "org"},
		{"/v1/projects?after=-x", everything, http.StatusBadRequest, wire.CodeInvalid, "after"},
		{"/v1/projects?limit=0", everything, http.StatusBadRequest, wire.CodeInvalid, "limit"},
		{"/v1/projects?limit=1001", everything, http.StatusBadRequest, wire.CodeInvalid, "limit"},
		{"/v1/projects?project=doc", everything, http.StatusBadRequest, wire.CodeInvalid, "project"},
	} {
		r := e.api.get(c.path, c.token)
		var body struct{ Error wire.Error }
		r.json(t, &body)
		if r.status != c.status || body.Error.Code != c.code || body.Error.Field != c.field || body.Error.Hint == "" {
			t.Errorf("%s: %d %s, want %d %s field %q", c.path, r.status, r.body, c.status, c.code, c.field)
		}
	}
}

func TestBranches(t *testing.T) {
	e := newEnv(t, nil)
	fill(e)
	tok := e.token("ann", []string{"doc", "empty"}, auth.ScopeRead)
	var br BranchesResponse
	r := e.api.get("/v1/projects/acme/doc/branches", tok)
	r.json(t, &br)
	if want := []store.Branch{{Name: "feat", Version: 1}, {Name: "main", Version: 6}}; r.status != 200 || !slices.Equal(br.Branches, want) ||
		r.header.Get("Cache-Control") != cacheRevalidate {
		t.Fatalf("branches: %d %s", r.status, r.body)
	}
	if r2 := e.api.get("/v1/projects/acme/doc/branches", tok, "If-None-Match", r.header.Get("ETag")); r2.status != 304 {
		t.Fatalf("branches revalidation: %d", r2.status)
	}
	// A project without a version yet: no branch, not an error.
	r = e.api.get("/v1/projects/acme/empty/branches", tok)
	br = BranchesResponse{}
	r.json(t, &br)
	if r.status != 200 || br.Branches == nil || len(br.Branches) != 0 {
		t.Fatalf("branches of a project without versions: %d %s", r.status, r.body)
	}
	if r := e.api.get("/v1/projects/acme/other/branches", tok); r.status != http.StatusForbidden {
		t.Fatalf("branches of a project the token does not reach: %d %s", r.status, r.body)
	}
	if r := e.api.get("/v1/projects/acme/doc/branches?branch=main", tok); r.status != http.StatusBadRequest || r.errorCode() != wire.CodeInvalid {
		t.Fatalf("branches with ?branch=: %d %s", r.status, r.body)
	}
}

func TestItemHistory(t *testing.T) {
	e := newEnv(t, nil)
	fill(e)
	tok := e.token("ann", []string{"doc"}, auth.ScopeRead)

	get := func(path string) (*response, ItemHistoryResponse) {
		t.Helper()
		var h ItemHistoryResponse
		r := e.api.get(path, tok)
		if r.status == 200 {
			r.json(t, &h)
		}
		return r, h
	}
	type change struct {
		v    uint64
		op   string
		meta string
	}
	changes := func(h ItemHistoryResponse) []change {
		var out []change
		for _, c := range h.Changes {
			out = append(out, change{c.Version, c.Op, string(c.Meta)})
			if (c.Op == "put") != (c.Hash != "" && c.Size > 0 && c.TS > 0) {
				t.Errorf("change %+v: a put has a hash, a size and a time; a delete neither hash nor size", c)
			}
		}
		return out
	}

	// notes/a: put at 2, patched at 4 (the meta stays).
	r, h := get("/v1/projects/acme/doc/items/notes/a/history")
	if want := []change{{4, "put", `{"t":1}`}, {2, "put", `{"t":1}`}}; r.status != 200 || h.Head != 6 || h.Next != 0 ||
		!slices.Equal(changes(h), want) || r.header.Get("Cache-Control") != cacheRevalidate {
		t.Fatalf("history of notes/a: %d %s", r.status, r.body)
	}
	// The bodies of two versions, as blobs: what a diff compares.
	for i, want := range []string{`{"x":1,"y":2}`, `{"x":1}`} {
		if b := e.api.get("/v1/projects/acme/doc/blobs/"+h.Changes[i].Hash, tok); b.status != 200 || string(b.body) != want {
			t.Errorf("body of version %d: %d %s, want %s", h.Changes[i].Version, b.status, b.body, want)
		}
	}
	// notes/b/1 (escaped): put at 3, deleted at 6.
	r, h = get("/v1/projects/acme/doc/items/notes/" + url.PathEscape("b/1") + "/history")
	if want := []change{{6, "delete", ""}, {3, "put", "{}"}}; r.status != 200 || !slices.Equal(changes(h), want) {
		t.Fatalf("history of notes/b/1: %d %s", r.status, r.body)
	}
	// Pages of one, each older page cacheable forever.
	r, h = get("/v1/projects/acme/doc/items/notes/a/history?limit=1")
	if r.status != 200 || len(h.Changes) != 1 || h.Changes[0].Version != 4 || h.Next != 4 {
		t.Fatalf("history page 1: %d %s", r.status, r.body)
	}
	r, h = get(fmt.Sprintf("/v1/projects/acme/doc/items/notes/a/history?limit=1&before=%d", h.Next))
	if r.status != 200 || len(h.Changes) != 1 || h.Changes[0].Version != 2 || h.Next != 0 || r.header.Get("Cache-Control") != cacheImmutable {
		t.Fatalf("history page 2: %d %s %v", r.status, r.body, r.header)
	}
	if r2 := e.api.get("/v1/projects/acme/doc/items/notes/a/history?limit=1&before=4", tok, "If-None-Match", r.header.Get("ETag")); r2.status != 304 {
		t.Fatalf("history revalidation: %d", r2.status)
	}
	// Before the first change: an empty page, not an error.
	r, h = get("/v1/projects/acme/doc/items/notes/a/history?before=2")
	if r.status != 200 || len(h.Changes) != 0 {
		t.Fatalf("history before 2: %d %s", r.status, r.body)
	}
	// On feat, made from main@4: inherited at its version 1.
	r, h = get("/v1/projects/acme/doc/items/notes/a/history?branch=feat")
	if want := []change{{1, "put", `{"t":1}`}}; r.status != 200 || h.Branch != "feat" || !slices.Equal(changes(h), want) {
		t.Fatalf("history on feat: %d %s", r.status, r.body)
	}

	for _, c := range []struct {
		path   string
		status int
		code   string
		field  string
	}{
		{"/v1/projects/acme/doc/items/notes/never/history", http.StatusNotFound, wire.CodeItemNotFound, ""},
		{"/v1/projects/acme/doc/items/notes/a/history?branch=nope", http.StatusNotFound, wire.CodeBranchNotFound, ""},
		{"/v1/projects/acme/doc/items/notes/a/history?before=0", http.StatusBadRequest, wire.CodeInvalid, "before"},
		{"/v1/projects/acme/doc/items/notes/a/history?limit=5000", http.StatusBadRequest, wire.CodeInvalid, "limit"},
		{"/v1/projects/acme/doc/items/notes/a/history?at=3", http.StatusBadRequest, wire.CodeInvalid, "at"},
		{"/v1/projects/acme/doc/items/no%20tes/a/history", http.StatusBadRequest, wire.CodeInvalid, "collection"},
		{"/v1/projects/acme/other/items/notes/a/history", http.StatusForbidden, wire.CodeForbidden, ""},
	} {
		r := e.api.get(c.path, tok)
		var body struct{ Error wire.Error }
		r.json(t, &body)
		if r.status != c.status || body.Error.Code != c.code || body.Error.Field != c.field {
			t.Errorf("%s: %d %s, want %d %s field %q", c.path, r.status, r.body, c.status, c.code, c.field)
		}
	}
}
