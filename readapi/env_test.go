package readapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testPartitions = 4

// openAPI is docs/openapi.yaml, loaded and validated once.
var openAPI = sync.OnceValues(func() (*openapi3.T, error) {
	_, file, _, _ := runtime.Caller(0)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(filepath.Dir(file), "..", "docs", "openapi.yaml"))
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
})

// apiClient sends requests to a server and checks every response
// against docs/openapi.yaml.
type apiClient struct {
	t      testing.TB
	base   string
	router routers.Router
}

func newAPIClient(t testing.TB, base string) *apiClient {
	t.Helper()
	doc, err := openAPI()
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &apiClient{t: t, base: base, router: router}
}

// response is an answer, read.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// errorCode is the code of an error answer.
func (r *response) errorCode() string {
	var e struct {
		Error wire.Error `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// do sends a request (token "" for none) and validates the response
// against the document: the route must be in it, and the status, headers
// and body must match its schemas.
func (c *apiClient) do(method, path, token string, body []byte, header ...string) *response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	c.validate(req, resp, b)
	return &response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *apiClient) get(path, token string, header ...string) *response {
	c.t.Helper()
	return c.do(http.MethodGet, path, token, nil, header...)
}

func (c *apiClient) validate(req *http.Request, resp *http.Response, body []byte) {
	c.t.Helper()
	// The router matches the request against the document's paths; the
	// server's host is not part of it.
	vreq := req.Clone(context.Background())
	vreq.URL.Scheme, vreq.URL.Host, vreq.Host = "", "", ""
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		c.t.Fatalf("%s %s is not in docs/openapi.yaml: %v", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: resp.StatusCode,
		Header: resp.Header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Fatalf("%s %s answered %d %s\nwhich does not match docs/openapi.yaml: %v", req.Method, req.URL, resp.StatusCode, body, err)
	}
}

// env is a read API over an in-memory store, filled by deciding
// mutations with the model, as the sequencer does.
type env struct {
	t    testing.TB
	st   *store.Store
	keys *auth.Keyset
	srv  *Server
	api  *apiClient
	// off is the next changelog offset per partition.
	off map[int32]int64
}

func newEnv(t testing.TB, partitions []int32) *env {
	t.Helper()
	st, err := store.Open(store.Config{Dir: "db", FS: vfs.NewMem(), Partitions: testPartitions, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Keys: keys.VerifyOnly(), Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &env{t: t, st: st, keys: keys, srv: srv, api: newAPIClient(t, hs.URL), off: map[int32]int64{}}
}

// token issues a token for org acme.
func (e *env) token(subject string, projects []string, scopes ...string) string {
	e.t.Helper()
	c := auth.Claims{Org: "acme", Projects: projects, Scopes: scopes}
	c.Subject = subject
	tok, err := e.keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// mut is a mutation to decide.
type mut struct {
	project, branch, group, client string
	id                             uint64
	name, args                     string
	principal                      string
}

// decide decides mutations one by one with the model and applies each
// decision to the store, as the sequencer does; it returns the kinds.
func (e *env) decide(ms ...mut) []model.Kind {
	e.t.Helper()
	var kinds []model.Kind
	for _, m := range ms {
		if m.branch == "" {
			m.branch = "main"
		}
		if m.group == "" {
			m.group = "g-" + m.client
		}
		if m.principal == "" {
			m.principal = "user:" + m.client
		}
		p := e.st.PartitionOf("acme", m.project)
		d := model.NewDecider(e.st, model.NewRegistry(), schemas.Limits{})
		dec, err := d.Decide(model.MutationRecord{
			Mutation: &schemas.Mutation{Org: "acme", Project: m.project, Branch: m.branch, ClientGroup: m.group,
				Client: m.client, ID: m.id, Name: m.name, Args: json.RawMessage(m.args), Principal: m.principal},
			Timestamp: time.UnixMilli(1_700_000_000_000 + e.off[p]), Partition: p, Offset: e.off[p],
		})
		if err != nil {
			e.t.Fatal(err)
		}
		kinds = append(kinds, dec.Kind)
		if dec.Version == nil {
			continue
		}
		var recs []store.Record
		for i := range dec.Chunks {
			recs = append(recs, store.Record{Chunk: &dec.Chunks[i]})
		}
		recs = append(recs, store.Record{Version: dec.Version})
		e.off[p]++
		if err := e.st.Apply(p, recs, e.off[p]); err != nil {
			e.t.Fatal(err)
		}
	}
	return kinds
}

// projectIn returns a project name on partition p.
func projectIn(p int32, i int) string {
	for k := 0; ; k++ {
		name := "p" + strconv.Itoa(k)
		if schemas.Partition(schemas.ProjectKey("acme", name), testPartitions) == p {
			if i == 0 {
				return name
			}
			i--
		}
	}
}
