package sequencer_test

// Integration and failure tests of the sequencer on a real Kafka broker
// (internal/testenv): `canon serve --roles sequencer` processes under
// load while instances join, leave, crash and stall and while the broker
// crashes, then the exactly-once invariants on canon.versions and on every
// instance's store. See harness_test.go for the machinery.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

func TestMain(m *testing.M) { testenv.Main(m) }

// TestIntegrationMembershipChurn runs three instances under load while one
// joins late, one leaves gracefully and comes back, and one is killed
// and restarted; every mutation is decided exactly once.
func TestIntegrationMembershipChurn(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 6)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 50, 150, 30, 1)
	a, b, c := newSeqProc(t, e, "a"), newSeqProc(t, e, "b"), newSeqProc(t, e, "c")
	a.Start(ctx)
	b.Start(ctx)
	startLoad(t, ctx, g, cl)

	g.allowUpTo(0.15)
	g.waitProduced(ctx, 0.15)
	t.Log("c joins late")
	c.Start(ctx)
	g.allowUpTo(0.35)
	canontest.Wait(t, ctx, "c owning partitions", func() (bool, error) { return c.owned() > 0, nil })

	g.waitProduced(ctx, 0.35)
	t.Log("b leaves gracefully")
	b.Stop()
	g.allowUpTo(0.5)
	g.waitProduced(ctx, 0.45)
	t.Log("b comes back")
	b.Start(ctx)
	canontest.Wait(t, ctx, "b owning partitions again", func() (bool, error) { return b.owned() > 0, nil })

	g.allowUpTo(0.65)
	g.waitProduced(ctx, 0.6)
	t.Log("a is killed and restarted")
	a.Kill()
	a.Start(ctx)
	g.allowUpTo(0.8)
	canontest.Wait(t, ctx, "a owning partitions again", func() (bool, error) { return a.owned() > 0, nil })

	finishAndCheck(t, ctx, e, g, cl, a, b, c)
}

// TestIntegrationBrokerCrash kills the broker with SIGKILL during the
// load and restarts it: producers retry, sequencers reconnect (their
// sessions may fail and be replaced) and nothing is lost or doubled.
func TestIntegrationBrokerCrash(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("integration test skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := testenv.StartKafka(ctx, testenv.KafkaOptions{Configs: map[string]string{
		// Transactions a crash left open are aborted soon after their
		// timeout, not up to 10s later.
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the dedicated broker's log:\n%s", srv.Tail(60))
		}
	})
	e := newTopicsEnv(t, srv.Brokers(), 6)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 50, 100, 30, 2)
	a, b := newSeqProc(t, e, "a"), newSeqProc(t, e, "b")
	a.Start(ctx)
	b.Start(ctx)
	startLoad(t, ctx, g, cl)

	for i, at := range []float64{0.4} {
		g.allowUpTo(at)
		g.waitProduced(ctx, at)
		canontest.Wait(t, ctx, "the changelog moving", func() (bool, error) { return cl.outcomes() > int64(at*float64(g.total())/2), nil })
		t.Logf("broker killed (%d)", i+1)
		srv.Kill()
		g.allowUpTo(at + 0.1) // produced into the client's buffer while the broker is down
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("broker restarted (%d)", i+1)
		before := cl.outcomes()
		canontest.Wait(t, ctx, "decisions after the restart", func() (bool, error) { return cl.outcomes() > before, nil })
	}

	finishAndCheck(t, ctx, e, g, cl, a, b)
}

// TestIntegrationZombie stops an instance (SIGSTOP) past its session
// timeout: the other takes its partitions and decides new mutations; when
// the stopped one resumes it is fenced. Then twice more, resuming it as
// soon as the other owns everything, while a transaction it left may
// still be pending. No version is ever published twice.
func TestIntegrationZombie(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 6)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 50, 100, 40, 3)
	a, z := newSeqProc(t, e, "a"), newSeqProc(t, e, "z")
	a.Start(ctx)
	z.Start(ctx)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions", func() (bool, error) { return a.owned() > 0 && z.owned() > 0, nil })

	g.allowUpTo(0.25)
	g.waitProduced(ctx, 0.2)
	t.Log("z stopped under load")
	joins := z.assignments()
	z.Signal(syscall.SIGSTOP)
	g.allowUpTo(0.45)
	canontest.Wait(t, ctx, "a owning every partition", func() (bool, error) { return a.owned() == float64(e.parts), nil })
	// a decides the new mutations, those of z's partitions included (once
	// z's open transaction, if any, timed out).
	g.waitProduced(ctx, 0.45)
	canontest.Wait(t, ctx, "a deciding everything produced", func() (bool, error) { return cl.outcomes() >= g.acked.Load(), nil })
	t.Log("z resumed")
	z.Signal(syscall.SIGCONT)
	z.waitRejoined(ctx, joins)

	for i, at := range []float64{0.6, 0.8} {
		g.allowUpTo(at)
		g.waitProduced(ctx, at-0.1)
		t.Logf("z stopped under load (%d)", i+2)
		joins := z.assignments()
		z.Signal(syscall.SIGSTOP)
		canontest.Wait(t, ctx, "a owning every partition", func() (bool, error) { return a.owned() == float64(e.parts), nil })
		t.Logf("z resumed at once (%d)", i+2)
		z.Signal(syscall.SIGCONT)
		z.waitRejoined(ctx, joins)
	}

	finishAndCheck(t, ctx, e, g, cl, a, z)
}

// TestIntegrationRejected produces bad records straight into
// canon.mutations: each becomes a dead letter with its reason, and the
// partition's later mutations are decided.
func TestIntegrationRejected(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 3
	e := newTopicsEnv(t, k.Brokers, parts)
	seq := newSeqProc(t, e, "s")
	seq.Start(ctx)

	mut := func(project, client string, id uint64, item string) *schemas.Mutation {
		return &schemas.Mutation{Org: "acme", Project: project, Branch: "main", ClientGroup: "g-" + client, Client: client,
			ID: id, Name: "item.put", Args: json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":%q,"data":{"v":%d}}`, item, id))}
	}
	// Two projects on different partitions, and a third key for the key
	// mismatch.
	key := func(project string) []byte { return schemas.ProjectKey("acme", project) }
	var p1, p2 string
	for i := 0; p1 == "" || p2 == ""; i++ {
		name := fmt.Sprintf("q%d", i)
		switch {
		case p1 == "":
			p1 = name
		case schemas.Partition(key(name), parts) != schemas.Partition(key(p1), parts):
			p2 = name
		}
	}
	part1, part2 := schemas.Partition(key(p1), parts), schemas.Partition(key(p2), parts)
	mutHeader := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}
	raw := func(k []byte, partition int32, headers []kgo.RecordHeader, value []byte) *kgo.Record {
		return &kgo.Record{Key: k, Partition: partition, Headers: headers, Value: value}
	}
	junk := make([]byte, 900<<10)
	for i := range junk {
		junk[i] = byte(i*7 + i>>8) // not UTF-8, not JSON
	}
	huge := []byte(`{"org":"acme","project":"` + p1 + `","pad":"` + strings.Repeat("x", 5<<19) + `"}`)
	valid := func(m *schemas.Mutation) []byte {
		v, err := schemas.EncodeMutation(m, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	otherKey := key("elsewhere")
	wrongPartition := (part1 + 1) % parts

	type badCase struct {
		name   string
		rec    *kgo.Record
		reason string
	}
	cases := []badCase{
		{"invalid JSON", raw(key(p1), part1, mutHeader, []byte(`{"org":"acme",`)), schemas.ReasonUndecodable},
		{"not an object", raw(key(p1), part1, mutHeader, []byte(`[1,2,3]`)), schemas.ReasonUndecodable},
		{"unknown schema major", raw(key(p1), part1, []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte("mutation/v9")}}, valid(mut(p1, "x", 1, "t"))), schemas.ReasonUnknownSchema},
		{"unknown schema kind", raw(key(p1), part1, []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte("gossip/v1")}}, valid(mut(p1, "x", 1, "t"))), schemas.ReasonUnknownSchema},
		{"no header", raw(key(p1), part1, nil, valid(mut(p1, "x", 1, "t"))), schemas.ReasonUnknownSchema},
		{"empty value", raw(key(p1), part1, mutHeader, nil), schemas.ReasonUndecodable},
		{"missing fields", raw(key(p1), part1, mutHeader, []byte(`{"org":"acme","project":"`+p1+`","name":"item.put"}`)), schemas.ReasonInvalid},
		{"key of another project", raw(otherKey, schemas.Partition(otherKey, parts), mutHeader, valid(mut(p1, "x", 1, "t"))), schemas.ReasonKeyMismatch},
		{"wrong partition for the key", raw(key(p1), wrongPartition, mutHeader, valid(mut(p1, "x", 1, "t"))), schemas.ReasonKeyMismatch},
		{"900 KB of junk", raw(key(p2), part2, mutHeader, junk), schemas.ReasonUndecodable},
		{"2.5 MB value", raw(key(p2), part2, mutHeader, huge), schemas.ReasonTooLarge},
		{"gap", raw(key(p2), part2, mutHeader, valid(mut(p2, "gappy", 3, "t"))), schemas.ReasonGap},
	}
	// Each bad record is followed by a valid mutation on its partition.
	type follow struct {
		project, client string
		id              uint64
	}
	var follows []follow
	ids := map[string]uint64{}
	for _, bc := range cases {
		e.produceSync(t, bc.rec)
		project := p1
		if bc.rec.Partition == part2 {
			project = p2
		} else if bc.rec.Partition != part1 {
			project = ""
		}
		if project == "" {
			continue
		}
		ids[project]++
		m := mut(project, "good", ids[project], fmt.Sprintf("t%d", ids[project]))
		e.produceSync(t, e.mutationRecord(t, m))
		follows = append(follows, follow{project, "good", ids[project]})
	}
	// The gappy client sends its first id after all: it is decided.
	e.produceSync(t, e.mutationRecord(t, mut(p2, "gappy", 1, "g")))
	follows = append(follows, follow{p2, "gappy", 1})

	// The valid ones are decided, the bad ones rejected with their reason.
	var rejected []*kgo.Record
	canontest.Wait(t, ctx, "every bad record in canon.rejected", func() (bool, error) {
		rejected = canontest.ReadTopic(t, e.brokers, e.names.Rejected)
		return len(rejected) >= len(cases), nil
	})
	byOffset := map[string]*schemas.Rejected{}
	for _, r := range rejected {
		rej, err := schemas.DecodeRejected(schemas.SchemaRejectedV1, r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if rej.Topic != e.names.Mutations {
			t.Errorf("rejected record names topic %q", rej.Topic)
		}
		if len(rej.Value) > schemas.MaxRejectedValueBytes {
			t.Errorf("rejected record copies %d bytes of the value", len(rej.Value))
		}
		byOffset[fmt.Sprintf("%d@%d", rej.Partition, rej.Offset)] = rej
	}
	if len(rejected) != len(cases) {
		t.Errorf("%d rejected records, want %d", len(rejected), len(cases))
	}
	for _, bc := range cases {
		rej := byOffset[fmt.Sprintf("%d@%d", bc.rec.Partition, bc.rec.Offset)]
		switch {
		case rej == nil:
			t.Errorf("%s: no rejected record for %d@%d", bc.name, bc.rec.Partition, bc.rec.Offset)
		case rej.Reason != bc.reason:
			t.Errorf("%s: reason %s (%s), want %s", bc.name, rej.Reason, rej.Message, bc.reason)
		case rej.Message == "":
			t.Errorf("%s: no message", bc.name)
		default:
			t.Logf("%s: %s: %.150s", bc.name, rej.Reason, rej.Message)
		}
		if bc.reason == schemas.ReasonGap && (rej == nil || rej.ExpectedID != 1) {
			t.Errorf("gap: the rejected record should expect id 1: %+v", rej)
		}
	}
	expect := map[mutKey]string{}
	for _, f := range follows {
		expect[mutKey(f)] = schemas.StatusApplied
	}
	cl := followChangelog(t, e)
	canontest.Wait(t, ctx, "the valid mutations decided", func() (bool, error) { return cl.outcomes() >= int64(len(follows)), nil })
	cl.catchUp(ctx)
	cl.check(expect)
	stopAll(t, ctx, seq)
}

// TestIntegrationStoreLost deletes an instance's Pebble directory while
// it is stopped: it restores its partitions from canon.versions alone and
// ends with the changelog's state.
func TestIntegrationStoreLost(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 6)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 50, 100, 30, 5)
	a, b := newSeqProc(t, e, "a"), newSeqProc(t, e, "b")
	a.Start(ctx)
	b.Start(ctx)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions", func() (bool, error) { return a.owned() > 0 && b.owned() > 0, nil })

	g.allowUpTo(0.4)
	g.waitProduced(ctx, 0.4)
	canontest.Wait(t, ctx, "b's partitions decided", func() (bool, error) { return cl.outcomes() >= g.acked.Load(), nil })
	t.Log("b stopped, its store deleted")
	b.Stop()
	if err := os.RemoveAll(filepath.Join(b.data, "store")); err != nil {
		t.Fatal(err)
	}
	g.allowUpTo(0.7)
	g.waitProduced(ctx, 0.6)
	t.Log("b restarts with no store")
	b.Start(ctx)
	canontest.Wait(t, ctx, "b owning restored partitions", func() (bool, error) { return b.owned() > 0 && b.Ready(), nil })
	restored, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil || restored == 0 {
		t.Fatalf("b restored %v changelog records (%v)", restored, err)
	}

	waitAllDecided(t, ctx, g, cl)
	canontest.Wait(t, ctx, "every instance ready", func() (bool, error) { return a.Ready() && b.Ready(), nil })
	bOwned := b.ownedFromLog()
	stopAll(t, ctx, a, b)
	cl.catchUp(ctx)
	h := cl.check(g.expected())
	checkStore(t, a, e.parts, h)
	heads := checkStore(t, b, e.parts, h)

	// b's partitions: every project, from version 1 (rebuilt from the
	// changelog, since b's store was deleted) up to the changelog's head.
	if len(bOwned) == 0 {
		t.Fatal("b owned no partition at the end")
	}
	owned := map[int32]bool{}
	for _, q := range bOwned {
		owned[q] = true
	}
	n := 0
	for br, vs := range h.versions {
		if !owned[schemas.Partition(schemas.ProjectKey("acme", br.project), e.parts)] {
			continue
		}
		n++
		want, _ := h.mem.Head("acme", br.project, br.branch)
		got := heads[br]
		if got.Version != uint64(len(vs)) || stateHash(got) != stateHash(want) || got.State != want.State {
			t.Errorf("b's %s@%s: head %d %s, the changelog's %d %s", br.project, br.branch, got.Version, stateHash(got), len(vs), stateHash(want))
		}
	}
	t.Logf("b restored partitions %v: %d projects equal to the changelog replay", bOwned, n)
}

// TestIntegrationRestoreAfterPendingCommit: an old owner's transaction
// has produced a version and committed its input offset (TxnOffsetCommit)
// but not yet ended when the old owner loses the group; the new owner
// restores, and only then does the old transaction end (KIP-447 lets it
// commit: the new owner's offset fetch waits for it; or the new owner
// fenced it, since its instance left the group). The new owner must not
// decide over a store that misses that version.
func TestIntegrationRestoreAfterPendingCommit(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 1)
	group := e.prefix + sequencer.DefaultGroup
	m1 := &schemas.Mutation{Org: "acme", Project: "doc", Branch: "main", ClientGroup: "g-a", Client: "a", ID: 1,
		Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":{"by":"a"}}`)}
	e.produceSync(t, e.mutationRecord(t, m1))

	// The old owner decides m1 and ends its transaction; the EndTxn
	// request, and everything after it, stalls on the wire.
	stall := &wireStall{release: make(chan struct{}), stalled: make(chan struct{})}
	old, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(e.brokers...),
		kgo.Dialer(stall.dial),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(e.names.Mutations),
		kgo.TransactionalID(group+"-old"), kgo.TransactionTimeout(time.Minute),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Begin(); err != nil {
		t.Fatal(err)
	}
	var polled []*kgo.Record
	for len(polled) == 0 {
		polled = old.PollFetches(ctx).Records()
		if ctx.Err() != nil {
			t.Fatal("old owner polled nothing")
		}
	}
	dec := model.NewDecider(modeltest.NewMemState(), model.NewRegistry(), schemas.DefaultLimits())
	r := polled[0]
	m, err := schemas.DecodeMutation(schemas.SchemaMutationV1, r.Value, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	d, err := dec.Decide(model.MutationRecord{Mutation: m, Timestamp: r.Timestamp, Partition: r.Partition, Offset: r.Offset})
	if err != nil || d.Kind != model.Applied {
		t.Fatalf("old owner's decision: %v %v", d.Kind, err)
	}
	for i := range d.Chunks {
		value, hash := schemas.EncodeChunk(&d.Chunks[i])
		old.Produce(ctx, &kgo.Record{Topic: e.names.Versions, Partition: 0, Key: r.Key, Value: value,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)}, {Key: schemas.HeaderChunkHash, Value: []byte(hash)}}}, nil)
	}
	value, err := schemas.EncodeVersion(d.Version, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	old.Produce(ctx, &kgo.Record{Topic: e.names.Versions, Partition: 0, Key: r.Key, Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}}, nil)
	stall.armed.Store(true)
	ended := make(chan error, 1)
	go func() {
		committed, err := old.End(ctx, kgo.TryCommit)
		if err == nil && !committed {
			err = fmt.Errorf("old owner's transaction aborted")
		}
		ended <- err
	}()
	select {
	case <-stall.stalled:
	case err := <-ended:
		t.Fatalf("old owner's transaction ended before EndTxn: %v", err)
	case <-ctx.Done():
		t.Fatal("old owner never sent EndTxn")
	}

	// The new owner joins; the old one, which no longer heartbeats, is
	// dropped from the group, and the new one restores partition 0.
	logs := &countingHandler{}
	st, err := store.Open(store.Config{Dir: filepath.Join(t.TempDir(), "store"), Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seq, err := sequencer.New(sequencer.Config{
		Kafka:          kafka.ClientConfig{Brokers: e.brokers, ClientID: "test-new-owner"},
		Topics:         e.names,
		Group:          group,
		InstanceID:     "new",
		Store:          st,
		SessionTimeout: 2 * time.Second,
		Log:            slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInProcess(ctx, seq)
	defer func() { _ = stop() }()
	// Past its first restore attempt: either it restored (and will decide
	// over what it restored), or it logged that it waits for the open
	// transaction (the sequencer's message).
	canontest.Wait(t, ctx, "the new owner owning partition 0 and past its first restore attempt", func() (bool, error) {
		return testutil.ToFloat64(sequencer.MetricsOf(seq).OwnedPartitions) == 1 &&
			(seq.Ready(ctx) == nil || logs.count("restore not complete") > 0), nil
	})

	// Now the old transaction ends: it commits version 1 of acme/doc,
	// unless the new owner fenced it while restoring (the old owner left
	// the group, so its open transaction was abandoned); then the new
	// owner decides m1 itself.
	close(stall.release)
	if err := <-ended; err != nil {
		if testutil.ToFloat64(sequencer.MetricsOf(seq).Fenced) == 0 {
			t.Fatalf("the old owner's transaction failed and the new owner fenced nothing: %v", err)
		}
		t.Logf("the new owner fenced the old owner's transaction: %v", err)
	}

	// Another client's first mutation: version 2, not a second version 1.
	m2 := &schemas.Mutation{Org: "acme", Project: "doc", Branch: "main", ClientGroup: "g-b", Client: "b", ID: 1,
		Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t2","data":{"by":"b"}}`)}
	e.produceSync(t, e.mutationRecord(t, m2))
	cl := followChangelog(t, e)
	canontest.Wait(t, ctx, "both mutations in the changelog", func() (bool, error) { return cl.outcomes() >= 2, nil })
	cl.catchUp(ctx)
	cl.check(map[mutKey]string{{"doc", "a", 1}: schemas.StatusApplied, {"doc", "b", 1}: schemas.StatusApplied})
	canontest.Wait(t, ctx, "version 2 in the new owner's store", func() (bool, error) {
		h, err := st.Head("acme", "doc", "main")
		return h.Version == 2, err
	})
}

// wireStall wraps a client's connections: once armed, the first EndTxn
// request and every write after it wait for release.
type wireStall struct {
	armed   atomic.Bool
	once    sync.Once
	hit     atomic.Bool
	stalled chan struct{}
	release chan struct{}
}

func (s *wireStall) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, s: s}, nil
}

type stallConn struct {
	net.Conn
	s *wireStall
}

// apiKeyEndTxn is the Kafka API key of EndTxn requests.
const apiKeyEndTxn = 26

func (c *stallConn) Write(b []byte) (int, error) {
	s := c.s
	// A request is a 4-byte size, then its 2-byte API key.
	if s.armed.Load() && len(b) >= 6 && int16(b[4])<<8|int16(b[5]) == apiKeyEndTxn {
		s.hit.Store(true)
	}
	if s.hit.Load() {
		s.once.Do(func() { close(s.stalled) })
		<-s.release
		// The client's write deadline passed while the request waited.
		_ = c.SetWriteDeadline(time.Time{})
	}
	return c.Conn.Write(b)
}

// countingHandler is a slog handler that counts messages by prefix.
type countingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// TestIntegrationReadyMeansDeciding checks what Ready promises: a
// mutation produced right after it says yes is decided without waiting
// for a fetch that was sent before every owned partition was restored.
// The fetch max wait is ten minutes, so a partition left out of the fetch
// in flight would wait that long; the mutation goes to the partition
// restored last.
func TestIntegrationReadyMeansDeciding(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 6
	e := newTopicsEnv(t, k.Brokers, parts)
	st, err := store.Open(store.Config{Dir: filepath.Join(t.TempDir(), "store"), Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seq, err := sequencer.New(sequencer.Config{
		Kafka:        kafka.ClientConfig{Brokers: e.brokers, ClientID: "test-ready"},
		Topics:       e.names,
		Group:        e.prefix + sequencer.DefaultGroup,
		Store:        st,
		FetchMaxWait: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stopOK(t, runInProcess(ctx, seq))
	canontest.Wait(t, ctx, "the sequencer ready", func() (bool, error) { return seq.Ready(ctx) == nil, nil })

	project := ""
	for i := 0; project == ""; i++ {
		name := fmt.Sprintf("doc-%d", i)
		if schemas.Partition(schemas.ProjectKey("acme", name), parts) == parts-1 {
			project = name
		}
	}
	m := &schemas.Mutation{Org: "acme", Project: project, Branch: "main", ClientGroup: "g-a", Client: "a", ID: 1,
		Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":{}}`)}
	e.produceSync(t, e.mutationRecord(t, m))
	canontest.Wait(t, ctx, fmt.Sprintf("the decision of a mutation of partition %d produced after Ready (a partition "+
		"is not fetched until the fetch sent before its restore returns, fetch max wait 10m)", parts-1), func() (bool, error) {
		h, err := st.Head("acme", project, "main")
		return h.Version == 1, err
	})
}
