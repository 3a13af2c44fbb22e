package readapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// DefaultProjectsPage is the page size of the projects list without
// ?limit=.
const DefaultProjectsPage = 100

// ProjectsResponse is a page of the projects of an org that the token
// reaches, among those of the partitions this instance serves.
type ProjectsResponse struct {
	Org      string        `json:"org"`
	Projects []ProjectInfo `json:"projects"`
	// Next is the ?after= of the next page, absent on the last one.
	Next string `json:"next,omitempty"`
}

// ProjectInfo is a project and its branches.
type ProjectInfo struct {
	Project   string         `json:"project"`
	Partition int32          `json:"partition"`
	Branches  []store.Branch `json:"branches"`
}

// ItemHistoryResponse is a page of the versions that changed an item,
// newest first.
type ItemHistoryResponse struct {
	Org        string `json:"org"`
	Project    string `json:"project"`
	Branch     string `json:"branch"`
	Collection string `json:"collection"`
	ID         string `json:"id"`
	// Head is the branch's latest version when the page was read.
	Head    uint64           `json:"head"`
	Changes []ItemChangeInfo `json:"changes"`
	// Next is the ?before= of the next page, absent on the last one.
	Next uint64 `json:"next,omitempty"`
}

// ItemChangeInfo is one version's change of an item: a put with the
// item's meta and its body's hash and size (the body is a blob), or a
// delete.
type ItemChangeInfo struct {
	Version uint64          `json:"version"`
	TS      int64           `json:"ts"`
	Op      string          `json:"op"`
	Meta    json.RawMessage `json:"meta,omitempty"`
	Hash    string          `json:"hash,omitempty"`
	Size    int64           `json:"size,omitempty"`
}

func (s *Server) handleProjects(w http.ResponseWriter, r *http.Request) {
	if aerr := checkParams(r, []string{"org", "after", "limit"}); aerr != nil {
		writeError(w, aerr)
		return
	}
	q := r.URL.Query()
	org, after := q.Get("org"), q.Get("after")
	if org != "" {
		if err := schemas.ValidateOrg("org", org); err != nil {
			writeError(w, invalid("org", err.Error(), "leave out ?org= for the token's org"))
			return
		}
	}
	if after != "" {
		if err := schemas.ValidateProject("after", after); err != nil {
			writeError(w, invalid("after", err.Error(), "?after= is the next of the previous page: a project name"))
			return
		}
	}
	limit, aerr := uintParam(r, "limit", 1, fmt.Sprintf("?limit= is the page size, 1 to %d", s.cfg.MaxVersionsPage))
	if aerr == nil && limit > uint64(s.cfg.MaxVersionsPage) {
		aerr = invalid("limit", fmt.Sprintf("%d is over the page limit of %d", limit, s.cfg.MaxVersionsPage),
			fmt.Sprintf("ask for at most %d projects and page on with ?after=", s.cfg.MaxVersionsPage))
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if limit == 0 {
		limit = DefaultProjectsPage
	}
	claims, aerr := s.verify(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if org == "" {
		org = claims.Org
	}
	if org != claims.Org {
		writeError(w, authError(fmt.Errorf("%w: the token is for org %q, not %q", auth.ErrForbidden, claims.Org, org)))
		return
	}
	if !claims.HasScope(auth.ScopeRead) {
		writeError(w, authError(fmt.Errorf("%w: the token has scopes %s; listing projects needs read",
			auth.ErrForbidden, strings.Join(claims.Scopes, ", "))))
		return
	}
	resp, err := s.listProjects(claims, org, after, int(limit))
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	s.writeVersioned(w, r, resp, cacheRevalidate)
}

// listProjects merges the org's projects of every served partition into
// one page sorted by name, keeping those the token reaches. Each
// partition lists at most limit names after the cursor; one that has more
// bounds the page: a name beyond its last could be missing, so the page
// ends there.
func (s *Server) listProjects(claims *auth.Claims, org, after string, limit int) (ProjectsResponse, error) {
	type candidate struct {
		name      string
		partition int32
	}
	var (
		cands []candidate
		bound string // the smallest last name of a partition with more
	)
	for p := range int32(len(s.serves)) {
		if !s.serving(p) {
			continue
		}
		ps, err := s.cfg.Store.OrgProjects(p, org, after, limit)
		if err != nil {
			return ProjectsResponse{}, err
		}
		if len(ps) == limit && (bound == "" || ps[limit-1].Project < bound) {
			bound = ps[limit-1].Project
		}
		for _, pr := range ps {
			if claims.Allow(org, pr.Project, auth.ScopeRead) == nil {
				cands = append(cands, candidate{pr.Project, p})
			}
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return strings.Compare(a.name, b.name) })
	if bound != "" {
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return c.name > bound })
	}
	resp := ProjectsResponse{Org: org, Projects: []ProjectInfo{}, Next: bound}
	if len(cands) > limit {
		cands = cands[:limit]
		resp.Next = cands[limit-1].name
	}
	for _, c := range cands {
		bs, err := s.cfg.Store.Branches(org, c.name)
		if err != nil {
			return ProjectsResponse{}, err
		}
		if bs == nil {
			bs = []store.Branch{}
		}
		resp.Projects = append(resp.Projects, ProjectInfo{Project: c.name, Partition: c.partition, Branches: bs})
	}
	return resp, nil
}

// BranchesResponse is a project's branches and their heads.
type BranchesResponse struct {
	Org     string `json:"org"`
	Project string `json:"project"`
	// Branches are sorted by name; none before the project's first
	// version.
	Branches []store.Branch `json:"branches"`
}

func (s *Server) handleBranches(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r)
	if !ok {
		return
	}
	bs, err := s.cfg.Store.Branches(c.org, c.project)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	if bs == nil {
		bs = []store.Branch{}
	}
	s.writeVersioned(w, r, BranchesResponse{Org: c.org, Project: c.project, Branches: bs}, cacheRevalidate)
}

func (s *Server) handleItemHistory(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch", "before", "limit")
	if !ok {
		return
	}
	collection, id, perr := itemPath(r)
	if perr != nil {
		writeError(w, perr)
		return
	}
	before, aerr := uintParam(r, "before", 1, "?before= is a version: the page holds the changes older than it (the next of the previous page)")
	var limit uint64
	if aerr == nil {
		limit, aerr = uintParam(r, "limit", 1, fmt.Sprintf("?limit= is the page size, 1 to %d", s.cfg.MaxVersionsPage))
	}
	if aerr == nil && limit > uint64(s.cfg.MaxVersionsPage) {
		aerr = invalid("limit", fmt.Sprintf("%d is over the page limit of %d", limit, s.cfg.MaxVersionsPage),
			fmt.Sprintf("ask for at most %d changes and page on with ?before=", s.cfg.MaxVersionsPage))
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if _, aerr := s.head(c); aerr != nil {
		writeError(w, aerr)
		return
	}
	h, err := s.cfg.Store.ItemHistory(c.org, c.project, c.branch, collection, id, before, int(limit))
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	if len(h.Changes) == 0 && before == 0 {
		writeError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeItemNotFound,
			Message: fmt.Sprintf("item %s/%s never existed on branch %s of %s/%s", collection, id, c.branch, c.org, c.project),
			Hint:    "list the items with GET /v1/projects/{org}/{project}; ?branch= names another branch"})
		return
	}
	resp := ItemHistoryResponse{Org: c.org, Project: c.project, Branch: c.branch, Collection: collection, ID: id,
		Head: h.Head, Changes: make([]ItemChangeInfo, len(h.Changes))}
	for i, ch := range h.Changes {
		info := ItemChangeInfo{Version: ch.Version, TS: ch.TS, Op: schemas.OpDelete}
		if !ch.Deleted {
			info.Op, info.Meta, info.Hash, info.Size = schemas.OpPut, orEmptyObject(ch.Ref.Meta), ch.Ref.Hash, ch.Ref.Size
		}
		resp.Changes[i] = info
	}
	if h.More {
		resp.Next = h.Changes[len(h.Changes)-1].Version
	}
	// The changes before a version the branch has never change: only the
	// first page, which reaches the head, must be revalidated.
	cache := cacheRevalidate
	if before > 0 && before <= h.Head {
		cache = cacheImmutable
	}
	s.writeVersioned(w, r, resp, cache)
}
