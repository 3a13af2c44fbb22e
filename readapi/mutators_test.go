package readapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// The validator of answers reads a bundle's source as text.
func init() {
	openapi3filter.RegisterBodyDecoder("text/javascript", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/javascript", openapi3filter.PlainBodyDecoder)
}

const notesBundle = `export default {
  "note.add": (tx, args) => { tx.put("notes", args.id, {text: args.text}); },
};
`

// TestDeployEndpoints deploys bundles over HTTP on the real broker, as
// docs/openapi.yaml says (every answer is checked against it): a bundle
// that cannot run is refused with 400 invalid_bundle and nothing is
// written, a deploy needs the admin scope (an org deploy, on every
// project), the read API answers the active bundle and its source, a push
// decided by the bundle records its hash in /versions, and an org deploy
// decides the org's other projects.
func TestDeployEndpoints(t *testing.T) {
	opts := bundle.Options{CPUBudget: 5_000_000}
	var srv *Server
	s := canontest.Start(t, canontest.Options{Partitions: 3,
		Bundles: model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
			b, err := bundle.Compile(src, opts)
			if err != nil {
				return nil, err
			}
			return b, nil
		}),
		Producer: &producer.Config{Partitions: 3, CheckBundle: func(src []byte) ([]string, error) {
			b, err := bundle.Compile(src, opts)
			if err != nil {
				return nil, err
			}
			defer b.Close()
			return b.Names(), nil
		}},
		Mount: func(s *canontest.Stack, mux *http.ServeMux) {
			var err error
			if srv, err = New(Config{Store: s.Store, Keys: s.Keys.VerifyOnly()}); err != nil {
				t.Fatal(err)
			}
			srv.Mount(mux)
		}})
	e := env{t: t, st: s.Store, keys: s.Keys, srv: srv, api: newAPIClient(t, s.URL), off: map[int32]int64{}}
	admin := e.token("user:ann", []string{"*"}, auth.ScopeAdmin)
	projectAdmin := e.token("user:ann", []string{"doc"}, auth.ScopeAdmin)
	writer := e.token("user:bob", []string{"*"}, auth.ScopeWrite)
	js := []string{"Content-Type", "application/javascript"}
	deploy := func(path, token, src string) *response {
		t.Helper()
		return e.api.do(http.MethodPut, path, token, []byte(src), js...)
	}

	if r := deploy("/v1/projects/acme/doc/mutators", projectAdmin, `export default { "x": (tx) => { `); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), wire.CodeInvalidBundle) {
		t.Errorf("a syntax error: %d %s, want 400 invalid_bundle", r.status, r.body)
	}
	if r := deploy("/v1/projects/acme/doc/mutators", projectAdmin, `export default { "item.put": (tx) => {} };`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "item.put") {
		t.Errorf("a built-in's name: %d %s, want 400 naming it", r.status, r.body)
	}
	if r := deploy("/v1/projects/acme/doc/mutators", writer, notesBundle); r.status != http.StatusForbidden {
		t.Errorf("a deploy with the write scope: %d %s, want 403", r.status, r.body)
	}
	if r := deploy("/v1/orgs/acme/mutators", projectAdmin, notesBundle); r.status != http.StatusForbidden {
		t.Errorf("an org deploy with a token of one project: %d %s, want 403", r.status, r.body)
	}
	if r := e.api.do(http.MethodGet, "/v1/projects/acme/doc/mutators", admin, nil); r.status != http.StatusNotFound || !strings.Contains(string(r.body), wire.CodeNoBundle) {
		t.Errorf("before a deploy: %d %s, want 404 no_bundle", r.status, r.body)
	}

	r := deploy("/v1/projects/acme/doc/mutators", projectAdmin, notesBundle)
	var dr wire.DeployResponse
	r.json(t, &dr)
	hash := schemas.BundleHash([]byte(notesBundle))
	if r.status != http.StatusOK || dr.Hash != hash || len(dr.Written) != 1 || strings.Join(dr.Names, ",") != "note.add" {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	var ab wire.ActiveBundle
	canontest.WaitFor(t, 30*time.Second, "the activation", func() (bool, error) {
		r := e.api.do(http.MethodGet, "/v1/projects/acme/doc/mutators", admin, nil)
		if r.status != http.StatusOK {
			return false, canontest.Pending("%d %s", r.status, r.body)
		}
		r.json(t, &ab)
		return true, nil
	})
	if ab.Hash != hash || ab.Scope != wire.ScopeProject || ab.Principal != "user:ann" || ab.Source != dr.Written[0] {
		t.Errorf("active bundle: %+v, want %s deployed at %+v", ab, hash, dr.Written[0])
	}
	if r := e.api.do(http.MethodGet, "/v1/projects/acme/doc/mutators/bundle", admin, nil); r.status != http.StatusOK || string(r.body) != notesBundle || r.header.Get("ETag") != `"`+hash+`"` {
		t.Errorf("bundle source: %d %q etag %s", r.status, r.body, r.header.Get("ETag"))
	}

	push := func(project string) wire.PushResponse {
		t.Helper()
		r := e.api.do(http.MethodPost, "/v1/projects/acme/"+project+"/push?wait=applied&timeout=20s", writer,
			[]byte(`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"note.add","args":{"id":"n1","text":"hi"}}]}`))
		var resp wire.PushResponse
		r.json(t, &resp)
		if r.status != http.StatusOK {
			t.Fatalf("push to %s: %d %s", project, r.status, r.body)
		}
		return resp
	}
	versionBundle := func(project string) string {
		t.Helper()
		var vr VersionsResponse
		r := e.api.do(http.MethodGet, "/v1/projects/acme/"+project+"/versions?from=1", writer, nil)
		r.json(t, &vr)
		if r.status != http.StatusOK || len(vr.Versions) != 1 {
			t.Fatalf("versions of %s: %d %s", project, r.status, r.body)
		}
		return vr.Versions[0].Bundle
	}
	if resp := push("doc"); resp.Outcomes[0].Status != wire.OutcomeApplied {
		t.Errorf("note.add on acme/doc: %+v", resp.Outcomes[0])
	}
	if got := versionBundle("doc"); got != hash {
		t.Errorf("/versions of acme/doc names bundle %q, want %s", got, hash)
	}

	// An org deploy: one record per partition; a project without a
	// deploy of its own then runs it.
	orgBundle := strings.Replace(notesBundle, "text: args.text", "text: args.text, org: true", 1)
	r = deploy("/v1/orgs/acme/mutators", admin, orgBundle)
	dr = wire.DeployResponse{}
	r.json(t, &dr)
	if r.status != http.StatusOK || len(dr.Written) != 3 || dr.Project != "" {
		t.Fatalf("org deploy: %d %s", r.status, r.body)
	}
	for i, w := range dr.Written {
		if w.Partition != int32(i) {
			t.Errorf("org deploy record %d went to partition %d", i, w.Partition)
		}
	}
	canontest.WaitFor(t, 30*time.Second, "the org activation in acme/other", func() (bool, error) {
		r := e.api.do(http.MethodGet, "/v1/projects/acme/other/mutators", admin, nil)
		if r.status != http.StatusOK {
			return false, canontest.Pending("%d", r.status)
		}
		r.json(t, &ab)
		return ab.Scope == wire.ScopeOrg, nil
	})
	if resp := push("other"); resp.Outcomes[0].Status != wire.OutcomeApplied {
		t.Errorf("note.add on acme/other: %+v", resp.Outcomes[0])
	}
	if got := versionBundle("other"); got != schemas.BundleHash([]byte(orgBundle)) {
		t.Errorf("/versions of acme/other names bundle %q, want the org's", got)
	}
	// acme/doc keeps its own deploy.
	r = e.api.do(http.MethodGet, "/v1/projects/acme/doc/mutators", admin, nil)
	r.json(t, &ab)
	if ab.Hash != hash || ab.Scope != wire.ScopeProject {
		t.Errorf("acme/doc after the org deploy: %+v, want its own %s", ab, hash)
	}

	// The org's deployments: the org's bundle, active in every partition
	// once each activated it, and acme/doc's own, in its partition.
	orgHash := schemas.BundleHash([]byte(orgBundle))
	var ds wire.Deployments
	canontest.WaitFor(t, 30*time.Second, "the org deploy in every partition", func() (bool, error) {
		r := e.api.do(http.MethodGet, "/v1/orgs/acme/mutators", admin, nil)
		if r.status != http.StatusOK {
			return false, fmt.Errorf("GET /v1/orgs/acme/mutators: %d %s", r.status, r.body)
		}
		ds = wire.Deployments{}
		r.json(t, &ds)
		return len(ds.Deployments) > 0 && len(ds.Deployments[0].Partitions) == 3, nil
	})
	want := []wire.Deployment{
		{Scope: wire.ScopeOrg, Hash: orgHash, Partitions: []int32{0, 1, 2}},
		{Scope: wire.ScopeProject, Project: "doc", Hash: hash, Partitions: []int32{s.Store.PartitionOf("acme", "doc")}},
	}
	if len(ds.Deployments) != len(want) || !slices.Equal(ds.Partitions, []int32{0, 1, 2}) {
		t.Fatalf("org deployments: %+v, want %+v", ds, want)
	}
	for i, d := range ds.Deployments {
		w := want[i]
		if d.Scope != w.Scope || d.Project != w.Project || d.Hash != w.Hash || !slices.Equal(d.Partitions, w.Partitions) || d.DeployedAt == 0 {
			t.Errorf("org deployment %d: %+v, want %+v", i, d, w)
		}
	}
	if r := e.api.do(http.MethodGet, "/v1/orgs/other/mutators", admin, nil); r.status != http.StatusForbidden {
		t.Errorf("another org's deployments: %d %s, want 403", r.status, r.body)
	}
}
