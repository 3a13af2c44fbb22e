package readapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
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

// handleOrgMutators lists the org's deployments in the partitions this
// instance serves: the org's deploy (one entry per bundle hash, with the
// partitions that run it) and each project's own deploy the token may
// read, sorted by project.
func (s *Server) handleOrgMutators(w http.ResponseWriter, r *http.Request) {
	org := r.PathValue("org")
	if err := schemas.ValidateOrg("org", org); err != nil {
		writeError(w, invalid("org", err.Error(), ""))
		return
	}
	if aerr := checkParams(r, nil); aerr != nil {
		writeError(w, aerr)
		return
	}
	claims, aerr := s.verify(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if org != claims.Org {
		writeError(w, authError(fmt.Errorf("%w: the token is for org %q, not %q", auth.ErrForbidden, claims.Org, org)))
		return
	}
	if !claims.HasScope(auth.ScopeRead) {
		writeError(w, authError(fmt.Errorf("%w: the token has scopes %s; listing deployments needs read",
			auth.ErrForbidden, strings.Join(claims.Scopes, ", "))))
		return
	}
	resp := wire.Deployments{Org: org, Partitions: []int32{}, Deployments: []wire.Deployment{}}
	orgAt := map[string]int{} // org bundle hash → index in resp.Deployments
	var projects []wire.Deployment
	for p := range s.cfg.Store.Partitions() {
		if !s.serving(p) {
			continue
		}
		resp.Partitions = append(resp.Partitions, p)
		ds, err := s.cfg.Store.Deployments(p, org)
		if err != nil {
			writeError(w, s.internal(r, err))
			return
		}
		for _, d := range ds {
			if d.Project == "" {
				i, ok := orgAt[d.Hash]
				if !ok {
					i = len(resp.Deployments)
					orgAt[d.Hash] = i
					resp.Deployments = append(resp.Deployments, wire.Deployment{Scope: wire.ScopeOrg, Hash: d.Hash,
						Principal: d.Principal, DeployedAt: d.DeployedAt})
				}
				resp.Deployments[i].Partitions = append(resp.Deployments[i].Partitions, p)
				continue
			}
			if claims.Allow(org, d.Project, auth.ScopeRead) != nil {
				continue
			}
			projects = append(projects, wire.Deployment{Scope: wire.ScopeProject, Project: d.Project, Hash: d.Hash,
				Principal: d.Principal, DeployedAt: d.DeployedAt, Partitions: []int32{p}})
		}
	}
	slices.SortFunc(projects, func(a, b wire.Deployment) int { return strings.Compare(a.Project, b.Project) })
	resp.Deployments = append(resp.Deployments, projects...)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, resp)
}
