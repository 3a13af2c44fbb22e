package producer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
)

// Concurrent pushes of mixed sizes under produce rounds, on a real broker
// that is killed (SIGKILL) and restarted under them: no push waits longer
// than its ProduceTimeout (plus scheduling slack), pushes succeed again
// once the broker is back, and every acknowledged record is in the topic.
func TestRoundsAcrossABrokerKill(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("integration test skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := testenv.StartKafka(ctx, testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	roundsUnderKill(t, ctx, srv.Brokers(), srv.Kill, func() error { return srv.Restart(ctx) }, false)
}

// The same on a three-node cluster (replication factor 3,
// min.insync.replicas 2) whose node 1 is killed: the leadership of its
// partitions moves, and pushes keep being acknowledged while it is down.
func TestRoundsAcrossALeaderMove(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("integration test skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := testenv.StartKafkaCluster(ctx, testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	node := c.Node(1)
	roundsUnderKill(t, ctx, c.Brokers(), node.Kill, func() error { return node.Restart(ctx) }, true)
}

// roundsUnderKill runs 16 writers of mixed pushes through a producer
// with rounds, calls kill once pushes are acknowledged, restart once
// pushes failed (or, with survive, once more were acknowledged while
// killed), and checks that no push waited over its ProduceTimeout and
// that every acknowledged record is in the topic.
func roundsUnderKill(t *testing.T, ctx context.Context, brokers []string, kill func(), restart func() error, survive bool) {
	t.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	info, err := kafka.EnsureTopics(ctx, adm, kafka.TopicsConfig{Partitions: 6}, nil)
	adm.Close()
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	const produceTimeout = 2 * time.Second
	p, err := New(Config{Kafka: kafka.ClientConfig{Brokers: brokers}, Topics: info.Names, Keys: keys.VerifyOnly(),
		ProduceTimeout: produceTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.rounds == nil {
		t.Fatal("produce rounds are not the default")
	}

	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		longest  time.Duration
		ok, fail atomic.Int64
		stop     atomic.Bool
	)
	push := func(w, n int, seq *int) {
		recs := make([]*kgo.Record, n)
		vals := make([]string, n)
		for i := range recs {
			vals[i] = fmt.Sprintf("w%d-%d", w, *seq)
			*seq++
			recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "doc-%d", w%9), Value: []byte(vals[i])}
		}
		pctx, pcancel := context.WithTimeout(ctx, produceTimeout)
		start := time.Now()
		err := p.send(pctx, recs, "", nil)
		took := time.Since(start)
		pcancel()
		mu.Lock()
		defer mu.Unlock()
		longest = max(longest, took)
		if err != nil {
			fail.Add(1)
			return
		}
		ok.Add(1)
		for _, v := range vals {
			acked[v] = true
		}
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := 0
			for i := 0; !stop.Load(); i++ {
				n := 1 + (i*7+w)%40 // 1 to 40 records
				if i%50 == 49 {
					n = 900 // now and then a large push
				}
				push(w, n, &seq)
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				stop.Store(true)
				t.Fatalf("no %s within 90s (%d pushes acknowledged, %d failed)", what, ok.Load(), fail.Load())
			}
		}
	}
	waitFor("acknowledged pushes", func() bool { return ok.Load() > 200 })
	kill()
	t.Logf("broker killed after %d acknowledged pushes", ok.Load())
	failedBefore, okBefore := fail.Load(), ok.Load()
	if survive {
		waitFor("acknowledged pushes while the broker is down", func() bool { return ok.Load() > okBefore+200 })
	} else {
		waitFor("failed pushes while the broker is down", func() bool { return fail.Load() > failedBefore+16 })
	}
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	okAfter := ok.Load()
	t.Logf("broker restarted; while it was down %d pushes failed, %d were acknowledged", fail.Load()-failedBefore, okAfter-okBefore)
	waitFor("acknowledged pushes after the restart", func() bool { return ok.Load() > okAfter+200 })
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d pushes acknowledged, %d failed; the longest wait %v (ProduceTimeout %v)", ok.Load(), fail.Load(), longest, produceTimeout)
	if longest > produceTimeout+time.Second {
		t.Errorf("a push waited %v, over its ProduceTimeout %v", longest, produceTimeout)
	}
	// Every acknowledged record is in the topic.
	ends, err := kadm.NewClient(p.cl).ListEndOffsets(ctx, info.Names.Mutations)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(info.Names.Mutations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for read := int64(0); read < total; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", read, total, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			delete(acked, string(r.Value))
		})
	}
	if len(acked) > 0 {
		t.Fatalf("%d acknowledged records are not in the topic", len(acked))
	}
}
