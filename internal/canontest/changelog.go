package canontest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// ChangelogGen makes changelog records (chunks and versions) of the
// projects of one partition directly, as a sequencer would publish them,
// without deciding mutations: for tests and benchmarks that need long
// histories fast (restores, checkpoints). Each version puts one item of a
// few hundred items per project (a new body, one chunk) or deletes one,
// and sets a scalar now and then; state hashes are computed as the store
// checks them. Reproducible from its seed.
type ChangelogGen struct {
	rng      *rand.Rand
	projects []*genProject
	source   int64
}

type genProject struct {
	org, name string
	head      uint64
	nextID    uint64
	sum       schemas.StateHasher
	items     map[string]genItemState
	scalars   map[string]json.RawMessage
}

type genItemState struct {
	meta json.RawMessage
	hash string
}

// NewChangelogGen returns a generator of versions of n projects of org
// "gen" that fall into partition p of partitions.
func NewChangelogGen(seed uint64, p, partitions int32, n int) *ChangelogGen {
	g := &ChangelogGen{rng: rand.New(rand.NewPCG(seed, 0xc4a))}
	for k := 0; len(g.projects) < n; k++ {
		name := "p" + strconv.Itoa(k)
		if schemas.Partition(schemas.ProjectKey("gen", name), partitions) == p {
			g.projects = append(g.projects, &genProject{org: "gen", name: name, items: map[string]genItemState{},
				scalars: map[string]json.RawMessage{}})
		}
	}
	return g
}

// Next returns the records of the next version: a chunk (when it puts an
// item) and the version.
func (g *ChangelogGen) Next() []store.Record {
	pr := g.projects[g.rng.IntN(len(g.projects))]
	pr.head++
	pr.nextID++
	g.source++
	v := &schemas.Version{Org: pr.org, Project: pr.name, Branch: "main", Version: pr.head, Parent: pr.head - 1,
		TS: 1_700_000_000_000 + g.source, Items: []schemas.ItemChange{}, LastIDs: map[string]uint64{"c": pr.nextID}}
	var recs []store.Record
	id := "i" + strconv.Itoa(g.rng.IntN(300))
	old, exists := pr.items[id]
	if exists && g.rng.IntN(8) == 0 {
		pr.sum.Remove(schemas.ItemDigest("tasks", id, old.meta, old.hash))
		delete(pr.items, id)
		v.Items = append(v.Items, schemas.ItemChange{Collection: "tasks", ID: id, Op: schemas.OpDelete})
	} else {
		body := []byte(fmt.Sprintf(`{"n":%d,"text":"%s","title":"task %s"}`, g.source, g.text(40+g.rng.IntN(200)), id))
		s := sha256.Sum256(body)
		h := hex.EncodeToString(s[:])
		meta := json.RawMessage(`{"owner":"c"}`)
		if exists {
			pr.sum.Remove(schemas.ItemDigest("tasks", id, old.meta, old.hash))
		}
		pr.sum.Add(schemas.ItemDigest("tasks", id, meta, h))
		pr.items[id] = genItemState{meta: meta, hash: h}
		recs = append(recs, store.Record{Chunk: &schemas.Chunk{Org: pr.org, Project: pr.name, Hash: h, Data: body}})
		v.Items = append(v.Items, schemas.ItemChange{Collection: "tasks", ID: id, Op: schemas.OpPut, Meta: meta, Hash: h,
			Size: int64(len(body)), Chunks: []string{h}})
	}
	if g.rng.IntN(20) == 0 {
		pr.scalars["name"] = json.RawMessage(strconv.Quote("project " + strconv.FormatInt(g.source, 10)))
	}
	v.Scalars = make(map[string]json.RawMessage, len(pr.scalars))
	for k, s := range pr.scalars {
		v.Scalars[k] = s
	}
	hash, err := pr.sum.StateHash(v.Scalars)
	if err != nil {
		panic(err)
	}
	v.StateHash = hash
	v.Mutations = []schemas.Outcome{{ClientGroup: "g", Client: "c", ID: pr.nextID, Name: "item.put",
		Args: json.RawMessage(`{}`), Status: schemas.StatusApplied, Offset: g.source}}
	return append(recs, store.Record{Version: v})
}

const genLetters = "abcdefghijklmnopqrstuvwxyz      "

func (g *ChangelogGen) text(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = genLetters[g.rng.IntN(len(genLetters))]
	}
	return string(b)
}

// Heads returns, for each project branch the generator wrote, its head
// version and state hash as "V:HASH": the changelog's state.
func (g *ChangelogGen) Heads() map[string]string {
	out := map[string]string{}
	for _, pr := range g.projects {
		if pr.head == 0 {
			continue
		}
		h, err := pr.sum.StateHash(pr.scalars)
		if err != nil {
			panic(err)
		}
		out[pr.org+"/"+pr.name+"@main"] = strconv.FormatUint(pr.head, 10) + ":" + h
	}
	return out
}

// StoreHeads returns what the store holds of partition p in Heads' form,
// the state hash computed from the store's own state (its items' digest
// sum and scalars), not read from a version record.
func StoreHeads(st *store.Store, p int32) (map[string]string, error) {
	out := map[string]string{}
	projects, err := st.Projects(p)
	if err != nil {
		return nil, err
	}
	for _, pr := range projects {
		branches, err := st.Branches(pr.Org, pr.Project)
		if err != nil {
			return nil, err
		}
		for _, b := range branches {
			h, err := st.Head(pr.Org, pr.Project, b.Name)
			if err != nil {
				return nil, err
			}
			hash, err := h.State.StateHash(h.Scalars)
			if err != nil {
				return nil, err
			}
			out[pr.Org+"/"+pr.Project+"@"+b.Name] = strconv.FormatUint(h.Version, 10) + ":" + hash
		}
	}
	return out, nil
}

// ProduceChangelog writes n versions of gen to partition p of the
// changelog topic as a sequencer does: chunks and versions with their
// schema headers, perTxn versions per transaction of txn (a client with a
// transactional id and a manual partitioner).
func ProduceChangelog(tb testing.TB, txn *kgo.Client, topic string, p int32, gen *ChangelogGen, n, perTxn int) {
	tb.Helper()
	ctx := context.Background()
	l := schemas.DefaultLimits()
	var errMu sync.Mutex
	var firstErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			errMu.Lock()
			firstErr = cmp.Or(firstErr, err)
			errMu.Unlock()
		}
	}
	for i := 0; i < n; {
		if err := txn.BeginTransaction(); err != nil {
			tb.Fatal(err)
		}
		for end := min(n, i+perTxn); i < end; i++ {
			for _, r := range gen.Next() {
				var rec *kgo.Record
				switch {
				case r.Chunk != nil:
					value, hash := schemas.EncodeChunk(r.Chunk)
					rec = &kgo.Record{Key: schemas.ProjectKey(r.Chunk.Org, r.Chunk.Project), Value: value, Headers: []kgo.RecordHeader{
						{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)}, {Key: schemas.HeaderChunkHash, Value: []byte(hash)}}}
				default:
					value, err := schemas.EncodeVersion(r.Version, l)
					if err != nil {
						tb.Fatal(err)
					}
					rec = &kgo.Record{Key: schemas.ProjectKey(r.Version.Org, r.Version.Project), Value: value, Headers: []kgo.RecordHeader{
						{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}}
				}
				rec.Topic, rec.Partition = topic, p
				txn.Produce(ctx, rec, done)
			}
		}
		if err := txn.Flush(ctx); err != nil {
			tb.Fatal(err)
		}
		errMu.Lock()
		err := firstErr
		errMu.Unlock()
		if err != nil {
			tb.Fatalf("produce the changelog: %v", err)
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			tb.Fatal(err)
		}
	}
}
