// Package readapi is Canon's read side over HTTP: the projects of an org,
// the state of any version of any project branch, its versions with their
// mutations and outcomes, single items and their history, bodies by hash, the status of a client's mutations, and
// Replicache's pull (pullVersion 1), all answered from a store: the
// sequencer's when the process runs one, or a read replica's (Replica),
// which materializes the store for a set of partitions from
// canon.versions with the same store.Apply. docs/readapi.md describes the
// API; docs/openapi.yaml is its contract, checked against the handlers by
// the tests.
package readapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// Defaults of Config.
const (
	DefaultMaxVersionsPage = 1000
	DefaultMaxPullBytes    = 64 << 10
)

// Config configures a Server.
type Config struct {
	// Store is what the reads come from. Required.
	Store *store.Store
	// Keys verify the bearer tokens; reads need the read scope (write and
	// admin include it). Required.
	Keys *auth.Keyset
	// Partitions are the partitions of canon.versions the store holds;
	// nil means all. A request for a project of another partition is
	// answered 421 with the partition's number, so that a router can send
	// it to an instance that holds it.
	Partitions []int32
	// Serves, when set, tells which partitions the store holds now, for a
	// store whose partitions change: the sequencer's, on a node that runs
	// both roles, holds the partitions the sequencer owns. It takes the
	// place of Partitions.
	Serves func(p int32) bool
	// MaxVersionsPage bounds ?limit= of the versions list; 0 means
	// DefaultMaxVersionsPage.
	MaxVersionsPage int
	// MaxPullBytes bounds the body of a Replicache pull; 0 means
	// DefaultMaxPullBytes.
	MaxPullBytes int64
	// Log receives request failures of the server's own making; nil
	// discards them.
	Log *slog.Logger
	// Registerer receives the server's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock tokens are checked against; nil means time.Now.
	Now func() time.Time
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("readapi: Store is required")
	case c.Keys == nil:
		return errors.New("readapi: Keys is required: reads check tokens")
	case c.MaxVersionsPage < 0:
		return fmt.Errorf("readapi: MaxVersionsPage is %d: use 0 for the default (%d) or a positive count", c.MaxVersionsPage, DefaultMaxVersionsPage)
	case c.MaxPullBytes < 0:
		return fmt.Errorf("readapi: MaxPullBytes is %d: use 0 for the default (%d) or a positive size", c.MaxPullBytes, DefaultMaxPullBytes)
	}
	for _, p := range c.Partitions {
		if p < 0 || p >= c.Store.Partitions() {
			return fmt.Errorf("readapi: partition %d is not one of the store's %d", p, c.Store.Partitions())
		}
	}
	return nil
}

// Server answers the read API. Its handlers are safe for concurrent use.
type Server struct {
	cfg    Config
	serves []bool // by partition
	m      *metrics
}

// New returns a server; Mount puts its routes on a mux.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxVersionsPage == 0 {
		cfg.MaxVersionsPage = DefaultMaxVersionsPage
	}
	if cfg.MaxPullBytes == 0 {
		cfg.MaxPullBytes = DefaultMaxPullBytes
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, serves: make([]bool, cfg.Store.Partitions())}
	for p := range s.serves {
		s.serves[p] = cfg.Partitions == nil || slices.Contains(cfg.Partitions, int32(p))
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Route is one endpoint of the server.
type Route struct {
	Method, Path string // Path in http.ServeMux's pattern syntax
	name         string // for the metrics
	handler      func(http.ResponseWriter, *http.Request)
}

// Routes lists the server's endpoints, in the order Mount registers them.
// docs/openapi.yaml documents exactly these (a test checks it).
func (s *Server) Routes() []Route {
	return []Route{
		{http.MethodGet, "/v1/projects", "projects", s.handleProjects},
		{http.MethodGet, "/v1/projects/{org}/{project}", "state", s.handleState},
		{http.MethodGet, "/v1/projects/{org}/{project}/branches", "branches", s.handleBranches},
		{http.MethodGet, "/v1/projects/{org}/{project}/versions", "versions", s.handleVersions},
		{http.MethodGet, "/v1/projects/{org}/{project}/items/{collection}/{id}", "item", s.handleItem},
		{http.MethodGet, "/v1/projects/{org}/{project}/items/{collection}/{id}/history", "item_history", s.handleItemHistory},
		{http.MethodGet, "/v1/projects/{org}/{project}/blobs/{hash}", "blob", s.handleBlob},
		{http.MethodGet, "/v1/projects/{org}/{project}/clients/{client}", "client", s.handleClient},
		{http.MethodGet, "/v1/projects/{org}/{project}/clients/{client}/mutations/{id}", "mutation", s.handleMutation},
		{http.MethodGet, "/v1/projects/{org}/{project}/mutators", "mutators", s.handleMutators},
		{http.MethodGet, "/v1/projects/{org}/{project}/mutators/bundle", "mutators_bundle", s.handleMutatorsBundle},
		{http.MethodGet, "/v1/orgs/{org}/mutators", "org_mutators", s.handleOrgMutators},
		{http.MethodPost, "/replicache/v1/{org}/{project}/pull", "replicache_pull", s.handleReplicachePull},
	}
}

// Mount registers the routes on mux.
func (s *Server) Mount(mux *http.ServeMux) {
	for _, r := range s.Routes() {
		mux.Handle(r.Method+" "+r.Path, s.m.instrument(r.name, http.HandlerFunc(r.handler)))
	}
}

// call is a request that passed the checks every route makes.
type call struct {
	r                    *http.Request
	org, project, branch string
	claims               *auth.Claims
}

// begin checks what every route needs: valid org and project names, a
// token with the read scope for them, a project on a partition this
// instance holds, and only known query parameters; branch is set from
// ?branch= (main by default) when the route takes one. On false it has
// answered with the error.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, params ...string) (*call, bool) {
	c := &call{r: r, org: r.PathValue("org"), project: r.PathValue("project"), branch: schemas.DefaultBranch}
	aerr := s.check(r, c, params)
	if aerr != nil {
		writeError(w, aerr)
		return nil, false
	}
	return c, true
}

func (s *Server) check(r *http.Request, c *call, params []string) *wire.Error {
	if err := schemas.ValidateOrg("org", c.org); err != nil {
		return invalid("org", err.Error(), "")
	}
	if err := schemas.ValidateProject("project", c.project); err != nil {
		return invalid("project", err.Error(), "")
	}
	if aerr := checkParams(r, params); aerr != nil {
		return aerr
	}
	if slices.Contains(params, "branch") {
		if b := r.URL.Query().Get("branch"); b != "" {
			if err := schemas.ValidateBranch("branch", b); err != nil {
				return invalid("branch", err.Error(), "")
			}
			c.branch = b
		}
	}
	claims, aerr := s.verify(r)
	if aerr != nil {
		return aerr
	}
	if err := claims.Allow(c.org, c.project, auth.ScopeRead); err != nil {
		return authError(err)
	}
	c.claims = claims
	if p := s.cfg.Store.PartitionOf(c.org, c.project); !s.serving(p) {
		return &wire.Error{Status: http.StatusMisdirectedRequest, Code: wire.CodePartitionNotServed,
			Message: fmt.Sprintf("project %s/%s is on partition %d of %s, which this instance does not serve (it serves %s)",
				c.org, c.project, p, schemas.TopicVersions, s.servedList()),
			Hint: fmt.Sprintf("send the request to an instance that serves partition %d", p)}
	}
	return nil
}

func (s *Server) serving(p int32) bool {
	if s.cfg.Serves != nil {
		return s.cfg.Serves(p)
	}
	return s.serves[p]
}

// checkParams refuses unknown and repeated query parameters.
func checkParams(r *http.Request, params []string) *wire.Error {
	q := r.URL.Query()
	for name := range q {
		if !slices.Contains(params, name) {
			known := "none"
			if len(params) > 0 {
				known = strings.Join(params, ", ")
			}
			return invalid(name, fmt.Sprintf("unknown query parameter %q", name),
				"check its spelling; this endpoint takes: "+known)
		}
		if len(q[name]) > 1 {
			return invalid(name, fmt.Sprintf("query parameter %q is given %d times", name, len(q[name])), "give it once")
		}
	}
	return nil
}

// verify checks the request's bearer token.
func (s *Server) verify(r *http.Request) (*auth.Claims, *wire.Error) {
	token, err := auth.BearerToken(r.Header.Get("Authorization"))
	if err != nil {
		return nil, authError(err)
	}
	claims, err := s.cfg.Keys.Verify(token, s.cfg.Now())
	if err != nil {
		return nil, authError(err)
	}
	return claims, nil
}

func (s *Server) servedList() string {
	var ps []string
	for p := range int32(len(s.serves)) {
		if s.serving(p) {
			ps = append(ps, fmt.Sprint(p))
		}
	}
	if len(ps) == 0 {
		return "none at the moment"
	}
	return strings.Join(ps, ",")
}
