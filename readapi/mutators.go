package readapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/wire"
)

// handleMutators answers which mutator bundle decides the project's
// mutations from its current position on: the project's own deploy, else
// its org's.
func (s *Server) handleMutators(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r)
	if !ok {
		return
	}
	ab, ok := s.activeBundle(w, r, c)
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ab)
}

// handleMutatorsBundle serves the source of the project's active bundle,
// the JavaScript module its deploy carried; the ETag is its hash.
func (s *Server) handleMutatorsBundle(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r)
	if !ok {
		return
	}
	ab, ok := s.activeBundle(w, r, c)
	if !ok {
		return
	}
	src, found, err := s.cfg.Store.Bundle(s.cfg.Store.PartitionOf(c.org, c.project), c.org, ab.Hash)
	if err == nil && !found {
		err = fmt.Errorf("the store has no source of the active bundle %s of %s/%s", ab.Hash, c.org, c.project)
	}
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	etag := `"` + ab.Hash + `"`
	w.Header().Set("Cache-Control", "no-cache")
	if notModified(w, r, etag) {
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(src)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(src)
}

func (s *Server) activeBundle(w http.ResponseWriter, r *http.Request, c *call) (*wire.ActiveBundle, bool) {
	d, found, err := s.cfg.Store.ActiveBundle(c.org, c.project)
	if err != nil {
		writeError(w, s.internal(r, err))
		return nil, false
	}
	if !found {
		writeError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeNoBundle,
			Message: fmt.Sprintf("no mutator bundle is deployed for %s/%s or its org: its mutations run the built-in and Go mutators", c.org, c.project),
			Hint:    "deploy one with 'canon mutators deploy'"})
		return nil, false
	}
	scope := wire.ScopeProject
	if d.Project == "" {
		scope = wire.ScopeOrg
	}
	return &wire.ActiveBundle{Org: c.org, Project: c.project, Scope: scope, Hash: d.Hash, Principal: d.Principal,
		DeployedAt: d.DeployedAt, ActivatedAt: d.ActivatedAt,
		Source: wire.DeployedRecord{Partition: d.Source.Partition, Offset: d.Source.Offset}}, true
}
