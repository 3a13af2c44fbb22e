package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// MaxErrorBytes bounds the error message of an outcome: a mutator's error
// (or panic value) is the client's to read, not a place for a dump.
const MaxErrorBytes = 1024

// Decider decides mutations in canonical order: for each one, whether it
// is applied, recorded with an error, a duplicate or a gap, and the
// version it produces. It reads the committed state through a Reader and
// keeps what it decided since its last Reset in an overlay, so that a
// batch is decided as if each decision were already committed.
//
// Decisions depend only on the committed state, the mutations and the
// registry: not on the wall clock, nor on where batches are cut (a
// decision made over the overlay and one made after a commit and Reset
// are byte-identical).
//
// A Decider is not safe for concurrent use: a sequencer has one, which
// decides the records of all its partitions, a transaction's batch at a
// time (Reset when the transaction ends).
type Decider struct {
	r      Reader
	reg    *Registry
	limits schemas.Limits

	branches map[branchKey]*branchState
	projects map[projectKey]*projectState

	// bundles are the committed deploys (SetBundles); activated the
	// deploys decided since the last Reset.
	bundles   Bundles
	activated map[scopeKey]MutatorSet

	// spare holds the overlay's branch states after a Reset, emptied, for
	// the next batch to reuse with their maps and slices.
	spare []*branchState

	// blobs are large bodies and the hashes of their chunks, kept across
	// Resets: the next edit of a large body neither reads it back nor
	// hashes its unchanged chunks again.
	blobs *blobCache
}

type branchKey struct{ org, project, branch string }

type projectKey struct{ org, project string }

// branchState is the overlay of one branch: its head and what the
// versions decided since the last Reset changed.
type branchState struct {
	key branchKey
	// committed is the Reader's latest version when the branch was loaded.
	committed uint64
	head      uint64
	// base is set when branch.create made the branch in this overlay.
	base *schemas.BranchRef

	scalars   map[string]json.RawMessage // immutable: replaced, never edited
	state     schemas.StateHasher
	stateHash string // of (scalars, state); "" until computed

	// heads are the versions committed+1..head, for branch.create from a
	// version decided in this batch.
	heads []headSnap
	// items are the writes of those versions, in version order.
	items   map[itemKey][]itemState
	lastIDs map[string]uint64
}

type headSnap struct {
	scalars   map[string]json.RawMessage
	state     schemas.StateHasher
	stateHash string
}

// projectState is what the overlay knows of a project's content-addressed
// namespace.
type projectState struct {
	// chunks are the chunks produced since the last Reset.
	chunks map[string]struct{}
	// bodies are the chunk lists of bodies known by hash, from the overlay
	// or the Reader: a body known here is not chunked again.
	bodies map[string][]string
	// groups are the owners of client groups, from the overlay or the
	// Reader.
	groups map[string]string
	// clients are the client groups of clients, from the overlay or the
	// Reader.
	clients map[string]string
}

// NewDecider returns a Decider over r's committed state. A zero field of
// limits takes its schemas.DefaultLimits value.
func NewDecider(r Reader, reg *Registry, limits schemas.Limits) *Decider {
	def := schemas.DefaultLimits()
	for _, f := range []struct{ v, d *int }{
		{&limits.MaxScalarsBytes, &def.MaxScalarsBytes},
		{&limits.MaxMetaBytes, &def.MaxMetaBytes},
		{&limits.MaxDataBytes, &def.MaxDataBytes},
		{&limits.MaxArgsBytes, &def.MaxArgsBytes},
		{&limits.MaxMutationBytes, &def.MaxMutationBytes},
		{&limits.MaxChunkBytes, &def.MaxChunkBytes},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return &Decider{
		r:        r,
		reg:      reg,
		limits:   limits,
		branches: make(map[branchKey]*branchState),
		projects: make(map[projectKey]*projectState),
		blobs:    newBlobCache(),
	}
}

// Reset drops the overlay: the next decisions read the Reader again. Call
// it once the decided batch is in the store (the Reader), or when the
// batch was abandoned (aborted transaction, or an error of Decide).
func (d *Decider) Reset() {
	clear(d.activated)
	for k, bs := range d.branches {
		delete(d.branches, k)
		if len(d.spare) < maxSpareBranches && bs.empty() {
			d.spare = append(d.spare, bs)
		}
	}
	for k, ps := range d.projects {
		if len(d.projects) > maxKeptProjects || !ps.empty() {
			delete(d.projects, k)
		}
	}
}

// The overlay's objects are reused after a Reset, emptied, unless they
// grew large or there are many.
const (
	maxSpareBranches = 64
	maxKeptProjects  = 64
	maxReusedEntries = 1 << 10
)

// empty empties a branch state for reuse, keeping the capacity of its
// maps and slices; false if it is too large to keep.
func (bs *branchState) empty() bool {
	if len(bs.items) > maxReusedEntries || len(bs.lastIDs) > maxReusedEntries || cap(bs.heads) > maxReusedEntries {
		return false
	}
	for k, es := range bs.items {
		clear(es) // no references to old bodies
		bs.items[k] = es[:0]
	}
	clear(bs.lastIDs)
	clear(bs.heads)
	*bs = branchState{items: bs.items, lastIDs: bs.lastIDs, heads: bs.heads[:0]}
	return true
}

// empty empties a project state for reuse; false if it is too large to
// keep.
func (ps *projectState) empty() bool {
	if len(ps.chunks) > maxReusedEntries || len(ps.bodies) > maxReusedEntries || len(ps.groups) > maxReusedEntries ||
		len(ps.clients) > maxReusedEntries {
		return false
	}
	clear(ps.chunks)
	clear(ps.bodies)
	clear(ps.groups)
	clear(ps.clients)
	return true
}

// Decide decides one mutation, the next in canonical order, and adds its
// effect to the overlay. Bad input of any kind is an outcome (Errored,
// Rejected …); the error is only for a failure of the Reader, after which
// the overlay is unchanged by this mutation and the caller should abandon
// the batch and Reset.
func (d *Decider) Decide(rec MutationRecord) (Decision, error) {
	m := rec.Mutation
	if m == nil {
		return rejected(0, "the record holds no mutation"), nil
	}
	branch := m.Branch
	if branch == "" {
		branch = schemas.DefaultBranch
	}
	if err := validateKey(m, branch); err != nil {
		return rejected(0, err.Error()), nil
	}
	bs, err := d.branch(branchKey{m.Org, m.Project, branch})
	if err != nil {
		return Decision{}, err
	}
	if ok, err := d.mayUseGroup(bs.key, m); err != nil || !ok {
		if err != nil {
			return Decision{}, err
		}
		return Decision{Kind: Rejected, Reason: schemas.ReasonUnauthorized,
			Message: fmt.Sprintf("client group %s of %s/%s belongs to another principal than %s: each user agent needs a client group of its own", m.ClientGroup, m.Org, m.Project, m.Principal)}, nil
	}
	if group, err := d.clientGroup(bs.key, m); err != nil || group != "" {
		if err != nil {
			return Decision{}, err
		}
		return Decision{Kind: Rejected, Reason: schemas.ReasonUnauthorized,
			Message: fmt.Sprintf("client %s of %s/%s belongs to client group %s, not %s: each client belongs to one client group; use a new client id", m.Client, m.Org, m.Project, group, m.ClientGroup)}, nil
	}
	// The project's bundle first, then the registry: a bundle cannot
	// name a built-in, so built-ins keep their meaning.
	set, err := d.activeBundle(rec.Partition, m.Org, m.Project)
	if err != nil {
		return Decision{}, fmt.Errorf("active bundle of %s/%s: %w", m.Org, m.Project, err)
	}
	var bundleHash string
	entry, known := d.reg.lookup(m.Name)
	if set != nil {
		if fn, ok := set.Mutator(m.Name); ok {
			entry, known, bundleHash = registered{fn: fn}, true, set.Hash()
		}
	}
	isCreate := known && entry.system && m.Name == BranchCreate
	if bs.head == 0 && branch != schemas.DefaultBranch && !isCreate {
		return rejected(0, fmt.Sprintf("branch %s does not exist: create it with %s", branch, BranchCreate)), nil
	}
	last, err := d.lastID(bs, m.Client)
	if err != nil {
		return Decision{}, err
	}
	switch {
	case m.ID <= last:
		return Decision{Kind: Duplicate, LastID: last}, nil
	case m.ID > last+1:
		return Decision{Kind: Gap, LastID: last, ExpectedID: last + 1}, nil
	}

	args := m.Args
	var argsErr, argsCode string
	switch {
	case len(args) > d.limits.MaxArgsBytes:
		argsErr = fmt.Sprintf("args are %d bytes, over the limit of %d bytes (MaxArgsBytes)", len(args), d.limits.MaxArgsBytes)
		argsCode = CodeTooLarge
		args = nil
	case len(args) == 0:
		args = nil
	case !schemas.ValidJSON(args):
		argsErr, argsCode = "args are not valid JSON", CodeInvalidArgs
		args = nil
	}
	if argsErr != "" {
		if isCreate && bs.head == 0 {
			// As branchCreate's failures: an error outcome would be the new
			// branch's first version.
			return rejected(last, argsErr), nil
		}
		return d.record(rec, bs, branch, args, argsCode, argsErr, nil)
	}
	if !known {
		return d.record(rec, bs, branch, args, CodeUnknownMutator, fmt.Sprintf("unknown mutator %q", m.Name), nil)
	}
	if isCreate {
		return d.branchCreate(rec, bs, branch, args)
	}

	dec, err := d.run(rec, bs, branch, args, entry.fn)
	if err == nil && bundleHash != "" && dec.Version != nil {
		dec.Version.Bundle = bundleHash
	}
	return dec, err
}

// run runs a mutator and records its outcome.
func (d *Decider) run(rec MutationRecord, bs *branchState, branch string, args json.RawMessage, fn Mutator) (Decision, error) {
	m := rec.Mutation
	t := &tx{d: d, bs: bs, mut: *m, now: time.UnixMilli(rec.Timestamp.UnixMilli()).UTC(), scalars: bs.scalars}
	t.mut.Branch = branch
	merr := run(fn, t, args, m.Name)
	t.done = true
	if t.err != nil {
		return Decision{}, t.err
	}
	if merr != nil {
		return d.record(rec, bs, branch, args, ErrorCode(merr), merr.Error(), nil)
	}
	c, err := d.collect(t)
	if err != nil {
		return Decision{}, err
	}
	if c.failure != "" {
		return d.record(rec, bs, branch, args, CodeTooLarge, c.failure, nil)
	}
	return d.record(rec, bs, branch, args, "", "", &c)
}

// run calls a mutator, turning a panic into its error outcome: one bad
// mutation must not stop the partition.
func run(fn Mutator, t *tx, args json.RawMessage, name string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CodedError{Code: CodePanic, Err: fmt.Errorf("mutator %s panicked: %v", name, p)}
		}
	}()
	return fn(t, args)
}

func validateKey(m *schemas.Mutation, branch string) error {
	if err := schemas.ValidateOrg("org", m.Org); err != nil {
		return err
	}
	if err := schemas.ValidateProject("project", m.Project); err != nil {
		return err
	}
	if err := schemas.ValidateBranch("branch", branch); err != nil {
		return err
	}
	if err := schemas.ValidateClient("client", m.Client); err != nil {
		return err
	}
	if m.ID == 0 {
		return &schemas.FieldError{Field: "id", Reason: "must be >= 1: a client's ids start at 1"}
	}
	return nil
}

func rejected(last uint64, msg string) Decision {
	return Decision{Kind: Rejected, LastID: last, Reason: schemas.ReasonInvalid, Message: msg}
}

// collected is the effect of a successful mutation, checked and ready to
// be added to the overlay.
type collected struct {
	// failure is a limit the mutation exceeded: an error outcome.
	failure string
	changes []schemas.ItemChange // sorted by (collection, id)
	items   []*txItem            // parallel to changes
	chunks  []schemas.Chunk
	// scalars are the scalars after the mutation, nil if it set none.
	scalars map[string]json.RawMessage
}

// collect checks a mutation's writes and computes their item changes and
// new chunks. It reads (HasChunk) but does not change the overlay.
func (d *Decider) collect(t *tx) (collected, error) {
	var c collected
	if t.scalarsChanged {
		if n := scalarsSize(t.scalars); n > d.limits.MaxScalarsBytes {
			c.failure = fmt.Sprintf("scalars would be %d bytes of canonical JSON, over the limit of %d bytes (MaxScalarsBytes)", n, d.limits.MaxScalarsBytes)
			return c, nil
		}
		c.scalars = t.scalars
	}
	c.items = t.written[:0]
	for _, it := range t.items {
		if it.written && (it.origOK || it.curOK) { // not read only, not created and deleted
			c.items = append(c.items, it)
		}
	}
	slices.SortFunc(c.items, func(a, b *txItem) int {
		if r := strings.Compare(a.key.collection, b.key.collection); r != 0 {
			return r
		}
		return strings.Compare(a.key.id, b.key.id)
	})
	c.changes = make([]schemas.ItemChange, len(c.items))
	ps := d.project(t.bs.key)
	for i, it := range c.items {
		ch := schemas.ItemChange{Collection: it.key.collection, ID: it.key.id, Op: schemas.OpDelete}
		if it.curOK {
			if it.cur.chunks == nil && it.cur.body == nil {
				// Only a store that lists an item without its chunks gets here.
				if _, err := t.body(&it.cur); err != nil {
					return c, err
				}
			}
			if err := d.chunkItem(t.bs.key, ps, &it.cur, it.orig.hash, it.origOK, &c.chunks); err != nil {
				return c, err
			}
			ch.Op, ch.Meta, ch.Hash, ch.Size, ch.Chunks = schemas.OpPut, it.cur.meta, it.cur.hash, it.cur.size, it.cur.chunks
		}
		c.changes[i] = ch
	}
	return c, nil
}

// chunkItem fills in the chunk list of a written body and appends the
// chunks that are neither in the store nor produced since the last Reset
// nor already in out.
func (d *Decider) chunkItem(k branchKey, ps *projectState, st *itemState, prevHash string, prevOK bool, out *[]schemas.Chunk) error {
	if st.chunks == nil {
		st.chunks = ps.bodies[st.hash]
	}
	if st.chunks != nil {
		return nil // a known body: its chunks are stored or produced
	}
	var (
		parts  [][]byte
		hashes []string
	)
	if len(st.body) <= ChunkMinSize {
		parts = [][]byte{st.body} // SplitBody's answer, without its allocation
	} else {
		// The next version of an edited body is cut again only around
		// the edit, and the chunks it keeps are not hashed again.
		var prevBody []byte
		var prev bodySplit
		if prevOK && prevHash != st.hash {
			var ok bool
			if prev, ok = d.blobs.split(prevHash); ok {
				prevBody = d.blobs.body(prevHash)
			}
		}
		if prevBody != nil {
			var was []int
			parts, was = resplitBody(prevBody, prev.ends, st.body)
			hashes = make([]string, len(parts))
			for i, k := range was {
				if k >= 0 {
					hashes[i] = prev.hashes[k]
				}
			}
		} else {
			parts = SplitBody(st.body)
		}
		// The next edit of this body reads it from here.
		d.blobs.addBody(st.hash, st.body)
	}
	hashes = d.blobs.chunkHashes(st.body, st.hash, parts, hashes)
	if len(st.body) > ChunkMinSize {
		d.blobs.addSplit(st.hash, parts, hashes)
	}
	for i, p := range parts {
		h := hashes[i]
		if _, ok := ps.chunks[h]; ok || pending(*out, h) {
			continue
		}
		has, err := d.r.HasChunk(k.org, k.project, h)
		if err != nil {
			return fmt.Errorf("look up chunk %s of %s/%s: %w", h, k.org, k.project, err)
		}
		if !has {
			*out = append(*out, schemas.Chunk{Org: k.org, Project: k.project, Hash: h, Data: p})
		}
	}
	st.chunks = hashes
	return nil
}

func pending(chunks []schemas.Chunk, h string) bool {
	for i := range chunks {
		if chunks[i].Hash == h {
			return true
		}
	}
	return false
}

// record makes the next version of a branch for a mutation: applied with
// the effect c, or, when c is nil, recorded with the error's code and
// message and no change of state.
func (d *Decider) record(rec MutationRecord, bs *branchState, branch string, args json.RawMessage, code, errMsg string, c *collected) (Decision, error) {
	m := rec.Mutation
	var (
		argsRef    *schemas.BlobRef
		argsChunks []schemas.Chunk
	)
	if c != nil {
		argsChunks = c.chunks
	}
	if len(args) > schemas.InlineArgsBytes {
		var err error
		if argsRef, argsChunks, err = d.storeArgs(bs.key, args, argsChunks); err != nil {
			return Decision{}, err
		}
		args = nil
	}
	v := bs.head + 1
	out := schemas.Outcome{
		ClientGroup: m.ClientGroup,
		Client:      m.Client,
		ID:          m.ID,
		Name:        m.Name,
		Args:        args,
		ArgsRef:     argsRef,
		Status:      schemas.StatusApplied,
		TS:          m.TS,
		Principal:   m.Principal,
		ReceivedAt:  m.ReceivedAt,
		Offset:      rec.Offset,
		Job:         m.Job,
		Origin:      m.Origin,
	}
	dec := Decision{Kind: Applied}
	items := []schemas.ItemChange{}
	if c == nil {
		out.Status, out.Error, out.Code = schemas.StatusError, truncate(errMsg, MaxErrorBytes), code
		dec.Kind = Errored
	} else {
		items = c.changes
		d.apply(bs, v, c)
	}
	dec.Chunks = argsChunks
	if argsRef != nil {
		ps := d.project(bs.key)
		for _, ch := range argsChunks {
			ps.chunks[ch.Hash] = struct{}{}
		}
	}
	if bs.stateHash == "" {
		bs.stateHash = stateHash(bs.state, bs.scalars)
	}
	d.bind(bs.key, m)
	bs.head = v
	bs.heads = append(bs.heads, headSnap{scalars: bs.scalars, state: bs.state, stateHash: bs.stateHash})
	bs.lastIDs[m.Client] = m.ID
	// The version and its one outcome in one allocation.
	vo := new(struct {
		v   schemas.Version
		out [1]schemas.Outcome
	})
	vo.out[0] = out
	dec.Version = &vo.v
	*dec.Version = schemas.Version{
		Org:       m.Org,
		Project:   m.Project,
		Branch:    branch,
		Version:   v,
		Parent:    v - 1,
		TS:        rec.Timestamp.UnixMilli(),
		Scalars:   bs.scalars,
		Items:     items,
		Mutations: vo.out[:],
		LastIDs:   map[string]uint64{m.Client: m.ID},
		StateHash: bs.stateHash,
		Source:    schemas.SourceRef{Partition: rec.Partition, Offset: rec.Offset},
	}
	return dec, nil
}

// storeArgs stores large args like a body: split into content-defined
// chunks in the project's namespace, so that args that differ little from
// earlier ones (a client re-sending a large item) add only the chunks that
// changed. It returns the reference and out with the new chunks appended.
func (d *Decider) storeArgs(k branchKey, args json.RawMessage, out []schemas.Chunk) (*schemas.BlobRef, []schemas.Chunk, error) {
	ps := d.project(k)
	hash := BodyHash(args)
	parts := SplitBody(args)
	// Args that carry a large body share most of its chunks, whose hashes
	// chunkItem just computed.
	ref := &schemas.BlobRef{Hash: hash, Size: int64(len(args)), Chunks: d.blobs.chunkHashes(args, hash, parts, nil)}
	out = slices.Clip(out)
	for i, p := range parts {
		h := ref.Chunks[i]
		if _, ok := ps.chunks[h]; ok || pending(out, h) {
			continue
		}
		has, err := d.r.HasChunk(k.org, k.project, h)
		if err != nil {
			return nil, nil, fmt.Errorf("look up chunk %s of %s/%s: %w", h, k.org, k.project, err)
		}
		if !has {
			out = append(out, schemas.Chunk{Org: k.org, Project: k.project, Hash: h, Data: p})
		}
	}
	return ref, out, nil
}

// apply adds a successful mutation's effect, as version v, to the overlay.
func (d *Decider) apply(bs *branchState, v uint64, c *collected) {
	ps := d.project(bs.key)
	changed := c.scalars != nil
	for _, it := range c.items {
		if it.origOK {
			d := it.orig.digest // orig is the overlay's entry, or from the Reader
			if !it.orig.hasDigest {
				d = schemas.ItemDigest(it.key.collection, it.key.id, it.orig.meta, it.orig.hash)
			}
			bs.state.Remove(d)
		}
		st := it.cur
		st.version = v
		if it.curOK {
			st.digest, st.hasDigest = schemas.ItemDigest(it.key.collection, it.key.id, st.meta, st.hash), true
			bs.state.Add(st.digest)
			ps.bodies[st.hash] = st.chunks
		} else {
			st.deleted = true
		}
		bs.items[it.key] = append(bs.items[it.key], st)
		changed = true
	}
	for _, ch := range c.chunks {
		ps.chunks[ch.Hash] = struct{}{}
	}
	if c.scalars != nil {
		bs.scalars = c.scalars
	}
	if changed {
		bs.stateHash = ""
	}
}

func stateHash(s schemas.StateHasher, scalars map[string]json.RawMessage) string {
	h, err := s.StateHash(scalars)
	if err != nil {
		// Scalars are canonical JSON: encoding them cannot fail.
		panic(fmt.Sprintf("model: state hash: %v", err))
	}
	return h
}

// branchCreate runs the system mutator branch.create: bs is the new
// branch.
func (d *Decider) branchCreate(rec MutationRecord, bs *branchState, branch string, args json.RawMessage) (Decision, error) {
	fail := func(code, msg string) (Decision, error) {
		if bs.head == 0 {
			// An error outcome would be the new branch's first version.
			return rejected(0, msg), nil
		}
		return d.record(rec, bs, branch, args, code, msg, nil)
	}
	a, err := parseBranchCreate(args)
	if err != nil {
		return fail(CodeInvalidArgs, err.Error())
	}
	if bs.head > 0 {
		return fail(CodeExists, fmt.Sprintf("branch %s already exists (head version %d)", branch, bs.head))
	}
	from, err := d.branch(branchKey{bs.key.org, bs.key.project, a.from})
	if err != nil {
		return Decision{}, err
	}
	if from.head == 0 {
		return fail(CodeNotFound, fmt.Sprintf("branch %s does not exist: there is nothing to create %s from", a.from, branch))
	}
	n := a.version
	if n == 0 {
		n = from.head
	}
	if n > from.head {
		return fail(CodeNotFound, fmt.Sprintf("branch %s has no version %d: its head is %d", a.from, n, from.head))
	}
	snap, err := d.headAt(from, n)
	if err != nil {
		return Decision{}, err
	}
	m := rec.Mutation
	d.bind(bs.key, m)
	bs.base = &schemas.BranchRef{Branch: a.from, Version: n}
	bs.scalars, bs.state, bs.stateHash = snap.scalars, snap.state, snap.stateHash
	bs.head = 1
	bs.heads = append(bs.heads, snap)
	bs.lastIDs[m.Client] = m.ID
	return Decision{Kind: Applied, Version: &schemas.Version{
		Org:     m.Org,
		Project: m.Project,
		Branch:  branch,
		Version: 1,
		Parent:  0,
		Base:    &schemas.BranchRef{Branch: a.from, Version: n},
		TS:      rec.Timestamp.UnixMilli(),
		Scalars: snap.scalars,
		Items:   []schemas.ItemChange{},
		Mutations: []schemas.Outcome{{
			ClientGroup: m.ClientGroup,
			Client:      m.Client,
			ID:          m.ID,
			Name:        m.Name,
			Args:        args,
			Status:      schemas.StatusApplied,
			TS:          m.TS,
			Principal:   m.Principal,
			ReceivedAt:  m.ReceivedAt,
			Offset:      rec.Offset,
			Job:         m.Job,
			Origin:      m.Origin,
		}},
		LastIDs:   map[string]uint64{m.Client: m.ID},
		StateHash: snap.stateHash,
		Source:    schemas.SourceRef{Partition: rec.Partition, Offset: rec.Offset},
	}}, nil
}

// headAt is a branch's state summary at version n (1 <= n <= head).
func (d *Decider) headAt(bs *branchState, n uint64) (headSnap, error) {
	if n == bs.head {
		if bs.stateHash == "" {
			bs.stateHash = stateHash(bs.state, bs.scalars)
		}
		return headSnap{scalars: bs.scalars, state: bs.state, stateHash: bs.stateHash}, nil
	}
	if n > bs.committed {
		return bs.heads[n-bs.committed-1], nil
	}
	k := bs.key
	h, ok, err := d.r.HeadAt(k.org, k.project, k.branch, n)
	if err != nil {
		return headSnap{}, fmt.Errorf("read version %d of %s/%s@%s: %w", n, k.org, k.project, k.branch, err)
	}
	if !ok {
		return headSnap{}, fmt.Errorf("read version %d of %s/%s@%s: the store has no such version below its head %d", n, k.org, k.project, k.branch, bs.committed)
	}
	scalars := h.Scalars
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	return headSnap{scalars: scalars, state: h.State, stateHash: stateHash(h.State, scalars)}, nil
}

// branch returns the overlay of a branch, loading its head on first use.
func (d *Decider) branch(k branchKey) (*branchState, error) {
	if bs, ok := d.branches[k]; ok {
		return bs, nil
	}
	h, err := d.r.Head(k.org, k.project, k.branch)
	if err != nil {
		return nil, fmt.Errorf("read head of %s/%s@%s: %w", k.org, k.project, k.branch, err)
	}
	scalars := h.Scalars
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	var bs *branchState
	if n := len(d.spare); n > 0 {
		bs, d.spare = d.spare[n-1], d.spare[:n-1]
	} else {
		bs = &branchState{items: make(map[itemKey][]itemState), lastIDs: make(map[string]uint64)}
	}
	bs.key, bs.committed, bs.head, bs.scalars, bs.state = k, h.Version, h.Version, scalars, h.State
	d.branches[k] = bs
	return bs, nil
}

func (d *Decider) project(k branchKey) *projectState {
	pk := projectKey{k.org, k.project}
	ps, ok := d.projects[pk]
	if !ok {
		ps = &projectState{chunks: make(map[string]struct{}), bodies: make(map[string][]string), groups: make(map[string]string),
			clients: make(map[string]string)}
		d.projects[pk] = ps
	}
	return ps
}

// mayUseGroup reports whether the mutation's principal may use its client
// group: the group is unbound or bound to that principal. A mutation
// without a principal was written to Kafka by a trusted tool, not by the
// ingest, and is not checked.
func (d *Decider) mayUseGroup(k branchKey, m *schemas.Mutation) (bool, error) {
	if m.Principal == "" || m.ClientGroup == "" {
		return true, nil
	}
	ps := d.project(k)
	owner, ok := ps.groups[m.ClientGroup]
	if !ok {
		var err error
		if owner, ok, err = d.r.GroupPrincipal(k.org, k.project, m.ClientGroup); err != nil {
			return false, err
		}
		if ok {
			ps.groups[m.ClientGroup] = owner
		}
	}
	return !ok || owner == m.Principal, nil
}

// clientGroup returns the client group the mutation's client belongs to
// when it is not the mutation's, and "" when the client is unbound or in
// the mutation's group. Like mayUseGroup, it lets a mutation without a
// principal pass (trusted tools write those), but it looks its client up
// all the same, for bind: the client's first group stays its group.
func (d *Decider) clientGroup(k branchKey, m *schemas.Mutation) (string, error) {
	if m.ClientGroup == "" {
		return "", nil
	}
	ps := d.project(k)
	group, ok := ps.clients[m.Client]
	if !ok {
		var err error
		if group, ok, err = d.r.ClientGroup(k.org, k.project, m.Client); err != nil {
			return "", fmt.Errorf("read the client group of client %s of %s/%s: %w", m.Client, k.org, k.project, err)
		}
		if ok {
			ps.clients[m.Client] = group
		}
	}
	if !ok || group == m.ClientGroup || m.Principal == "" {
		return "", nil
	}
	return group, nil
}

// bind adds what a recorded mutation binds to the overlay, as the store
// and modeltest.MemState index it from the version: its client group's first
// principal owns the group, and its client belongs to the group from then
// on (also for a mutation without a principal). mayUseGroup and
// clientGroup looked up the bindings the Reader knows: what the overlay
// does not hold is unbound.
func (d *Decider) bind(k branchKey, m *schemas.Mutation) {
	if m.ClientGroup == "" {
		return
	}
	ps := d.project(k)
	if m.Principal != "" {
		if _, ok := ps.groups[m.ClientGroup]; !ok {
			ps.groups[m.ClientGroup] = m.Principal
		}
	}
	if _, ok := ps.clients[m.Client]; !ok {
		ps.clients[m.Client] = m.ClientGroup
	}
}

func (d *Decider) lastID(bs *branchState, client string) (uint64, error) {
	if id, ok := bs.lastIDs[client]; ok {
		return id, nil
	}
	if bs.committed == 0 {
		return 0, nil
	}
	k := bs.key
	id, err := d.r.LastID(k.org, k.project, k.branch, client)
	if err != nil {
		return 0, fmt.Errorf("read last id of client %s on %s/%s@%s: %w", client, k.org, k.project, k.branch, err)
	}
	bs.lastIDs[client] = id
	return id, nil
}

// lookup returns an item of a branch as of version v: from the overlay's
// writes up to v, else from the Reader, else, for a branch created in
// this overlay, from its base.
func (d *Decider) lookup(bs *branchState, k itemKey, v uint64) (itemState, bool, error) {
	es := bs.items[k]
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].version <= v {
			if es[i].deleted {
				return itemState{}, false, nil
			}
			return es[i], true, nil
		}
	}
	switch {
	case bs.committed > 0:
		var (
			ref ItemRef
			ok  bool
			err error
		)
		b := bs.key
		if v >= bs.committed {
			ref, ok, err = d.r.ItemRef(b.org, b.project, b.branch, k.collection, k.id)
		} else {
			ref, ok, err = d.r.ItemRefAt(b.org, b.project, b.branch, k.collection, k.id, v)
		}
		if err != nil {
			return itemState{}, false, fmt.Errorf("read item %s/%s of %s/%s@%s (version %d): %w", k.collection, k.id, b.org, b.project, b.branch, v, err)
		}
		if !ok {
			return itemState{}, false, nil
		}
		if len(ref.Chunks) > 0 {
			d.project(b).bodies[ref.Hash] = ref.Chunks
		}
		var chunks []string
		if len(ref.Chunks) > 0 {
			chunks = ref.Chunks
		}
		return itemState{meta: ref.Meta, hash: ref.Hash, size: ref.Size, chunks: chunks}, true, nil
	case bs.base != nil:
		from, ok := d.branches[branchKey{bs.key.org, bs.key.project, bs.base.Branch}]
		if !ok {
			// branch.create loaded it, and only Reset drops it.
			panic(fmt.Sprintf("model: base branch %s of %s not in the overlay", bs.base.Branch, bs.key.branch))
		}
		return d.lookup(from, k, bs.base.Version)
	}
	return itemState{}, false, nil
}
