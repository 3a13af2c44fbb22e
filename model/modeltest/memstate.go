// Package modeltest holds the test oracle of Canon's state: MemState,
// the naive reference model of the Pebble store that the Decider's,
// the store's and the sequencer's tests check against. No production
// code imports it.
package modeltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

type (
	branchKey  struct{ org, project, branch string }
	projectKey struct{ org, project string }
	itemKey    struct{ collection, id string }
)

// MemState is an in-memory store of versions and chunks: the naive
// reference model of the Pebble store. It applies versions as the store
// does, answers the Reader interface and the queries the read side needs,
// and is written to be obviously correct rather than fast: every version
// keeps a full snapshot of the branch's state.
//
// Apply is stricter than a store needs to be: it refuses a version that
// does not follow its branch's head, an item change out of order or whose
// body's chunks are missing or do not hash to the body, a mutation id
// that is not its client's last id + 1, and a state hash that differs
// from the one it recomputes from the whole state. Tests drive it with
// a Decider's decisions, so these checks check the Decider.
//
// A branch made by branch.create (a version with Base) starts as a copy of
// the base's state at that version; its items' ItemRef.Version is 1, the
// new branch's version that brought them in. Its last ids start empty:
// ids are per branch.
//
// A MemState is safe for concurrent use.
type MemState struct {
	mu       sync.RWMutex
	branches map[branchKey]*memBranch
	chunks   map[projectKey]map[string][]byte
	// bodies are the chunk lists of the bodies of applied puts, by hash.
	bodies map[projectKey]map[string][]string
	// groups are the owners of the projects' client groups: the first
	// principal that made a version with the group.
	groups map[projectKey]map[string]string
	// clients are the client groups of the projects' clients: the group
	// of the first version that recorded a mutation of the client.
	clients map[projectKey]map[string]string
}

type memBranch struct {
	versions []*memVersion // versions[i] is version i+1
}

// memVersion is the full state of a branch after a version.
type memVersion struct {
	record  *schemas.Version
	scalars map[string]json.RawMessage
	items   map[itemKey]model.ItemRef
	lastIDs map[string]uint64
	state   schemas.StateHasher
}

var _ model.Reader = (*MemState)(nil)

// NewMemState returns an empty MemState.
func NewMemState() *MemState {
	return &MemState{
		branches: make(map[branchKey]*memBranch),
		chunks:   make(map[projectKey]map[string][]byte),
		bodies:   make(map[projectKey]map[string][]string),
		groups:   make(map[projectKey]map[string]string),
		clients:  make(map[projectKey]map[string]string),
	}
}

// Apply adds a version and the chunks produced with it (Decision.Chunks),
// or changes nothing and returns why it cannot.
func (s *MemState) Apply(v *schemas.Version, chunks []schemas.Chunk) error {
	if v == nil {
		return fmt.Errorf("apply: no version")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.apply(v, chunks); err != nil {
		return fmt.Errorf("apply version %d of %s/%s@%s: %w", v.Version, v.Org, v.Project, v.Branch, err)
	}
	return nil
}

func (s *MemState) apply(v *schemas.Version, chunks []schemas.Chunk) error {
	pk := projectKey{v.Org, v.Project}
	bk := branchKey{v.Org, v.Project, v.Branch}

	// Chunks first: the version's puts may use them.
	newChunks := make(map[string][]byte)
	for _, c := range chunks {
		if c.Org != v.Org || c.Project != v.Project {
			return fmt.Errorf("chunk %s belongs to %s/%s", c.Hash, c.Org, c.Project)
		}
		if got := model.BodyHash(c.Data); got != c.Hash {
			return fmt.Errorf("chunk %s: its data hashes to %s", c.Hash, got)
		}
		newChunks[c.Hash] = bytes.Clone(c.Data)
	}
	chunk := func(h string) ([]byte, bool) {
		if b, ok := newChunks[h]; ok {
			return b, true
		}
		b, ok := s.chunks[pk][h]
		return b, ok
	}
	// assemble concatenates a blob's chunks and checks its hash and size.
	assemble := func(what string, chunks []string, hash string, size int64) ([]byte, error) {
		var blob []byte
		for _, h := range chunks {
			c, ok := chunk(h)
			if !ok {
				return nil, fmt.Errorf("%s: chunk %s is neither stored nor given", what, h)
			}
			blob = append(blob, c...)
		}
		if model.BodyHash(blob) != hash || int64(len(blob)) != size {
			return nil, fmt.Errorf("%s: its chunks make %d bytes hashing to %s, not %d bytes hashing to %s",
				what, len(blob), model.BodyHash(blob), size, hash)
		}
		return blob, nil
	}

	b := s.branches[bk]
	var head uint64
	if b != nil {
		head = uint64(len(b.versions))
	}
	if v.Version != head+1 || v.Parent != head {
		return fmt.Errorf("version %d (parent %d) does not follow the head %d", v.Version, v.Parent, head)
	}

	// The state the version applies to.
	next := &memVersion{
		items:   make(map[itemKey]model.ItemRef),
		lastIDs: make(map[string]uint64),
	}
	switch {
	case v.Base != nil:
		if v.Version != 1 {
			return fmt.Errorf("only a branch's first version may have a base")
		}
		if v.Base.Branch == v.Branch {
			return fmt.Errorf("a branch cannot be its own base")
		}
		base := s.branches[branchKey{v.Org, v.Project, v.Base.Branch}]
		if base == nil || v.Base.Version == 0 || v.Base.Version > uint64(len(base.versions)) {
			return fmt.Errorf("base %s@%d does not exist", v.Base.Branch, v.Base.Version)
		}
		for k, ref := range base.versions[v.Base.Version-1].items {
			ref.Version = 1
			next.items[k] = ref
		}
	case head > 0:
		prev := b.versions[head-1]
		maps.Copy(next.items, prev.items)
		maps.Copy(next.lastIDs, prev.lastIDs)
	}

	// Mutations: each client's ids follow each other.
	if len(v.Mutations) == 0 {
		return fmt.Errorf("no mutations")
	}
	clients := make(map[string]uint64)
	newBodies := make(map[string][]string)
	for _, o := range v.Mutations {
		if ref := o.ArgsRef; ref != nil {
			what := fmt.Sprintf("args of mutation %d of client %s", o.ID, o.Client)
			args, err := assemble(what, ref.Chunks, ref.Hash, ref.Size)
			if err != nil {
				return err
			}
			if !json.Valid(args) {
				return fmt.Errorf("%s: not JSON", what)
			}
			newBodies[ref.Hash] = slices.Clone(ref.Chunks)
		}
		if want := next.lastIDs[o.Client] + 1; o.ID != want {
			return fmt.Errorf("mutation %d of client %s: expected id %d", o.ID, o.Client, want)
		}
		if o.Status != schemas.StatusApplied && o.Status != schemas.StatusError {
			return fmt.Errorf("mutation %d of client %s: unknown status %q", o.ID, o.Client, o.Status)
		}
		next.lastIDs[o.Client] = o.ID
		clients[o.Client] = o.ID
	}
	if !maps.Equal(clients, v.LastIDs) {
		return fmt.Errorf("lastIds %v do not match the mutations' %v", v.LastIDs, clients)
	}

	// Items.
	for i, ch := range v.Items {
		k := itemKey{ch.Collection, ch.ID}
		if i > 0 {
			p := v.Items[i-1]
			if c := strings.Compare(p.Collection, ch.Collection); c > 0 || (c == 0 && p.ID >= ch.ID) {
				return fmt.Errorf("items not sorted by (collection, id): %s/%s after %s/%s", ch.Collection, ch.ID, p.Collection, p.ID)
			}
		}
		if err := schemas.ValidateCollection("collection", ch.Collection); err != nil {
			return err
		}
		if err := schemas.ValidateItemID("id", ch.ID); err != nil {
			return err
		}
		switch ch.Op {
		case schemas.OpDelete:
			if _, ok := next.items[k]; !ok {
				return fmt.Errorf("delete of %s/%s, which does not exist", ch.Collection, ch.ID)
			}
			delete(next.items, k)
		case schemas.OpPut:
			if canon, err := model.Canonical(ch.Meta); err != nil || !bytes.Equal(canon, ch.Meta) || !bytes.HasPrefix(ch.Meta, []byte("{")) {
				return fmt.Errorf("item %s/%s: meta %s is not a canonical JSON object", ch.Collection, ch.ID, ch.Meta)
			}
			if len(ch.Chunks) == 0 {
				return fmt.Errorf("item %s/%s: no chunks", ch.Collection, ch.ID)
			}
			body, err := assemble("item "+ch.Collection+"/"+ch.ID, ch.Chunks, ch.Hash, ch.Size)
			if err != nil {
				return err
			}
			if canon, err := model.Canonical(body); err != nil || !bytes.Equal(canon, body) {
				return fmt.Errorf("item %s/%s: the body is not canonical JSON", ch.Collection, ch.ID)
			}
			next.items[k] = model.ItemRef{
				Collection: ch.Collection,
				ID:         ch.ID,
				Meta:       bytes.Clone(ch.Meta),
				Hash:       ch.Hash,
				Size:       ch.Size,
				Chunks:     slices.Clone(ch.Chunks),
				Version:    v.Version,
			}
			newBodies[ch.Hash] = slices.Clone(ch.Chunks)
		default:
			return fmt.Errorf("item %s/%s: unknown op %q", ch.Collection, ch.ID, ch.Op)
		}
	}

	// Scalars: all of them, canonical.
	next.scalars = make(map[string]json.RawMessage, len(v.Scalars))
	for name, val := range v.Scalars {
		if err := schemas.ValidateScalarName("scalars", name); err != nil {
			return err
		}
		if canon, err := model.Canonical(val); err != nil || !bytes.Equal(canon, val) {
			return fmt.Errorf("scalar %s: %s is not canonical JSON", name, val)
		}
		next.scalars[name] = bytes.Clone(val)
	}

	// The state hash, from scratch.
	for k, ref := range next.items {
		next.state.Add(schemas.ItemDigest(k.collection, k.id, ref.Meta, ref.Hash))
	}
	h, err := next.state.StateHash(next.scalars)
	if err != nil {
		return err
	}
	if h != v.StateHash {
		return fmt.Errorf("state hash %s, but the state hashes to %s", v.StateHash, h)
	}

	// Commit.
	next.record = CloneVersion(v)
	if b == nil {
		b = &memBranch{}
		s.branches[bk] = b
	}
	b.versions = append(b.versions, next)
	if s.chunks[pk] == nil {
		s.chunks[pk] = make(map[string][]byte)
		s.bodies[pk] = make(map[string][]string)
	}
	maps.Copy(s.chunks[pk], newChunks)
	maps.Copy(s.bodies[pk], newBodies)
	for _, o := range v.Mutations {
		if o.ClientGroup == "" {
			continue
		}
		if s.clients[pk] == nil {
			s.clients[pk] = make(map[string]string)
		}
		if _, ok := s.clients[pk][o.Client]; !ok {
			s.clients[pk][o.Client] = o.ClientGroup
		}
		if o.Principal == "" {
			continue
		}
		if s.groups[pk] == nil {
			s.groups[pk] = make(map[string]string)
		}
		if _, ok := s.groups[pk][o.ClientGroup]; !ok {
			s.groups[pk][o.ClientGroup] = o.Principal
		}
	}
	return nil
}

// ClientGroup implements Reader.
func (s *MemState) ClientGroup(org, project, client string) (string, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.clients[projectKey{org, project}][client]
	return g, ok, nil
}

// GroupPrincipal implements Reader.
func (s *MemState) GroupPrincipal(org, project, group string) (string, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.groups[projectKey{org, project}][group]
	return p, ok, nil
}

func (s *MemState) version(org, project, branch string, v uint64) (*memVersion, bool) {
	b := s.branches[branchKey{org, project, branch}]
	if b == nil || v == 0 || v > uint64(len(b.versions)) {
		return nil, false
	}
	return b.versions[v-1], true
}

func (s *MemState) latest(org, project, branch string) (*memVersion, bool) {
	b := s.branches[branchKey{org, project, branch}]
	if b == nil || len(b.versions) == 0 {
		return nil, false
	}
	return b.versions[len(b.versions)-1], true
}

func (mv *memVersion) head() model.Head {
	sc := make(map[string]json.RawMessage, len(mv.scalars))
	for k, v := range mv.scalars {
		sc[k] = bytes.Clone(v)
	}
	return model.Head{Version: mv.record.Version, Scalars: sc, State: mv.state}
}

// Head implements Reader.
func (s *MemState) Head(org, project, branch string) (model.Head, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.latest(org, project, branch)
	if !ok {
		return model.Head{}, nil
	}
	return mv.head(), nil
}

// HeadAt implements Reader.
func (s *MemState) HeadAt(org, project, branch string, v uint64) (model.Head, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.version(org, project, branch, v)
	if !ok {
		return model.Head{}, false, nil
	}
	return mv.head(), true, nil
}

// ItemRef implements Reader.
func (s *MemState) ItemRef(org, project, branch, collection, id string) (model.ItemRef, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.latest(org, project, branch)
	if !ok {
		return model.ItemRef{}, false, nil
	}
	ref, ok := mv.items[itemKey{collection, id}]
	return cloneRef(ref), ok, nil
}

// ItemRefAt implements Reader.
func (s *MemState) ItemRefAt(org, project, branch, collection, id string, v uint64) (model.ItemRef, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.version(org, project, branch, v)
	if !ok {
		return model.ItemRef{}, false, nil
	}
	ref, ok := mv.items[itemKey{collection, id}]
	return cloneRef(ref), ok, nil
}

// Body implements Reader: the concatenation of the body's chunks.
func (s *MemState) Body(org, project, hash string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pk := projectKey{org, project}
	hashes, ok := s.bodies[pk][hash]
	if !ok {
		return nil, fmt.Errorf("body %s of %s/%s: %w", hash, org, project, model.ErrNotFound)
	}
	var body []byte
	for _, h := range hashes {
		body = append(body, s.chunks[pk][h]...)
	}
	return body, nil
}

// HasChunk implements Reader.
func (s *MemState) HasChunk(org, project, hash string) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.chunks[projectKey{org, project}][hash]
	return ok, nil
}

// LastID implements Reader.
func (s *MemState) LastID(org, project, branch, client string) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.latest(org, project, branch)
	if !ok {
		return 0, nil
	}
	return mv.lastIDs[client], nil
}

// Items returns all items of a branch at version v, sorted by (collection,
// id); ok is false when the branch has no version v.
func (s *MemState) Items(org, project, branch string, v uint64) ([]model.ItemRef, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.version(org, project, branch, v)
	if !ok {
		return nil, false
	}
	refs := make([]model.ItemRef, 0, len(mv.items))
	for _, ref := range mv.items {
		refs = append(refs, cloneRef(ref))
	}
	slices.SortFunc(refs, func(a, b model.ItemRef) int {
		if c := strings.Compare(a.Collection, b.Collection); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return refs, true
}

// Version returns the record of version v of a branch, as applied.
func (s *MemState) Version(org, project, branch string, v uint64) (*schemas.Version, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	mv, ok := s.version(org, project, branch, v)
	if !ok {
		return nil, false
	}
	return CloneVersion(mv.record), true
}

// Outcome returns what became of a client's mutation on a branch: the
// version that recorded it and its outcome; ok is false when no version
// did.
func (s *MemState) Outcome(org, project, branch, client string, id uint64) (version uint64, o schemas.Outcome, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := s.branches[branchKey{org, project, branch}]
	if b == nil {
		return 0, schemas.Outcome{}, false
	}
	for _, mv := range b.versions {
		for _, o := range mv.record.Mutations {
			if o.Client == client && o.ID == id {
				o.Args = bytes.Clone(o.Args)
				return mv.record.Version, o, true
			}
		}
	}
	return 0, schemas.Outcome{}, false
}

// Branches lists a project's branches, sorted.
func (s *MemState) Branches(org, project string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var names []string
	for k := range s.branches {
		if k.org == org && k.project == project {
			names = append(names, k.branch)
		}
	}
	slices.Sort(names)
	return names
}

func cloneRef(r model.ItemRef) model.ItemRef {
	r.Meta = bytes.Clone(r.Meta)
	r.Chunks = slices.Clone(r.Chunks)
	return r
}

// CloneVersion returns a deep copy of v.
func CloneVersion(v *schemas.Version) *schemas.Version {
	c := *v
	if v.Base != nil {
		b := *v.Base
		c.Base = &b
	}
	if v.Scalars != nil {
		c.Scalars = make(map[string]json.RawMessage, len(v.Scalars))
		for k, val := range v.Scalars {
			c.Scalars[k] = bytes.Clone(val)
		}
	}
	if v.Items != nil {
		c.Items = make([]schemas.ItemChange, len(v.Items))
		for i, ch := range v.Items {
			ch.Meta = bytes.Clone(ch.Meta)
			ch.Chunks = slices.Clone(ch.Chunks)
			c.Items[i] = ch
		}
	}
	if v.Mutations != nil {
		c.Mutations = make([]schemas.Outcome, len(v.Mutations))
		for i, o := range v.Mutations {
			o.Args = bytes.Clone(o.Args)
			c.Mutations[i] = o
		}
	}
	c.LastIDs = maps.Clone(v.LastIDs)
	return &c
}
