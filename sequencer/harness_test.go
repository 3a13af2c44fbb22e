package sequencer_test

// The harness of the integration tests on a real broker: Canon's topics
// under a unique prefix, `canon serve --roles sequencer` processes, a load
// generator of many clients, a reader that follows canon.versions, and the
// checks of the exactly-once invariants on the changelog and the stores.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// Timeouts of the failure tests: a session and a transaction timeout short
// enough that a stopped or killed instance is replaced in seconds (the
// hidden flags of `canon serve`).
const (
	itSessionTimeout = 3 * time.Second
	itTxnTimeout     = 8 * time.Second
)

// topicsEnv is a set of Canon's topics under a unique prefix, with a
// client that produces raw records.
type topicsEnv struct {
	brokers []string
	prefix  string
	names   kafka.TopicNames
	parts   int32
	cl      *kgo.Client
}

func newTopicsEnv(t testing.TB, brokers []string, parts int32) *topicsEnv {
	t.Helper()
	e := &topicsEnv{parts: parts}
	var info kafka.TopicsInfo
	e.brokers, e.prefix, info = canontest.Topics(t, brokers, parts)
	e.names = info.Names
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A record of 900 KB or 2.5 MB must fit a batch.
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		kgo.MaxBufferedRecords(100_000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.cl = cl
	return e
}

// mutationRecord is how the ingest produces a mutation.
func (e *topicsEnv) mutationRecord(t testing.TB, m *schemas.Mutation) *kgo.Record {
	t.Helper()
	return canontest.MutationRecord(t, e.names.Mutations, e.parts, m)
}

// produceSync produces records one after the other; each gets its
// offset.
func (e *topicsEnv) produceSync(t testing.TB, rs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rs {
		if r.Topic == "" {
			r.Topic = e.names.Mutations
		}
		if err := e.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s[%d]: %v", r.Topic, r.Partition, err)
		}
	}
}

// ---------------------------------------------------------------------
// Sequencer processes

// seqProc is one `canon serve --roles sequencer` process, restartable on
// the same data directory.
type seqProc struct {
	*testenv.CanonProcess
	t    *testing.T
	name string
	data string
}

// runInProcess runs seq in this process until the stop it returns is
// called; stop returns what Run returned.
func runInProcess(ctx context.Context, seq *sequencer.Sequencer) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- seq.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// stopOK stops a sequencer started by runInProcess and fails t with
// Run's error: `defer stopOK(t, runInProcess(ctx, seq))`.
func stopOK(t testing.TB, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Errorf("sequencer run: %v", err)
	}
}

// storeSync is every sequencer process's --store-sync: by default
// canon's own (never), which the kill tests show restores a store that
// lost its last writes; `-store-sync always` runs them with an fsync per
// transaction.
var storeSync = flag.String("store-sync", "never", "--store-sync of the sequencer processes (always or never)")

func newSeqProc(t *testing.T, e *topicsEnv, name string, extra ...string) *seqProc {
	t.Helper()
	data := filepath.Join(testenv.ProcessDir(t, "sequencer-"+name), "data")
	args := append([]string{"serve", "--roles", "sequencer",
		"--brokers", strings.Join(e.brokers, ","),
		"--topic-prefix", e.prefix,
		"--topic-partitions", strconv.Itoa(int(e.parts)),
		"--data", data,
		"--http", "127.0.0.1:0",
		"--session-timeout", itSessionTimeout.String(),
		"--transaction-timeout", itTxnTimeout.String(),
		"--store-sync", *storeSync,
	}, extra...)
	return &seqProc{CanonProcess: testenv.NewCanonProcess(t, name, args...), t: t, name: name, data: data}
}

// owned is canon_sequencer_owned_partitions, or -1 while unreachable.
func (p *seqProc) owned() float64 {
	v, err := p.Metric("canon_sequencer_owned_partitions")
	if err != nil {
		return -1
	}
	return v
}

var partitionsLine = regexp.MustCompile(`msg="partitions (assigned|revoked)".* partitions="?\[([0-9 ]*)\]`)

// ownedFromLog replays the current run's "partitions assigned/revoked"
// lines: the partitions the instance owned when it logged its last one.
func (p *seqProc) ownedFromLog() []int32 {
	owned := map[int32]bool{}
	for _, m := range partitionsLine.FindAllStringSubmatch(p.CurrentLog(), -1) {
		for _, f := range strings.Fields(m[2]) {
			n, _ := strconv.Atoi(f)
			if m[1] == "assigned" {
				owned[int32(n)] = true
			} else {
				delete(owned, int32(n))
			}
		}
	}
	var out []int32
	for q := range owned {
		out = append(out, q)
	}
	slices.Sort(out)
	return out
}

// assignments counts the "partitions assigned" lines of the current run:
// one per group session the process joined.
func (p *seqProc) assignments() int {
	return strings.Count(p.CurrentLog(), `msg="partitions assigned"`)
}

// waitRejoined waits, after a SIGCONT, until the process has joined the
// group again (more "partitions assigned" lines than before: it was
// fenced out while stopped, whether or not franz-go still reported the
// partitions it had as revoked or lost) and owns partitions again.
func (p *seqProc) waitRejoined(ctx context.Context, before int) {
	p.t.Helper()
	canontest.Wait(p.t, ctx, p.Name()+" joining the group again and owning partitions", func() (bool, error) {
		return p.assignments() > before && p.owned() > 0, nil
	})
}

// ---------------------------------------------------------------------
// Load generator

// mutKey names one mutation of a client (branch main, org acme).
type mutKey struct {
	project, client string
	id              uint64
}

type genClient struct{ name, project string }

// loadGen produces the mutations of many clients, each bound to one
// project and sending ids 1..rounds in order. It never runs ahead of what
// the test allows, nor more than window mutations ahead of the changelog.
type loadGen struct {
	t       *testing.T
	e       *topicsEnv
	clients []*genClient
	window  int64
	gen     *canontest.Gen
	// rate, when set, paces the generator to this many mutations a
	// second, so that a long test has load at every moment.
	rate float64

	mu     sync.Mutex
	rounds int               // the last round; finish lowers it
	round  int               // the round being produced
	expect map[mutKey]string // status: applied or error
	allow  int64
	perr   error

	produced atomic.Int64
	acked    atomic.Int64
	done     chan struct{}
}

func newLoadGen(t *testing.T, e *topicsEnv, projects, clients, rounds int, seed uint64) *loadGen {
	g := &loadGen{t: t, e: e, rounds: rounds, window: 400, gen: canontest.NewGen(seed),
		expect: map[mutKey]string{}, done: make(chan struct{})}
	for i := range clients {
		g.clients = append(g.clients, &genClient{name: fmt.Sprintf("c%03d", i), project: fmt.Sprintf("p%02d", i%projects)})
	}
	t.Logf("load: %d clients on %d projects, %d mutations each (seed %d)", clients, projects, rounds, seed)
	return g
}

func (g *loadGen) total() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(len(g.clients) * g.rounds)
}

// finish makes the round being produced the last one, for a paced
// generator whose test has seen enough.
func (g *loadGen) finish() {
	g.mu.Lock()
	g.rounds = max(g.round, 1)
	g.mu.Unlock()
}

// allowUpTo lets the generator produce up to a fraction of the total.
func (g *loadGen) allowUpTo(frac float64) {
	n := int64(frac * float64(g.total()))
	g.mu.Lock()
	g.allow = max(g.allow, n)
	g.mu.Unlock()
}

// waitProduced waits until a fraction of the total is acknowledged.
func (g *loadGen) waitProduced(ctx context.Context, frac float64) {
	g.t.Helper()
	n := int64(frac * float64(g.total()))
	canontest.Wait(g.t, ctx, fmt.Sprintf("%d mutations produced", n), func() (bool, error) {
		g.mu.Lock()
		err := g.perr
		g.mu.Unlock()
		return g.acked.Load() >= n, err
	})
}

// run produces every mutation, paced by allow and the window.
func (g *loadGen) run(ctx context.Context, decided func() int64) {
	defer close(g.done)
	start := time.Now()
	for round := 1; ; round++ {
		g.mu.Lock()
		last := round > g.rounds
		if !last {
			g.round = round
		}
		g.mu.Unlock()
		if last {
			return
		}
		for _, c := range g.clients {
			if g.rate > 0 {
				due := start.Add(time.Duration(float64(g.produced.Load()) / g.rate * float64(time.Second)))
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(due)):
				}
			}
			for {
				g.mu.Lock()
				allow := g.allow
				g.mu.Unlock()
				n := g.produced.Load()
				if n < allow && n-decided() < g.window {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(canontest.Poll):
				}
			}
			m, status := g.next(c, uint64(round))
			g.mu.Lock()
			g.expect[mutKey{c.project, c.name, uint64(round)}] = status
			g.mu.Unlock()
			rec := g.e.mutationRecord(g.t, m)
			g.produced.Add(1)
			g.e.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
				if err != nil {
					g.mu.Lock()
					if g.perr == nil {
						g.perr = fmt.Errorf("produce mutation of %s: %w", r.Key, err)
					}
					g.mu.Unlock()
					return
				}
				g.acked.Add(1)
			})
		}
	}
}

// next makes mutation id of client c and says its expected status.
func (g *loadGen) next(c *genClient, id uint64) (*schemas.Mutation, string) {
	m := &schemas.Mutation{Org: "acme", Project: c.project, Branch: "main", ClientGroup: "g-" + c.name, Client: c.name,
		ID: id, TS: time.Now().UnixMilli()}
	return m, g.gen.Next(m)
}

// expected returns what the generator produced and expects.
func (g *loadGen) expected() map[mutKey]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[mutKey]string, len(g.expect))
	for k, v := range g.expect {
		out[k] = v
	}
	return out
}

// startLoad runs the generator against a changelog reader, and waits for
// it to end when the test does.
func startLoad(t *testing.T, ctx context.Context, g *loadGen, cl *changelog) {
	lctx, cancel := context.WithCancel(ctx)
	go g.run(lctx, cl.outcomes)
	t.Cleanup(func() { cancel(); <-g.done })
}

// waitAllDecided waits until every mutation is produced and its outcome
// is in the changelog.
func waitAllDecided(t *testing.T, ctx context.Context, g *loadGen, cl *changelog) {
	t.Helper()
	g.allowUpTo(1)
	g.waitProduced(ctx, 1)
	n := g.total()
	canontest.Wait(t, ctx, fmt.Sprintf("the outcomes of all %d mutations in the changelog", n), func() (bool, error) {
		return cl.outcomes() >= n, nil
	})
}

// ---------------------------------------------------------------------
// The changelog

// changelog follows canon.versions from the start, read_committed, and
// keeps every record in offset order per partition.
type changelog struct {
	t     *testing.T
	e     *topicsEnv
	mu    sync.Mutex
	recs  map[int32][]*kgo.Record // data records
	next  map[int32]int64         // next offset, control records included
	count int64                   // mutation outcomes seen
	err   error
	stop  context.CancelFunc
	done  chan struct{}
}

func followChangelog(t *testing.T, e *topicsEnv) *changelog {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.names.Versions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &changelog{t: t, e: e, recs: map[int32][]*kgo.Record{}, next: map[int32]int64{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				c.next[r.Partition] = r.Offset + 1
				if r.Attrs.IsControl() {
					return
				}
				c.recs[r.Partition] = append(c.recs[r.Partition], r)
				if canontest.Header(r, schemas.HeaderSchema) == schemas.SchemaVersionV1 {
					v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.DefaultLimits())
					if err != nil {
						c.err = errors.Join(c.err, fmt.Errorf("version at %d@%d: %w", r.Partition, r.Offset, err))
						return
					}
					if v.Org != generatedOrg {
						c.count += int64(len(v.Mutations))
					}
				}
			})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// outcomes is how many mutation outcomes the changelog holds so far.
func (c *changelog) outcomes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// catchUp waits until the reader has read every partition up to its last
// stable offset as it is now.
func (c *changelog) catchUp(ctx context.Context) {
	c.t.Helper()
	ends, err := kadm.NewClient(c.e.cl).ListCommittedOffsets(ctx, c.e.names.Versions)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	canontest.Wait(c.t, ctx, "the changelog read up to its last stable offsets", func() (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		caught := true
		ends.Each(func(o kadm.ListedOffset) {
			if c.next[o.Partition] < o.Offset {
				caught = false
			}
		})
		return caught, c.err
	})
}

// generatedOrg is the org of the histories canontest.ChangelogGen
// writes to the changelog directly (generateHistory): they were decided
// by no sequencer, and the invariant checks leave them out.
const generatedOrg = "gen"

// branchRef names a branch of a project of org acme.
type branchRef struct{ project, branch string }

// history is the changelog checked and replayed.
type history struct {
	mem      *modeltest.MemState
	versions map[branchRef][]*schemas.Version // versions[b][i] is version i+1
}

// check verifies the exactly-once invariants on everything read so far
// and replays it into the reference model:
//   - every record is on its key's partition, keyed by its project;
//   - per (project, branch), versions are contiguous from 1: no version
//     twice, none missing, so never two payloads for one version;
//   - every expected mutation appears exactly once, with the expected
//     status, and nothing else appears;
//   - each client's ids follow each other in changelog order;
//   - the model accepts every version (it recomputes every state hash),
//     and its heads are the last version records.
func (c *changelog) check(expect map[mutKey]string) *history {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		c.t.Fatal(c.err)
	}
	h := &history{mem: modeltest.NewMemState(), versions: map[branchRef][]*schemas.Version{}}
	seen := map[mutKey]int{}
	lastID := map[string]uint64{}
	errs := 0
	fail := func(format string, args ...any) {
		c.t.Helper()
		errs++
		if errs <= 20 {
			c.t.Errorf(format, args...)
		}
	}
	var parts []int32
	for p := range c.recs {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	versions := 0
	for _, p := range parts {
		var chunks []schemas.Chunk
		for _, r := range c.recs[p] {
			if org, _, err := schemas.ParseProjectKey(r.Key); err == nil && org == generatedOrg {
				continue
			}
			if want := schemas.Partition(r.Key, c.e.parts); want != p {
				fail("record %d@%d keyed %q belongs to partition %d", p, r.Offset, r.Key, want)
			}
			switch schema := canontest.Header(r, schemas.HeaderSchema); schema {
			case schemas.SchemaChunkV1:
				ch, err := schemas.DecodeChunk(schema, canontest.Header(r, schemas.HeaderChunkHash), r.Key, r.Value, schemas.DefaultLimits())
				if err != nil {
					fail("chunk at %d@%d: %v", p, r.Offset, err)
					continue
				}
				chunks = append(chunks, *ch)
			case schemas.SchemaVersionV1:
				versions++
				v, err := schemas.DecodeVersion(schema, r.Value, schemas.DefaultLimits())
				if err != nil {
					fail("version at %d@%d: %v", p, r.Offset, err)
					continue
				}
				if !bytes.Equal(r.Key, schemas.ProjectKey(v.Org, v.Project)) {
					fail("version %d of %s/%s keyed %q", v.Version, v.Org, v.Project, r.Key)
				}
				b := branchRef{v.Project, v.Branch}
				if n := uint64(len(h.versions[b])); v.Version != n+1 {
					fail("%s@%s: version %d at %d@%d follows version %d (published twice or out of order)", b.project, b.branch, v.Version, p, r.Offset, n)
				}
				h.versions[b] = append(h.versions[b], v)
				if err := h.mem.Apply(v, chunks); err != nil {
					fail("replay of %d@%d: %v", p, r.Offset, err)
				}
				chunks = nil
				for _, o := range v.Mutations {
					k := mutKey{v.Project, o.Client, o.ID}
					seen[k]++
					if want, ok := expect[k]; ok && want != o.Status {
						fail("mutation %s/%s#%d: status %s (%s), want %s", k.project, k.client, k.id, o.Status, o.Error, want)
					}
					ck := v.Project + "/" + v.Branch + "/" + o.Client
					if o.ID <= lastID[ck] {
						fail("client %s: id %d after %d in version %d", ck, o.ID, lastID[ck], v.Version)
					}
					lastID[ck] = o.ID
				}
			default:
				fail("record of schema %q at %d@%d in the changelog", schema, p, r.Offset)
			}
		}
		if len(chunks) > 0 {
			fail("partition %d ends with %d chunks of no version", p, len(chunks))
		}
	}
	for k, n := range seen {
		if _, ok := expect[k]; !ok {
			fail("mutation %s/%s#%d in the changelog was never produced", k.project, k.client, k.id)
		} else if n != 1 {
			fail("mutation %s/%s#%d appears %d times", k.project, k.client, k.id, n)
		}
	}
	missing := 0
	for k := range expect {
		if seen[k] == 0 {
			missing++
			if missing <= 5 {
				fail("mutation %s/%s#%d is in no version", k.project, k.client, k.id)
			}
		}
	}
	for b, vs := range h.versions {
		head, err := h.mem.Head("acme", b.project, b.branch)
		last := vs[len(vs)-1]
		if err != nil || head.Version != last.Version || stateHash(head) != last.StateHash {
			fail("%s@%s: the replay's head %d (%v) is not the last version %d (%s)", b.project, b.branch, head.Version, err, last.Version, last.StateHash)
		}
	}
	if errs > 20 {
		c.t.Errorf("... %d errors in all", errs)
	}
	if errs > 0 {
		c.t.FailNow()
	}
	c.t.Logf("changelog: %d versions of %d branches, %d mutations, %d records", versions, len(h.versions), len(seen), c.recordCount())
	return h
}

// stateHash is a head's state hash; "" if it cannot be computed.
func stateHash(h model.Head) string {
	s, err := h.State.StateHash(h.Scalars)
	if err != nil {
		return ""
	}
	return s
}

func (c *changelog) recordCount() int {
	n := 0
	for _, rs := range c.recs {
		n += len(rs)
	}
	return n
}

// checkRejectedEmpty fails if canon.rejected holds anything: no gap, no
// undecodable record, nothing out of order.
func checkRejectedEmpty(t *testing.T, e *topicsEnv) {
	t.Helper()
	for _, r := range canontest.ReadTopic(t, e.brokers, e.names.Rejected) {
		rej, err := schemas.DecodeRejected(schemas.SchemaRejectedV1, r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("rejected at %d@%d: %s: %s", r.Partition, r.Offset, rej.Reason, rej.Message)
	}
}

// storeHeads is what one store holds: the head of each branch.
type storeHeads map[branchRef]model.Head

// checkStore opens a stopped instance's store and checks that it is a
// prefix of the changelog: every version it holds, from 1 without a gap,
// has the changelog's state hash, mutations and source. It returns the
// store's heads.
func checkStore(t *testing.T, p *seqProc, parts int32, h *history) storeHeads {
	t.Helper()
	st, err := store.Open(store.Config{Dir: filepath.Join(p.data, "store"), Partitions: parts})
	if err != nil {
		t.Fatalf("open the store of %s: %v", p.name, err)
	}
	defer st.Close()
	heads := storeHeads{}
	count := 0
	for q := range parts {
		projects, err := st.Projects(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range projects {
			if pr.Org == generatedOrg {
				continue
			}
			branches, err := st.Branches(pr.Org, pr.Project)
			if err != nil {
				t.Fatal(err)
			}
			for _, br := range branches {
				b := branchRef{pr.Project, br.Name}
				log := h.versions[b]
				var next uint64 = 1
				for {
					vs, err := st.Versions(pr.Org, pr.Project, br.Name, next, 500)
					if err != nil {
						t.Fatal(err)
					}
					for _, v := range vs {
						if v.Version != next {
							t.Fatalf("store of %s: %s@%s holds version %d where %d was expected", p.name, b.project, b.branch, v.Version, next)
						}
						if int(v.Version) > len(log) {
							t.Fatalf("store of %s: %s@%s has version %d, the changelog only %d", p.name, b.project, b.branch, v.Version, len(log))
						}
						want := log[v.Version-1]
						if v.StateHash != want.StateHash || v.Source != want.Source || !sameOutcomes(v.Mutations, want.Mutations) {
							t.Fatalf("store of %s: %s@%s version %d differs from the changelog's (state %s vs %s)",
								p.name, b.project, b.branch, v.Version, v.StateHash, want.StateHash)
						}
						next++
						count++
					}
					if len(vs) < 500 {
						break
					}
				}
				if next-1 != br.Version {
					t.Fatalf("store of %s: %s@%s head %d but versions up to %d", p.name, b.project, b.branch, br.Version, next-1)
				}
				head, err := st.Head(pr.Org, pr.Project, br.Name)
				if err != nil {
					t.Fatal(err)
				}
				heads[b] = head
			}
		}
	}
	t.Logf("store of %s: %d versions of %d branches, all equal to the changelog's", p.name, count, len(heads))
	return heads
}

func sameOutcomes(a, b []schemas.Outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Client != b[i].Client || a[i].ID != b[i].ID || a[i].Status != b[i].Status || a[i].Offset != b[i].Offset {
			return false
		}
	}
	return true
}

// stopAll waits until every instance is ready, checks that none found
// the input offsets behind the changelog (versions and input offsets
// commit together, so a restore never does), stops them with SIGTERM and
// checks their logs.
// finishAndCheck lets every mutation of g be decided, stops the
// instances, and checks the invariants on what they wrote: the
// changelog's versions are contiguous, each mutation is applied once and
// in its client's order, nothing was rejected, and each instance's store
// agrees with the changelog.
func finishAndCheck(t *testing.T, ctx context.Context, e *topicsEnv, g *loadGen, cl *changelog, ps ...*seqProc) {
	t.Helper()
	waitAllDecided(t, ctx, g, cl)
	stopAll(t, ctx, ps...)
	cl.catchUp(ctx)
	h := cl.check(g.expected())
	checkRejectedEmpty(t, e)
	for _, p := range ps {
		checkStore(t, p, e.parts, h)
	}
}

func stopAll(t *testing.T, ctx context.Context, ps ...*seqProc) {
	t.Helper()
	canontest.Wait(t, ctx, "every instance ready", func() (bool, error) {
		for _, p := range ps {
			if !p.Ready() {
				return false, nil
			}
		}
		return true, nil
	})
	for _, p := range ps {
		checkMetricZero(t, p, "canon_sequencer_input_offset_behind_total")
	}
	for _, p := range ps {
		p.Stop()
		p.CheckLog()
	}
}

// checkMetricZero fails if a counter of a running instance is not zero.
func checkMetricZero(t *testing.T, p *seqProc, name string) {
	t.Helper()
	v, err := p.Metric(name)
	if err != nil {
		t.Fatalf("%s of %s: %v", name, p.name, err)
	}
	if v != 0 {
		t.Errorf("%s of %s is %v, want 0", name, p.name, v)
	}
}
