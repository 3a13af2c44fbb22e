package sequencer_test

// Benchmarks on a real broker (internal/testenv): run them with the test
// wrapper, or with CANON_TEST_KAFKA_BROKERS set, without -race, e.g.
//
//	go test -run '^$' -bench Sequencer -benchtime 20000x -count 5 ./sequencer/
//
// In both, b.N is a number of mutations. BenchmarkSequencerThroughput
// decides b.N mutations and copies the same b.N records with a plain
// exactly-once pipe in the same run, and reports both rates and their
// ratio. BenchmarkSequencerRestore restores the changelog of b.N
// mutations into a fresh store and reports MB/s.

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// benchMutations produces n mutations of 200 clients on 100 projects:
// puts of bodies of about dataBytes, patches and splices of them.
func benchMutations(b testing.TB, e *topicsEnv, n, dataBytes int) {
	benchMutationsNamed(b, e, n, dataBytes, "item.")
}

// benchMutationsNamed is benchMutations with the mutators' names under
// prefix: "item." for the built-ins, "task." for modeltest.TasksBundle's.
func benchMutationsNamed(b testing.TB, e *topicsEnv, n, dataBytes int, prefix string) {
	b.Helper()
	const clients, projects = 200, 100
	rng := mrand.New(mrand.NewPCG(uint64(n), 7))
	pad := func(k int) string {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		out := make([]byte, k)
		for i := range out {
			out[i] = letters[rng.IntN(len(letters))]
		}
		return string(out)
	}
	ids := make([]uint64, clients)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		perr error
	)
	for i := range n {
		c := i % clients
		ids[c]++
		id := ids[c]
		client := fmt.Sprintf("c%03d", c)
		item := fmt.Sprintf("%s-%d", client, id%5)
		var name string
		var args any
		switch {
		case id <= 5 || rng.IntN(3) == 0:
			name, args = prefix+"put", map[string]any{"collection": "tasks", "id": item,
				"data": map[string]any{"text": "hello world", "n": id, "pad": pad(dataBytes)}}
		case rng.IntN(2) == 0:
			name, args = prefix+"patch", map[string]any{"collection": "tasks", "id": item, "data": map[string]any{"n": id}}
		default:
			name, args = prefix+"splice", map[string]any{"collection": "tasks", "id": item, "path": "/text", "index": 0, "delete": 0, "insert": "x"}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			b.Fatal(err)
		}
		m := &schemas.Mutation{Org: "acme", Project: fmt.Sprintf("p%03d", c%projects), Branch: "main",
			ClientGroup: "g-" + client, Client: client, ID: id, Name: name, Args: raw}
		e.cl.Produce(ctx, e.mutationRecord(b, m), func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
		})
	}
	if err := e.cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if perr != nil {
		b.Fatal(perr)
	}
}

// consumedRate waits until group has committed n offsets of topic and
// returns the rate from its first commit on: the steady state, without
// the group join, which both pipelines pay alike.
func consumedRate(b testing.TB, e *topicsEnv, group, topic string, n int64) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	adm := kadm.NewClient(e.cl)
	var (
		t0    time.Time
		c0    int64
		total int64
	)
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			total = 0
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic && o.Err == nil && o.At > 0 {
					total += o.At
				}
			})
			if t0.IsZero() && total > 0 {
				t0, c0 = time.Now(), total
			}
			if total >= n {
				break
			}
		}
		select {
		case <-ctx.Done():
			b.Fatalf("group %s committed %d of %d offsets", group, total, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	d := time.Since(t0)
	if total <= c0 || d <= 0 {
		return 0
	}
	return float64(total-c0) / d.Seconds()
}

// pipe is the reference: a GroupTransactSession that copies every record
// of one topic to another, with the sequencer's client options and batch
// bounds, and nothing else.
func pipe(ctx context.Context, brokers []string, group, in, out string) error {
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.TransactionalID(group+"-pipe"), kgo.TransactionTimeout(sequencer.DefaultTxnTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(sequencer.DefaultLinger), kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		kgo.Balancers(kgo.CooperativeStickyBalancer()))
	if err != nil {
		return err
	}
	defer sess.Close()
	for {
		recs := sess.PollRecords(ctx, sequencer.DefaultMaxBatchRecords).Records()
		if ctx.Err() != nil {
			return nil
		}
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return err
		}
		start, n := time.Now(), 0
		var perr error
		var mu sync.Mutex
		for len(recs) > 0 {
			for _, r := range recs {
				sess.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers},
					func(_ *kgo.Record, err error) {
						if err != nil {
							mu.Lock()
							perr = err
							mu.Unlock()
						}
					})
			}
			n += len(recs)
			recs = nil
			if n < sequencer.DefaultMaxBatchRecords && time.Since(start) < sequencer.DefaultMaxBatchTime && sess.Client().BufferedFetchRecords() > 0 {
				recs = sess.PollRecords(ctx, sequencer.DefaultMaxBatchRecords-n).Records()
			}
		}
		mu.Lock()
		try := kgo.TransactionEndTry(perr == nil)
		mu.Unlock()
		if _, err := sess.End(ctx, try); err != nil {
			return err
		}
	}
}

// BenchmarkSequencerThroughput measures mutations decided per second by
// one in-process Sequencer, and the rate of the plain pipe over the same
// records; ratio is sequencer/pipe. In the same run, js_mut/s and
// js_ratio are the same mutations decided by JavaScript mutators (an
// org deploy of modeltest.TasksBundle before them), on topics of their own.
func BenchmarkSequencerThroughput(b *testing.B) {
	k := testenv.NewKafka(b)
	const parts = 12
	e := newTopicsEnv(b, k.Brokers, parts)
	benchMutations(b, e, b.N, 1000)
	js := newTopicsEnv(b, k.Brokers, parts)
	deployAll(b, js, modeltest.TasksBundle)
	benchMutationsNamed(b, js, b.N, 1000, "task.")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()

	// The pipe, into a topic of its own.
	out := e.prefix + "pipe"
	if _, err := kadm.NewClient(e.cl).CreateTopic(ctx, parts, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("4194304")}, out); err != nil {
		b.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	perr := make(chan error, 1)
	go func() { perr <- pipe(pctx, e.brokers, e.prefix+"pipe", e.names.Mutations, out) }()
	pipeRate := consumedRate(b, e, e.prefix+"pipe", e.names.Mutations, int64(b.N))
	pcancel()
	if err := <-perr; err != nil {
		b.Fatal(err)
	}

	// The sequencer.
	st, err := store.Open(store.Config{Dir: filepath.Join(b.TempDir(), "store"), Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	seq, err := sequencer.New(sequencer.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers, ClientID: "bench"}, Topics: e.names,
		Group: e.prefix + "seq", Store: st})
	if err != nil {
		b.Fatal(err)
	}
	stop := runInProcess(ctx, seq)
	seqRate := consumedRate(b, e, e.prefix+"seq", e.names.Mutations, int64(b.N))
	b.StopTimer()
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	if got := testutil.ToFloat64(sequencer.MetricsOf(seq).Outcomes.WithLabelValues("applied")); got != float64(b.N) {
		b.Fatalf("%v mutations applied, want %d", got, b.N)
	}

	// The sequencer with JavaScript mutators.
	b.StartTimer()
	jsRate, jsApplied := runBenchSequencer(b, ctx, js, parts, int64(b.N)+parts)
	b.StopTimer()
	if jsApplied != float64(b.N) {
		b.Fatalf("%v mutations applied by the JavaScript mutators, want %d", jsApplied, b.N)
	}
	b.ReportMetric(seqRate, "mut/s")
	b.ReportMetric(pipeRate, "pipe_rec/s")
	b.ReportMetric(jsRate, "js_mut/s")
	if pipeRate > 0 {
		b.ReportMetric(seqRate/pipeRate, "ratio")
		b.ReportMetric(jsRate/pipeRate, "js_ratio")
	}
	b.ReportMetric(0, "ns/op") // the rates say it; a mean per mutation over a run with a join would not
}

// deployAll writes an org deploy of src for org acme, one record to
// each partition, as the producer does.
func deployAll(b testing.TB, e *topicsEnv, src string) {
	b.Helper()
	d := &schemas.Deploy{Org: "acme", Hash: schemas.BundleHash([]byte(src)), Bundle: src, DeployedAt: 1}
	v, err := schemas.EncodeDeploy(d)
	if err != nil {
		b.Fatal(err)
	}
	var recs []*kgo.Record
	for p := range e.parts {
		recs = append(recs, &kgo.Record{Topic: e.names.Mutations, Partition: p, Key: schemas.DeployKey("acme", ""), Value: v,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
}

// runBenchSequencer runs a sequencer that compiles bundles on e's topics
// until it committed n input offsets, and returns its rate and how many
// mutations it applied.
func runBenchSequencer(b *testing.B, ctx context.Context, e *topicsEnv, parts int32, n int64) (rate, applied float64) {
	st, err := store.Open(store.Config{Dir: filepath.Join(b.TempDir(), "store-js"), Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	seq, err := sequencer.New(sequencer.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers, ClientID: "bench-js"}, Topics: e.names,
		Group: e.prefix + "seq", Store: st, Bundles: bundleCache()})
	if err != nil {
		b.Fatal(err)
	}
	stop := runInProcess(ctx, seq)
	rate = consumedRate(b, e, e.prefix+"seq", e.names.Mutations, n)
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	return rate, testutil.ToFloat64(sequencer.MetricsOf(seq).Outcomes.WithLabelValues("applied"))
}

// BenchmarkSequencerRestore fills canon.versions by deciding b.N
// mutations (puts of 2 KB bodies, patches, splices: 20000 make about
// 40 MB), then restores every partition of it into a fresh store once, and
// reports the MB/s of record values read from the changelog and applied to
// Pebble.
func BenchmarkSequencerRestore(b *testing.B) {
	k := testenv.NewKafka(b)
	const parts = 6
	e := newTopicsEnv(b, k.Brokers, parts)
	benchMutations(b, e, b.N, 2000)
	fill := func() error {
		st, err := store.Open(store.Config{Dir: filepath.Join(b.TempDir(), "fill"), Partitions: parts})
		if err != nil {
			return err
		}
		defer st.Close()
		seq, err := sequencer.New(sequencer.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers, ClientID: "bench"}, Topics: e.names,
			Group: e.prefix + "seq", Store: st})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- seq.Run(ctx) }()
		consumedRate(b, e, e.prefix+"seq", e.names.Mutations, int64(b.N))
		cancel()
		return <-done
	}
	if err := fill(); err != nil {
		b.Fatal(err)
	}

	st, err := store.Open(store.Config{Dir: filepath.Join(b.TempDir(), "restore"), Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	seq, err := sequencer.New(sequencer.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers, ClientID: "bench-restore"}, Topics: e.names, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	// What Run reads first: a restore looks for the partition's last
	// rejection in canon.rejected, by partition count.
	if err := sequencer.ReadPartitionCounts(context.Background(), seq); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for p := range int32(parts) {
		if err := sequencer.Restore(context.Background(), seq, e.cl, p); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	b.StopTimer()
	mb := testutil.ToFloat64(sequencer.MetricsOf(seq).RestoreBytes) / 1e6
	b.ReportMetric(mb/took.Seconds(), "MB/s")
	b.ReportMetric(mb, "MB")
	b.ReportMetric(testutil.ToFloat64(sequencer.MetricsOf(seq).RestoreRecords)/took.Seconds(), "rec/s")
	b.ReportMetric(0, "ns/op") // one restore of b.N mutations' changelog, not b.N operations
}
