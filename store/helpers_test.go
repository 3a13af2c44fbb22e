package store

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// The tests build changelogs with projectModel, a naive reference model:
// it produces schemas.Version and schemas.Chunk records the way the
// sequencer does (state hash from StateHasher and ItemDigest, chunks that
// are new to the project) and remembers every state, so that each query
// can be checked against it.

const testOrg = "acme"

// cid names an item.
type cid struct{ collection, id string }

// branchState is a branch at one version.
type branchState struct {
	version uint64
	ts      int64
	scalars map[string]json.RawMessage
	items   map[cid]model.ItemRef
	sum     schemas.StateHasher
	hash    string
}

func (s branchState) clone() branchState {
	c := s
	c.scalars = maps.Clone(s.scalars)
	c.items = maps.Clone(s.items)
	if c.scalars == nil {
		c.scalars = map[string]json.RawMessage{}
	}
	if c.items == nil {
		c.items = map[cid]model.ItemRef{}
	}
	return c
}

type branchModel struct {
	// history[v-1] is the state at version v.
	history  []branchState
	versions []*schemas.Version
}

func (b *branchModel) head() uint64 { return uint64(len(b.history)) }

type projectModel struct {
	org, project string
	branches     map[string]*branchModel
	chunks       map[string]bool   // chunk hashes already produced
	bodies       map[string][]byte // body hash → body
	chunkSize    int
	// forget drops the history (benchmarks build long changelogs).
	forget bool
}

func newProject(org, project string) *projectModel {
	return &projectModel{
		org: org, project: project,
		branches:  map[string]*branchModel{},
		chunks:    map[string]bool{},
		bodies:    map[string][]byte{},
		chunkSize: 16,
	}
}

func (pm *projectModel) branch(name string) *branchModel {
	b := pm.branches[name]
	if b == nil {
		b = &branchModel{}
		pm.branches[name] = b
	}
	return b
}

// at is the state of a branch at version v (v >= 1).
func (pm *projectModel) at(branch string, v uint64) branchState {
	return pm.branches[branch].history[v-1]
}

// versionBuilder builds the next version of a branch.
type versionBuilder struct {
	pm      *projectModel
	branch  string
	st      branchState
	v       *schemas.Version
	chunks  []schemas.Chunk
	pending map[string]bool
}

// next starts the version after the branch's head.
func (pm *projectModel) next(branch string) *versionBuilder {
	b := pm.branch(branch)
	var st branchState
	if b.head() > 0 {
		st = b.history[b.head()-1]
	}
	return pm.build(branch, st.clone(), b.head(), nil)
}

// fork starts version 1 of a new branch made from another at version at.
func (pm *projectModel) fork(branch, from string, at uint64) *versionBuilder {
	st := pm.at(from, at).clone()
	for k, r := range st.items {
		r.Version = 1
		st.items[k] = r
	}
	return pm.build(branch, st, 0, &schemas.BranchRef{Branch: from, Version: at})
}

func (pm *projectModel) build(branch string, st branchState, head uint64, base *schemas.BranchRef) *versionBuilder {
	n := head + 1
	st.version = n
	st.ts = int64(n) * 1000
	return &versionBuilder{
		pm: pm, branch: branch, st: st, pending: map[string]bool{},
		v: &schemas.Version{
			Org: pm.org, Project: pm.project, Branch: branch,
			Version: n, Parent: head, Base: base, TS: st.ts,
			Items: []schemas.ItemChange{}, Mutations: []schemas.Outcome{}, LastIDs: map[string]uint64{},
		},
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// put writes an item; meta "" means none.
func (b *versionBuilder) put(collection, id, meta, body string) *versionBuilder {
	k := cid{collection, id}
	if old, ok := b.st.items[k]; ok {
		b.st.sum.Remove(schemas.ItemDigest(collection, id, old.Meta, old.Hash))
	}
	data := []byte(body)
	h := sha(data)
	b.pm.bodies[h] = data
	var chunks []string
	for off := 0; off < len(data); off += b.pm.chunkSize {
		c := data[off:min(off+b.pm.chunkSize, len(data))]
		ch := sha(c)
		chunks = append(chunks, ch)
		if !b.pm.chunks[ch] && !b.pending[ch] {
			b.pending[ch] = true
			b.chunks = append(b.chunks, schemas.Chunk{Org: b.pm.org, Project: b.pm.project, Hash: ch, Data: bytes.Clone(c)})
		}
	}
	var m json.RawMessage
	if meta != "" {
		m = json.RawMessage(meta)
	}
	b.st.sum.Add(schemas.ItemDigest(collection, id, m, h))
	b.st.items[k] = model.ItemRef{Collection: collection, ID: id, Meta: m, Hash: h, Size: int64(len(data)), Chunks: chunks, Version: b.v.Version}
	b.v.Items = append(b.v.Items, schemas.ItemChange{Collection: collection, ID: id, Op: schemas.OpPut, Meta: m, Hash: h, Size: int64(len(data)), Chunks: chunks})
	return b
}

func (b *versionBuilder) del(collection, id string) *versionBuilder {
	k := cid{collection, id}
	old, ok := b.st.items[k]
	if !ok {
		panic("delete of a missing item " + collection + "/" + id)
	}
	b.st.sum.Remove(schemas.ItemDigest(collection, id, old.Meta, old.Hash))
	delete(b.st.items, k)
	b.v.Items = append(b.v.Items, schemas.ItemChange{Collection: collection, ID: id, Op: schemas.OpDelete})
	return b
}

func (b *versionBuilder) scalar(name, value string) *versionBuilder {
	b.st.scalars[name] = json.RawMessage(value)
	return b
}

func (b *versionBuilder) mutation(client string, id uint64, status, msg string) *versionBuilder {
	b.v.Mutations = append(b.v.Mutations, schemas.Outcome{
		ClientGroup: "g-" + client, Client: client, ID: id, Name: "edit",
		Args: json.RawMessage(`{}`), Status: status, Error: msg, Offset: int64(id),
	})
	b.v.LastIDs[client] = id
	return b
}

// code gives the last mutation added an error code.
func (b *versionBuilder) code(code string) *versionBuilder {
	b.v.Mutations[len(b.v.Mutations)-1].Code = code
	return b
}

// commit finishes the version, records it in the model and returns its
// changelog records: the new chunks, then the version.
func (b *versionBuilder) commit() []Record {
	slices.SortStableFunc(b.v.Items, func(x, y schemas.ItemChange) int {
		return cmp.Or(cmp.Compare(x.Collection, y.Collection), cmp.Compare(x.ID, y.ID))
	})
	b.v.Scalars = maps.Clone(b.st.scalars)
	h, err := b.st.sum.StateHash(b.v.Scalars)
	if err != nil {
		panic(err)
	}
	b.v.StateHash = h
	b.st.hash = h
	bm := b.pm.branch(b.branch)
	if b.pm.forget && len(bm.history) > 0 {
		// Keep only the head; history[v-1] still has to index.
		bm.history[len(bm.history)-1] = branchState{}
		bm.versions[len(bm.versions)-1] = nil
	}
	bm.history = append(bm.history, b.st)
	bm.versions = append(bm.versions, b.v)
	var recs []Record
	for i := range b.chunks {
		b.pm.chunks[b.chunks[i].Hash] = true
		recs = append(recs, Record{Chunk: &b.chunks[i]})
	}
	return append(recs, Record{Version: b.v})
}

// expected returns the State the store must return for a branch at v.
func (pm *projectModel) expected(branch string, v uint64, bodies bool) State {
	st := pm.at(branch, v)
	want := State{
		Org: pm.org, Project: pm.project, Branch: branch, Version: v,
		TS: st.ts, StateHash: st.hash, Scalars: st.scalars,
		Collections: map[string][]model.ItemRef{},
	}
	if bodies {
		want.Bodies = map[string][]byte{}
	}
	for k, r := range st.items {
		want.Collections[k.collection] = append(want.Collections[k.collection], r)
		if bodies {
			want.Bodies[r.Hash] = pm.bodies[r.Hash]
		}
	}
	for _, refs := range want.Collections {
		slices.SortFunc(refs, func(a, b model.ItemRef) int { return cmp.Compare(a.ID, b.ID) })
	}
	return want
}

// projectIn returns the i-th project name (of "p0", "p1", ...) that falls
// into partition p of n.
func projectIn(p, n int32, i int) string {
	for k := 0; ; k++ {
		name := fmt.Sprintf("p%d", k)
		if schemas.Partition(schemas.ProjectKey(testOrg, name), n) == p {
			if i == 0 {
				return name
			}
			i--
		}
	}
}

const testPartitions = 4

var quiet = slog.New(slog.DiscardHandler)

func openStore(t testing.TB, fs vfs.FS, dir string) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, FS: fs, Partitions: testPartitions, CacheSize: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newStore(t testing.TB) *Store {
	t.Helper()
	s := openStore(t, vfs.NewMem(), "db")
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func mustApply(t testing.TB, s *Store, p int32, recs []Record, next int64) {
	t.Helper()
	if err := s.Apply(p, recs, next); err != nil {
		t.Fatal(err)
	}
}

type kv struct{ k, v string }

// scan returns every key and value of the range [lo, hi).
func scan(t testing.TB, s *Store, lo, hi []byte) []kv {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	var out []kv
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kv{string(it.Key()), string(v)})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func scanPartition(t testing.TB, s *Store, p int32) []kv {
	t.Helper()
	lo := partitionPrefix(p)
	return scan(t, s, lo, prefixEnd(lo))
}

func diffScans(a, b []kv) string {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("entry %d: key %x value %.40x vs key %x value %.40x", i, a[i].k, a[i].v, b[i].k, b[i].v)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d entries vs %d", len(a), len(b))
	}
	return ""
}
