package readapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// Cache-Control of the answers: a response about a named version, or a
// blob, never changes (a version is never rewritten with another
// payload); one about the latest version must be revalidated (ETag). They
// are private: every answer needs a token.
const (
	cacheImmutable  = "private, max-age=31536000, immutable"
	cacheRevalidate = "private, no-cache"
)

// StateResponse is the state of a branch at a version.
type StateResponse struct {
	Org       string                     `json:"org"`
	Project   string                     `json:"project"`
	Branch    string                     `json:"branch"`
	Version   uint64                     `json:"version"`
	TS        int64                      `json:"ts"`
	StateHash string                     `json:"stateHash"`
	Scalars   map[string]json.RawMessage `json:"scalars"`
	// Collections maps each collection to its items, sorted by id.
	Collections map[string][]ItemInfo `json:"collections"`
}

// ItemInfo is an item as a state lists it: its metadata, and its body
// with ?items=full.
type ItemInfo struct {
	ID   string          `json:"id"`
	Meta json.RawMessage `json:"meta"`
	Hash string          `json:"hash"`
	Size int64           `json:"size"`
	// Version is the branch version that last wrote the item.
	Version uint64          `json:"version"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// ItemResponse is one item with its body.
type ItemResponse struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Meta       json.RawMessage `json:"meta"`
	Hash       string          `json:"hash"`
	Size       int64           `json:"size"`
	Version    uint64          `json:"version"`
	Chunks     []string        `json:"chunks"`
	Data       json.RawMessage `json:"data"`
}

// VersionsResponse is a page of a branch's versions.
type VersionsResponse struct {
	Org     string `json:"org"`
	Project string `json:"project"`
	Branch  string `json:"branch"`
	// Head is the branch's latest version when the page was read.
	Head     uint64            `json:"head"`
	Versions []schemas.Version `json:"versions"`
	// Next is the from of the next page, absent on the last one.
	Next uint64 `json:"next,omitempty"`
}

// ClientResponse is a client's last decided mutation on a branch.
type ClientResponse struct {
	Client         string `json:"client"`
	Branch         string `json:"branch"`
	LastMutationID uint64 `json:"lastMutationID"`
}

// Mutation statuses of MutationResponse.
const (
	StatusApplied  = schemas.StatusApplied // decided and applied, in Version
	StatusError    = schemas.StatusError   // decided: the mutator failed; Version records it
	StatusPending  = "pending"             // not decided yet (or never received)
	StatusRejected = "rejected"            // not recorded: Reason says why (gap, unauthorized …)
)

// MutationResponse says what became of one mutation of a client.
type MutationResponse struct {
	Client  string `json:"client"`
	Branch  string `json:"branch"`
	ID      uint64 `json:"id"`
	Status  string `json:"status"`
	Applied bool   `json:"applied"`
	// Version is the branch version that records the mutation (absent
	// while pending).
	Version uint64 `json:"version,omitempty"`
	// Error is the mutator's message for status error.
	Error string `json:"error,omitempty"`
	// Code is the error outcome's stable code for status error (as in
	// push answers and websocket versions); absent for mutations decided
	// by a Canon that did not store codes yet.
	Code string `json:"code,omitempty"`
	// Reason, Message and ExpectedID say why the sequencer rejected the
	// mutation (status rejected); a gap's is resent from ExpectedID.
	Reason         string `json:"reason,omitempty"`
	Message        string `json:"message,omitempty"`
	ExpectedID     uint64 `json:"expectedId,omitempty"`
	LastMutationID uint64 `json:"lastMutationID"`
}

// head returns the branch's latest version, or the 404 for a missing
// branch.
func (s *Server) head(c *call) (uint64, *wire.Error) {
	h, err := s.cfg.Store.Head(c.org, c.project, c.branch)
	if err != nil {
		return 0, s.internal(c.r, err)
	}
	if h.Version == 0 {
		return 0, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeBranchNotFound,
			Message: fmt.Sprintf("project %s/%s has no branch %s", c.org, c.project, c.branch),
			Hint:    "check ?branch=; main is created by a project's first mutation, other branches by branch.create"}
	}
	return h.Version, nil
}

// resolve turns ?at= (0: absent) into a version of the branch.
func (s *Server) resolve(c *call, at uint64) (v uint64, latest bool, aerr *wire.Error) {
	head, aerr := s.head(c)
	if aerr != nil {
		return 0, false, aerr
	}
	if at == 0 {
		return head, true, nil
	}
	if at > head {
		return 0, false, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeVersionNotFound, Field: "at",
			Message: fmt.Sprintf("branch %s of %s/%s has no version %d: the latest is %d", c.branch, c.org, c.project, at, head),
			Hint:    fmt.Sprintf("ask for a version from 1 to %d, or leave out ?at= for the latest", head)}
	}
	return at, at == head, nil
}

// uintParam parses an optional query parameter as an integer >= min; 0
// when absent.
func uintParam(r *http.Request, name string, min uint64, what string) (uint64, *wire.Error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || v < min {
		return 0, invalid(name, fmt.Sprintf("%q is not an integer >= %d", raw, min), what)
	}
	return v, nil
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch", "at", "items")
	if !ok {
		return
	}
	at, aerr := uintParam(r, "at", 1, "?at= is a version number (1 is the first); leave it out for the latest")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var full bool
	switch mode := r.URL.Query().Get("items"); mode {
	case "", "meta":
	case "full":
		full = true
	default:
		writeError(w, invalid("items", fmt.Sprintf("%q is not an items mode", mode),
			"use ?items=meta (the default: metadata only) or ?items=full (with the bodies)"))
		return
	}
	v, latest, aerr := s.resolve(c, at)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	setCache(w, latest)
	// A state is named by its version and state hash: a client that has
	// it is answered from the version's header alone.
	if r.Header.Get("If-None-Match") != "" {
		h, found, err := s.cfg.Store.HeadAt(c.org, c.project, c.branch, v)
		if err != nil || !found {
			writeError(w, s.internal(r, fmt.Errorf("read version %d of %s/%s branch %s: found %v, %w", v, c.org, c.project, c.branch, found, err)))
			return
		}
		hash, err := h.State.StateHash(h.Scalars)
		if err != nil {
			writeError(w, s.internal(r, err))
			return
		}
		if notModified(w, r, stateETag(hash, v, full)) {
			return
		}
	}
	st, err := s.cfg.Store.StateAt(c.org, c.project, c.branch, v, full)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	resp := StateResponse{
		Org: c.org, Project: c.project, Branch: c.branch, Version: st.Version, TS: st.TS,
		StateHash: st.StateHash, Scalars: st.Scalars, Collections: make(map[string][]ItemInfo, len(st.Collections)),
	}
	for coll, refs := range st.Collections {
		items := make([]ItemInfo, len(refs))
		for i, ref := range refs {
			items[i] = ItemInfo{ID: ref.ID, Meta: orEmptyObject(ref.Meta), Hash: ref.Hash, Size: ref.Size, Version: ref.Version}
			if full {
				items[i].Data = st.Bodies[ref.Hash]
			}
		}
		resp.Collections[coll] = items
	}
	w.Header().Set("ETag", stateETag(st.StateHash, st.Version, full))
	writeJSON(w, http.StatusOK, resp)
}

func stateETag(stateHash string, v uint64, full bool) string {
	mode := "meta"
	if full {
		mode = "full"
	}
	return fmt.Sprintf(`"%s.%d.%s"`, stateHash, v, mode)
}

func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch", "from", "limit")
	if !ok {
		return
	}
	from, aerr := uintParam(r, "from", 1, "?from= is the first version of the page (1 is the first)")
	if aerr == nil && from == 0 {
		from = 1
	}
	var limit uint64
	if aerr == nil {
		limit, aerr = uintParam(r, "limit", 1, fmt.Sprintf("?limit= is the page size, 1 to %d", s.cfg.MaxVersionsPage))
	}
	if aerr == nil && limit > uint64(s.cfg.MaxVersionsPage) {
		aerr = invalid("limit", fmt.Sprintf("%d is over the page limit of %d", limit, s.cfg.MaxVersionsPage),
			fmt.Sprintf("ask for at most %d versions and page on with ?from=", s.cfg.MaxVersionsPage))
	}
	if limit == 0 {
		limit = store.DefaultVersionsLimit
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	head, aerr := s.head(c)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	resp := VersionsResponse{Org: c.org, Project: c.project, Branch: c.branch, Head: head, Versions: []schemas.Version{}}
	if from <= head {
		vs, err := s.cfg.Store.Versions(c.org, c.project, c.branch, from, int(limit))
		if err != nil {
			writeError(w, s.internal(r, err))
			return
		}
		resp.Versions = vs
		if n := len(vs); n > 0 && vs[n-1].Version < head {
			resp.Next = vs[n-1].Version + 1
		}
	}
	// A page changes only while it reaches the head: its bytes name it.
	s.writeVersioned(w, r, resp, cacheRevalidate)
}

// itemPath is the collection and id of an item's path, checked.
func itemPath(r *http.Request) (collection, id string, _ *wire.Error) {
	collection, id = r.PathValue("collection"), r.PathValue("id")
	if err := schemas.ValidateCollection("collection", collection); err != nil {
		return "", "", invalid("collection", err.Error(), "")
	}
	if err := schemas.ValidateItemID("id", id); err != nil {
		return "", "", invalid("id", err.Error(), "percent-encode an id that holds '/' or other reserved characters")
	}
	return collection, id, nil
}

func (s *Server) handleItem(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch", "at")
	if !ok {
		return
	}
	collection, id, perr := itemPath(r)
	if perr != nil {
		writeError(w, perr)
		return
	}
	at, aerr := uintParam(r, "at", 1, "?at= is a version number (1 is the first); leave it out for the latest")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	v, latest, aerr := s.resolve(c, at)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ref, body, found, err := s.cfg.Store.Item(c.org, c.project, c.branch, collection, id, v)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	if !found {
		writeError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeItemNotFound,
			Message: fmt.Sprintf("item %s/%s does not exist at version %d of branch %s of %s/%s", collection, id, v, c.branch, c.org, c.project),
			Hint:    "list the items with GET /v1/projects/{org}/{project}; ?at= reads an older version"})
		return
	}
	setCache(w, latest)
	// The version that last wrote an item and its body's hash name it on
	// the branch, whatever version it is read at.
	etag := fmt.Sprintf(`"%s.%d"`, ref.Hash, ref.Version)
	if notModified(w, r, etag) {
		return
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, ItemResponse{
		Collection: collection, ID: id, Meta: orEmptyObject(ref.Meta), Hash: ref.Hash, Size: ref.Size,
		Version: ref.Version, Chunks: ref.Chunks, Data: body,
	})
}

func (s *Server) handleBlob(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r)
	if !ok {
		return
	}
	hash := r.PathValue("hash")
	if err := schemas.ValidateHash("hash", hash); err != nil {
		writeError(w, invalid("hash", err.Error(), "a blob is named by the SHA-256 of its bytes, 64 lower-case hex digits"))
		return
	}
	etag := `"` + hash + `"`
	w.Header().Set("Cache-Control", cacheImmutable)
	if notModified(w, r, etag) {
		return
	}
	b, err := s.cfg.Store.Blob(c.org, c.project, hash)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeBlobNotFound,
			Message: fmt.Sprintf("project %s/%s holds no body or chunk of hash %s", c.org, c.project, hash),
			Hint:    "blobs are per project: use a hash from this project's items or versions"})
		return
	}
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) handleClient(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch")
	if !ok {
		return
	}
	client := r.PathValue("client")
	if err := schemas.ValidateClient("client", client); err != nil {
		writeError(w, invalid("client", err.Error(), ""))
		return
	}
	if _, aerr := s.head(c); aerr != nil {
		writeError(w, aerr)
		return
	}
	last, err := s.cfg.Store.LastID(c.org, c.project, c.branch, client)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ClientResponse{Client: client, Branch: c.branch, LastMutationID: last})
}

func (s *Server) handleMutation(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch")
	if !ok {
		return
	}
	client := r.PathValue("client")
	if err := schemas.ValidateClient("client", client); err != nil {
		writeError(w, invalid("client", err.Error(), ""))
		return
	}
	raw := r.PathValue("id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || id == 0 {
		writeError(w, invalid("id", fmt.Sprintf("%q is not a mutation id: an integer >= 1", raw), "a client's first mutation has id 1"))
		return
	}
	// The rejection first: a branch whose first mutation was rejected
	// does not exist, and the answer is still why.
	rej, rejected, err := s.cfg.Store.Rejection(c.org, c.project, c.branch, client, id)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	if _, aerr := s.head(c); aerr != nil && !rejected {
		writeError(w, aerr)
		return
	}
	// The record next: a mutation decided between the two reads is then
	// seen with a last id that covers it.
	st, found, err := s.cfg.Store.Mutation(c.org, c.project, c.branch, client, id)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	last, err := s.cfg.Store.LastID(c.org, c.project, c.branch, client)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	resp := MutationResponse{Client: client, Branch: c.branch, ID: id, LastMutationID: last}
	switch {
	case found:
		resp.Status, resp.Applied, resp.Version, resp.Error, resp.Code = st.Status, st.Status == schemas.StatusApplied, st.Version, st.Error, st.Code
	case rejected:
		// Not recorded (a later version would have): the id is unused.
		resp.Status, resp.Reason, resp.Message, resp.ExpectedID = StatusRejected, rej.Reason, rej.Message, rej.ExpectedID
	case id > last:
		resp.Status = StatusPending
	default:
		writeError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeMutationNotFound,
			Message: fmt.Sprintf("client %s is at mutation %d on branch %s, but mutation %d has no record", client, last, c.branch, id),
			Hint:    "the instance's store is missing data: rebuild it from the changelog"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, resp)
}

func setCache(w http.ResponseWriter, latest bool) {
	if latest {
		w.Header().Set("Cache-Control", cacheRevalidate)
	} else {
		w.Header().Set("Cache-Control", cacheImmutable)
	}
}

// writeVersioned answers v as JSON with an ETag of its bytes, or 304 if
// the client has them.
func (s *Server) writeVersioned(w http.ResponseWriter, r *http.Request, v any, cache string) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("Cache-Control", cache)
	if notModified(w, r, etag) {
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// notModified answers 304 if If-None-Match names etag (or is *).
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	inm := r.Header.Get("If-None-Match")
	if inm == "" {
		return false
	}
	for _, tag := range strings.Split(inm, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == etag || tag == "*" {
			w.Header().Set("ETag", etag)
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	return false
}

func orEmptyObject(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return json.RawMessage("{}")
	}
	return m
}
